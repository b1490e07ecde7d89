"""The docs tell the truth about the code (like sqlite-utils' test_docs): the settings table is
the settings declared, every name, path, command and example in them exists or runs, and the
pages hang together (every page linked from docs/index.md, one benchmark table in the README)."""

from __future__ import annotations

import argparse
import io
import json
import re
from pathlib import Path

import pytest

from lookback.settings import reference

README = Path(__file__).resolve().parents[1] / "README.md"
CONFIGURATION = README.parent / "docs" / "configuration.md"
ROW = re.compile(r"^\| `(?P<key>[a-z_.]+)` \| `(?P<variable>LOOKBACK_[A-Z_]+)` "
                 r"\| (?P<default>[^|]+) \|")


def documented_settings() -> list[tuple[str, str, str]]:
    """(key, variable, default) of each row of docs/configuration.md's table."""
    text = CONFIGURATION.read_text(encoding="utf-8")
    section = text.split("\n## Settings\n", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        match = ROW.match(line)
        if match:
            default = match["default"].strip()
            rows.append((match["key"], match["variable"], default.strip("`")))
    return rows


def test_the_configuration_page_lists_every_setting_with_its_variable_and_default():
    documented = documented_settings()
    declared = reference()
    assert [row[0] for row in documented] == [row[0] for row in declared], \
        "docs/configuration.md's table and lookback/settings.py list different settings"
    for row, expected in zip(documented, declared, strict=True):
        assert row == expected, \
            f"docs/configuration.md: {expected[0]!r} is {row[1:]}, the code {expected[1:]}"


def test_the_table_is_found():
    assert len(documented_settings()) >= 30


def test_the_configuration_pages_example_file_loads(tmp_path):
    """The sample config.toml is a file ``load_settings`` accepts, with the values it shows."""
    from lookback.settings import load_settings

    text = CONFIGURATION.read_text(encoding="utf-8")
    sample = text.split("```toml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "config.toml").write_text(sample, encoding="utf-8")
    settings = load_settings(environ={"LOOKBACK_CONFIG": str(tmp_path / "config.toml")})
    assert settings.retrieval.semantic is True and settings.retrieval.embedder == "minilm+e5-onnx"
    assert settings.privacy.providers == {"anthropic": "internal"}


def test_the_pi_extension_variables_are_left_to_the_extension():
    """Its variables share the prefix; the settings loader must not refuse them."""
    from lookback.settings import FOREIGN_VARIABLES

    extension = (README.parent / "integrations" / "pi" / "README.md").read_text(encoding="utf-8")
    variables = set(re.findall(r"^\| `(LOOKBACK_[A-Z_]+)` \|", extension, re.MULTILINE))
    assert variables and variables <= FOREIGN_VARIABLES, \
        f"add {sorted(variables - FOREIGN_VARIABLES)} to lookback.settings.FOREIGN_VARIABLES"


ROOT = README.parent
SKIP = {".git", ".venv", "node_modules", "__pycache__", ".pytest_cache", ".ruff_cache",
        ".mypy_cache"}
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


# --- dotted names, commands and the README's examples (sqlite-utils' test_docs) ----------

#: A backticked dotted name of the package (``lookback.x.y``, or ``index.store`` as the
#: docs shorten it); :mod:`~x.y` roles included.
DOTTED = re.compile(r"`+~?((?:lookback|ingest|embedders|index|query|workers)(?:\.\w+)+)`+")
SUFFIXES = {"md", "py", "json", "jsonl", "toml", "txt", "ts", "yaml", "yml", "sh", "html"}


def documents() -> list[tuple[str, str]]:
    """(where, text) of every page of docs and every docstring of the package."""
    import ast

    from tests.test_layers import modules

    pages = [README, *sorted((ROOT / "docs").glob("*.md")),
             *sorted((ROOT / "integrations").glob("*/README.md"))]
    found = [(str(page.relative_to(ROOT)), page.read_text(encoding="utf-8")) for page in pages]
    for path in sorted(modules().values()):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef
                          | ast.AsyncFunctionDef) and (doc := ast.get_docstring(node)):
                found.append((f"{path.relative_to(ROOT)}:{getattr(node, 'lineno', 1)}", doc))
    return found


def dotted_problem(name: str) -> str | None:
    """Why ``name`` names nothing (None: a module, or a module and an attribute of it)."""
    import importlib

    from tests.test_layers import modules

    known = modules()
    parts = (name if name.startswith("lookback") else f"lookback.{name}").split(".")
    for cut in range(len(parts), 0, -1):
        module = ".".join(parts[:cut])
        if module in known:
            found: object = importlib.import_module(module)
            for attribute in parts[cut:]:
                if not hasattr(found, attribute):
                    return f"{module} has no {'.'.join(parts[cut:])}"
                found = getattr(found, attribute)
            return None
    return "no such module"


def test_every_dotted_name_in_docs_and_docstrings_exists():
    """``query.search.ranking``, ``lookback.api.retrieve``: a module that moved leaves
    no stale name behind. Settings keys (``workers.host``) look alike and are skipped."""
    settings = {row[0] for row in reference()}
    named = [(where, name) for where, text in documents() for name in DOTTED.findall(text)
             if name.rsplit(".", 1)[-1] not in SUFFIXES and name not in settings]
    assert len(named) > 100  # the scan reads the docstrings, not only the pages
    wrong = [f"{where}: {name} ({problem})" for where, name in named
             if (problem := dotted_problem(name))]
    assert wrong == []


def test_the_dotted_name_check_tells_a_moved_module():
    assert dotted_problem("index.embedding") == "lookback.index has no embedding"
    assert dotted_problem("query.fusion.fuse") == "lookback.query has no fusion.fuse"
    assert dotted_problem("embedders.port.EmbeddingPort") is None
    assert dotted_problem("lookback.retrieve") is None
    assert dotted_problem("index.store.no_such_function") == \
        "lookback.index.store has no no_such_function"
    assert DOTTED.findall("see :func:`~index.chunking.chunk_text` and ``query.text``") == [
        "index.chunking.chunk_text", "query.text"]


def commands() -> list[str]:
    from lookback.cli import build_parser

    actions = [action for action in build_parser()._actions
               if isinstance(action, argparse._SubParsersAction)]
    return sorted(actions[0].choices)


def test_every_command_is_in_the_readme():
    from lookback.cli import COMMANDS

    readme = README.read_text(encoding="utf-8")
    assert set(commands()) == set(COMMANDS)
    assert [name for name in commands() if f"lookback {name}" not in readme] == []


@pytest.mark.parametrize("name", commands())
def test_every_command_has_help(name, capsys):
    from lookback.cli import main

    with pytest.raises(SystemExit) as exit:
        main([name, "--help"])
    out = capsys.readouterr().out
    assert exit.value.code == 0 and out.startswith(f"usage: lookback {name}")
    assert len(out.splitlines()) > 3  # a description and the options, not a bare usage line


def readme_block(heading: str) -> str:
    """The first ``sh`` code block after ``heading``."""
    text = README.read_text(encoding="utf-8").split(heading, 1)[1]
    return text.split("```sh\n", 1)[1].split("```", 1)[0]


@pytest.fixture
def lookback(tmp_path, monkeypatch, capsys):
    """``lookback ARGS`` as the README runs it, on an empty data directory."""
    from lookback.cli import main

    monkeypatch.setenv("LOOKBACK_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("LOOKBACK_REDIS_URL", raising=False)
    monkeypatch.delenv("LOOKBACK_CONFIG", raising=False)
    monkeypatch.chdir(ROOT)

    def run(argv: list[str], stdin: str = "") -> tuple[int, str]:
        monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(stdin.encode())))
        code = main(argv)
        return code, capsys.readouterr().out

    return run


