/** The extension's configuration, read from the environment once per extension instance. */

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
	/** The `lookback` command that starts it (`LOOKBACK_COMMAND`; default: `lookback` on PATH). */
	lookbackCommand: string;
}

function positiveInt(raw: string | undefined): number | undefined {
	if (raw === undefined || raw.trim() === "") return undefined;
	const value = Number(raw);
	return Number.isInteger(value) && value > 0 ? value : undefined;
}

export function readSettings(env: NodeJS.ProcessEnv = process.env): Settings {
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
		lookbackCommand: env.LOOKBACK_COMMAND || "lookback",
	};
}
