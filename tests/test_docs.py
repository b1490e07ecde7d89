"""README's configuration table is the settings the code declares (like sqlite-utils' test_docs)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lookback.settings import reference

README = Path(__file__).resolve().parents[1] / "README.md"
ROW = re.compile(r"^\| `(?P<key>[a-z_.]+)` \| `(?P<variable>LOOKBACK_[A-Z_]+)` "
                 r"\| (?P<default>[^|]+) \|")


def readme_settings() -> list[tuple[str, str, str]]:
    text = README.read_text(encoding="utf-8")
    section = text.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        match = ROW.match(line)
        if match:
            default = match["default"].strip()
            rows.append((match["key"], match["variable"], default.strip("`")))
    return rows


def test_readme_lists_every_setting_with_its_variable_and_default():
    documented = readme_settings()
    declared = reference()
    assert [row[0] for row in documented] == [row[0] for row in declared], \
        "README's configuration table and lookback/settings.py list different settings"
    for row, expected in zip(documented, declared, strict=True):
        assert row == expected, f"README: {expected[0]!r} is {row[1:]}, the code {expected[1:]}"


def test_the_table_is_found():
    assert len(readme_settings()) >= 30


def test_the_pi_extension_variables_are_left_to_the_extension():
    """Its variables share the prefix; the settings loader must not refuse them."""
    from lookback.settings import FOREIGN_VARIABLES

    extension = (README.parent / "integrations" / "pi" / "README.md").read_text(encoding="utf-8")
    variables = set(re.findall(r"^\| `(LOOKBACK_[A-Z_]+)` \|", extension, re.MULTILINE))
    assert variables and variables <= FOREIGN_VARIABLES, \
        f"add {sorted(variables - FOREIGN_VARIABLES)} to lookback.settings.FOREIGN_VARIABLES"


ROOT = README.parent
SKIP = {".git", ".venv", "node_modules", "__pycache__", ".pytest_cache", ".ruff_cache"}
OUTSIDE = ("/work/shared", "../shared", "DESIGN.md", "PI_SESSION_FORMAT.md",
           "PI_CLIENT_TESTING.md", "spec/historical-retrieval.md")


def project_files(*suffixes: str) -> list[Path]:
    found = []
    for path in ROOT.rglob("*"):
        parts = set(path.relative_to(ROOT).parts)
        if path.is_file() and path.suffix in suffixes and not parts & SKIP \
                and not any(part.endswith(".egg-info") for part in parts):
            found.append(path)
    return found


def test_every_reference_points_inside_the_repository():
    """The specification, design and formats live in docs/; nothing cites a path outside."""
    this = Path(__file__).resolve()
    offenders = [f"{path.relative_to(ROOT)}: {needle}"
                 for path in project_files(".py", ".md", ".ts", ".json", ".toml", ".yaml")
                 if path.resolve() != this
                 for needle in OUTSIDE if needle in path.read_text(encoding="utf-8")]
    assert offenders == []


def test_markdown_links_resolve():
    broken = []
    for page in project_files(".md"):
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", page.read_text(encoding="utf-8")):
            if "://" not in target and not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)} -> {target}")
    assert broken == []


def doctest_modules() -> list[str]:
    from tests.test_layers import modules

    return sorted(name for name, path in modules().items()
                  if ">>> " in path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("module", doctest_modules())
def test_doctests(module):
    """The examples in docstrings run, as the installed modules (lookback.query.text.*)."""
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0


def test_ci_runs_the_readme_test_command():
    """.ci/run ends with the command README gives (linter, type checker, whole suite), so
    they agree."""
    readme = README.read_text(encoding="utf-8")
    command = next(line for line in readme.splitlines()
                   if line.startswith("python3 -m venv .venv && ") and "pytest" in line)
    assert "ruff check" in command and "tests.typecheck" in command
    assert command.endswith(".venv/bin/pytest")
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8").strip().splitlines()
    assert ci[-1] == command


TOP = ("lookback/", "ingest/", "embedders/", "index/", "query/", "workers/", "tests/", "bench/",
       "docs/", "integrations/", ".ci/")


def test_files_the_docs_name_exist():
    """A backticked path in README or docs/ (``query/search/ranking.py``) is a real file."""
    missing = []
    for page in [README, *sorted((ROOT / "docs").glob("*.md"))]:
        for quoted in re.findall(r"`([^`\s]+)`", page.read_text(encoding="utf-8")):
            path = quoted.split("::")[0].split(":")[0].rstrip(",.")
            if path.startswith(TOP) and "*" not in path and "<" not in path \
                    and not (ROOT / path).exists():
                missing.append(f"{page.relative_to(ROOT)}: {quoted}")
    assert missing == []
