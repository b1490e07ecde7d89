/** This user's reader over its Unix socket: nothing of the conversation goes to anything else. */

import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, writeFileSync } from "node:fs";
import http from "node:http";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { ReaderStarter } from "../src/autostart.ts";
import { ADDRESS_FILE, fingerprint, socketPath } from "../src/local-reader.ts";
import { ReaderClient, ReaderError, deadline, describe } from "../src/reader-client.ts";
import { readSettings } from "../src/settings.ts";

/** An HTTP server on a socket in a private folder, answering health with `identity`. */
async function socketServer(identity: unknown): Promise<{ socket: string; seen: string[]; close: () => Promise<void> }> {
	const folder = join(mkdtempSync(join(tmpdir(), "lookback-sock-")), "lookback");
	mkdirSync(folder, { mode: 0o700 });
	const socket = join(folder, "reader.sock");
	const seen: string[] = [];
	const server = http.createServer((request, response) => {
		seen.push(`${request.method} ${request.url} ${request.headers.authorization ?? "-"}`);
		request.resume();
		request.on("end", () => {
			response.setHeader("content-type", "application/json");
			response.end(JSON.stringify(request.url?.startsWith("/v1/health") ? { status: "ok", identity } : { status: "ok", evidence: [] }));
		});
	});
	await new Promise<void>((resolve) => server.listen(socket, resolve));
	return { socket, seen, close: () => new Promise((resolve) => server.close(() => resolve())) };
}

async function retrieve(client: ReaderClient): Promise<unknown> {
	const { signal, done } = deadline(5000);
	try {
		return await client.call("POST", "/v1/retrieve", { message: "the prompt" }, signal);
	} finally {
		done();
	}
}

test("its own reader gets the call, after naming the data home it expects (no token sent for that)", async () => {
	const reader = await socketServer("0123456789abcdef");
	const client = new ReaderClient({ url: "", token: "t0k3n-s3cret", locate: async () => ({ socket: reader.socket, identity: "0123456789abcdef" }) });
	try {
		await retrieve(client);
		await retrieve(client);
		assert.deepEqual(reader.seen, ["GET /v1/health?projects=0 -", "POST /v1/retrieve Bearer t0k3n-s3cret", "POST /v1/retrieve Bearer t0k3n-s3cret"]);
	} finally {
		client.close();
		await reader.close();
	}
});

test("a reader of another data home, or no reader at all, receives no prompt", async () => {
	const reader = await socketServer("fedcba9876543210");
	const client = new ReaderClient({ url: "", token: "t0k3n-s3cret", locate: async () => ({ socket: reader.socket, identity: "0123456789abcdef" }) });
	const silent = await socketServer(undefined);
	const notReader = new ReaderClient({ url: "", token: undefined, locate: async () => ({ socket: silent.socket, identity: "0123456789abcdef" }) });
	const nothing = new ReaderClient({ url: "", token: undefined, locate: async () => ({ socket: join(tmpdir(), "none", "x.sock"), identity: "x" }) });
	try {
		await assert.rejects(retrieve(client), (error: Error) => error instanceof ReaderError && describe(error).startsWith("not ours"));
		await assert.rejects(retrieve(client), (error: Error) => describe(error).startsWith("not ours")); // checked again, refused again
		assert.equal(client.notOurs, 2);
		assert.deepEqual(reader.seen, Array(2).fill("GET /v1/health?projects=0 -"));
		await assert.rejects(retrieve(notReader), (error: Error) => describe(error).startsWith("not ours"));
		assert.deepEqual(silent.seen, ["GET /v1/health?projects=0 -"]);
		await assert.rejects(retrieve(nothing), (error: Error) => describe(error) === "no reader");
	} finally {
		for (const c of [client, notReader, nothing]) c.close();
		await reader.close();
		await silent.close();
	}
});

test("a reader started under another environment is found at the socket it recorded in the data home", async () => {
	const home = mkdtempSync(join(tmpdir(), "lookback-home-"));
	const reader = await socketServer(fingerprint(home));
	const elsewhere = mkdtempSync(join(tmpdir(), "lookback-tmp-")); // this environment's TMPDIR, no XDG_RUNTIME_DIR
	const settings = readSettings({ LOOKBACK_HOME: home, TMPDIR: elsewhere }, undefined, undefined);
	assert.notEqual(socketPath(home, settings.socketEnv), reader.socket);
	writeFileSync(join(home, ADDRESS_FILE), `${reader.socket}\n`);
	const starter = new ReaderStarter(settings, () => {});
	const client = new ReaderClient({ url: "", token: undefined, locate: () => starter.locate() });
	try {
		assert.deepEqual(await starter.locate(), { socket: reader.socket, identity: fingerprint(home) });
		await retrieve(client);
		assert.deepEqual(reader.seen, ["GET /v1/health?projects=0 -", "POST /v1/retrieve -"]);
	} finally {
		client.close();
		await reader.close();
	}
});

test("a recorded socket that is not a socket of this user's is passed over", async () => {
	const home = mkdtempSync(join(tmpdir(), "lookback-home-"));
	const env = { LOOKBACK_HOME: home, TMPDIR: mkdtempSync(join(tmpdir(), "lookback-tmp-")) };
	writeFileSync(join(home, ADDRESS_FILE), "/nonexistent/lookback/x.sock\n");
	const starter = new ReaderStarter(readSettings(env, undefined, undefined), () => {});
	assert.equal((await starter.locate())?.socket, socketPath(home, env));
});
