/**
 * One model call's retrieval: ask the reader for evidence and the planner's decision in one
 * request (`POST /v1/retrieve` with `plan`), then apply and check that decision here.
 */

import { existsSync } from "node:fs";
import { estimateTokens, latestRealUserIndex, messageKind, textOnly } from "./messages.ts";
import type { EvidenceMessage } from "./messages.ts";
import { applyDecision, hardLimit } from "./plan.ts";
import { type ReaderClient, deadline } from "./reader-client.ts";
import { type SessionView, contextEntryIds } from "./session-view.ts";
import type { Settings } from "./settings.ts";
import { isEnvelope, field } from "./messages.ts";

/** What `/context retrieved` shows: kept in memory only, never written anywhere. */
export interface LastRetrieval {
	at: number;
	status: string;
	evidence: Record<string, unknown>[];
	excluded: unknown[];
	diagnostics: Record<string, unknown>;
	inserted: number;
	planner: "reader" | "none";
	/** Milliseconds per step of this call (debug line): Pi's view, retrieve, apply. */
	phases: Record<string, number>;
}

export interface RetrievalOutcome<M> {
	/** The messages to send instead of Pi's, or undefined: Pi's own go out unchanged. */
	messages: (M | EvidenceMessage)[] | undefined;
	last: LastRetrieval | undefined;
}

const isRecord = (value: unknown): value is Record<string, unknown> =>
	value !== null && typeof value === "object" && !Array.isArray(value);

export async function retrieveAndPlan<M extends object>(
	reader: ReaderClient,
	settings: Settings,
	session: SessionView,
	messages: readonly M[],
	model: unknown,
	signal: AbortSignal | undefined,
	log: (line: string) => void,
): Promise<RetrievalOutcome<M>> {
	const userIndex = latestRealUserIndex(messages);
	const sessionFile = session.getSessionFile();
	// Pi writes a new session's file only after the first model reply: nothing to ask yet.
	if (userIndex < 0 || !sessionFile || !existsSync(sessionFile)) return { messages: undefined, last: undefined };

	const clock = performance.now();
	const phases: Record<string, number> = {};
	const lap = (name: string, since: number) => {
		phases[name] = Math.round((performance.now() - since) * 100) / 100;
		return performance.now();
	};
	const branch = session.getBranch();
	const contextIds = contextEntryIds(session, branch);
	// What the planner needs of the conversation: each message's kind and token estimate.
	const kinds = messages.map(messageKind);
	const tokens = messages.map(estimateTokens);
	const limit = hardLimit(model);
	let mark = lap("view", clock);
	const provider = field(model, "provider");
	const request = {
		session_file: sessionFile,
		session_id: session.getSessionId(),
		leaf_id: session.getLeafId(),
		branch_ids: branch.map((e) => e.id),
		context_ids: contextIds,
		messages: [textOnly(messages[userIndex])],
		provider: typeof provider === "string" ? provider : undefined,
		plan: { kinds, tokens, ...(limit !== undefined ? { hard_limit_tokens: limit } : {}) },
		...(settings.maxResults !== undefined ? { max_results: settings.maxResults } : {}),
		...(settings.maxHistoryTokens !== undefined ? { max_retrieved_history_tokens: settings.maxHistoryTokens } : {}),
	};
	// Esc (Pi's ctx.signal) cancels the call as the timeout does: Pi's messages go out unchanged.
	const { signal: bounded, done } = deadline(settings.timeoutMs, signal);
	try {
		const retrieved = await reader.call("POST", "/v1/retrieve", request, bounded);
		const evidence = Array.isArray(retrieved.evidence) ? retrieved.evidence.filter(isRecord) : [];
		const last: LastRetrieval = {
			at: Date.now(),
			status: String(retrieved.status ?? "unknown"),
			evidence,
			excluded: Array.isArray(retrieved.excluded) ? retrieved.excluded : [],
			diagnostics: isRecord(retrieved.diagnostics) ? retrieved.diagnostics : {},
			inserted: 0,
			planner: "none",
			phases,
		};
		mark = lap("retrieve", mark);
		// Only whole envelopes from this answer may ever be inserted; the rest is ignored.
		const usable = evidence.filter((item) => isEnvelope(item.message));
		if (retrieved.status !== "ok" || usable.length === 0) return { messages: undefined, last };
		if (signal?.aborted) return { messages: undefined, last };

		// The reader decided which evidence fits where (`plan`); this side applies and checks it.
		const planned = isRecord(retrieved.plan) ? retrieved.plan : {};
		const final = applyDecision(messages, usable, planned.decision);
		lap("apply", mark);
		if (final === undefined) {
			if (planned.decision !== null || planned.fallback == null) log("plan rejected: not an insertion of this retrieval's evidence");
			return { messages: undefined, last };
		}
		last.inserted = final.length - messages.length;
		last.planner = "reader";
		return { messages: final, last };
	} finally {
		done();
	}
}
