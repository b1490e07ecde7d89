"""Typed settings: one declaration, four sources in order, and unknown keys refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from lookback.errors import SettingsError, UserError
from lookback.settings import DEFAULTS, Settings, load_settings


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
