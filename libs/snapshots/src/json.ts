import type { StepView } from "@holdfast/events";
import { assembleAnswer } from "./assemble.js";
import type { StepSnapshot } from "./reader.js";

/**
 * A step and its snapshot as JSON: `holdfast show <run> <step> --json` and the control
 * API's `GET runs/:id/steps/:n`. Each side parsed where it is JSON (a text that is not
 * stays a string), a stream's events each parsed, and what is missing said.
 */
export function stepJson(runId: string, view: StepView, snapshot: StepSnapshot): unknown {
  const { request, answer } = snapshot;
  return {
    run: runId,
    step: view.step,
    stepId: view.stepId,
    api: view.api,
    model: view.model,
    status: view.status,
    request:
      request === undefined
        ? null
        : {
            forwarded: parsed(request.forwardedText),
            ...(request.clientText === undefined ? {} : { client: parsed(request.clientText) }),
            bytes: request.forwarded.bytes,
            redactedPieces: request.redacted,
            storedAtMs: request.at,
          },
    answer:
      answer === undefined
        ? null
        : {
            status: answer.status,
            ...(answer.events === undefined
              ? { body: parsed(answer.text) }
              : { events: sseEvents(answer.text) }),
            // What it said, put together (a stream's deltas joined): text, tool calls, usage.
            assembled: assembleAnswer(view.api, answer.text, answer.events !== undefined),
            bytes: (answer.body ?? answer.events)?.bytes ?? 0,
            redactedPieces: answer.redacted,
            storedAtMs: answer.at,
          },
    missing: snapshot.missing,
  };
}

function parsed(text: string): unknown {
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

/** A stream's events: each one's event name and data (parsed where it is JSON). */
export function sseEvents(text: string): { event?: string; data: unknown }[] {
  const events: { event?: string; data: unknown }[] = [];
  for (const block of text.split(/\r?\n\r?\n/)) {
    if (block.trim() === "") continue;
    let event: string | undefined;
    const data: string[] = [];
    for (const line of block.split(/\r?\n/)) {
      if (line.startsWith("event:")) event = line.slice(6).trim();
      else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
    }
    if (data.length === 0 && event === undefined) continue;
    events.push({ ...(event === undefined ? {} : { event }), data: parsed(data.join("\n")) });
  }
  return events;
}
