"""The ``lookback`` command as a user meets it: summaries, status, clear errors."""

from __future__ import annotations

import json
import shutil

import pytest

from lookback.cli import main
from tests.support import FIXTURES, as_another_user, fixture_path


@pytest.fixture
def run(home, capsys, monkeypatch):
    monkeypatch.setenv("LOOKBACK_HOME", str(home))
    monkeypatch.delenv("LOOKBACK_REDIS_URL", raising=False)

    def invoke(*argv: str):
        code = main(list(argv))
        out, err = capsys.readouterr()
        return code, out, err

    return invoke


def test_index_prints_a_summary_and_a_rerun_adds_nothing(run):
    code, out, _ = run("index", str(FIXTURES))
    assert code == 0
    assert "indexed 2,038 new entries from 4 files: 3 projects, 4 sessions" in out
    code, out, _ = run("index", "--json", str(FIXTURES))
    summary = json.loads(out)
    assert code == 0 and summary["entries_added"] == 0 and summary["sessions"] == 4


def test_index_defaults_to_pis_sessions_folder(run, tmp_path, monkeypatch):
    agent = tmp_path / "agent"
    (agent / "sessions" / "--work--").mkdir(parents=True)
    (agent / "sessions" / "--work--" / "s.jsonl").write_bytes(
        fixture_path("branching.jsonl").read_bytes())
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(agent))
    code, out, _ = run("index")
    assert code == 0 and "8 new entries from 1 files" in out


def test_status_lists_projects(run):
    run("index", str(FIXTURES))
    code, out, _ = run("status", "--json")
    report = json.loads(out)
    assert code == 0 and report["mode"] == "embedded"
    by_cwd = {p["cwd"]: p for p in report["projects"]}
    assert by_cwd["/Users/badlogic/workspaces/pi-mono"]["sessions"] == 2
    assert by_cwd["/workspace/demo"]["entries"] == 10
    code, out, _ = run("status")
    assert "/workspace/demo" in out


def test_reindex_rebuilds_every_project(run):
    run("index", str(FIXTURES))
    code, out, _ = run("reindex")
    assert code == 0 and out.count("rebuilt ") == 3
    code, out, _ = run("status", "--json")
    assert {p["generation"] for p in json.loads(out)["projects"]} == {2}


@pytest.mark.parametrize("setup, expected_code, message", [
    (lambda tmp: tmp / "missing", 2, "no such file or directory"),
    (lambda tmp: _write(tmp / "notes.jsonl", '{"hello": 1}\n'), 1, "not a session file"),
    (lambda tmp: _mkdir(tmp / "empty"), 1, "no session files"),
])
def test_user_mistakes_get_one_clear_line(run, tmp_path, setup, expected_code, message):
    code, out, err = run("index", str(setup(tmp_path)))
    assert code == expected_code
    assert message in err
    assert "Traceback" not in err


def test_a_dangling_link_and_a_stray_jsonl_in_a_folder_are_skipped_and_counted(run, tmp_path):
    folder = tmp_path / "sessions"
    folder.mkdir()
    (folder / "branching.jsonl").write_bytes(fixture_path("branching.jsonl").read_bytes())
    (folder / "gone.jsonl").symlink_to(tmp_path / "deleted-session.jsonl")
    _write(folder / "notes.jsonl", '{"hello": 1}\n')
    code, out, err = run("index", "--json", str(folder))
    summary = json.loads(out)
    assert code == 0, err
    assert summary["not_sessions"] == 2 and summary["errors"] == []
    assert summary["entries_added"] == 8
    code, out, err = run("index", str(folder))
    assert code == 0 and "skipped 2 files that are not Pi, Claude Code or Codex sessions" in out
    assert "error" not in err


