"""Fast JSON for the ingest and index hot paths, with the standard library as fallback.

``orjson`` parses and writes several times faster than ``json``, but is stricter:
it refuses lone surrogates (``"\\ud800"``), which Pi may have written and the
standard library accepts. Every call therefore falls back to ``json`` instead of
losing a line, and what the fallback parses has its lone surrogates escaped
(``ingest.storable``), so no value read here can fail to encode later.
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from lookback.ingest.storable import escape_strings

#: What a line that no parser accepts raises (nesting past the parsers' limits included).
PARSE_ERRORS = (ValueError, UnicodeDecodeError, RecursionError)


def loads(data: bytes | str) -> Any:
    """Parse JSON; raises ``ValueError`` when neither parser accepts it."""
    return loads_repaired(data)[0]


def loads_repaired(data: bytes | str) -> tuple[Any, int]:
    """(parsed value, how many strings had lone surrogates escaped).

    Raises ``ValueError`` when neither parser accepts the text, also for nesting
    deeper than the standard library's recursion limit.
    """
    try:
        return orjson.loads(data), 0
    except orjson.JSONDecodeError:
        pass
    try:
        value = json.loads(data)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    return escape_strings(value)


def dumps(value: Any) -> str:
    """Compact JSON text, non-ASCII kept as is."""
    try:
        return orjson.dumps(value).decode()
    except (TypeError, UnicodeDecodeError):  # orjson.JSONEncodeError is a TypeError
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
