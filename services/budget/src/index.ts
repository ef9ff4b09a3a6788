export { BudgetBook, type BudgetLimit, type Grant, type Lease, periodsOf } from "./book.js";
export { BudgetError, BudgetNotReadyError, InvalidBudgetRequestError } from "./errors.js";
export { budgetLimits, type RunningBudget, startBudget } from "./service.js";
