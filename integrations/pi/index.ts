/**
 * Lookback for Pi — give the model back what context compaction took away.
 *
 * Before every model call (Pi's `context` event) this extension asks the Lookback reader
 * (`lookback serve`) which earlier entries of the current branch, no longer in the model's
 * context, the latest real user message talks about. The same request tells the reader's
 * planner each message's kind and token estimate — never the conversation — and the answer
 * carries its decision (which evidence, in which order, where). The extension applies that
 * decision itself and checks it: the final messages are Pi's own message objects with only
 * enveloped evidence messages inserted immediately before the latest real user message.
 *
 * Fail-open by design: a reader that is down, slow, broken or answering nonsense — including a
 * plan that is anything but that insertion — and Esc (Pi's `ctx.signal`) leave the messages
 * exactly as Pi built them. Nothing here ever logs message or evidence text.
 *
 * No npm install at run time: Node built-ins, Pi's own types (type-only imports, erased when Pi
 * loads the file) and `typebox`, which Pi maps to its bundled copy. The modules are in src/;
 * README.md lists the configuration (environment variables).
 */

import type { ExtensionAPI, ExtensionContext } from "@earendil-works/pi-coding-agent";
import { ActionEvidence } from "./src/action.ts";
import { ReaderStarter, isLocal } from "./src/autostart.ts";
import { COMMAND_TIMEOUT_MS, registerHistoryTool } from "./src/history-tool.ts";
import { NUDGE_TIMEOUT_MS, ReaderClient, deadline, describe } from "./src/reader-client.ts";
import { field } from "./src/messages.ts";
import { renderManifest, renderRetrieved } from "./src/rendering.ts";
import { type LastRetrieval, retrieveAndPlan } from "./src/retrieve.ts";
import { type SessionView, persisted } from "./src/session-view.ts";
import { readSettings } from "./src/settings.ts";

export { EVIDENCE_FOOTER, EVIDENCE_HEADER } from "./src/messages.ts";

const VIEWS = ["retrieved", "manifest", "included", "excluded", "excluded all"];

/** The session view of a handler's ctx, or undefined once Pi has closed that ctx (stale). */
function sessionOf(ctx: ExtensionContext): SessionView | undefined {
	try {
		return ctx.sessionManager;
	} catch {
		return undefined;
	}
}

