/**
 * The HTTP client of the Lookback reader (`lookback serve`).
 *
 * node:http with a keep-alive agent rather than the global fetch: a fraction of fetch's
 * per-request cost, and idle sockets are unref'd, so they never keep Pi running. The agent is a
 * session resource: opened on `session_start`, destroyed on `session_shutdown`.
 */

import http from "node:http";
import https from "node:https";

export const NUDGE_TIMEOUT_MS = 1000;

/** A JSON object as the reader answers it; every field is checked where it is read. */
export type JsonObject = Record<string, unknown>;

export class ReaderError extends Error {
	readonly stage: string;

	constructor(stage: string) {
		super(stage);
		this.name = "ReaderError";
		this.stage = stage;
	}
}

export interface ReaderOptions {
	url: string;
	token: string | undefined;
}

export class ReaderClient {
	private readonly options: ReaderOptions;
	private readonly agent: http.Agent;
	private closed = false;
	private pending = 0;

	constructor(options: ReaderOptions) {
		this.options = options;
		this.agent = new (options.url.startsWith("https:") ? https : http).Agent({ keepAlive: true, maxSockets: 4 });
	}

	get url(): string {
		return this.options.url;
	}

	/**
	 * Close the kept-alive sockets; later calls fail at once (idempotent). Calls under way finish
	 * first: a nudge sent at the last turn_end of `pi -p` still reaches the reader.
	 */
	close(): void {
		this.closed = true;
		if (this.pending === 0) this.agent.destroy();
	}

	private settled(): void {
		this.pending--;
		if (this.closed && this.pending === 0) this.agent.destroy();
	}

	private headers(payload: Buffer | undefined): Record<string, string> {
		const headers: Record<string, string> = { "content-type": "application/json" };
		if (payload) headers["content-length"] = String(payload.length);
		if (this.options.token) headers.authorization = `Bearer ${this.options.token}`;
		return headers;
	}

	/** One JSON call; rejects with ReaderError on HTTP errors and on bodies that are not a JSON object. */
	call(method: "GET" | "POST", path: string, body: unknown, signal: AbortSignal): Promise<JsonObject> {
		if (this.closed) return Promise.reject(new ReaderError("client closed"));
		const url = new URL(`${this.options.url}${path}`);
		const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
		const client = url.protocol === "https:" ? https : http;
		this.pending++;
		const answer = new Promise<JsonObject>((resolve, reject) => {
			const request = client.request(url, { method, headers: this.headers(payload), agent: this.agent, signal }, (response) => {
				const chunks: Buffer[] = [];
				response.on("data", (chunk: Buffer) => chunks.push(chunk));
				response.on("error", reject);
				response.on("end", () => {
					const status = response.statusCode ?? 0;
					if (status < 200 || status > 299) return reject(new ReaderError(`${path} HTTP ${status}`));
					let parsed: unknown;
					try {
						parsed = JSON.parse(Buffer.concat(chunks).toString("utf8"));
					} catch {
						return reject(new ReaderError(`${path} invalid JSON`));
					}
					if (parsed === null || typeof parsed !== "object" || Array.isArray(parsed)) {
						return reject(new ReaderError(`${path} not a JSON object`));
					}
					resolve(parsed as JsonObject);
				});
			});
			request.on("error", reject);
			request.end(payload);
		});
		return answer.finally(() => this.settled());
	}

	/** Fire and forget: ask the indexer to catch up with this session file now. */
	nudge(sessionFile: string | undefined, log: (line: string) => void): void {
		if (!sessionFile || this.closed) return;
		const { signal, done } = deadline(NUDGE_TIMEOUT_MS);
		this.call("POST", "/v1/nudge", { session_file: sessionFile }, signal)
			.catch((error: unknown) => log(`nudge failed: ${describe(error)}`))
			.finally(done);
	}
}

/**
 * An AbortSignal that fires after `ms`, or as soon as `outer` does (Pi's `ctx.signal`: Esc);
 * the timer never keeps Pi alive.
 */
export function deadline(ms: number, outer?: AbortSignal): { signal: AbortSignal; done: () => void } {
	const controller = new AbortController();
	const timer = setTimeout(() => controller.abort(), ms);
	timer.unref?.();
	const signal = outer ? AbortSignal.any([controller.signal, outer]) : controller.signal;
	return { signal, done: () => clearTimeout(timer) };
}

/**
 * Error description safe for logs: what went wrong, never a body or a message text. Network
 * failures carry the system error's code (on the error, or as `cause`).
 */
export function describe(error: unknown): string {
	if (error instanceof ReaderError) return error.stage;
	if (!(error instanceof Error)) return "unknown error";
	if (error.name === "AbortError" || error.name === "TimeoutError") return "timeout";
	const failed = error as Error & { code?: unknown; cause?: { code?: unknown } };
	const code = failed.code ?? failed.cause?.code;
	if (code === "ECONNREFUSED") return "connection refused";
	if (code === "ECONNRESET" || code === "UND_ERR_SOCKET") return "connection reset";
	if (typeof code === "string") return `network error ${code}`;
	return error.name;
}
