"""Run mypy over the package as it is installed: ``index/store.py`` is checked as
``lookback.index.store`` (pyproject's package-dir table), which mypy cannot work out
itself from an editable install. The settings are pyproject's ``[tool.mypy]``, which
must stay ``strict`` (checked here: a run without it fails).

    .venv/bin/python -m tests.typecheck [mypy options]
"""

from __future__ import annotations

import sys
from pathlib import Path

from mypy import build
from mypy.errors import CompileError
from mypy.fscache import FileSystemCache
from mypy.main import process_options
from mypy.modulefinder import BuildSource

from tests.test_layers import modules

ROOT = Path(__file__).resolve().parents[1]

#: A few of the flags ``strict`` sets; all on means the configuration is strict.
STRICT_FLAGS = ("disallow_untyped_defs", "disallow_any_generics", "warn_return_any",
                "disallow_untyped_calls", "strict_equality")


def sources() -> list[BuildSource]:
    """Every module of the package, by its installed name."""
    return [BuildSource(str(path.relative_to(ROOT)), module)
            for module, path in sorted(modules().items())]


def main(args: list[str]) -> int:
    fscache = FileSystemCache()
    _, options = process_options(["--config-file", str(ROOT / "pyproject.toml"), *args],
                                 require_targets=False, fscache=fscache)
    if not all(getattr(options, flag) for flag in STRICT_FLAGS):
        print("mypy: pyproject.toml's [tool.mypy] must set strict = true")
        return 1
    try:
        result = build.build(sources(), options, fscache=fscache)
        messages = result.errors
    except CompileError as error:
        messages = error.messages
    for line in messages:
        print(line)
    errors = sum(": error:" in line for line in messages)
    print(f"mypy: {errors} errors in {len(sources())} modules" if errors
          else f"mypy: no errors in {len(sources())} modules")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