export default function lookback(pi: ExtensionAPI): void {
	const settings = readSettings();
	const log = (line: string) => {
		if (settings.debug) process.stderr.write(`[lookback] ${line}\n`);
	};
	// The reader client is a session resource: opened on session_start, closed on session_shutdown.
	let reader: ReaderClient | undefined;
	const starter = new ReaderStarter(settings, log);
	let last: LastRetrieval | undefined;
	// Evidence at the point of action: asked at each tool call, placed by the context event.
	const action = new ActionEvidence(settings.timeoutMs, settings.actionMaxTokens, log);
	// The session file as plain data, captured while the ctx is live: handlers that run after Pi
	// closed the ctx (print mode ends with a compaction) must never touch it again.
	let sessionFile: string | undefined;
	const remember = (ctx: ExtensionContext) => {
		try {
			sessionFile = sessionOf(ctx)?.getSessionFile() ?? sessionFile;
		} catch {
			// a stale ctx: keep what we had
		}
	};

	// This user's reader (no TCP LOOKBACK_URL): located and checked before anything is sent.
	const local = isLocal(settings.url);
	const notAnswering = (why: string) => {
		if (why === "connection refused" || why === "no reader") starter.refused();
	};
	pi.on("session_start", async (_event, ctx) => {
		reader ??= new ReaderClient({ url: settings.url, token: settings.token, locate: local ? () => starter.locate() : undefined });
		remember(ctx);
		// A new session writes its file only after the first reply, so its first call asks
		// nothing: find out now whether the reader runs (and is ours), and start it if not
		// (fail-open).
		if (!settings.disabled && local) {
			const { signal, done } = deadline(NUDGE_TIMEOUT_MS);
			reader
				.call("GET", "/v1/health?projects=0", undefined, signal)
				.then(() => starter.answered())
				.catch((error: unknown) => {
					const why = describe(error);
					log(`reader check: ${why}`);
					notAnswering(why);
				})
				.finally(done);
		}
	});
	pi.on("session_shutdown", async () => {
		reader?.close();
		reader = undefined;
	});

	pi.on("tool_call", (event, ctx) => {
		// Never throws and never waits: a throwing tool_call handler would block the tool.
		try {
			if (settings.disabled || !settings.action || !reader) return undefined;
			remember(ctx);
			const provider = field(ctx.model, "provider");
			action.ask(reader, sessionFile, typeof provider === "string" ? provider : undefined, event, ctx.cwd);
		} catch (error) {
			log(`tool evidence skipped: ${describe(error)}`);
		}
		return undefined;
	});

	pi.on("context", async (event, ctx) => {
		if (settings.disabled || !reader) return undefined;
		const retrieved = await retrieveForPrompt(reader, event.messages, ctx);
		if (!settings.action) return retrieved;
		try {
			const placed = await action.place(retrieved?.messages ?? event.messages);
			return placed ? { messages: placed } : retrieved;
		} catch (error) {
			log(`tool evidence not placed: ${describe(error)}`);
			return retrieved;
		}
	});

	const retrieveForPrompt = async <M extends object>(reader: ReaderClient, messages: M[], ctx: ExtensionContext) => {
		const event = { messages };
		const started = performance.now();
		const signal = ctx.signal;
		try {
			remember(ctx);
			const session = sessionOf(ctx);
			if (!session) return undefined;
			// A prompt is persisted right after the first call's handler starts: then yield once.
			// The other calls of a tool loop find their last message persisted already.
			if (!persisted(session, event.messages)) await new Promise((resolve) => setTimeout(resolve, 0));
			const outcome = await retrieveAndPlan(reader, settings, session, event.messages, ctx.model, signal, log);
			if (outcome.last) {
				last = outcome.last;
				starter.answered();
			}
			const phases = outcome.last ? ` ${Object.entries(outcome.last.phases).map(([k, v]) => `${k}=${v}`).join(" ")}` : "";
			log(
				`retrieve status=${outcome.last?.status ?? "skipped"} evidence=${outcome.last?.evidence.length ?? 0} ` +
					`inserted=${outcome.last?.inserted ?? 0} ms=${(performance.now() - started).toFixed(2)}${phases}`,
			);
			return outcome.messages ? { messages: outcome.messages } : undefined;
		} catch (error) {
			const why = signal?.aborted ? "cancelled" : describe(error);
			log(`retrieve failed: ${why} ms=${(performance.now() - started).toFixed(2)}`);
			notAnswering(why);
			return undefined;
		}
	};

	// Nudges are a hint: the reader also keeps sessions fresh on its own, so a lost one costs nothing.
	const nudge = (_event: unknown, ctx: ExtensionContext) => {
		if (settings.disabled) return;
		remember(ctx);
		reader?.nudge(sessionFile, log);
	};
	pi.on("turn_end", nudge);
	pi.on("session_tree", nudge);
	// After a compaction Pi may already have shut the session down (print mode): use only data.
	pi.on("session_compact", () => {
		action.reset();
		if (!settings.disabled) reader?.nudge(sessionFile, log);
	});

	pi.registerCommand("context", {
		description: "Lookback retrieval: /context retrieved|manifest|included|excluded|excluded all",
		getArgumentCompletions: (prefix: string) => {
			const items = VIEWS.filter((v) => v.startsWith(prefix.trim())).map((v) => ({ value: v, label: v }));
			return items.length ? items : null;
		},
		handler: async (args, ctx) => {
			const view = args.trim().replace(/\s+/g, " ") || "manifest";
			const show = (text: string, level: "info" | "error" = "info") => {
				// Without a UI (print/JSON mode) Pi owns stdout for the answer: report on stderr.
				if (ctx.hasUI) ctx.ui.notify(text, level);
				else process.stderr.write(`${text}\n`);
			};
			if (!VIEWS.includes(view)) {
				show("Usage: /context retrieved|manifest|included|excluded|excluded all", "error");
				return;
			}
			const { signal, done } = deadline(COMMAND_TIMEOUT_MS);
			let entries: Record<string, unknown>[] | undefined;
			try {
				if (!reader) throw new Error("session closed");
				const sessionId = encodeURIComponent(ctx.sessionManager.getSessionId());
				const manifest = await reader.call("GET", `/v1/manifest?session_id=${sessionId}`, undefined, signal);
				entries = Array.isArray(manifest.entries) ? manifest.entries : [];
			} catch (error) {
				if (view !== "retrieved") {
					show(`Lookback reader unavailable at ${reader?.url ?? settings.url} (${describe(error)})`, "error");
					return;
				}
			} finally {
				done();
			}
			show(view === "retrieved" ? renderRetrieved(last, entries) : renderManifest(view, entries ?? []));
		},
	});

	if (settings.historyTool) registerHistoryTool(pi, () => reader, settings.url || "this user's reader");
}
