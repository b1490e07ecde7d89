"""Make parsed values storable: the repairs that lose nothing a reader needs.

A session line can hold values SQLite, Redis and UTF-8 refuse: a lone surrogate
(an emoji cut in half; JavaScript's ``JSON.stringify`` writes ``"\\ud83d"``), a
number that is not finite or does not fit 64 bits. Surrogates are escaped to the
six characters ``\\ud83d`` (the text the file holds, so nothing is lost); numbers
that cannot be stored are dropped by the caller, which counts them.
"""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

import regex

_SURROGATE = regex.compile(r"[\ud800-\udfff]")

#: Milliseconds since the epoch SQLite can store and ``datetime`` can show (years 1-9999).
MIN_MILLIS = -62_135_596_800_000
MAX_MILLIS = 253_402_300_799_999


def has_surrogates(text: str) -> bool:
    return _SURROGATE.search(text) is not None


def escape_surrogates(text: str) -> str:
    """``text`` with every lone surrogate written as its ``\\uXXXX`` escape."""
    if text.isascii() or not has_surrogates(text):
        return text
    return _SURROGATE.sub(lambda match: f"\\u{ord(match.group()):04x}", text)


def escape_strings(value: Any) -> tuple[Any, int]:
    """``value`` with surrogates escaped in every string and key; (value, strings fixed).

    Walks without recursion: a JSON parser may hand over 1,000 levels of nesting.
    Containers are repaired in place.
    """
    if isinstance(value, str):
        fixed = escape_surrogates(value)
        return fixed, int(fixed is not value)
    repaired = 0
    stack: list[Any] = [value] if isinstance(value, dict | list) else []
    while stack:
        node = stack.pop()
        slots = list(node) if isinstance(node, dict) else range(len(node))  # renamed keys move
        for slot in slots:
            item = node[slot]
            if isinstance(item, str):
                fixed = escape_surrogates(item)
                if fixed is not item:
                    node[slot], repaired = fixed, repaired + 1
            elif isinstance(item, dict | list):
                stack.append(item)
            if isinstance(slot, str) and (new_key := escape_surrogates(slot)) is not slot:
                node[new_key] = node.pop(slot)
                repaired += 1
    return value, repaired


def millis(value: Any) -> int | None:
    """A finite number of epoch milliseconds within years 1-9999, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if not MIN_MILLIS <= value <= MAX_MILLIS:
        return None
    return int(value)



def iso_millis(stamp: Any) -> int | None:
    """Epoch milliseconds of an ISO 8601 timestamp (``Z`` allowed), else None."""
    if not isinstance(stamp, str):
        return None
    try:
        return millis(datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000)
    except (ValueError, OverflowError, OSError):
        return None
