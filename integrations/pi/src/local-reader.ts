/**
 * Where this user's reader listens, and whether what is there is it: the rule of
 * `lookback/local_reader.py`, which `tests/test_contract_parity.py` holds equal to this one.
 *
 * The reader of a data home listens on a Unix socket named after the home (`fingerprint`: a
 * short hash of its real path) in a directory only its user may enter: `$XDG_RUNTIME_DIR/lookback`
 * when that is a directory the user owns, else `${TMPDIR:-/tmp}/lookback-<uid>`. Before anything
 * is sent, `socketProblem` checks the directory (owner, mode) and the socket (owner); the reader's
 * `/v1/health?projects=0` must then name the home's fingerprint (`ReaderClient`). Node cannot ask
 * the kernel for the peer's uid, but no other uid can bind a socket in a directory it cannot enter.
 * That directory depends on the environment, so the reader records its socket's path in the data
 * home (`reader.socket`): `findSocket` looks there first, then where this environment puts it;
 * whatever it finds passes the same checks.
 */

import { createHash } from "node:crypto";
import { lstatSync, readFileSync, realpathSync, statSync } from "node:fs";
import { homedir } from "node:os";
import { basename, dirname, isAbsolute, join, resolve } from "node:path";

/** How an address names a Unix socket: `unix:/run/user/1000/lookback/0123abcd.sock`. */
export const UNIX_PREFIX = "unix:";
/** The bytes a socket path may have (`sun_path`, its terminating NUL excluded). */
const MAX_SOCKET_PATH_BYTES = (process.platform === "darwin" ? 104 : 108) - 1;
/** The file in the data home that names the socket its reader listens on. */
export const ADDRESS_FILE = "reader.socket";

function uid(): number {
	return process.getuid?.() ?? -1;
}

/** `os.path.realpath` of Python: the real path of the part that exists, the rest appended. */
function realPath(path: string): string {
	const absolute = resolve(path.startsWith("~") ? join(homedir(), path.slice(1)) : path);
	const rest: string[] = [];
	let existing = absolute;
	for (;;) {
		try {
			return join(realpathSync(existing), ...rest.reverse());
		} catch {
			const parent = dirname(existing);
			if (parent === existing) return absolute;
			rest.push(basename(existing));
			existing = parent;
		}
	}
}

/** The data home's identity: a short hash of its real path (nothing secret). */
export function fingerprint(home: string): string {
	return createHash("sha256").update(realPath(home)).digest("hex").slice(0, 16);
}

/** The per-user directories a socket may live in, preferred first. */
export function socketDirs(env: NodeJS.ProcessEnv = process.env): string[] {
	const found: string[] = [];
	const runtime = env.XDG_RUNTIME_DIR ?? "";
	if (isAbsolute(runtime)) {
		try {
			const info = statSync(runtime);
			if (info.isDirectory() && info.uid === uid()) found.push(join(runtime, "lookback"));
		} catch {
			// no such directory: the next one
		}
	}
	for (const temporary of [env.TMPDIR ?? "", "/tmp"]) {
		if (!isAbsolute(temporary)) continue;
		const folder = join(temporary, `lookback-${uid()}`);
		if (!found.includes(folder)) found.push(folder);
	}
	return found;
}

/** The socket of the reader of `home`; undefined when no directory gives a short enough path. */
export function socketPath(home: string, env: NodeJS.ProcessEnv = process.env): string | undefined {
	const name = `${fingerprint(home)}.sock`;
	return socketDirs(env)
		.map((folder) => join(folder, name))
		.find((path) => Buffer.byteLength(path) <= MAX_SOCKET_PATH_BYTES);
}

/** The socket the reader of `home` recorded, or undefined (none, or not a socket path). */
export function recordedSocket(home: string): string | undefined {
	let text: string;
	try {
		const expanded = home.startsWith("~") ? join(homedir(), home.slice(1)) : home;
		text = readFileSync(join(expanded, ADDRESS_FILE), "utf8").trim();
	} catch {
		return undefined;
	}
	const fits = Buffer.byteLength(text) <= MAX_SOCKET_PATH_BYTES;
	return isAbsolute(text) && fits && !text.includes("\0") && !text.includes("\n") ? text : undefined;
}

/** Where to look for the reader of `home`, first first: the socket it recorded, then `socketPath`. */
export function socketCandidates(home: string, env: NodeJS.ProcessEnv = process.env): string[] {
	const found: string[] = [];
	const recorded = recordedSocket(home);
	if (recorded) found.push(recorded);
	const computed = socketPath(home, env);
	if (computed && !found.includes(computed)) found.push(computed);
	return found;
}

/**
 * The first candidate that is a socket of this user's in a private directory (`socketProblem`
 * finds none), else where a reader started now would listen (checked again before use).
 */
export function findSocket(home: string, env: NodeJS.ProcessEnv = process.env): string | undefined {
	const candidates = socketCandidates(home, env);
	return candidates.find((path) => socketProblem(path) === undefined) ?? candidates.at(-1);
}

/**
 * Why the socket at `path` is not this user's reader ("none": nothing is there), or undefined
 * when its directory and the socket itself are this user's and no one else may enter.
 */
export function socketProblem(path: string): string | undefined {
	const folder = dirname(path);
	try {
		const info = lstatSync(folder);
		if (!info.isDirectory()) return `${folder} is not a directory`;
		if (info.uid !== uid()) return `${folder} belongs to uid ${info.uid}, not to you`;
		if ((info.mode & 0o077) !== 0) return `${folder} is open to other users`;
		const socket = lstatSync(path);
		if (!socket.isSocket() || socket.uid !== uid()) return `${path} is not a socket of yours`;
	} catch (error) {
		return (error as NodeJS.ErrnoException).code === "ENOENT" ? "none" : "cannot read it";
	}
	return undefined;
}