def test_unknown_project_and_bad_settings(run, tmp_path, monkeypatch):
    code, _, err = run("status", "--project", "bad name!")
    assert code == 2 and "--project bad name!: invalid project name" in err
    code, _, err = run("status", "--project", "../etc")  # a folder: its cwd, never a path
    assert code == 2 and "--project ../etc: no such project is indexed" in err
    for command in ("status", "reindex"):
        code, _, err = run(command, "--project", "/no/such/cwd")
        assert code == 2 and "--project /no/such/cwd: no such project is indexed" in err
    code, _, err = run("context", "retrieved", "--session-file", str(tmp_path / "gone.jsonl"))
    assert code == 2 and f"--session-file {tmp_path / 'gone.jsonl'}: " in err
    bad = _write(tmp_path / "bad.toml", "retrieval = [")
    code, _, err = run("--config", str(bad), "status")
    assert code == 2 and "bad.toml" in err


def _write(path, text):
    path.write_text(text)
    return path


def _mkdir(path):
    path.mkdir()
    return path


def test_a_50_mb_line_is_skipped_with_a_warning(run, tmp_path):
    session = tmp_path / "big.jsonl"
    header = json.dumps({"type": "session", "version": 3, "id": "big", "cwd": "/big",
                         "timestamp": "2026-01-01T00:00:00Z"})
    huge = json.dumps({"type": "message", "id": "h", "parentId": None, "timestamp": "t",
                       "message": {"role": "user", "content": "x" * (50 * 1024 * 1024)}})
    small = json.dumps({"type": "message", "id": "s", "parentId": None, "timestamp": "t",
                        "message": {"role": "user", "content": "small one"}})
    session.write_text(f"{header}\n{huge}\n{small}\n")
    code, out, err = run("index", str(session))
    assert code == 0
    # The huge line's text is skipped; it stays as a text-less link (its id and parent).
    assert "2 new entries" in out and "1 oversized" in out
    assert "skipped a line of 52,428," in err


def test_status_counts_the_entries_whose_text_was_cut(run, tmp_path):
    session = tmp_path / "long.jsonl"
    header = json.dumps({"type": "session", "version": 3, "id": "long", "cwd": "/long",
                         "timestamp": "2026-01-01T00:00:00Z"})
    lines = [header] + [json.dumps({
        "type": "message", "id": f"m{n}", "parentId": f"m{n - 1}" if n else None,
        "timestamp": "t", "message": {"role": "user", "content": text}})
        for n, text in enumerate(["x" * 1_200_000, "short one", "y" * 999_999])]
    session.write_text("\n".join(lines) + "\n")
    code, out, err = run("index", str(session))
    assert code == 0, err
    code, out, _ = run("status", "--json")
    (project,) = json.loads(out)["projects"]
    assert project["entries"] == 3 and project["entries_cut"] == 1
    code, out, _ = run("status")
    assert "entries cut" in out and "1,000,000 characters" in out


def test_retrieve_reads_stdin_and_writes_json(run, monkeypatch, capsys):
    import io

    run("index", str(FIXTURES))
    request = {"session_file": str(fixture_path("before-compaction.jsonl")),
               "message": "`AppMessage`", "max_results": 2}
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(json.dumps(request).encode())))
    code, out, _ = run("retrieve")
    response = json.loads(out)
    assert code == 0 and response["status"] == "ok" and len(response["evidence"]) == 2
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(b"{not json")))
    code, out, _ = run("retrieve")
    assert code == 2 and json.loads(out)["error"]["code"] == "invalid-request"
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(
        json.dumps({**request, "max_results": 500}).encode())))
    code, out, _ = run("retrieve")
    assert code == 2 and "max_results" in json.loads(out)["error"]["message"]


def test_search_chooses_its_scope(run):
    run("index", str(FIXTURES))
    session = str(fixture_path("pi-session-v3.jsonl"))
    code, out, _ = run("search", "OracleProvider", "--session-file", session, "--json")
    branch = {r["entry_id"] for r in json.loads(out)["results"]}
    code, out, _ = run("search", "OracleProvider", "--session-file", session, "--scope",
                       "session", "--json")
    whole = {r["entry_id"] for r in json.loads(out)["results"]}
    assert code == 0
    assert "00000004" in whole and "00000004" not in branch  # the sibling branch
    assert branch < whole


