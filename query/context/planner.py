"""Fit retrieved evidence into the message list the agent is about to send.

The planner decides; the client applies. ``decide`` sees no conversation text: per
message only its kind (``user`` — a real request —, ``evidence``, ``summary``,
``assistant``, ``toolResult``, ``other``) and a token estimate, and per evidence item
its source, rank position and tokens. It answers a *decision*: where the evidence goes
(``insert_before``, the index of the latest real user message) and which sources, in
which order. The client (the Pi extension; ``apply_decision`` here) inserts those
evidence messages — its own copies from the retrieve answer — and checks the result
is its original messages with only enveloped evidence inserted immediately before the
latest real user message; anything else gives the original messages. So a reader can
neither read nor rewrite the conversation.

Priorities follow docs/specification.md: recent conversation 100, retrieved evidence 85,
active summaries (Pi's compaction and branch summaries) 75. The conversation is
mandatory context: evidence only competes for the room left beside it, and the
priorities appear in the token accounting.

Evidence arrives ranked (best first). Each evidence message is atomic: it goes in
whole or not at all. Items are taken in rank order while they fit both the retrieval
budget (``max_retrieved_history_tokens``) and the room left under the active input
target and the hard limit; the first one that does not fit, and every lower-ranked
one after it, is excluded, so a lower-ranked item never displaces a better one.

Fail-open: when the mandatory context alone exceeds the hard limit, when there is no
real user message, when a message or evidence item is malformed, the decision inserts
nothing and ``fallback`` says why. A provider call is never blocked by retrieval.

``plan`` is the same for a Python caller holding whole messages: it describes them,
decides and applies the decision.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeGuard

from msgspec import UNSET

from lookback.query.contract.answers import (
    Decision,
    Evidence,
    Included,
    PlanAnswer,
    PlanExcluded,
    PlanTokens,
    RetrieveAnswer,
    answer_dict,
)
from lookback.query.contract.messages import (
    EVIDENCE_FOOTER,
    EVIDENCE_HEADER,
    JsonObject,
    estimate_message_tokens,
    is_evidence_message,
    is_summary_message,
    latest_real_user_message,
    message_text,
)

if TYPE_CHECKING:
    from lookback.query.contract.request import PlanRequest

PRIORITY_RECENT = 100
PRIORITY_EVIDENCE = 85
PRIORITY_SUMMARY = 75

#: What ``decide`` may be told about one message.
KINDS = frozenset({"user", "evidence", "summary", "assistant", "toolResult", "other"})
#: Most messages and evidence items one decision request may describe.
MAX_DESCRIBED = 100_000


class _Fallback(Exception):
    """Raised inside the planner to insert nothing, with a reason."""


# ---------------------------------------------------------------------------------------
# The decision (what the reader computes)


def decide(
    messages: Any,
    evidence: Any,
    *,
    max_retrieved_history_tokens: int,
    input_target_tokens: int | None = None,
    hard_limit_tokens: int | None = None,
) -> PlanAnswer:
    """Decide which ranked evidence goes where, from kinds and token counts only.

    ``messages``: one ``{"kind", "tokens"}`` per message, in order. ``evidence``: the
    ranked items, each ``{"entry_id", "session_id", "tokens"}`` (``group_id``, ``tier``,
    ``score`` are carried into the records). Returns the ``PlanAnswer``: ``decision``
    (``insert_before`` and ``sources``, or None), ``included``, ``excluded``, ``tokens``
    and ``fallback``. Budgets that are not non-negative integers raise ``ValueError``.
    """
    budgets = _budgets(max_retrieved_history_tokens, input_target_tokens, hard_limit_tokens)
    tokens: dict[str, Any] = dict(budgets)
    try:
        tokens.update(_mandatory_tokens(messages))
        return _fit(messages, evidence, tokens)
    except _Fallback as fallback:
        return _fallback_result(evidence, tokens, str(fallback))


def _budgets(retrieval: Any, target: Any, hard: Any) -> dict[str, Any]:
    _check_budget("max_retrieved_history_tokens", retrieval, optional=False)
    _check_budget("input_target_tokens", target, optional=True)
    _check_budget("hard_limit_tokens", hard, optional=True)
    return {"retrieval_budget": retrieval, "input_target": target, "hard_limit": hard}


def _check_budget(name: str, value: Any, *, optional: bool) -> None:
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {value!r}")


def _mandatory_tokens(messages: Any) -> dict[str, int]:
    """Token cost of the client's own messages, by priority class."""
    if not isinstance(messages, list) or len(messages) > MAX_DESCRIBED:
        raise _Fallback("malformed messages: not a list")
    recent = summaries = 0
    for index, message in enumerate(messages):
        problem = _description_problem(message)
        if problem:
            raise _Fallback(f"malformed message at index {index}: {problem}")
        if message["kind"] == "summary":
            summaries += message["tokens"]
        else:
            recent += message["tokens"]
    return {"recent": recent, "summaries": summaries, "mandatory": recent + summaries}


