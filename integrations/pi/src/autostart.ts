/**
 * This user's reader, found and started with nothing to do by hand: where it listens
 * (`locate`: the socket the data home's reader recorded, else derived from the home, or asked of `lookback serve --address` when the home is
 * not known here) and, when it does not answer, `lookback serve --ensure` once per outage (it
 * returns at once and starts at most one reader per data home, under a lock in its folder). The
 * call that found it down stays fail-open; later calls find the reader. A reader on TCP
 * (`LOOKBACK_URL=http…`) is a team's: never located nor started from here.
 */

import { execFile, spawn } from "node:child_process";
import { UNIX_PREFIX, findSocket, fingerprint } from "./local-reader.ts";
import type { LocalReader } from "./reader-client.ts";
import type { Settings } from "./settings.ts";

/** How long `lookback serve --address` may take (a Python start, once per Pi process). */
const ADDRESS_TIMEOUT_MS = 10_000;

/** Whether `url` names this user's reader on a Unix socket (the default, or `unix:/path`). */
export function isLocal(url: string): boolean {
	return url === "" || url.startsWith(UNIX_PREFIX);
}

export class ReaderStarter {
	private readonly settings: Settings;
	private readonly log: (line: string) => void;
	/** Asked since the reader last answered: ask once per outage, not on every call. */
	private asked = false;
	private located: Promise<LocalReader | undefined> | undefined;

	constructor(settings: Settings, log: (line: string) => void) {
		this.settings = settings;
		this.log = log;
	}

	/** Whether this extension may start the reader: turned on, for this user's reader. */
	enabled(): boolean {
		return this.settings.autoStart && isLocal(this.settings.url);
	}

	/** The command line of `lookback <args>`, for the data home this extension knows. */
	private command(args: string[]): [string, string[]] {
		const home = this.settings.home ? ["--home", this.settings.home] : [];
		return [this.settings.lookbackCommand, [...this.settings.lookbackArgs, ...home, ...args]];
	}

	/**
	 * Where this user's reader listens and the identity it must name: from the data home when
	 * it is known here, else from `lookback serve --address` (once; again after a failure).
	 */
	locate(): Promise<LocalReader | undefined> {
		const explicit = this.settings.url.startsWith(UNIX_PREFIX) ? this.settings.url.slice(UNIX_PREFIX.length) : undefined;
		if (this.settings.home) {
			const socket = explicit ?? findSocket(this.settings.home, this.settings.socketEnv);
			return Promise.resolve(socket ? { socket, identity: fingerprint(this.settings.home) } : undefined);
		}
		this.located ??= this.askAddress().then((found) => {
			if (!found) this.located = undefined;
			return found && explicit ? { ...found, socket: explicit } : found;
		});
		return this.located;
	}

	private askAddress(): Promise<LocalReader | undefined> {
		const [command, args] = this.command(["serve", "--address"]);
		return new Promise((resolve) => {
			try {
				const child = execFile(command, args, { timeout: ADDRESS_TIMEOUT_MS }, (error, stdout) => {
					if (error) {
						this.log(`reader address unknown: ${(error as NodeJS.ErrnoException).code ?? error.name}`);
						return resolve(undefined);
					}
					try {
						const { socket, identity } = JSON.parse(stdout) as Record<string, unknown>;
						if (typeof socket === "string" && typeof identity === "string") return resolve({ socket, identity });
					} catch {
						// not the JSON `lookback serve --address` prints
					}
					this.log("reader address unknown: unexpected answer");
					resolve(undefined);
				});
				child.unref();
			} catch (error) {
				this.log(`reader address unknown: ${error instanceof Error ? error.name : "unknown error"}`);
				resolve(undefined);
			}
		});
	}

	/** The reader did not answer: start it in the background (once). */
	refused(): void {
		if (this.asked || !this.enabled()) return;
		this.asked = true;
		const [command, args] = this.command(["serve", "--ensure", "--started-by", "pi"]);
		try {
			const child = spawn(command, args, { detached: true, stdio: "ignore" });
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