def test_the_readmes_sample_sessions_index_and_show_in_status(lookback):
    """The quick start on the sample sessions: ``lookback index tests/fixtures/...``,
    then ``lookback status``, which lists every project found."""
    readme = README.read_text(encoding="utf-8")
    command = re.search(r"`\.venv/bin/lookback (index [^`]+)`", readme)[1].split()
    assert command[1:] == ["tests/fixtures/pi-sessions", "tests/fixtures/claude-code"]
    assert "lookback status" in readme_block("## Set-up")
    code, out = lookback(command)
    assert code == 0 and "entries" in out
    code, out = lookback(["status", "--json"])
    cwds = {project["cwd"] for project in json.loads(out)["projects"]}
    headers = [json.loads(path.read_text(encoding="utf-8").splitlines()[0])
               for path in (ROOT / "tests/fixtures/pi-sessions").glob("*.jsonl")]
    assert code == 0 and {header["cwd"] for header in headers} <= cwds
    code, out = lookback(["status"])
    assert code == 0 and all(cwd in out for cwd in cwds)


def test_the_readmes_retrieve_and_search_examples_run(lookback):
    """``Using it``'s ``echo '{...}' | lookback retrieve`` and ``lookback search``, with
    the placeholder session replaced by a sample session."""
    block = readme_block("## Using it")
    session = str(ROOT / "tests/fixtures/pi-sessions/before-compaction.jsonl")
    shell = re.search(r"^echo '(\{.*\})' \| lookback retrieve$", block, re.M)[1]
    request = json.loads(shell.replace("'\"$PWD\"'", str(ROOT)))  # the shell's splice
    assert request["session_file"] == session
    lookback(["index", "tests/fixtures/pi-sessions"])
    code, out = lookback(["retrieve"], json.dumps(request))
    response = json.loads(out)
    # The backticked name is searched as an identifier, and the sample has evidence.
    assert code == 0 and response["status"] == "ok" and response["evidence"]
    assert response["query"]["identifier"] == ["tokensAfter"]
    # The message the comment names, a name that occurs nowhere: no evidence (issue 28)
    unanswered = re.search(r'\("(why did .*?)"\)', block)[1]
    code, out = lookback(["retrieve"], json.dumps({**request, "message": unanswered}))
    assert code == 0 and json.loads(out)["evidence"] == []
    search = re.search(r"^lookback (search .*?)\s*$", block, re.M)[1].split()
    search = [arg.strip('"') for arg in search if not arg.startswith("[")]
    assert search[:3] == ["search", "tokensAfter", "--session-file"]
    code, out = lookback([*search[:3], session, "--json"])
    assert code == 0 and json.loads(out)["results"]


