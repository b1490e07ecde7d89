/**
 * The golden contract cases (tests/fixtures/contract/, shared with tests/test_contract_parity.py):
 * the extension must give the reader's answer (Python is the reference) for every case.
 */

import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { estimateTokens, messageKind, messageText } from "../src/messages.ts";
import { applyDecision, sourceOf } from "../src/plan.ts";
import { type EntryLike, contextIdsOfBranch } from "../src/session-view.ts";

const FIXTURES = new URL("../../../tests/fixtures/contract/", import.meta.url);

interface Cases<T> {
	cases: (T & { name: string })[];
}

function load<T>(name: string): Cases<T>["cases"] {
	const parsed: Cases<T> = JSON.parse(readFileSync(new URL(name, FIXTURES), "utf8"));
	assert.ok(parsed.cases.length > 0, `${name} holds no cases`);
	return parsed.cases;
}

test("messageKind gives the reader's kind for every golden case", () => {
	for (const c of load<{ message: object; kind: string }>("message_kinds.json")) {
		assert.equal(messageKind(c.message), c.kind, c.name);
	}
});

test("estimateTokens gives the reader's estimate for every golden case", () => {
	for (const c of load<{ message: object; tokens: number }>("token_estimates.json")) {
		assert.equal(estimateTokens(c.message), c.tokens, c.name);
	}
});

test("the context rule gives the reader's entry ids for every golden branch", () => {
	for (const c of load<{ branch: EntryLike[]; context_ids: string[] }>("context_entry_ids.json")) {
		assert.deepEqual(contextIdsOfBranch(c.branch), c.context_ids, c.name);
	}
});

test("applyDecision accepts and rejects exactly the decisions the reader's check does", () => {
	type Case = { messages: object[]; evidence: { message: object }[]; decision: unknown; final: string[] };
	for (const c of load<Case>("decisions.json")) {
		const final = applyDecision(c.messages, c.evidence, c.decision) ?? c.messages;
		const labels = final.map((message) => {
			const index = c.messages.indexOf(message);
			if (index >= 0) return `m${index}`;
			// An inserted copy: name the evidence item whose envelope it carries.
			const item = c.evidence.find((e) => messageText(e.message) === messageText(message));
			return `e:${sourceOf(item)}`;
		});
		assert.deepEqual(labels, c.final, c.name);
	}
});
