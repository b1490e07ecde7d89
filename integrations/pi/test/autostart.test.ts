/** Starting the reader: only for a loopback URL, once per outage, never when turned off. */

import assert from "node:assert/strict";
import { chmodSync, existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { test } from "node:test";
import { ReaderStarter, loopbackPort } from "../src/autostart.ts";
import { readInstalledCommand, readSettings } from "../src/settings.ts";

test("only loopback http URLs name a port to start a reader on", () => {
	assert.equal(loopbackPort("http://127.0.0.1:8765"), 8765);
	assert.equal(loopbackPort("http://localhost:9000/"), 9000);
	assert.equal(loopbackPort("http://[::1]:7000"), 7000);
	assert.equal(loopbackPort("http://reader.internal:8765"), undefined);
	assert.equal(loopbackPort("https://127.0.0.1:8765"), undefined);
	assert.equal(loopbackPort("not a url"), undefined);
});

/** A stand-in `lookback` that appends its arguments to a file. */
function recordingCommand(): { command: string; calls: () => string[] } {
	const folder = mkdtempSync(join(tmpdir(), "lookback-start-"));
	const record = join(folder, "calls");
	const command = join(folder, "lookback");
	writeFileSync(command, `#!/bin/sh\necho "$@" >> '${record}'\n`);
	chmodSync(command, 0o755);
	return { command, calls: () => (existsSync(record) ? readFileSync(record, "utf8").trim().split("\n") : []) };
}

async function until(condition: () => boolean): Promise<void> {
	while (!condition()) await new Promise((resolve) => setTimeout(resolve, 10));
}

test("a refused reader is started once per outage with lookback serve --ensure", async () => {
	const { command, calls } = recordingCommand();
	const starter = new ReaderStarter(readSettings({ LOOKBACK_URL: "http://127.0.0.1:9123", LOOKBACK_COMMAND: command }), () => {});
	starter.refused();
	starter.refused();
	await until(() => calls().length === 1);
	starter.answered();
	starter.refused();
	await until(() => calls().length === 2);
	assert.deepEqual(calls(), Array(2).fill("serve --ensure --started-by pi --port 9123"));
});

test("LOOKBACK_AUTOSTART=0 and a remote reader start nothing; a missing command is only logged", async () => {
	const lines: string[] = [];
	const missing = join(mkdtempSync(join(tmpdir(), "lookback-none-")), "lookback");
	assert.equal(new ReaderStarter(readSettings({ LOOKBACK_AUTOSTART: "0" }), () => {}).enabled(), false);
	assert.equal(new ReaderStarter(readSettings({ LOOKBACK_URL: "http://reader.example:8765" }), () => {}).enabled(), false);
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
	writeFileSync(file, JSON.stringify({ command: [command, "-P", "-m", "lookback"] }));
	const installed = readInstalledCommand(pathToFileURL(file));
	assert.deepEqual(installed, [command, "-P", "-m", "lookback"]);
	new ReaderStarter(readSettings({ LOOKBACK_URL: "http://127.0.0.1:9124" }, installed), () => {}).refused();
	await until(() => calls().length === 1 && calls()[0].endsWith("9124")); // the line whole
	assert.deepEqual(calls(), ["-P -m lookback serve --ensure --started-by pi --port 9124"]);
	// LOOKBACK_COMMAND still wins; an unreadable or malformed record means `lookback` on PATH.
	assert.equal(readSettings({ LOOKBACK_COMMAND: "/x/lookback" }, installed).lookbackCommand, "/x/lookback");
	writeFileSync(file, JSON.stringify({ command: [] }));
	assert.equal(readInstalledCommand(pathToFileURL(file)), undefined);
	assert.equal(readInstalledCommand(pathToFileURL(`${file}.missing`)), undefined);
	assert.deepEqual(readSettings({}, undefined).lookbackCommand, "lookback");
});
