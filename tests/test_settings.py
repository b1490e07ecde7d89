"""Typed settings: one declaration, four sources in order, and unknown keys refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from lookback.errors import SettingsError, UserError
from lookback.settings import DEFAULTS, Settings, load_settings, reference


def environ(tmp_path: Path, text: str = "", **variables: str) -> dict[str, str]:
    config = tmp_path / "config.toml"
    config.write_text(text)
    return {"LOOKBACK_HOME": str(tmp_path / "home"), "LOOKBACK_CONFIG": str(config),
            **variables}


def test_defaults_are_typed_values():
    settings = Settings()
    assert settings.retrieval.max_results == 12 and settings.retrieval.embedder == "hashing"
    assert settings.server.port == 8765 and not settings.service_mode
    assert DEFAULTS == settings


def test_file_then_variables_then_flags(tmp_path):
    env = environ(tmp_path, "namespace = 'file'\n[retrieval]\nmax_results = 5\nsemantic = true\n"
                            "[server]\nport = 9000\n",
                  LOOKBACK_RETRIEVAL__MAX_RESULTS="7", LOOKBACK_SERVER__TOKENS='{"abcdefgh1": "*"}',
                  LOOKBACK_PRIVACY__LOCAL_PROVIDERS="ollama, mine",
                  LOOKBACK_SESSIONS_DIR="/a:/b")
    settings = load_settings({"retrieval": {"max_results": 9}, "namespace": None}, env)
    assert settings.retrieval.max_results == 9  # the flag wins
    assert settings.retrieval.semantic is True and settings.server.port == 9000  # the file
    assert settings.namespace == "file"  # a flag left unset changes nothing
    assert settings.server.tokens == {"abcdefgh1": "*"}
    assert settings.privacy.local_providers == ("ollama", "mine")
    assert settings.sessions_dirs == ("/a", "/b")
    assert settings.home == tmp_path / "home"


def test_a_variable_is_read_as_its_setting_type(tmp_path):
    settings = load_settings(environ=environ(tmp_path, LOOKBACK_NAMESPACE="123",
                                             LOOKBACK_WORKERS__REINDEX_ON_START="true",
                                             LOOKBACK_WORKERS__DRAIN_SECONDS="2"))
    assert settings.namespace == "123"  # text stays text
    assert settings.workers.reindex_on_start is True and settings.workers.drain_seconds == 2.0


@pytest.mark.parametrize(("text", "variables", "overrides", "message"), [
    ("[retrieval]\nmax_result = 5\n", {}, None,
     "config.toml: unknown setting 'retrieval.max_result'; known: retrieval.max_results"),
    ("[retreival]\n", {}, None, "unknown setting 'retreival'"),
    ("", {"LOOKBACK_RETRIEVAL__MAX_RESULT": "5"}, None,
     "LOOKBACK_RETRIEVAL__MAX_RESULT is not a Lookback setting"),
    ("", {"LOOKBACK_REDIS_ULR": "redis://x"}, None, "LOOKBACK_REDIS_ULR is not a Lookback"),
    ("", {}, {"server": {"tokenz": {}}}, "the command line: unknown setting 'server.tokenz'"),
    ("[retrieval]\nmax_results = 101\n", {}, None, "retrieval.max_results: expected `int` <= 100"),
    ("", {"LOOKBACK_SERVER__PORT": "http"}, None, "server.port: expected `int`, got `str`"),
    ("", {"LOOKBACK_SERVER__TOKENS": "secret"}, None, "LOOKBACK_SERVER__TOKENS must be a JSON"),
    ("[server]\ntokens = ['a']\n", {}, None, "server.tokens: expected a table, got a list"),
    # An infinite time is a float, and overflows every wait it reaches (the reader's
    # freshness wait answered 500 to every request that had a file to index).
    ("[freshness]\nwait_ms = inf\n", {}, None, "freshness.wait_ms: expected `float` <= "),
    ("", {"LOOKBACK_SERVER__IDLE_TIMEOUT_SECONDS": "inf"}, None,
     "server.idle_timeout_seconds: expected `float` <= "),
])
def test_what_cannot_be_used_is_refused_by_name(tmp_path, text, variables, overrides, message):
    with pytest.raises(SettingsError) as raised:
        load_settings(overrides, environ(tmp_path, text, **variables))
    assert message in str(raised.value)
    assert isinstance(raised.value, UserError) and raised.value.exit_code == 2


def test_the_pi_extension_and_compose_variables_are_not_settings(tmp_path):
    settings = load_settings(environ=environ(
        tmp_path, LOOKBACK_URL="http://127.0.0.1:1", LOOKBACK_TOKEN="t" * 16,
        LOOKBACK_WORKERS="3", LOOKBACK_DEBUG="1", LOOKBACK_TEST_REDIS_URL="redis://x"))
    assert settings.server == DEFAULTS.server and settings.workers == DEFAULTS.workers


def test_a_named_settings_file_must_exist(tmp_path):
    with pytest.raises(SettingsError, match="does not exist"):
        load_settings(environ={"LOOKBACK_CONFIG": str(tmp_path / "missing.toml")})


def test_polling_is_one_setting_and_its_old_names_still_work(tmp_path, caplog):
    from lookback.freshness import engine_for

    old = load_settings(environ=environ(tmp_path, "[freshness]\npoll_ms = 20\n",
                                        LOOKBACK_FRESHNESS__HOT_SECONDS="60"))
    assert (old.watch.poll_ms, old.watch.rescan_seconds, old.watch.hot_seconds) == (20, 2, 60)
    assert "freshness.poll_ms is deprecated" in caplog.text
    assert "freshness.hot_seconds is deprecated" in caplog.text
    both = load_settings(environ=environ(tmp_path, "[freshness]\npoll_ms = 20\n"
                                                   "[watch]\npoll_ms = 30\n"))
    assert both.watch.poll_ms == 30  # the new name wins
    engine = engine_for(old)
    assert engine is not None
    try:  # the reader's tailer polls as `lookback watch` does
        assert (engine.watcher.poll_seconds, engine.watcher.hot_seconds) == (0.02, 60)
    finally:
        engine.close()


def test_the_file_lives_in_the_platforms_config_folder(tmp_path, monkeypatch, caplog):
    """``~/.config/lookback/config.toml`` (XDG_CONFIG_HOME here); the old place,
    ``<home>/config.toml``, is still read when the new one is absent, with a note."""
    from lookback.settings import load_with_origins, settings_file

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    home = tmp_path / "home"
    home.mkdir()
    env = {"LOOKBACK_HOME": str(home)}
    current = tmp_path / "xdg" / "lookback" / "config.toml"
    assert settings_file(env) == (current, None)
    (home / "config.toml").write_text("[retrieval]\nmax_results = 3\n")
    path, note = settings_file(env)
    assert path == home / "config.toml" and f"move it to {current}" in note
    settings, origins = load_with_origins(environ=env)
    assert settings.retrieval.max_results == 3
    assert origins["retrieval.max_results"] == str(home / "config.toml")
    assert f"move it to {current}" in caplog.text
    current.parent.mkdir(parents=True)
    current.write_text("[retrieval]\nmax_results = 4\n")
    path, note = settings_file(env)
    assert path == current and note == (f"settings file {home / 'config.toml'} is ignored: "
                                         f"{current} is read now")
    assert load_settings(environ=env).retrieval.max_results == 4
    explicit = tmp_path / "mine.toml"
    explicit.write_text("")
    assert settings_file({**env, "LOOKBACK_CONFIG": str(explicit)}) == (explicit, None)


def test_each_value_says_where_it_came_from(tmp_path):
    from lookback.settings import load_with_origins

    env = environ(tmp_path, "[retrieval]\nmax_results = 5\n[freshness]\npoll_ms = 20\n",
                  LOOKBACK_SERVER__PORT="9000")
    settings, origins = load_with_origins({"home": str(tmp_path / "flagged")}, env)
    assert settings.server.port == 9000 and settings.home == tmp_path / "flagged"
    assert origins["retrieval.max_results"] == str(tmp_path / "config.toml")
    assert origins["server.port"] == "LOOKBACK_SERVER__PORT"
    assert origins["home"] == "--home"
    assert origins["retrieval.semantic"] == "default"
    assert origins["watch.poll_ms"] == str(tmp_path / "config.toml")  # via its old name
    assert set(origins) == {key for key, _, _ in reference()}
