"""Fit retrieved evidence into the message list the agent is about to send.

Priorities follow docs/specification.md: recent conversation 100, retrieved evidence 85,
active summaries (Pi's compaction and branch summaries) 75. The conversation Pi
hands over — recent turns and its summaries alike — is mandatory context: the planner
never drops or edits one of Pi's messages, so evidence only competes for the room left
beside it, and the priorities appear in the token accounting.

Evidence arrives ranked (best first). Each evidence message is atomic: it goes in
whole or not at all. Items are taken in rank order while they fit both the retrieval
budget (``max_retrieved_history_tokens``) and the room left under the active input
target and the hard limit; the first one that does not fit, and every lower-ranked
one after it, is excluded, so a lower-ranked item never displaces a better one.
The included messages go immediately before the latest real user message.

Fail-open: when the mandatory context alone exceeds the hard limit, when there is no
real user message, when a message or evidence item is malformed, or when the final
list fails validation, every synthetic message is dropped and the original
``AgentMessage[]`` comes back unchanged with ``fallback`` saying why. A provider call
is never blocked by retrieval.
"""

from __future__ import annotations

from typing import Any

from lookback.query.context.messages import (
    EVIDENCE_FOOTER,
    EVIDENCE_HEADER,
    estimate_message_tokens,
    is_summary_message,
    latest_real_user_message,
    message_text,
)

PRIORITY_RECENT = 100
PRIORITY_EVIDENCE = 85
PRIORITY_SUMMARY = 75


class _Fallback(Exception):
    """Raised inside the planner to return the original messages with a reason."""


def plan(
    messages: list[dict],
    evidence: list[dict],
    *,
    max_retrieved_history_tokens: int,
    input_target_tokens: int | None = None,
    hard_limit_tokens: int | None = None,
) -> dict:
    """Return the final message list with as much ranked evidence as fits.

    ``messages`` is Pi's ``AgentMessage[]``; ``evidence`` is the privacy-allowed,
    ranked list of evidence items, each with ``message`` (the user-role evidence
    envelope), ``tokens``, ``score``, ``tier``, ``group_id``, ``entry_id`` and
    ``session_id``. Returns ``{"messages", "included", "excluded", "tokens",
    "fallback"}``; ``fallback`` is None, or the reason the original messages were
    returned unchanged. Neither input is modified. Budgets that are not non-negative
    integers raise ``ValueError``.
    """
    _check_budget("max_retrieved_history_tokens", max_retrieved_history_tokens, optional=False)
    _check_budget("input_target_tokens", input_target_tokens, optional=True)
    _check_budget("hard_limit_tokens", hard_limit_tokens, optional=True)
    budgets = {
        "retrieval_budget": max_retrieved_history_tokens,
        "input_target": input_target_tokens,
        "hard_limit": hard_limit_tokens,
    }
    tokens: dict[str, Any] = dict(budgets)
    try:
        tokens.update(_mandatory_tokens(messages))
        return _fit(messages, evidence, tokens)
    except _Fallback as fallback:
        return _fallback_result(messages, evidence, tokens, str(fallback))


def _check_budget(name: str, value: Any, *, optional: bool) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")


def _mandatory_tokens(messages: Any) -> dict[str, int]:
    """Token cost of Pi's own messages, by priority class; malformed ones fall back."""
    if not isinstance(messages, list):
        raise _Fallback("malformed messages: not a list")
    recent = summaries = 0
    for index, message in enumerate(messages):
        problem = _message_problem(message)
        if problem:
            raise _Fallback(f"malformed message at index {index}: {problem}")
        cost = estimate_message_tokens(message)
        if is_summary_message(message):
            summaries += cost
        else:
            recent += cost
    return {"recent": recent, "summaries": summaries, "mandatory": recent + summaries}


def _message_problem(message: Any) -> str | None:
    if not isinstance(message, dict):
        return "not an object"
    if not isinstance(message.get("role"), str) or not message["role"]:
        return "no role"
    if message["role"] in ("user", "assistant", "toolResult"):
        content = message.get("content")
        if not isinstance(content, str | list):
            return "content is neither text nor a list of blocks"
        if isinstance(content, list) and not all(isinstance(b, dict) for b in content):
            return "content holds a block that is not an object"
    return None


def _fit(messages: list[dict], evidence: Any, tokens: dict[str, Any]) -> dict:
    hard_limit = tokens["hard_limit"]
    if hard_limit is not None and tokens["mandatory"] > hard_limit:
        raise _Fallback("mandatory context exceeds the hard limit")
    if not isinstance(evidence, list):
        raise _Fallback("malformed evidence: not a list")
    if not evidence:
        return _result(messages, [], [], tokens, evidence_tokens=0)
    latest = latest_real_user_message(messages)
    if latest is None:
        raise _Fallback("no real user message to place evidence before")
    for item in evidence:
        problem = _evidence_problem(item)
        if problem:
            raise _Fallback(f"malformed evidence {_source(item)}: {problem}")

    chosen, excluded, used = _select(evidence, tokens)
    index = latest[0]
    inserted = [item["message"] for item, _ in chosen]
    final = messages[:index] + inserted + messages[index:]
    _validate_final(final, messages, inserted, tokens["mandatory"] + used, hard_limit)
    included = [_included_record(item, cost) for item, cost in chosen]
    return _result(final, included, excluded, tokens, evidence_tokens=used)


