"""Fast JSON for the ingest and index hot paths, with the standard library as fallback.

``orjson`` parses and writes several times faster than ``json``, but is stricter:
it refuses lone surrogates (``"\\ud800"``), which Pi may have written and the
standard library accepts. Every call therefore falls back to ``json`` instead of
losing a line, and what the fallback parses has its lone surrogates escaped
(``ingest.storable``), so no value read here can fail to encode later.

Two more repairs keep a line that would otherwise be lost (and with it the link its
children hang on): bytes that are not UTF-8 are decoded with U+FFFD in their place,
and containers nested deeper than ``KEPT_DEPTH`` (past both parsers' limits) are
replaced by the text ``{…}`` or ``[…]``. Each counts as one repaired value.
"""

from __future__ import annotations

import json
import re
from typing import Any

import orjson

from lookback.ingest.storable import escape_strings

#: What a line that no parser accepts raises (nesting past the parsers' limits included).
PARSE_ERRORS = (ValueError, UnicodeDecodeError, RecursionError)


def loads(data: bytes | str) -> Any:
    """Parse JSON; raises ``ValueError`` when neither parser accepts it."""
    return loads_repaired(data)[0]


#: Containers deeper than this are cut from a line no parser takes whole (orjson stops at
#: 1,024 levels, the standard library near its recursion limit of 1,000 frames).
KEPT_DEPTH = 500

#: A JSON string (skipped whole) or a bracket, for ``cut_deep``.
_STRING_OR_BRACKET = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)


def loads_repaired(data: bytes | str) -> tuple[Any, int]:
    """(parsed value, how many values were repaired: strings with lone surrogates
    escaped, a line's bytes that are not UTF-8, containers cut at ``KEPT_DEPTH``).

    Raises ``ValueError`` when neither parser accepts the text.
    """
    try:
        return orjson.loads(data), 0
    except orjson.JSONDecodeError:
        pass
    repaired = 0
    if isinstance(data, str):
        text = data
    else:
        raw = bytes(data)
        try:
            text = raw.decode("utf-8-sig")
        except UnicodeDecodeError:  # a stray byte: U+FFFD in its place, the rest kept
            text, repaired = raw.decode("utf-8-sig", "replace"), 1
    try:
        value = json.loads(text)
    except RecursionError:
        try:
            value = json.loads(cut_deep(text, KEPT_DEPTH))
        except RecursionError:
            raise ValueError("JSON nested too deeply") from None
        repaired += 1
    value, escaped = escape_strings(value)
    return value, escaped + repaired


def cut_deep(text: str, depth: int) -> str:
    """``text`` with every container nested deeper than ``depth`` replaced by the JSON
    string ``"{…}"`` or ``"[…]"`` (strings are left as they are)."""
    parts: list[str] = []
    level = kept_to = 0
    cut_at: int | None = None
    for match in _STRING_OR_BRACKET.finditer(text):
        bracket = match.group()
        if bracket[0] == '"':
            continue
        if bracket in "[{":
            level += 1
            if level == depth + 1 and cut_at is None:
                cut_at = match.start()
        else:
            if level == depth + 1 and cut_at is not None:
                parts += [text[kept_to:cut_at], '"{…}"' if text[cut_at] == "{" else '"[…]"']
                kept_to, cut_at = match.end(), None
            level -= 1
    parts.append(text[kept_to:])
    return "".join(parts)


def dumps(value: Any) -> str:
    """Compact JSON text, non-ASCII kept as is."""
    try:
        return orjson.dumps(value).decode()
    except (TypeError, UnicodeDecodeError):  # orjson.JSONEncodeError is a TypeError
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
