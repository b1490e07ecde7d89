/**
 * Applying the reader planner's decision (Python: `lookback.query.context.planner.apply_decision`).
 *
 * The reader decides which evidence fits where; this side inserts its own copies of those
 * envelopes and checks the result as a whole: Pi's very message objects, in order, with only
 * whole envelopes of this retrieval, each once, immediately before the latest real user message.
 */

import { type EvidenceMessage, evidenceMessage, field, isEnvelope, latestRealUserIndex } from "./messages.ts";

/** One evidence item of a retrieve answer (the fields this side reads). */
export type EvidenceItem = Record<string, unknown>;

/** `session_id:entry_id`, the planner's name for an evidence item (Python: `_source`). */
export function sourceOf(item: unknown): string {
	if (item === null || typeof item !== "object") return "?:?";
	const session = field(item, "session_id");
	const entry = field(item, "entry_id");
	return `${session === undefined ? "?" : String(session)}:${entry === undefined ? "?" : String(entry)}`;
}

export function insertBefore<M, E>(messages: readonly M[], index: number, inserted: readonly E[]): (M | E)[] {
	return [...messages.slice(0, index), ...inserted, ...messages.slice(index)];
}

/**
 * Pi's messages with the decided evidence inserted, or undefined when the decision is anything
 * but envelopes from this retrieval, each once, immediately before the latest real user message.
 * An empty list of sources inserts nothing: undefined too (Pi's messages stay as they are).
 */
export function applyDecision<M extends object>(
	messages: readonly M[],
	evidence: readonly unknown[],
	decision: unknown,
): (M | EvidenceMessage)[] | undefined {
	const userIndex = latestRealUserIndex(messages);
	const sources = field(decision, "sources");
	if (userIndex < 0 || field(decision, "insert_before") !== userIndex || !Array.isArray(sources)) return undefined;
	if (sources.length === 0 || new Set(sources.map(String)).size !== sources.length) return undefined;
	const bySource = new Map<string, unknown>();
	for (const item of evidence) if (item !== null && typeof item === "object") bySource.set(sourceOf(item), item);
	const inserted: EvidenceMessage[] = [];
	for (const source of sources) {
		const copy = typeof source === "string" && bySource.has(source) ? evidenceMessage(field(bySource.get(source), "message")) : undefined;
		if (copy === undefined) return undefined;
		inserted.push(copy);
	}
	const final = insertBefore(messages, userIndex, inserted);
	return onlyEvidenceInserted(final, messages) ? final : undefined;
}

/**
 * True when `final` is exactly Pi's `original` message objects, in order, with one run of
 * envelopes inserted immediately before the latest real user message — and nothing else.
 */
export function onlyEvidenceInserted(final: readonly unknown[], original: readonly unknown[]): boolean {
	const userIndex = latestRealUserIndex(original);
	const added = final.length - original.length;
	if (userIndex < 0 || added <= 0) return false;
	for (let i = 0; i < userIndex; i++) if (final[i] !== original[i]) return false;
	for (let i = userIndex; i < userIndex + added; i++) if (!isEnvelope(final[i])) return false;
	for (let i = userIndex; i < original.length; i++) if (final[i + added] !== original[i]) return false;
	return latestRealUserIndex(final) === userIndex + added;
}

/** What the planner needs to know of the model: a hard limit on the input, when Pi knows it. */
export function hardLimit(model: unknown): number | undefined {
	const window = Number(field(model, "contextWindow"));
	const output = Number(field(model, "maxTokens") ?? 0);
	const room = window - output;
	return Number.isInteger(room) && room > 0 ? room : undefined;
}