def test_no_pi_sessions_yet_is_not_an_error(run, tmp_path, monkeypatch):
    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(tmp_path / "no-agent-here"))
    code, out, err = run("index")
    assert code == 0 and "no Pi, Claude Code or Codex sessions yet" in out and not err
    code, out, _ = run("status")
    # The README's set-up runs index then status: status names a next step, not index again.
    assert code == 0 and "no projects indexed yet" in out and "lookback index PATH" in out


def test_claude_codes_folder_is_read_by_default_beside_pis(run, tmp_path, monkeypatch):
    from tests.test_claude_code import CWD, PROJECT_DIR

    monkeypatch.setenv("PI_CODING_AGENT_DIR", str(tmp_path / "no-agent-here"))
    config = tmp_path / "claude-config"
    shutil.copytree(PROJECT_DIR, config / "projects" / PROJECT_DIR.name)
    monkeypatch.setenv("CLAUDE_CONFIG_DIR", str(config))
    code, out, err = run("index", "--json")
    assert code == 0 and json.loads(out)["sessions"] == 3, err
    code, out, _ = run("status", "--json")
    assert CWD in out
    monkeypatch.setenv("LOOKBACK_CLAUDE_CODE__READ_BY_DEFAULT", "false")
    code, out, _ = run("index")
    assert code == 0 and "no Pi, Claude Code or Codex sessions yet" in out


def test_status_says_when_an_index_needs_a_rebuild(run, home):
    from lookback.index.layout import list_projects
    from lookback.index.store import open_writer, write_meta

    run("index", str(fixture_path("branching.jsonl")))
    project = list_projects(home)[0]
    connection = open_writer(project.index_path())
    with connection:
        write_meta(connection, "schema_version", 1)  # as an older Lookback left it
    connection.close()
    code, out, _ = run("status")
    assert code == 0 and "run `lookback reindex`" in out
    run("reindex")
    code, out, _ = run("status", "--json")
    assert json.loads(out)["projects"][0]["needs_reindex"] is False


def test_version_names_the_installed_distribution(capsys):
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exit:
        main(["--version"])
    assert exit.value.code == 0
    assert capsys.readouterr().out == f"lookback {version('pi-lookback')}\n"


def test_help_lists_the_exit_codes(capsys):
    from lookback.cli import EXIT_CODES

    with pytest.raises(SystemExit):
        main(["--help"])
    out = capsys.readouterr().out
    assert "exit status:" in out
    assert all(f"  {code:<4} {meaning}" in out for code, meaning in EXIT_CODES)


def complete(shell_script: str, line: str) -> list[str]:
    """What bash offers for ``line`` (the cursor at its end) with ``shell_script`` loaded."""
    import subprocess

    words = line.split(" ")
    program = (f"{shell_script}\nCOMP_WORDS=({' '.join(repr(w) for w in words)})\n"
               f"COMP_CWORD={len(words) - 1}\n_lookback\nprintf '%s\\n' \"${{COMPREPLY[@]}}\"\n")
    done = subprocess.run(["bash", "--norc", "--noprofile"], input=program, text=True,
                          capture_output=True, timeout=30, check=True)
    return [word for word in done.stdout.splitlines() if word]


def test_bash_completes_commands_flags_and_choices(run):
    code, script, _ = run("completion", "bash")
    assert code == 0 and "complete -o default -F _lookback lookback" in script
    assert complete(script, "lookback ind") == ["index"]
    assert complete(script, "lookback --home /tmp/x sta") == ["status"]
    assert complete(script, "lookback search --sc") == ["--scope"]
    assert complete(script, "lookback search x --scope ") == ["branch", "session", "project"]
    assert complete(script, "lookback context ") == ["retrieved", "manifest", "included",
                                                     "excluded", "all"]
    assert complete(script, "lookback completion f") == ["fish"]
    assert complete(script, "lookback search --session-file ") == []  # the shell's files