# --- the pages hang together (issue 21: docs a newcomer reads in ten minutes) -------------

INDEX = ROOT / "docs" / "index.md"


def test_every_page_of_docs_is_linked_from_the_index():
    """docs/index.md is the map: a new page under docs/ gets a line there."""
    linked = {target.split("#")[0] for target in
              re.findall(r"\]\(([^)\s]+)\)", INDEX.read_text(encoding="utf-8"))}
    pages = {path.name for path in (ROOT / "docs").glob("*.md")} - {"index.md"}
    assert pages and sorted(pages - linked) == []


def test_the_readme_links_the_index_and_stays_short():
    readme = README.read_text(encoding="utf-8")
    assert "(docs/index.md)" in readme
    assert len(readme.splitlines()) <= 150, "README.md is the short page; details go to docs/"


def markdown_tables(text: str) -> list[list[str]]:
    """Each table of ``text`` as its lines (a header row, then a ``|---`` row)."""
    lines = text.splitlines()
    return [[line for line in lines[start - 1:] if line.startswith("|")]
            for start, line in enumerate(lines) if re.match(r"^\|[-| :]+\|$", line)]


def test_the_readme_has_one_table_the_headline_figures():
    """Benchmarks in the README are one table with a command per row; the rest (and every
    earlier figure) lives in docs/benchmarks.md and CHANGELOG.md."""
    readme = README.read_text(encoding="utf-8")
    tables = markdown_tables(readme)
    assert len(tables) == 1
    table = "\n".join(tables[0])
    assert table in readme.split("## Benchmarks", 1)[1]
    assert "DRAGON" in table and "BM25" in table and "p95" in table
    rows = tables[0][2:]
    assert rows and all("`bench_" in row.rsplit("|", 2)[1] for row in rows)
    assert " was " not in table and "(was" not in table  # history goes to CHANGELOG.md
    for script in re.findall(r"`(bench_\w+\.py)", table):
        assert (ROOT / "bench" / script).exists(), script


