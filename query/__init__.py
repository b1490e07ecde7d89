"""Query: the synchronous read side (text, search, privacy, context, semantic).

Each subpackage's public API is the ``_EXPORTS`` table in its ``__init__``: what other
packages may use (tests/test_layers.py checks it); everything else is the subpackage's
own. Each name is imported on first use (``lazy_exports``), so importing one module of
a subpackage stays cheap.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package_name: str, exports: Mapping[str, str]) -> Callable[[str], Any]:
    """The module ``__getattr__`` of a subpackage whose public names load on first use.

    ``exports`` maps each public name to the module of ``package_name`` that defines
    it; importing one module of the package then stays cheap (PEP 562).
    """

    def __getattr__(name: str) -> Any:
        if name in exports:
            return getattr(importlib.import_module(f"{package_name}.{exports[name]}"), name)
        raise AttributeError(f"module {package_name!r} has no attribute {name!r}")

    return __getattr__