def test_zsh_and_fish_scripts_name_every_command(run):
    from lookback.cli import COMMANDS

    code, zsh, _ = run("completion", "zsh")
    assert code == 0 and "bashcompinit" in zsh and "_lookback()" in zsh
    code, fish, _ = run("completion", "fish")
    assert code == 0
    for name in COMMANDS:
        assert f" -a {name} -d " in fish
    assert "__fish_seen_subcommand_from search' -l scope -x -a 'branch session project'" in fish


@pytest.mark.skipif(shutil.which("fish") is None, reason="fish is not installed here")
def test_fish_completes_with_the_script_loaded(run, tmp_path):
    import subprocess

    code, script, _ = run("completion", "fish")
    (tmp_path / "lookback.fish").write_text(script)
    done = subprocess.run(["fish", "--no-config", "-c",
                           f"source {tmp_path / 'lookback.fish'}; complete -C 'lookback ind'; "
                           "complete -C 'lookback search --scope '"],
                          capture_output=True, text=True, timeout=30, check=True)
    offered = [line.split("\t")[0] for line in done.stdout.splitlines()]
    assert offered == ["index", "branch", "project", "session"]


def _session_in(folder, tmp_path):
    """A copy of the branching sample whose header names ``folder`` as its cwd."""
    lines = fixture_path("branching.jsonl").read_text().splitlines()
    header = json.loads(lines[0])
    path = tmp_path / "sessions" / "s.jsonl"
    path.parent.mkdir(exist_ok=True)
    path.write_text("\n".join([json.dumps({**header, "cwd": str(folder)}), *lines[1:]]) + "\n")
    return path


def test_search_names_the_flag_of_a_missing_file_or_unknown_project(run, tmp_path):
    run("index", str(FIXTURES))
    code, out, err = run("search", "AppMessage", "--session-file", str(tmp_path / "gone.jsonl"))
    assert code == 2 and out == ""
    assert err == f"lookback: error: --session-file {tmp_path / 'gone.jsonl'}: no such file\n"
    code, out, err = run("search", "AppMessage", "--project", "/no/such/project", "--json")
    assert code == 2 and "--project /no/such/project: no such project is indexed" in err
    assert json.loads(out)["error"]["code"] == "not-found"
    notes = _write(tmp_path / "notes.jsonl", '{"hello": 1}\n')
    code, out, err = run("search", "AppMessage", "--session-file", str(notes))
    assert code == 2 and "--session-file is not a Pi, Claude Code or Codex session" in err
    assert "session_file" not in err


def test_search_limit_and_its_old_name(run, capsys):
    run("index", str(FIXTURES))
    session = str(fixture_path("before-compaction.jsonl"))
    for flag in ("--limit", "--max-results"):
        code, out, _ = run("search", "AppMessage", "--session-file", session, flag, "2",
                           "--json")
        assert code == 0 and len(json.loads(out)["results"]) == 2
    with pytest.raises(SystemExit) as exit:
        main(["search", "AppMessage", "--session-file", session, "--limit", "0"])
    assert exit.value.code == 2 and "--limit: must be between 1 and 100" in \
        capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["search", "--help"])
    assert "--max-results" not in capsys.readouterr().out


def test_search_prints_text_even_into_a_pipe_and_json_when_asked(run):
    run("index", str(FIXTURES))
    session = str(fixture_path("before-compaction.jsonl"))
    code, out, _ = run("search", "AppMessage", "--session-file", session)  # not a terminal
    assert code == 0 and out.startswith("20 results (branch scope)\n")
    code, out, _ = run("search", "AppMessage", "--session-file", session, "--json")
    assert code == 0 and json.loads(out)["status"] == "ok"


