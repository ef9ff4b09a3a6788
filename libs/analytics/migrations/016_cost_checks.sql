-- A step's cost as every other reader counts it: the run's fold and the budgets read a
-- negative cost (which only a writer's error or a forged event makes) as 0, and so does
-- the projection now. `cost_problem` keeps what the log said, so an operator can see the
-- figure was not believed.
ALTER TABLE steps_v2 ADD COLUMN IF NOT EXISTS cost_problem String DEFAULT '';

-- Rows projected before: counted the same way. Matches nothing when applied again.
ALTER TABLE steps_v2 UPDATE cost_problem = concat('cost ', toString(cost_usd), ' USD is negative; counted as 0'), cost_usd = 0 WHERE cost_usd < 0 SETTINGS mutations_sync = 2;

-- The view lists the columns as they were when made: made again, it has the new one.
CREATE OR REPLACE VIEW steps AS SELECT * FROM steps_v2 FINAL;
