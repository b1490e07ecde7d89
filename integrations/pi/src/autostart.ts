/**
 * Nothing to start by hand: when no reader listens at a loopback address, run
 * `lookback serve --ensure` once (it returns at once and starts at most one reader per machine,
 * under a lock in Lookback's data dir). This call stays fail-open; later calls find the reader.
 */

import { spawn } from "node:child_process";
import type { Settings } from "./settings.ts";

const LOOPBACK_HOSTS = new Set(["127.0.0.1", "localhost", "[::1]"]);

/** The port of a loopback `http://` reader URL; undefined for any other address. */
export function loopbackPort(url: string): number | undefined {
	let parsed: URL;
	try {
		parsed = new URL(url);
	} catch {
		return undefined;
	}
	if (parsed.protocol !== "http:" || !LOOPBACK_HOSTS.has(parsed.hostname)) return undefined;
	const port = Number(parsed.port || "80");
	return Number.isInteger(port) && port > 0 ? port : undefined;
}

export class ReaderStarter {
	private readonly settings: Settings;
	private readonly log: (line: string) => void;
	/** Asked since the reader last answered: ask once per outage, not on every call. */
	private asked = false;

	constructor(settings: Settings, log: (line: string) => void) {
		this.settings = settings;
		this.log = log;
	}

	/** Whether this extension may start the reader: turned on, for a loopback URL. */
	enabled(): boolean {
		return this.settings.autoStart && loopbackPort(this.settings.url) !== undefined;
	}

	/** The reader refused the connection: start it in the background (once). */
	refused(): void {
		const port = loopbackPort(this.settings.url);
		if (this.asked || !this.enabled() || port === undefined) return;
		this.asked = true;
		const args = ["serve", "--ensure", "--started-by", "pi", "--port", String(port)];
		try {
			const child = spawn(this.settings.lookbackCommand, [...this.settings.lookbackArgs, ...args], { detached: true, stdio: "ignore" });
			child.on("error", (error: NodeJS.ErrnoException) => this.log(`reader start failed: ${error.code ?? error.name}`));
			child.unref();
			this.log("reader not running: lookback serve --ensure");
		} catch (error) {
			this.log(`reader start failed: ${error instanceof Error ? error.name : "unknown error"}`);
		}
	}

	/** The reader answered: a later outage may start it again. */
	answered(): void {
		this.asked = false;
	}
}
