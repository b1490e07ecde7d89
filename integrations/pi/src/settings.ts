/**
 * The extension's configuration, read from the environment once per extension instance, and the
 * command `lookback install pi` recorded beside the installed copy (`lookback.json`).
 */

import { readFileSync } from "node:fs";

export const DEFAULT_URL = "http://127.0.0.1:8765";
export const DEFAULT_TIMEOUT_MS = 1500;

export interface Settings {
	url: string;
	token: string | undefined;
	timeoutMs: number;
	maxResults: number | undefined;
	maxHistoryTokens: number | undefined;
	historyTool: boolean;
	disabled: boolean;
	debug: boolean;
	/** Run `lookback serve --ensure` when no reader listens at a loopback URL (`LOOKBACK_AUTOSTART=0`: never). */
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

/** The recorded command (a non-empty list of strings), or undefined when none is readable. */
export function readInstalledCommand(file: URL = INSTALLED_COMMAND_FILE): string[] | undefined {
	try {
		const command: unknown = JSON.parse(readFileSync(file, "utf8")).command;
		if (Array.isArray(command) && command.length > 0 && command.every((part) => typeof part === "string" && part)) {
			return command;
		}
	} catch {
		// not installed by `lookback install pi` (a clone loaded with `pi -e`): PATH decides
	}
	return undefined;
}

function positiveInt(raw: string | undefined): number | undefined {
	if (raw === undefined || raw.trim() === "") return undefined;
	const value = Number(raw);
	return Number.isInteger(value) && value > 0 ? value : undefined;
}

export function readSettings(env: NodeJS.ProcessEnv = process.env, installed = readInstalledCommand()): Settings {
	const [lookbackCommand, ...lookbackArgs] = env.LOOKBACK_COMMAND ? [env.LOOKBACK_COMMAND] : (installed ?? ["lookback"]);
	return {
		url: (env.LOOKBACK_URL || DEFAULT_URL).replace(/\/+$/, ""),
		token: env.LOOKBACK_TOKEN || undefined,
		timeoutMs: positiveInt(env.LOOKBACK_TIMEOUT_MS) ?? DEFAULT_TIMEOUT_MS,
		maxResults: positiveInt(env.LOOKBACK_MAX_RESULTS),
		maxHistoryTokens: positiveInt(env.LOOKBACK_MAX_HISTORY_TOKENS),
		historyTool: env.LOOKBACK_HISTORY_TOOL === "1",
		disabled: env.LOOKBACK_DISABLED === "1",
		debug: Boolean(env.LOOKBACK_DEBUG),
		autoStart: env.LOOKBACK_AUTOSTART !== "0",
		lookbackCommand,
		lookbackArgs,
	};
}