def test_search_and_show_default_to_the_current_folders_project(run, tmp_path, monkeypatch):
    project = tmp_path / "work" / "app"
    (project / "src").mkdir(parents=True)
    run("index", str(_session_in(project, tmp_path)))
    monkeypatch.chdir(project / "src")  # a subfolder finds its project too
    code, out, err = run("search", "redacted", "--scope", "session", "--json")
    assert code == 0, err
    results = json.loads(out)["results"]
    assert results
    code, out, err = run("show", results[0]["entry_id"], "--json")
    assert code == 0, err
    assert json.loads(out)["entry"]["entry_id"] == results[0]["entry_id"]
    monkeypatch.chdir(tmp_path)
    code, out, err = run("search", "redacted")
    assert code == 2 and out == "" and "no project is indexed for this folder" in err
    code, out, err = run("search", "redacted", "--scope", "session", "--project", "work/app",
                         "--json")  # a relative folder names its cwd
    assert code == 0 and json.loads(out)["results"] == results, err
    code, out, err = run("status", "--project", "work/app", "--json")
    assert code == 0 and json.loads(out)["projects"][0]["cwd"] == str(project)


def test_search_of_a_project_without_a_session_named_searches_every_session(
        run, tmp_path, monkeypatch):
    """Before: `lookback search TEXT` in a project's folder searched the current branch of
    whichever session was active last, and said "0 results" for what an older session of the
    project holds (`lookback show` then read it whole). A session named: its branch still."""
    project = tmp_path / "app"
    project.mkdir()
    older, newer = tmp_path / "older.jsonl", tmp_path / "newer.jsonl"
    for source, copy in (("before-compaction.jsonl", older), ("branching.jsonl", newer)):
        lines = fixture_path(source).read_text().splitlines()
        header = {**json.loads(lines[0]), "cwd": str(project)}
        copy.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
        assert run("index", str(copy))[0] == 0  # the newer one is indexed last
    monkeypatch.chdir(project)
    for flags in ((), ("--project", str(project))):
        code, out, err = run("search", "tokensAfter", *flags, "--json")
        answer = json.loads(out)
        assert code == 0 and answer["scope"] == "project" and answer["results"], err
    code, out, _ = run("search", "tokensAfter")
    assert "(project scope)" in out and "0 results" not in out
    entry = out.splitlines()[1].split()[3]
    assert out.splitlines()[-1] == "read one whole: lookback show ENTRY"
    code, out, err = run("show", entry)  # as the hint says, from the same folder
    assert code == 0 and "tokensAfter" in out, err
    code, out, _ = run("search", "tokensAfter", "--session-id", "fixture-session", "--json")
    assert code == 0 and json.loads(out)["scope"] == "branch"
    assert json.loads(out)["results"] == []  # that session's branch has no such entry
    code, out, _ = run("search", "tokensAfter", "--session-file", str(newer), "--json")
    assert json.loads(out)["scope"] == "branch" and json.loads(out)["results"] == []
    monkeypatch.chdir(tmp_path)  # elsewhere the hint names the session searched
    code, out, _ = run("search", "tokensAfter", "--session-file", str(older), "--limit", "1")
    hint = out.splitlines()[-1]
    assert hint == f"read one whole: lookback show ENTRY --session-file {older}"
    entry = out.splitlines()[1].split()[3]
    code, out, err = run("show", entry, *hint.split("ENTRY ")[1].split())
    assert code == 0 and "tokensAfter" in out, err


