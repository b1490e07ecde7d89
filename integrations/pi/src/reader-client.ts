/**
 * The HTTP client of the Lookback reader (`lookback serve`).
 *
 * node:http with a keep-alive agent rather than the global fetch: a fraction of fetch's
 * per-request cost, and idle sockets are unref'd, so they never keep Pi running. The agent is a
 * session resource: opened on `session_start`, destroyed on `session_shutdown`.
 *
 * This user's reader is reached on its Unix socket, and only once it is known to be it: before
 * each call the socket's directory and owner are checked (`socketProblem`), and before the first
 * (again after any failure) `GET /v1/health?projects=0` must name the data home's identity.
 * Anything else is "not ours": nothing of the conversation is sent. A TCP reader (`http://…`,
 * a team's, behind a token) is asked as it is.
 */

import http from "node:http";
import https from "node:https";
import { socketProblem } from "./local-reader.ts";

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

/** Where this user's reader listens, and the identity its health must name. */
export interface LocalReader {
	socket: string;
	identity: string;
}

export interface ReaderOptions {
	url: string;
	token: string | undefined;
	/** This user's reader (no TCP `url`): where it is, found on demand (`ReaderStarter.locate`). */
	locate?: () => Promise<LocalReader | undefined>;
}

/** Nothing listens where this user's reader would (a reason for `describe`: "no reader"). */
const NO_READER = "no reader";

export class ReaderClient {
	private readonly options: ReaderOptions;
	private readonly agent: http.Agent;
	private closed = false;
	private pending = 0;
	/** This user's reader, once its health named the identity expected (reset on any failure). */
	private verified: Promise<LocalReader> | undefined;
	/** Calls refused because what answered was not this user's reader of this data home. */
	notOurs = 0;

	constructor(options: ReaderOptions) {
		this.options = options;
		this.agent = new (options.url.startsWith("https:") ? https : http).Agent({ keepAlive: true, maxSockets: 4 });
	}

	get url(): string {
		return this.options.url || "this user's reader";
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

	private headers(payload: Buffer | undefined, withToken: boolean): Record<string, string> {
		const headers: Record<string, string> = { "content-type": "application/json" };
		if (payload) headers["content-length"] = String(payload.length);
		if (this.options.token && withToken) headers.authorization = `Bearer ${this.options.token}`;
		return headers;
	}

	/** One JSON call; rejects with ReaderError on HTTP errors and on bodies that are not a JSON object. */
	call(method: "GET" | "POST", path: string, body: unknown, signal: AbortSignal): Promise<JsonObject> {
		if (this.closed) return Promise.reject(new ReaderError("client closed"));
		this.pending++;
		const answer = this.options.locate
			? this.ours(signal).then((local) => this.send(method, path, body, signal, local))
			: this.send(method, path, body, signal, undefined);
		return answer
			.catch((error: unknown) => {
				this.verified = undefined; // a reader restarted or replaced is checked again
				throw error;
			})
			.finally(() => this.settled());
	}

	/** This user's reader, checked: its socket now, its identity once (see the module's doc). */
	private async ours(signal: AbortSignal): Promise<LocalReader> {
		this.verified ??= this.verify(signal);
		const local = await this.verified;
		this.check(local);
		return local;
	}

	private async verify(signal: AbortSignal): Promise<LocalReader> {
		const local = await this.options.locate?.();
		if (!local) throw new ReaderError(NO_READER);
		this.check(local);
		// No token with it: the identity is answered without one, and nothing is given away first.
		const health = await this.send("GET", "/v1/health?projects=0", undefined, signal, local, false);
		if (health.identity !== local.identity) {
			this.notOurs++;
			throw new ReaderError(`not ours: ${typeof health.identity === "string" ? "another data home's reader" : "no reader"}`);
		}
		return local;
	}

	private check(local: LocalReader): void {
		const problem = socketProblem(local.socket);
		if (problem === "none") throw new ReaderError(NO_READER);
		if (problem) {
			this.notOurs++;
			throw new ReaderError(`not ours: ${problem}`);
		}
	}

	private send(
		method: "GET" | "POST",
		path: string,
		body: unknown,
		signal: AbortSignal,
		local: LocalReader | undefined,
		withToken = true,
	): Promise<JsonObject> {
		const payload = body === undefined ? undefined : Buffer.from(JSON.stringify(body));
		const url = local ? undefined : new URL(`${this.options.url}${path}`);
		const client = url?.protocol === "https:" ? https : http;
		const where = local ? { socketPath: local.socket, path } : {};
		return new Promise<JsonObject>((resolve, reject) => {
			const options = { ...where, method, headers: this.headers(payload, withToken), agent: this.agent, signal };
			const respond = (response: http.IncomingMessage) => {
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
			};
			const request = url ? client.request(url, options, respond) : client.request(options, respond);
			request.on("error", reject);
			request.end(payload);
		});
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
	if (code === "ENOENT") return NO_READER;
	if (code === "ECONNRESET" || code === "UND_ERR_SOCKET") return "connection reset";
	if (typeof code === "string") return `network error ${code}`;
	return error.name;
}
