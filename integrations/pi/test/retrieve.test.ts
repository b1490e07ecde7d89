/** One model call's retrieval against a local reader: evidence applied, Esc and shutdown honoured. */

import assert from "node:assert/strict";
import { mkdtempSync, writeFileSync } from "node:fs";
import http from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { EVIDENCE_FOOTER, EVIDENCE_HEADER } from "../src/messages.ts";
import { ReaderClient } from "../src/reader-client.ts";
import { retrieveAndPlan } from "../src/retrieve.ts";
import type { SessionView } from "../src/session-view.ts";
import { readSettings } from "../src/settings.ts";

type Handler = (body: Record<string, unknown>, response: http.ServerResponse) => void;

async function serve(handler: Handler): Promise<{ url: string; requests: Record<string, unknown>[]; close: () => Promise<void> }> {
	const requests: Record<string, unknown>[] = [];
	const server = http.createServer((request, response) => {
		const chunks: Buffer[] = [];
		request.on("data", (chunk: Buffer) => chunks.push(chunk));
		request.on("end", () => {
			const body = JSON.parse(Buffer.concat(chunks).toString("utf8") || "{}");
			requests.push(body);
			handler(body, response);
		});
	});
	await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
	const { port } = server.address() as AddressInfo;
	return {
		url: `http://127.0.0.1:${port}`,
		requests,
		close: () => {
			server.closeAllConnections();
			return new Promise((resolve) => server.close(() => resolve()));
		},
	};
}

function session(): SessionView {
	const file = join(mkdtempSync(join(tmpdir(), "lookback-pi-")), "s.jsonl");
	writeFileSync(file, "{}\n");
	const branch = [
		{ type: "message", id: "a1", parentId: null, timestamp: "t" },
		{ type: "compaction", id: "k1", parentId: "a1", timestamp: "t", firstKeptEntryId: "k1", summary: "s", tokensBefore: 1 },
	];
	return {
		getSessionFile: () => file,
		getSessionId: () => "s1",
		getLeafId: () => "k1",
		getBranch: () => branch as unknown as ReturnType<SessionView["getBranch"]>,
		getLeafEntry: () => undefined,
	};
}

const prompt = { role: "user", content: [{ type: "text", text: "what did we decide about café.ts?" }], timestamp: 2 };
const answer = { role: "assistant", content: [{ type: "text", text: "ok" }] };
const envelope = { role: "user", content: [{ type: "text", text: `${EVIDENCE_HEADER}\nQuoted content JSON: "x"\n${EVIDENCE_FOOTER}` }], timestamp: 1 };

test("the planner's decision is applied: Pi's own objects plus a copy of the envelope", async () => {
	const reader = await serve((body, response) => {
		const plan = body.plan as { kinds: string[] };
		response.end(
			JSON.stringify({
				status: "ok",
				evidence: [{ session_id: "s1", entry_id: "a1", message: envelope }],
				plan: { decision: { insert_before: plan.kinds.length - 1, sources: ["s1:a1"] } },
			}),
		);
	});
	const client = new ReaderClient({ url: reader.url, token: undefined });
	try {
		const messages = [answer, prompt];
		const outcome = await retrieveAndPlan(client, readSettings({}), session(), messages, { provider: "p" }, undefined, () => {});
		assert.ok(outcome.messages);
		assert.equal(outcome.messages.length, 3);
		assert.equal(outcome.messages[0], answer);
		assert.equal(outcome.messages[2], prompt);
		assert.deepEqual(outcome.messages[1], envelope);
		assert.notEqual(outcome.messages[1], envelope, "the extension inserts its own copy");
		const sent = reader.requests[0];
		assert.deepEqual(sent.context_ids, ["k1"], "a retain-none compaction keeps nothing before it");
		assert.deepEqual(sent.plan, { kinds: ["assistant", "user"], tokens: [5, 13] });
		assert.equal(sent.provider, "p");
	} finally {
		client.close();
		await reader.close();
	}
});

test("Esc (Pi's ctx.signal) cancels the retrieval: the call settles while the reader is still silent", async () => {
	const reader = await serve(() => {}); // never answers
	const client = new ReaderClient({ url: reader.url, token: undefined });
	const esc = new AbortController();
	try {
		const call = retrieveAndPlan(client, readSettings({ LOOKBACK_TIMEOUT_MS: "600000" }), session(), [prompt], undefined, esc.signal, () => {});
		while (reader.requests.length === 0) await new Promise((resolve) => setTimeout(resolve, 5));
		esc.abort();
		await assert.rejects(call, (error: Error) => error.name === "AbortError");
	} finally {
		client.close();
		await reader.close();
	}
});

test("closing the client lets a call under way finish and refuses new ones", async () => {
	let release: () => void = () => {};
	const held = new Promise<void>((resolve) => {
		release = resolve;
	});
	const reader = await serve((_body, response) => {
		held.then(() => response.end(JSON.stringify({ status: "ok" })));
	});
	const client = new ReaderClient({ url: reader.url, token: undefined });
	try {
		const call = client.call("POST", "/v1/nudge", { session_file: "f" }, new AbortController().signal);
		while (reader.requests.length === 0) await new Promise((resolve) => setTimeout(resolve, 5));
		client.close();
		release();
		assert.deepEqual(await call, { status: "ok" });
		await assert.rejects(client.call("POST", "/v1/nudge", {}, new AbortController().signal), /client closed/);
	} finally {
		await reader.close();
	}
});