def test_show_reads_one_entry_and_its_neighbours(run):
    run("index", str(FIXTURES))
    session = str(fixture_path("before-compaction.jsonl"))
    code, out, err = run("show", "v1:30", "--session-file", session)
    assert code == 0, err
    assert out.splitlines()[1] == "get messages(): Message[]; not AppMessage with our extension?"
    code, out, _ = run("show", "v1:30", "--session-file", session, "--before", "2",
                       "--after", "1", "--json")
    answer = json.loads(out)
    assert code == 0 and len(answer["before"]) == 2 and len(answer["after"]) == 1
    code, out, err = run("show", "v1:nope", "--session-file", session)
    assert code == 2 and "ENTRY v1:nope: no such entry" in err
    code, out, err = run("show", "v1:30", "--session-file", session, "--before", "99")
    assert code == 2 and "--before must be an integer between 0 and 20" in err
    code, out, err = run("show", "v1:30", "--project", "/Users/badlogic/workspaces/pi-mono")
    assert code == 2 and "name one with --session-id" in err  # the id is in two sessions


def _as_another_user(command: list[str]) -> list[str]:
    """``command`` run by a uid that file modes bind (root reads a mode-000 folder)."""
    import os

    if os.geteuid() != 0:
        return command
    if shutil.which("setpriv") is None:
        pytest.skip("root without setpriv cannot run as a second uid")
    return as_another_user(command)


def test_unreadable_folders_and_files_are_skipped_named_and_counted(shared_tmp):
    """One folder index cannot read used to abort the run with nothing indexed: now the
    rest is indexed, each unreadable path named, and the exit status is 1."""
    import os
    import subprocess
    import sys

    base = shared_tmp
    try:
        sessions, home = base / "sessions", base / "home"
        (sessions / "open").mkdir(parents=True)
        (sessions / "locked").mkdir()
        home.mkdir(mode=0o777)
        home.chmod(0o777)
        shutil.copy(fixture_path("branching.jsonl"), sessions / "open" / "a.jsonl")
        shutil.copy(fixture_path("before-compaction.jsonl"), sessions / "locked" / "b.jsonl")
        shutil.copy(fixture_path("before-compaction.jsonl"), sessions / "open" / "c.jsonl")
        for path in (sessions, sessions / "open"):
            path.chmod(0o755)
        (sessions / "open" / "a.jsonl").chmod(0o644)
        (sessions / "open" / "c.jsonl").chmod(0o000)
        (sessions / "locked").chmod(0o000)
        environ = {**os.environ, "LOOKBACK_HOME": str(home), "HOME": str(home),
                   "XDG_CONFIG_HOME": str(home)}
        environ.pop("LOOKBACK_CONFIG", None)
        command = _as_another_user([sys.executable, "-m", "lookback.cli", "index"])
        done = subprocess.run([*command, "--json", str(sessions)], env=environ,
                              capture_output=True, text=True, timeout=120, cwd=base)
        assert done.returncode == 1, done.stderr
        summary = json.loads(done.stdout)
        assert summary["entries_added"] == 8 and summary["sessions"] == 1
        assert summary["unreadable_skipped"] == 2
        assert f"lookback: error: {sessions / 'locked'}: Permission denied" in done.stderr
        assert f"lookback: error: {sessions / 'open' / 'c.jsonl'}: Permission denied" \
            in done.stderr
        done = subprocess.run([*command, str(sessions)], env=environ, capture_output=True,
                              text=True, timeout=120, cwd=base)
        assert done.returncode == 1
        assert "skipped 2 folders or files that could not be read" in done.stdout
    finally:
        for path in (base / "sessions" / "locked", base / "sessions" / "open" / "c.jsonl"):
            if path.exists() or path.is_symlink():
                path.chmod(0o700)


def _on_a_terminal(argv: list[str], environ: dict[str, str]) -> tuple[int, str, str]:
    """Run ``lookback ARGV`` with stderr on a pseudo-terminal: (exit, stdout, terminal)."""
    import os
    import pty
    import subprocess
    import sys

    leader, follower = pty.openpty()
    process = subprocess.Popen([sys.executable, "-m", "lookback.cli", *argv], env=environ,
                               stdout=subprocess.PIPE, stderr=follower, text=True)
    os.close(follower)
    shown = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # EIO: the terminal's other end closed
            break
        if not chunk:
            break
        shown += chunk
    out = process.stdout.read() if process.stdout else ""
    code = process.wait(timeout=120)
    os.close(leader)
    return code, out, shown.decode("utf-8", "replace")