def test_every_benchmark_is_listed_with_its_command():
    """docs/benchmarks.md's command list names every bench script, and each script a page
    names exists (the README's table names them by file name)."""
    benchmarks = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    commands = benchmarks.split("## The commands", 1)[1].split("```sh\n", 1)[1].split("```")[0]
    listed = set(re.findall(r"bench/(bench_\w+\.py)", commands))
    scripts = {path.name for path in (ROOT / "bench").glob("bench_*.py")}
    assert sorted(scripts - listed) == []
    named = set(re.findall(r"\b(bench_\w+\.py)", README.read_text(encoding="utf-8") + benchmarks))
    assert sorted(named - scripts) == []


def test_the_exit_codes_in_usage_are_the_clis():
    """docs/usage.md's exit status table is ``lookback --help``'s (``cli.EXIT_CODES``)."""
    from lookback.cli import EXIT_CODES

    usage = (ROOT / "docs" / "usage.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (\d+) \| (.+) \|$", usage.split("## The command line", 1)[1]
                      .split("\n## ", 1)[0], re.MULTILINE)
    assert [(int(code), meaning) for code, meaning in rows] == list(EXIT_CODES)


def command_flags() -> dict[str, set[str]]:
    """Each command's option strings (the global ones included), hidden aliases too."""
    from lookback.cli import build_parser

    parser = build_parser()
    global_flags = {flag for action in parser._actions for flag in action.option_strings}
    (subparsers,) = [action for action in parser._actions
                     if isinstance(action, argparse._SubParsersAction)]
    return {name: global_flags | {flag for action in sub._actions
                                  for flag in action.option_strings}
            for name, sub in subparsers.choices.items()}


#: ``lookback CMD …`` up to a comment, the end of a code span or of the line.
INVOCATION = re.compile(r"lookback ((?:--\S+ \S+ )*)([a-z]+)((?: [^`#|\n]*)?)")


def test_every_flag_the_docs_give_a_command_exists():
    """``lookback search … --limit N`` in README or docs/: each flag is one of that
    command's (a renamed flag leaves no stale instruction behind)."""
    flags = command_flags()
    checked, wrong = 0, []
    for page in [README, *sorted((ROOT / "docs").glob("*.md"))]:
        for before, name, rest in INVOCATION.findall(page.read_text(encoding="utf-8")):
            if name not in flags:
                continue
            for flag in re.findall(r"(?<![\w-])(--?[a-z][a-z-]*)", before + rest):
                checked += 1
                if flag not in flags[name]:
                    wrong.append(f"{page.relative_to(ROOT)}: lookback {name} {flag}")
    assert checked > 20 and wrong == []


#: Commands whose output is not a result: services, the hook, a script; ``install`` and
#: ``uninstall`` change the agents' files (``--print`` shows how).
NO_JSON = {"serve", "watch", "worker", "hook", "mcp", "completion", "install", "uninstall"}


def test_every_command_that_prints_a_result_takes_json():
    """One output rule: text for people, ``--json`` for programs (``retrieve`` answers
    JSON always: its request is JSON)."""
    flags = command_flags()
    missing = sorted(name for name, own in flags.items()
                     if name not in NO_JSON and "--json" not in own)
    assert missing == []
