/**
 * Evidence at the point of action for Pi (docs/pi-session-format.md, "Where a Pi extension calls
 * in"): the compacted entries of the current branch about what a tool call touches.
 *
 * Pi's `tool_call` event can only block a call or change its input, and a `tool_result` change is
 * saved in the session (Lookback would index its own evidence). So the call only starts the
 * question (`POST /v1/retrieve` with `tool: {name, input, cwd}`; the reader builds the query and
 * keeps only informative entries), without delaying the tool; the answer is placed by the
 * `context` event — which runs before every model call and is never saved — right after the run of
 * tool results holding that call's result, on every model call until a compaction drops the
 * result. Entries already placed are sent as `quoted_ids`: a file edited ten times gets its history
 * once. Fail-open: a slow, failing or absent reader places nothing, and nothing here throws into Pi
 * (a throwing `tool_call` handler would block the tool).
 */

import { type EvidenceMessage, evidenceMessage, field } from "./messages.ts";
import { type ReaderClient, deadline, describe } from "./reader-client.ts";

/** The evidence one tool call may add, in tokens (the reader's `action.max_tokens` default). */
export const DEFAULT_ACTION_TOKENS = 1000;

interface Placed {
	ids: string[];
	messages: EvidenceMessage[];
}

export class ActionEvidence {
	private readonly asked = new Map<string, Promise<Placed>>();
	private readonly placed = new Map<string, Placed>();
	private readonly timeoutMs: number;
	private readonly maxTokens: number;
	private readonly log: (line: string) => void;

	constructor(timeoutMs: number, maxTokens: number, log: (line: string) => void) {
		this.timeoutMs = timeoutMs;
		this.maxTokens = maxTokens;
		this.log = log;
	}

	/** Start the question for one tool call (never throws, never waits). */
	ask(reader: ReaderClient, sessionFile: string | undefined, provider: string | undefined, call: { toolCallId: string; toolName: string; input: unknown }, cwd: string): void {
		if (!sessionFile || typeof call.toolCallId !== "string" || this.asked.has(call.toolCallId)) return;
		const input = call.input !== null && typeof call.input === "object" ? call.input : {};
		const request = {
			session_file: sessionFile,
			tool: { name: String(call.toolName), input, cwd },
			max_retrieved_history_tokens: this.maxTokens,
			quoted_ids: [...this.placed.values()].flatMap((p) => p.ids),
			...(provider ? { provider } : {}),
		};
		const { signal, done } = deadline(this.timeoutMs);
		const started = performance.now();
		const answer = reader
			.call("POST", "/v1/retrieve", request, signal)
			.then((retrieved) => {
				const items = Array.isArray(retrieved.evidence) ? retrieved.evidence : [];
				const placed: Placed = { ids: [], messages: [] };
				for (const item of items) {
					const message = evidenceMessage(field(item, "message"));
					const id = field(item, "entry_id");
					if (message && typeof id === "string") {
						placed.ids.push(id);
						placed.messages.push(message);
					}
				}
				this.log(`tool evidence status=${String(retrieved.status)} evidence=${placed.ids.length} ms=${(performance.now() - started).toFixed(2)}`);
				return placed;
			})
			.catch((error: unknown) => {
				this.log(`tool evidence failed: ${describe(error)}`);
				return { ids: [], messages: [] };
			})
			.finally(done);
		this.asked.set(call.toolCallId, answer);
	}

	/**
	 * `messages` with each answered call's evidence after the run of tool results holding its result,
	 * or undefined when there is none to place.
	 */
	async place<M>(messages: readonly M[]): Promise<(M | EvidenceMessage)[] | undefined> {
		const present = new Set(messages.map((m) => (field(m, "role") === "toolResult" ? field(m, "toolCallId") : undefined)));
		for (const [id, answer] of this.asked) {
			if (!present.has(id)) continue;
			this.placed.set(id, await answer);
			this.asked.delete(id);
		}
		const out: (M | EvidenceMessage)[] = [];
		let waiting: EvidenceMessage[] = [];
		let changed = false;
		messages.forEach((message, index) => {
			out.push(message);
			if (field(message, "role") !== "toolResult") return;
			waiting = waiting.concat(this.placed.get(String(field(message, "toolCallId")))?.messages ?? []);
			if (field(messages[index + 1], "role") === "toolResult") return; // after the whole run
			changed ||= waiting.length > 0;
			out.push(...waiting);
			waiting = [];
		});
		return changed ? out : undefined;
	}

	/** After a compaction nothing placed before it is in the model's context any more. */
	reset(): void {
		this.placed.clear();
		this.asked.clear();
	}
}