def _description_problem(message: Any) -> str | None:
    if not isinstance(message, dict):
        return "not an object"
    if message.get("kind") not in KINDS:
        return "unknown kind"
    if not _count(message.get("tokens")):
        return "tokens is not a non-negative integer"
    return None


def _count(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _fit(messages: list[JsonObject], evidence: Any, tokens: dict[str, Any]) -> PlanAnswer:
    hard_limit = tokens["hard_limit"]
    if hard_limit is not None and tokens["mandatory"] > hard_limit:
        raise _Fallback("mandatory context exceeds the hard limit")
    if not isinstance(evidence, list) or len(evidence) > MAX_DESCRIBED:
        raise _Fallback("malformed evidence: not a list")
    if not evidence:
        return _result(None, [], [], tokens, evidence_tokens=0)
    index = latest_request_index(messages)
    if index is None:
        raise _Fallback("no real user message to place evidence before")
    for item in evidence:
        problem = _evidence_problem(item)
        if problem:
            raise _Fallback(f"malformed evidence {_source(item)}: {problem}")
    chosen, excluded, used = _select(evidence, tokens)
    decision = Decision(insert_before=index, sources=[_source(item) for item, _ in chosen])
    included = [_included_record(item, cost) for item, cost in chosen]
    return _result(decision, included, excluded, tokens, evidence_tokens=used)


def latest_request_index(messages: list[JsonObject]) -> int | None:
    """Index of the last message described as a real user request."""
    for index in range(len(messages) - 1, -1, -1):
        if messages[index]["kind"] == "user":
            return index
    return None


def _evidence_problem(item: Any) -> str | None:
    if not isinstance(item, dict):
        return "not an object"
    for key in ("entry_id", "session_id"):
        if not isinstance(item.get(key), str) or not item[key]:
            return f"missing {key}"
    if not _count(item.get("tokens")):
        return "tokens is not a non-negative integer"
    return None


def _select(
    evidence: list[JsonObject], tokens: dict[str, Any]
) -> tuple[list[tuple[JsonObject, int]], list[PlanExcluded], int]:
    """Take ranked items while they fit; exclude the first misfit and all after it."""
    rooms = {"retrieval budget full": tokens["retrieval_budget"]}
    for key, reason in (("input_target", "input target full"), ("hard_limit", "hard limit")):
        if tokens[key] is not None:
            rooms[reason] = max(0, tokens[key] - tokens["mandatory"])
    chosen: list[tuple[JsonObject, int]] = []
    excluded: list[PlanExcluded] = []
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
        cost = item["tokens"]
        full = next((reason for reason, room in rooms.items() if used + cost > room), None)
        if full:
            stopped = full
            excluded.append(_excluded_record(item, full))
            continue
        chosen.append((item, cost))
        used += cost
    return chosen, excluded, used


def _source(item: Any) -> str:
    if not isinstance(item, dict):
        return "?:?"
    return f"{item.get('session_id', '?')}:{item.get('entry_id', '?')}"


def _included_record(item: JsonObject, cost: int) -> Included:
    return Included(
        source=_source(item),
        entry_id=item["entry_id"],
        session_id=item["session_id"],
        group_id=item.get("group_id"),
        tier=item.get("tier"),
        score=item.get("score"),
        tokens=cost,
        priority=PRIORITY_EVIDENCE,
    )


def _excluded_record(item: Any, reason: str) -> PlanExcluded:
    if isinstance(item, dict):
        return PlanExcluded(source=_source(item), reason=reason,
                            entry_id=item.get("entry_id"), session_id=item.get("session_id"))
    return PlanExcluded(source=_source(item), reason=reason)


def _tokens(tokens: dict[str, Any], evidence_tokens: int) -> PlanTokens:
    """The accounting: the budgets, the mandatory context when it was counted (a
    fallback before the messages were read has none), the evidence and the total."""
    counted = "mandatory" in tokens
    return PlanTokens(
        retrieval_budget=tokens["retrieval_budget"], input_target=tokens["input_target"],
        hard_limit=tokens["hard_limit"],
        recent=tokens["recent"] if counted else UNSET,
        summaries=tokens["summaries"] if counted else UNSET,
        mandatory=tokens["mandatory"] if counted else UNSET,
        evidence=evidence_tokens,
        total=tokens["mandatory"] + evidence_tokens if counted else UNSET)


def _result(
    decision: Decision | None,
    included: list[Included],
    excluded: list[PlanExcluded],
    tokens: dict[str, Any],
    *,
    evidence_tokens: int,
) -> PlanAnswer:
    return PlanAnswer(decision=decision, included=included, excluded=excluded,
                      tokens=_tokens(tokens, evidence_tokens), fallback=None)


def _fallback_result(evidence: Any, tokens: dict[str, Any], reason: str) -> PlanAnswer:
    items = evidence if isinstance(evidence, list) else []
    return PlanAnswer(
        decision=None, included=[],
        excluded=[_excluded_record(item, f"fallback: {reason}") for item in items[:1000]],
        tokens=_tokens(tokens, 0), fallback=reason)


def decide_for_answer(answer: RetrieveAnswer,
                      request_plan: PlanRequest | None) -> PlanAnswer | None:
    """The decision for a retrieve answer's evidence, when the request carried ``plan``
    (``{"kinds": [...], "tokens": [...], "hard_limit_tokens"?, "input_target_tokens"?,
    "max_retrieved_history_tokens"?}``: one kind and one token estimate per message, as
    two flat lists — cheap to send and to check — one round trip instead of two),
    already validated by ``query.contract.request.parse_request``. None without ``plan``
    or without evidence."""
    if request_plan is None or answer.status != "ok" or not answer.evidence:
        return None
    refs = [_reference(item) for item in answer.evidence]
    return decide_request(request_plan, refs)


def _reference(item: Evidence) -> dict[str, Any]:
    """What the planner reads of one evidence item; its ``tokens`` are its message's
    estimate already (``_item_cost`` would find the same)."""
    return {"entry_id": item.entry_id, "session_id": item.session_id, "tokens": item.tokens,
            "score": item.score, "tier": item.tier, "group_id": item.group_id}


def decide_request(request: PlanRequest, evidence: list[JsonObject] | None = None) -> PlanAnswer:
    """``decide`` for a validated plan request (``/v1/plan``; ``evidence``: the items to
    plan instead of the request's own)."""
    return decide(request.messages, request.evidence if evidence is None else evidence,
                  max_retrieved_history_tokens=request.max_retrieved_history_tokens,
                  input_target_tokens=request.input_target_tokens,
                  hard_limit_tokens=request.hard_limit_tokens)


# ---------------------------------------------------------------------------------------
# The client side: describing messages, applying a decision


def message_kind(message: JsonObject) -> str:
    """The kind ``decide`` is told for one of Pi's ``AgentMessage``s."""
    if is_evidence_message(message):
        return "evidence"
    if is_summary_message(message):
        return "summary"
    role = message.get("role")
    if role == "user":
        return "user"
    return role if role in ("assistant", "toolResult") else "other"


def describe(messages: list[JsonObject]) -> list[JsonObject]:
    """Kinds and token estimates: all ``decide`` needs to know of the conversation."""
    return [{"kind": message_kind(m), "tokens": estimate_message_tokens(m)} for m in messages]


def apply_decision(messages: list[JsonObject], evidence: list[JsonObject], decision: Any
                   ) -> list[JsonObject]:
    """``messages`` with the decided evidence messages inserted, or ``messages`` itself
    when the decision is anything but evidence of ``evidence``, each once, placed
    immediately before the latest real user message. ``decision``: as JSON gives it
    (a dict), or a ``Decision``."""
    if isinstance(decision, Decision):
        decision = {"insert_before": decision.insert_before, "sources": decision.sources}
    if not isinstance(decision, dict) or not isinstance(decision.get("sources"), list):
        return messages
    latest = latest_real_user_message(messages)
    if latest is None or decision.get("insert_before") != latest[0]:
        return messages
    by_source = {_source(item): item for item in evidence if isinstance(item, dict)}
    sources = decision["sources"]
    if len(set(map(str, sources))) != len(sources) or not all(s in by_source for s in sources):
        return messages
    inserted = [by_source[source].get("message") for source in sources]
    envelopes = [message for message in inserted if _is_envelope(message)]
    if len(envelopes) != len(inserted):
        return messages
    index = latest[0]
    return messages[:index] + envelopes + messages[index:]


def _is_envelope(message: Any) -> TypeGuard[dict[str, Any]]:
    if not isinstance(message, dict) or message.get("role") != "user":
        return False
    text = message_text(message).strip()
    return text.startswith(EVIDENCE_HEADER) and text.endswith(EVIDENCE_FOOTER)


def plan(
    messages: list[JsonObject],
    evidence: list[JsonObject],
    *,
    max_retrieved_history_tokens: int,
    input_target_tokens: int | None = None,
    hard_limit_tokens: int | None = None,
) -> JsonObject:
    """The final message list with as much ranked evidence as fits, for a caller that
    holds whole messages: ``{"messages", "included", "excluded", "tokens",
    "fallback"}``. Neither input is modified."""
    budgets: dict[str, Any] = {"max_retrieved_history_tokens": max_retrieved_history_tokens,
               "input_target_tokens": input_target_tokens,
               "hard_limit_tokens": hard_limit_tokens}
    _budgets(*budgets.values())
    problem = _whole_input_problem(messages, evidence)
    if problem:
        result = _fallback_result(evidence, dict(_budgets(*budgets.values())), problem)
    else:
        described = [{**item, "tokens": _item_cost(item)} for item in evidence]
        result = decide(describe(messages), described, **budgets)
    final = apply_decision(messages, evidence, result.decision)
    answer = answer_dict(result)
    del answer["decision"]
    return {"messages": final, **answer}


def _whole_input_problem(messages: Any, evidence: Any) -> str | None:
    if not isinstance(messages, list):
        return "malformed messages: not a list"
    for index, message in enumerate(messages):
        problem = _message_problem(message)
        if problem:
            return f"malformed message at index {index}: {problem}"
    for item in evidence if isinstance(evidence, list) else []:
        if isinstance(item, dict) and not _is_envelope(item.get("message")):
            if not isinstance(item.get("message"), dict) or item["message"].get("role") != "user":
                return f"malformed evidence {_source(item)}: message is not a user-role message"
            return f"malformed evidence {_source(item)}: message is not an evidence envelope"
    return None


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


def _item_cost(item: Any) -> Any:
    """Tokens an evidence item costs: its own estimate or its message's, the larger."""
    if not isinstance(item, dict) or not isinstance(item.get("message"), dict):
        return item.get("tokens") if isinstance(item, dict) else None
    declared = item.get("tokens")
    return max(declared if _count(declared) else 0, estimate_message_tokens(item["message"]))