def test_index_shows_bytes_rate_and_files_on_a_terminal_only(run, home, tmp_path):
    import os

    environ = {**os.environ, "LOOKBACK_HOME": str(home)}
    environ.pop("LOOKBACK_CONFIG", None)
    code, out, terminal = _on_a_terminal(["index", str(FIXTURES)], environ)
    assert code == 0 and "indexed 2,038 new entries" in out
    assert "indexing: 100%" in terminal and "B/s" in terminal
    assert "4/4 files, 2,038 entries" in terminal
    code, out, terminal = _on_a_terminal(["reindex"], {**environ})
    assert code == 0 and "events/s" in terminal and out.count("rebuilt ") == 3
    code, out, terminal = _on_a_terminal(["reindex", "--quiet"], environ)
    assert code == 0 and terminal == ""
    code, out, err = run("index", str(FIXTURES), "--json")  # stderr not a terminal
    assert code == 0 and err == ""


def test_config_prints_each_setting_with_its_origin(run, home, tmp_path, monkeypatch):
    config = _write(tmp_path / "lookback.toml", "[server]\nport = 9100\n")
    monkeypatch.setenv("LOOKBACK_RETRIEVAL__SEMANTIC", "true")
    code, out, err = run("--config", str(config), "config")
    assert code == 0, err
    lines = out.splitlines()
    assert lines[0] == f"settings file: {config}"
    assert any(line.split() == ["server.port", "9100", f"({config})"] for line in lines)
    assert any(line.split() == ["retrieval.semantic", "true",
                                "(LOOKBACK_RETRIEVAL__SEMANTIC)"] for line in lines)
    assert any(line.split() == ["home", json.dumps(str(home)), "(LOOKBACK_HOME)"]
               for line in lines)
    assert any(line.split() == ["retrieval.max_results", "12", "(default)"] for line in lines)
    code, out, _ = run("--config", str(config), "--home", str(tmp_path / "h"), "config",
                       "--json")
    report = json.loads(out)
    assert code == 0 and report["file"] == str(config) and report["file_exists"]
    assert report["settings"]["home"] == {"value": str(tmp_path / "h"), "origin": "--home"}
    assert report["settings"]["server.port"] == {"value": 9100, "origin": str(config)}


def test_watch_goes_on_past_a_folder_it_cannot_read(shared_tmp):
    """One unreadable folder made every rescan fail, so nothing beside it was watched."""
    import os
    import subprocess
    import sys

    base = shared_tmp
    try:
        sessions, home = base / "sessions", base / "home"
        (sessions / "locked").mkdir(parents=True)
        (sessions / "open").mkdir()
        home.mkdir()
        home.chmod(0o777)
        shutil.copy(fixture_path("branching.jsonl"), sessions / "open" / "a.jsonl")
        for path in (sessions, sessions / "open", sessions / "open" / "a.jsonl"):
            path.chmod(0o755)
        (sessions / "locked").chmod(0o000)
        environ = {**os.environ, "LOOKBACK_HOME": str(home), "HOME": str(home),
                   "XDG_CONFIG_HOME": str(home)}
        environ.pop("LOOKBACK_CONFIG", None)
        environ.pop("LOOKBACK_REDIS_URL", None)
        command = _as_another_user([sys.executable, "-m", "lookback.cli", "watch", "--once",
                                    str(sessions)])
        done = subprocess.run(command, env=environ, capture_output=True, text=True,
                              timeout=120, cwd=base)
        assert done.returncode == 0, done.stderr
        assert f"lookback: error: {sessions / 'locked'}: Permission denied" in done.stderr
        assert "events from 1 changed files" in done.stderr
    finally:
        (base / "sessions" / "locked").chmod(0o700)
