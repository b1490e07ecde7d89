/**
 * What the extension reads of Pi's session: the branch, the entries in the model's context, and
 * whether the call's last message is persisted yet (Python: `lookback.index.tree`).
 */

import type { ExtensionContext } from "@earendil-works/pi-coding-agent";
import { field } from "./messages.ts";

/** The few fields of a session entry the context rule reads. */
export interface EntryLike {
	type: string;
	id: string;
	firstKeptEntryId?: string;
	targetId?: string;
}

/** Pi's read-only session manager, as its handlers receive it. */
type ReadonlySessionManager = ExtensionContext["sessionManager"];

/**
 * The session manager methods the extension calls, in both scopes' types. Pi 0.73.1 has no
 * `buildContextEntries()`: optional here.
 */
export type SessionView = Pick<ReadonlySessionManager, "getSessionFile" | "getSessionId" | "getLeafId" | "getBranch" | "getLeafEntry"> & {
	buildContextEntries?: () => readonly { id: string }[];
};

/**
 * Entry ids in the model's context, by Pi's rule on a branch (root first): the latest compaction,
 * the path entries from its firstKeptEntryId up to it, then everything after it. A firstKeptEntryId
 * not before it on the path (a retain-none compaction names its own id) keeps nothing before it.
 * The targets of Pi 1.x `context_edit` entries on the branch are out: their original content no
 * longer reaches the model (Python: `lookback.index.tree.context_entries`).
 */
export function contextIdsOfBranch(branch: readonly EntryLike[]): string[] {
	let compactionAt = -1;
	branch.forEach((entry, i) => {
		if (entry.type === "compaction") compactionAt = i;
	});
	if (compactionAt < 0) return withoutEdited(branch.map((e) => e.id), branch);
	const compaction = branch[compactionAt];
	const keptFrom = branch.findIndex((e, i) => i < compactionAt && e.id === compaction.firstKeptEntryId);
	const kept = keptFrom >= 0 ? branch.slice(keptFrom, compactionAt) : [];
	return withoutEdited([compaction, ...kept, ...branch.slice(compactionAt + 1)].map((e) => e.id), branch);
}

/** `ids` less the entries a `context_edit` on the branch omits or replaces. */
function withoutEdited(ids: string[], branch: readonly EntryLike[]): string[] {
	const edited = new Set<string>();
	for (const entry of branch) if (entry.type === "context_edit" && typeof entry.targetId === "string") edited.add(entry.targetId);
	return edited.size === 0 ? ids : ids.filter((id) => !edited.has(id));
}

/** Entry ids in the model's context: from Pi's own `buildContextEntries()` when it has one. */
export function contextEntryIds(session: SessionView, branch: readonly EntryLike[]): string[] {
	if (typeof session.buildContextEntries !== "function") return contextIdsOfBranch(branch);
	return withoutEdited(session.buildContextEntries().map((e) => e.id), branch);
}

/** True when Pi's session already holds the last message of this call (leaf = that message). */
export function persisted(session: SessionView, messages: readonly unknown[]): boolean {
	const last = messages[messages.length - 1];
	const timestamp = field(last, "timestamp");
	if (typeof timestamp !== "number") return false;
	const leaf: unknown = session.getLeafEntry();
	const message = field(leaf, "message");
	return field(leaf, "type") === "message" && field(message, "timestamp") === timestamp && field(message, "role") === field(last, "role");
}
