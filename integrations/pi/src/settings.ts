/**
 * The extension's configuration, read from the environment once per extension instance, and the
 * command `lookback install pi` recorded beside the installed copy (`lookback.json`).
 */

import { readFileSync } from "node:fs";
import { DEFAULT_ACTION_TOKENS } from "./action.ts";
import { field } from "./messages.ts";

export const DEFAULT_TIMEOUT_MS = 1500;

export interface Settings {
	/**
	 * `LOOKBACK_URL`: `http(s)://…` a reader on TCP (a team's, with a token); `unix:/path` this
	 * user's reader at that socket; "" (the default) this user's reader of `home`, on the socket
	 * `src/local-reader.ts` derives from it.
	 */
	url: string;
	/** The data home whose reader this is: `LOOKBACK_HOME`, else the one `lookback install pi` recorded. */
	home: string | undefined;
	/** The variables its socket's folder depends on (`XDG_RUNTIME_DIR`, `TMPDIR`). */
	socketEnv: NodeJS.ProcessEnv;
	token: string | undefined;
	timeoutMs: number;
	maxResults: number | undefined;
	maxHistoryTokens: number | undefined;
	historyTool: boolean;
	/** Evidence at the point of action (tool calls): `LOOKBACK_ACTION=0` or `action.enabled = false` at install turns it off. */
	action: boolean;
	actionMaxTokens: number;
	disabled: boolean;
	debug: boolean;
	/** Run `lookback serve --ensure` when this user's reader does not answer (`LOOKBACK_AUTOSTART=0`: never). */
	autoStart: boolean;
	/**
	 * The program that starts it and its first arguments: `LOOKBACK_COMMAND`, else the absolute
	 * command `lookback install pi` recorded (this Lookback's Python), else `lookback` on PATH.
	 */
	lookbackCommand: string;
	lookbackArgs: string[];
}

/** Where `lookback install pi` records the command of the Lookback it installed from. */
export const INSTALLED_COMMAND_FILE = new URL("../lookback.json", import.meta.url);

function readInstalled(file: URL): Record<string, unknown> {
	try {
		const recorded: unknown = JSON.parse(readFileSync(file, "utf8"));
		if (recorded !== null && typeof recorded === "object") return recorded as Record<string, unknown>;
	} catch {
		// not installed by `lookback install pi` (a clone loaded with `pi -e`): PATH decides
	}
	return {};
}

/** The recorded command (a non-empty list of strings), or undefined when none is readable. */
export function readInstalledCommand(file: URL = INSTALLED_COMMAND_FILE): string[] | undefined {
	const command = readInstalled(file).command;
	if (Array.isArray(command) && command.length > 0 && command.every((part) => typeof part === "string" && part)) {
		return command;
	}
	return undefined;
}

/** What `lookback install pi` recorded of the `action` settings (enabled, max_tokens). */
export function readInstalledAction(file: URL = INSTALLED_COMMAND_FILE): { enabled?: boolean; maxTokens?: number } {
	const action = readInstalled(file).action;
	const enabled = field(action, "enabled");
	const maxTokens = field(action, "max_tokens");
	return {
		enabled: typeof enabled === "boolean" ? enabled : undefined,
		maxTokens: typeof maxTokens === "number" && Number.isInteger(maxTokens) && maxTokens > 0 ? maxTokens : undefined,
	};
}

/** The data home `lookback install pi` recorded, or undefined. */
export function readInstalledHome(file: URL = INSTALLED_COMMAND_FILE): string | undefined {
	const home = readInstalled(file).home;
	return typeof home === "string" && home ? home : undefined;
}

function positiveInt(raw: string | undefined): number | undefined {
	if (raw === undefined || raw.trim() === "") return undefined;
	const value = Number(raw);
	return Number.isInteger(value) && value > 0 ? value : undefined;
}

export function readSettings(
	env: NodeJS.ProcessEnv = process.env,
	installed = readInstalledCommand(),
	installedHome = readInstalledHome(),
	installedAction = readInstalledAction(),
): Settings {
	const [lookbackCommand, ...lookbackArgs] = env.LOOKBACK_COMMAND ? [env.LOOKBACK_COMMAND] : (installed ?? ["lookback"]);
	return {
		url: (env.LOOKBACK_URL || "").replace(/\/+$/, ""),
		home: env.LOOKBACK_HOME || installedHome,
		socketEnv: { XDG_RUNTIME_DIR: env.XDG_RUNTIME_DIR, TMPDIR: env.TMPDIR },
		token: env.LOOKBACK_TOKEN || undefined,
		timeoutMs: positiveInt(env.LOOKBACK_TIMEOUT_MS) ?? DEFAULT_TIMEOUT_MS,
		maxResults: positiveInt(env.LOOKBACK_MAX_RESULTS),
		maxHistoryTokens: positiveInt(env.LOOKBACK_MAX_HISTORY_TOKENS),
		historyTool: env.LOOKBACK_HISTORY_TOOL === "1",
		action: env.LOOKBACK_ACTION !== undefined ? env.LOOKBACK_ACTION !== "0" : (installedAction.enabled ?? true),
		actionMaxTokens: positiveInt(env.LOOKBACK_ACTION_MAX_TOKENS) ?? installedAction.maxTokens ?? DEFAULT_ACTION_TOKENS,
		disabled: env.LOOKBACK_DISABLED === "1",
		debug: Boolean(env.LOOKBACK_DEBUG),
		autoStart: env.LOOKBACK_AUTOSTART !== "0",
		lookbackCommand,
		lookbackArgs,
	};
}
