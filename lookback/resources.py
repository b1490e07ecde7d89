"""Files Lookback ships beside its code: the Pi extension and the agents' READMEs
(``integrations/``) and the documentation (``docs/``). An installed wheel holds them as package
data (``lookback/integrations``, ``lookback/docs``: pyproject.toml); a clone, at the top of the
repository. Either way the docs' relative links between the two still resolve."""

from __future__ import annotations

from pathlib import Path


def shipped(name: str) -> Path | None:
    """The shipped folder ``name`` (``"docs"``, ``"integrations"``), or None."""
    package = Path(__file__).resolve().parent
    for folder in (package / name, package.parent / name):
        if folder.is_dir():
            return folder
    return None