def _evidence_problem(item: Any) -> str | None:
    if not isinstance(item, dict):
        return "not an object"
    for key in ("entry_id", "session_id"):
        if not isinstance(item.get(key), str) or not item[key]:
            return f"missing {key}"
    message = item.get("message")
    if not isinstance(message, dict) or message.get("role") != "user":
        return "message is not a user-role message"
    text = message_text(message).strip()
    if not text.startswith(EVIDENCE_HEADER) or not text.endswith(EVIDENCE_FOOTER):
        return "message is not an evidence envelope"
    return None


def _item_cost(item: dict) -> int:
    """Tokens an evidence item costs: its own estimate or its message's, the larger."""
    declared = item.get("tokens")
    declared = declared if isinstance(declared, int) and not isinstance(declared, bool) else 0
    return max(declared, estimate_message_tokens(item["message"]))


def _select(
    evidence: list[dict], tokens: dict[str, Any]
) -> tuple[list[tuple[dict, int]], list[dict], int]:
    """Take ranked items while they fit; exclude the first misfit and all after it."""
    rooms = {"retrieval budget full": tokens["retrieval_budget"]}
    for key, reason in (("input_target", "input target full"), ("hard_limit", "hard limit")):
        if tokens[key] is not None:
            rooms[reason] = max(0, tokens[key] - tokens["mandatory"])
    chosen: list[tuple[dict, int]] = []
    excluded: list[dict] = []
    seen: set[str] = set()
    used = 0
    stopped: str | None = None
    for item in evidence:
        source = _source(item)
        if source in seen:
            excluded.append(_excluded_record(item, "duplicate source"))
            continue
        seen.add(source)
        if stopped:
            excluded.append(_excluded_record(item, f"{stopped} (ranked below excluded evidence)"))
            continue
        cost = _item_cost(item)
        full = next((reason for reason, room in rooms.items() if used + cost > room), None)
        if full:
            stopped = full
            excluded.append(_excluded_record(item, full))
            continue
        chosen.append((item, cost))
        used += cost
    return chosen, excluded, used


def _validate_final(
    final: list[dict],
    original: list[dict],
    inserted: list[dict],
    total: int,
    hard_limit: int | None,
) -> None:
    """Check the evidence sits right before the real request and nothing else moved."""
    if not inserted:
        return
    latest = latest_real_user_message(final)
    if latest is None:
        raise _Fallback("final validation failed: no real user message")
    index = latest[0]
    placed = final[index - len(inserted) : index]
    if not _same_objects(placed, inserted):
        raise _Fallback("final validation failed: evidence is not before the latest request")
    inserted_ids = {id(message) for message in inserted}
    kept = [message for message in final if id(message) not in inserted_ids]
    if not _same_objects(kept, original):
        raise _Fallback("final validation failed: original messages changed")
    if hard_limit is not None and total > hard_limit:
        raise _Fallback("final validation failed: over the hard limit")


def _same_objects(left: list[dict], right: list[dict]) -> bool:
    """True when both lists hold the very same message objects in the same order."""
    return len(left) == len(right) and all(a is b for a, b in zip(left, right, strict=True))


def _source(item: Any) -> str:
    if not isinstance(item, dict):
        return "?:?"
    return f"{item.get('session_id', '?')}:{item.get('entry_id', '?')}"


def _included_record(item: dict, cost: int) -> dict:
    return {
        "source": _source(item),
        "entry_id": item["entry_id"],
        "session_id": item["session_id"],
        "group_id": item.get("group_id"),
        "tier": item.get("tier"),
        "score": item.get("score"),
        "tokens": cost,
        "priority": PRIORITY_EVIDENCE,
    }


def _excluded_record(item: Any, reason: str) -> dict:
    record = {"source": _source(item), "reason": reason}
    if isinstance(item, dict):
        record["entry_id"] = item.get("entry_id")
        record["session_id"] = item.get("session_id")
    return record


def _result(
    messages: list[dict],
    included: list[dict],
    excluded: list[dict],
    tokens: dict[str, Any],
    *,
    evidence_tokens: int,
) -> dict:
    totals = {**tokens, "evidence": evidence_tokens}
    totals["total"] = tokens["mandatory"] + evidence_tokens
    return {
        "messages": messages,
        "included": included,
        "excluded": excluded,
        "tokens": totals,
        "fallback": None,
    }


def _fallback_result(messages: Any, evidence: Any, tokens: dict[str, Any], reason: str) -> dict:
    items = evidence if isinstance(evidence, list) else []
    totals = {**tokens, "evidence": 0}
    if "mandatory" in totals:
        totals["total"] = totals["mandatory"]
    return {
        "messages": messages,
        "included": [],
        "excluded": [_excluded_record(item, f"fallback: {reason}") for item in items],
        "tokens": totals,
        "fallback": reason,
    }
