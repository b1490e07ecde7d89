/** Finding and starting this user's reader: once per outage, never when turned off or for a TCP reader. */

import assert from "node:assert/strict";
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { test } from "node:test";
import { ReaderStarter, isLocal } from "../src/autostart.ts";
import { fingerprint, socketPath, socketProblem } from "../src/local-reader.ts";
import { readInstalledCommand, readInstalledHome, readSettings } from "../src/settings.ts";

test("the default and unix: URLs are this user's reader; http URLs a team's", () => {
	assert.equal(isLocal(readSettings({}, undefined, undefined).url), true);
	assert.equal(isLocal("unix:/run/user/1000/lookback/0123.sock"), true);
	assert.equal(isLocal("http://127.0.0.1:8765"), false);
	assert.equal(isLocal("https://reader.internal"), false);
});

/** A stand-in `lookback` that appends its arguments to a file (and prints `stdout`). */
function recordingCommand(stdout = ""): { command: string; calls: () => string[] } {
	const folder = mkdtempSync(join(tmpdir(), "lookback-start-"));
	const record = join(folder, "calls");
	const command = join(folder, "lookback");
	writeFileSync(command, `#!/bin/sh\necho "$@" >> '${record}'\nprintf '%s' '${stdout}'\n`);
	chmodSync(command, 0o755);
	return { command, calls: () => (existsSync(record) ? readFileSync(record, "utf8").trim().split("\n") : []) };
}

async function until(condition: () => boolean): Promise<void> {
	while (!condition()) await new Promise((resolve) => setTimeout(resolve, 10));
}

test("a reader that does not answer is started once per outage with lookback serve --ensure", async () => {
	const { command, calls } = recordingCommand();
	const starter = new ReaderStarter(readSettings({ LOOKBACK_HOME: "/data/home", LOOKBACK_COMMAND: command }), () => {});
	starter.refused();
	starter.refused();
	await until(() => calls().length === 1);
	starter.answered();
	starter.refused();
	await until(() => calls().length === 2);
	assert.deepEqual(calls(), Array(2).fill("--home /data/home serve --ensure --started-by pi"));
});

test("LOOKBACK_AUTOSTART=0 and a TCP reader start nothing; a missing command is only logged", async () => {
	const lines: string[] = [];
	const missing = join(mkdtempSync(join(tmpdir(), "lookback-none-")), "lookback");
	assert.equal(new ReaderStarter(readSettings({ LOOKBACK_AUTOSTART: "0" }), () => {}).enabled(), false);
	assert.equal(new ReaderStarter(readSettings({ LOOKBACK_URL: "http://127.0.0.1:8765" }), () => {}).enabled(), false);
	assert.equal(new ReaderStarter(readSettings({}), () => {}).enabled(), true);
	new ReaderStarter(readSettings({ LOOKBACK_AUTOSTART: "0", LOOKBACK_COMMAND: missing }), (l) => lines.push(l)).refused();
	new ReaderStarter(readSettings({ LOOKBACK_URL: "http://reader.example:8765", LOOKBACK_COMMAND: missing }), (l) => lines.push(l)).refused();
	assert.equal(lines.length, 0);
	new ReaderStarter(readSettings({ LOOKBACK_COMMAND: missing }), (l) => lines.push(l)).refused();
	await until(() => lines.some((l) => l.startsWith("reader start failed")));
	assert.ok(lines.includes("reader start failed: ENOENT"));
});

test("the command lookback install pi recorded starts the reader, with its arguments first", async () => {
	const { command, calls } = recordingCommand();
	const file = join(mkdtempSync(join(tmpdir(), "lookback-installed-")), "lookback.json");
	writeFileSync(file, JSON.stringify({ command: [command, "-P", "-m", "lookback"], home: "/data/lb" }));
	const installed = readInstalledCommand(pathToFileURL(file));
	const home = readInstalledHome(pathToFileURL(file));
	assert.deepEqual(installed, [command, "-P", "-m", "lookback"]);
	assert.equal(home, "/data/lb");
	new ReaderStarter(readSettings({}, installed, home), () => {}).refused();
	await until(() => calls().length === 1 && calls()[0].endsWith("pi")); // the line whole
	assert.deepEqual(calls(), ["-P -m lookback --home /data/lb serve --ensure --started-by pi"]);
	// LOOKBACK_COMMAND and LOOKBACK_HOME still win; an unreadable or malformed record means `lookback` on PATH.
	assert.equal(readSettings({ LOOKBACK_COMMAND: "/x/lookback" }, installed).lookbackCommand, "/x/lookback");
	assert.equal(readSettings({ LOOKBACK_HOME: "/y" }, installed, home).home, "/y");
	writeFileSync(file, JSON.stringify({ command: [] }));
	assert.equal(readInstalledCommand(pathToFileURL(file)), undefined);
	assert.equal(readInstalledHome(pathToFileURL(file)), undefined);
	assert.equal(readInstalledCommand(pathToFileURL(`${file}.missing`)), undefined);
	assert.deepEqual(readSettings({}, undefined).lookbackCommand, "lookback");
});

test("the reader's address comes from the data home, else from lookback serve --address", async () => {
	const runtime = mkdtempSync(join(tmpdir(), "lookback-run-"));
	const env = { XDG_RUNTIME_DIR: runtime, LOOKBACK_HOME: "/data/home" };
	const known = await new ReaderStarter(readSettings(env), () => {}).locate();
	assert.deepEqual(known, { socket: join(runtime, "lookback", `${fingerprint("/data/home")}.sock`), identity: fingerprint("/data/home") });
	assert.equal(known?.socket, socketPath("/data/home", env));
	const printed = JSON.stringify({ address: "unix:/s.sock", socket: "/s.sock", identity: "abc" });
	const { command, calls } = recordingCommand(printed);
	const asked = new ReaderStarter(readSettings({ LOOKBACK_COMMAND: command }, undefined, undefined), () => {});
	assert.deepEqual(await asked.locate(), { socket: "/s.sock", identity: "abc" });
	assert.deepEqual(await asked.locate(), { socket: "/s.sock", identity: "abc" });
	assert.deepEqual(calls(), ["serve --address"]); // asked once
	const explicit = new ReaderStarter(readSettings({ LOOKBACK_URL: "unix:/other.sock", LOOKBACK_HOME: "/data/home" }), () => {});
	assert.deepEqual(await explicit.locate(), { socket: "/other.sock", identity: fingerprint("/data/home") });
});

test("a socket whose folder is not private, or not this user's, is a problem; none is 'none'", () => {
	const runtime = mkdtempSync(join(tmpdir(), "lookback-run-"));
	const folder = join(runtime, "lookback");
	assert.equal(socketProblem(join(folder, "x.sock")), "none");
	mkdirSync(folder, { mode: 0o700 });
	assert.equal(socketProblem(join(folder, "x.sock")), "none");
	writeFileSync(join(folder, "x.sock"), "");
	assert.match(socketProblem(join(folder, "x.sock")) ?? "", /is not a socket of yours/);
	chmodSync(folder, 0o755);
	assert.match(socketProblem(join(folder, "x.sock")) ?? "", /is open to other users/);
});
