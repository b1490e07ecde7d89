"""Fast JSON for the ingest and index hot paths, with the standard library as fallback.

``orjson`` parses and writes several times faster than ``json``, but is stricter:
it refuses lone surrogates (``"\\ud800"``), which Pi may have written and the
standard library accepts. Every call therefore falls back to ``json`` instead of
losing a line.
"""

from __future__ import annotations

import json
from typing import Any

import orjson


def loads(data: bytes | str) -> Any:
    """Parse JSON; raises ``ValueError`` when neither parser accepts it."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


def dumps(value: Any) -> str:
    """Compact JSON text, non-ASCII kept as is."""
    try:
        return orjson.dumps(value).decode()
    except (TypeError, UnicodeDecodeError):  # orjson.JSONEncodeError is a TypeError
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))
