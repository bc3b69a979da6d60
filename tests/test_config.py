"""Settings: every setting reachable from refold.toml (top level or tables), REFOLD_* and
--set; unknown keys name the valid ones; ``refold config show`` says where each came from; the
parts built from settings really use them (policy, summarizer timeout, memory)."""

from __future__ import annotations

import json
import time
import typing
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from refold.compaction.policy import CompactionPolicy, ModelOverride
from refold.config import COMPACTION_FIELDS, SECTIONS, Settings, load_settings
from refold.errors import InvalidInput
from refold.testing import ScriptedReply, serve


def _home(tmp_path: Path, toml: str = "") -> Path:
    home = tmp_path / "home"
    home.mkdir(parents=True, exist_ok=True)
    if toml:
        (home / "refold.toml").write_text(toml, encoding="utf-8")
    return home


def _changed(name: str) -> tuple[Any, str]:
    """A non-default value for a CompactionPolicy field, and its text form for REFOLD_*."""
    default = getattr(CompactionPolicy(), name)
    kind = typing.get_type_hints(CompactionPolicy)[name]
    if name == "overrides":
        value = [{"match": "gpt-4o", "threshold_percent": 0.6}]
        return value, json.dumps(value)
    if isinstance(default, bool):
        return (not default), str(not default).lower()
    if isinstance(default, tuple):
        return [0.9, 0.6], "0.9,0.6"
    if isinstance(default, float):
        return default / 2 + 0.01, str(default / 2 + 0.01)
    if isinstance(default, int) or default is None:
        assert default is None or isinstance(default, int), kind
        value = (default or 6) + 1
        return value, str(value)
    raise AssertionError(f"add a value for {name} ({kind})")


def _as_policy_value(name: str, value: Any) -> Any:
    if name == "overrides":
        return tuple(ModelOverride(**v) for v in value)
    return tuple(value) if isinstance(getattr(CompactionPolicy(), name), tuple) else value


@pytest.mark.parametrize("name", COMPACTION_FIELDS)
def test_every_compaction_field_is_reachable_from_toml_env_and_set(
        name: str, tmp_path: Path) -> None:
    value, text = _changed(name)
    expected = _as_policy_value(name, value)
    toml_value = json.dumps(value) if name != "overrides" else (
        '[{match = "gpt-4o", threshold_percent = 0.6}]')
    top = load_settings({"home": str(_home(tmp_path, f"{name} = {toml_value}\n"))}, {})
    table = load_settings({"home": str(_home(tmp_path / "t", f"[compaction]\n{name} = "
                                             f"{toml_value}\n"))}, {})
    env = load_settings({"home": str(tmp_path / "none")}, {f"REFOLD_{name.upper()}": text})
    flag = load_settings({"home": str(tmp_path / "none")}, {},
                         sets=[f"compaction.{name}={text}"])
    for settings in (top, table, env, flag):
        assert getattr(settings.compaction, name) == expected, settings.source_of(name)
    assert env.source_of(name) == f"env REFOLD_{name.upper()}"
    assert flag.source_of(name) == f"flag --set compaction.{name}"
    assert top.source_of(name).endswith("refold.toml")


def test_every_summarizer_memory_and_serve_key_works_in_its_table(tmp_path: Path) -> None:
    samples = {str: "x", bool: True, int: 3, float: 2.5}
    for section, keys in SECTIONS.items():
        if section == "compaction":
            continue
        for short, name in keys.items():
            kind = typing.get_type_hints(Settings)[name]
            base = typing.get_args(kind)[0] if typing.get_args(kind) else kind
            value: Any = ["k"] if base is list or kind == list[str] else samples.get(
                base, "x")
            if name in ("memory_approval",):
                value = "stage"
            if name == "budget_action":
                value = "refuse"
            if name == "pricing":
                continue  # a table of tables: tests/cli/test_cli_cost.py
            value = {"recall_mode": "hybrid", "embed_background": "on"}.get(name, value)
            settings = load_settings({"home": str(tmp_path)}, {}, sets=[
                f"{section}.{short}={','.join(value) if isinstance(value, list) else value}"])
            assert settings.value_of(name) == value, (section, short)


def test_precedence_defaults_toml_env_set_flags(tmp_path: Path) -> None:
    home = _home(tmp_path, 'model = "from-toml"\ncontext_length = 1000\n'
                           '[summarizer]\ntimeout = 9\n[memory]\nenabled = false\n')
    env = {"REFOLD_CONTEXT_LENGTH": "2000", "REFOLD_SUMMARIZER_TIMEOUT": "8",
           "REFOLD_HOME": str(home)}
    settings = load_settings({"model": None}, env, sets=["summarizer.timeout=7"])
    assert (settings.model, settings.context_length, settings.summarizer_timeout) == (
        "from-toml", 2000, 7.0)
    assert settings.memory_enabled is False
    assert settings.source_of("port") == "default"
    assert settings.source_of("summarizer_timeout") == "flag --set summarizer.timeout"
    flagged = load_settings({"model": "from-flag"}, env, sets=["model=from-set"])
    assert flagged.model == "from-flag" and flagged.source_of("model") == "flag --model"


def test_unknown_keys_name_the_key_and_the_valid_ones(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput) as top:
        load_settings({"home": str(_home(tmp_path, "threshhold_percent = 0.6\n"))}, {})
    assert "'threshhold_percent'" in str(top.value) and "refold.toml" in str(top.value)
    assert "did you mean 'threshold_percent'" in (top.value.hint or "")
    assert "protect_first_n" in (top.value.hint or "")
    with pytest.raises(InvalidInput) as table:
        load_settings({"home": str(_home(tmp_path / "b", "[memory]\nlimit = 5\n"))}, {})
    assert "'memory.limit'" in str(table.value)
    assert "memory.memory_char_limit" in (table.value.hint or "")
    with pytest.raises(InvalidInput, match="unknown setting 'nope'"):
        load_settings({"home": str(tmp_path)}, {}, sets=["nope=1"])
    with pytest.raises(InvalidInput, match="expected KEY=VALUE"):
        load_settings({"home": str(tmp_path)}, {}, sets=["model"])


def test_a_bad_value_names_the_setting_and_where_it_came_from(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput) as err:
        load_settings({"home": str(tmp_path)}, {"REFOLD_THRESHOLD_PERCENT": "lots"})
    assert "threshold_percent = 'lots'" in str(err.value)
    assert "env REFOLD_THRESHOLD_PERCENT" in str(err.value)
    with pytest.raises(InvalidInput, match="header_timeout"):
        load_settings({"home": str(tmp_path)}, {}, sets=["serve.header_timeout=0"])


def test_config_show_prints_values_and_sources_with_secrets_masked(tmp_path: Path) -> None:
    from refold.cli.main import cli

    home = _home(tmp_path, "[compaction]\nthreshold_percent = 0.6\n")
    env = {"REFOLD_UPSTREAM_API_KEY": "sk-very-secret", "REFOLD_API_KEYS": "a,b",
           "REFOLD_TRESHOLD_PERCENT": "1"}
    result = CliRunner().invoke(cli, ["--home", str(home), "--set", "memory.enabled=false",
                                      "config", "show", "--json"], env=env)
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    rows = {r["name"]: r for r in data["settings"]}
    assert rows["threshold_percent"]["value"] == 0.6
    assert rows["threshold_percent"]["source"] == str(home / "refold.toml")
    assert rows["memory_enabled"] == {"name": "memory_enabled", "section": "memory",
                                      "value": False, "source": "flag --set memory.enabled"}
    assert rows["upstream_api_key"]["value"] == "***" and rows["api_keys"]["value"] == [
        "***", "***"]
    assert "sk-very-secret" not in result.output
    assert data["ignored_env"] == ["REFOLD_TRESHOLD_PERCENT"]
    text = CliRunner().invoke(cli, ["--home", str(home), "config", "show"], env=env)
    assert "threshold_percent" in text.stdout and "# env REFOLD_UPSTREAM_API_KEY" in text.stdout
    assert "REFOLD_TRESHOLD_PERCENT names no setting" in text.stderr


def test_bad_settings_are_an_error_line_not_a_traceback(tmp_path: Path) -> None:
    from refold.cli.main import main

    home = _home(tmp_path, "[compaction]\nthreshold = 0.6\n")
    with pytest.raises(SystemExit) as done:
        main(["--home", str(home), "config", "show"])
    assert done.value.code == 2


# -- the parts use them ----------------------------------------------------------------------
def test_the_engine_gets_the_policy_and_memory_settings(tmp_path: Path) -> None:
    from refold.assembly import build_engine, summarizer_setup
    from refold.store.sqlite import SQLiteStore

    store = SQLiteStore(str(tmp_path / "r.db"))
    settings = load_settings({"home": str(tmp_path)}, {
        "REFOLD_THRESHOLD_PERCENT": "0.6", "REFOLD_PROTECT_FIRST_N": "1",
        "REFOLD_MEMORY_CHAR_LIMIT": "500", "REFOLD_MEMORY_REVIEW_EVERY_TURNS": "2"})
    setup = summarizer_setup(settings)
    engine = build_engine(settings, store, setup)
    try:
        assert engine.ops.policy.threshold_percent == 0.6
        assert engine.ops.policy.protect_first_n == 1
        assert engine.memory is not None and engine.memory.store.limits["memory"] == 500
        assert engine.memory.manager.reviewer.every_turns == 2
    finally:
        engine.close()
    off = build_engine(settings.updated(memory_enabled=False), store, setup)
    try:
        assert off.memory is None
    finally:
        off.close()
        store.close()


def _transcript(tmp_path: Path) -> Path:
    words = ["the", "build", "failed", "in", "src/app/main.py", "with", "error", "E1234", "after", "the", "refactor"]
    messages: list[dict[str, Any]] = [{"role": "system", "content": "You are helpful."}]
    for i in range(24):
        text = " ".join(words[(i + j) % len(words)] for j in range(60))
        messages.append({"role": "user" if i % 2 == 0 else "assistant", "content": text})
    path = tmp_path / "t.json"
    path.write_text(json.dumps(messages), encoding="utf-8")
    return path


def _compact(tmp_path: Path, url: str, *sets: str) -> tuple[dict[str, Any], float]:
    from refold.cli.main import cli

    args = ["--home", str(tmp_path / "home")]
    for item in sets:
        args += ["--set", item]
    args += ["compact", str(_transcript(tmp_path)), "--context-length", "1200",
             "--summarizer", "llm", "--json"]
    started = time.monotonic()
    result = CliRunner().invoke(cli, args, env={"REFOLD_UPSTREAM": url,
                                                "REFOLD_SUMMARIZER_MODEL": "aux-model"})
    elapsed = time.monotonic() - started
    assert result.stdout, (result.output, result.exception)
    return json.loads(result.stdout)["report"], elapsed


def test_the_summarizer_timeout_bounds_a_hung_endpoint(tmp_path: Path) -> None:
    hang = ScriptedReply(content="never", delay=8.0)
    with serve(default=lambda body: hang) as up:
        report, elapsed = _compact(tmp_path, up.base_url, "summarizer.timeout=1")
    # one budget for the aux model and the main-model retry together, then the fallback
    assert elapsed < 4.0, elapsed
    assert report["status"] == "fallback", report
    assert 1 <= len(up.llm.requests) <= 2


def test_abort_on_summary_failure_keeps_the_transcript(tmp_path: Path) -> None:
    broken = ScriptedReply(status=500, error={"error": {"message": "boom"}})
    with serve(default=lambda body: broken) as up:
        fallback, _ = _compact(tmp_path, up.base_url)
        aborted, _ = _compact(tmp_path, up.base_url, "summarizer.abort_on_failure=true")
    assert fallback["status"] == "fallback"
    assert aborted["status"] == "aborted" and "abort_on_summary_failure" in aborted["reason"]


def test_cache_friendly_mode_sends_the_conversation_prefix(tmp_path: Path) -> None:
    with serve(default=lambda body: ScriptedReply(content="## Goal\nship it")) as up:
        _compact(tmp_path, up.base_url, "summarizer.cache_friendly=true")
    sent = up.llm.requests[0]["messages"]
    assert sent[0] == {"role": "system", "content": "You are helpful."}  # the real prefix
    assert "Summarize the conversation above" in sent[-1]["content"]


def test_settings_convert_text_and_refuse_bad_values_without_a_framework() -> None:
    """Settings are plain Python (no pydantic on the start-up path): text converts to each
    field's type, out-of-range and non-finite values are refused naming the setting."""
    settings = Settings(port="9000", memory_enabled="off", summarizer_timeout="2.5",
                        api_keys=("a",), threshold_percent="0.6",
                        overrides=[{"match": "m", "context_length": "1000"}])
    assert (settings.port, settings.memory_enabled, settings.summarizer_timeout) == (
        9000, False, 2.5)
    assert settings.api_keys == ["a"] and settings.compaction.threshold_percent == 0.6
    assert settings.compaction.overrides == (ModelOverride("m", context_length=1000),)
    for bad, match in (({"port": 70000}, "port = 70000: must be at least 0 and at most 65535"),
                       ({"summarizer_timeout": 0}, "summarizer_timeout = 0: must be above 0"),
                       ({"threshold_percent": "nan"}, "finite"),
                       ({"context_length": 1.5}, "whole number"),
                       ({"memory_enabled": "maybe"}, "true or false"),
                       ({"budget_action": "shout"}, "warn, refuse"),
                       ({"overrides": [{"match": "m", "ratio": 1}]}, "unknown key 'ratio'")):
        with pytest.raises(InvalidInput, match=match):
            Settings(**bad)
    with pytest.raises(InvalidInput, match="unknown setting 'colour'"):
        Settings(colour="red")
    shown = repr(Settings(upstream_api_key="sk-secret", api_keys=["client-key"]))
    assert "sk-secret" not in shown and "client-key" not in shown  # secrets stay out of logs


def test_refolds_own_switches_are_not_reported_as_typos() -> None:
    """``config show`` lists ``REFOLD_*`` variables that name no setting (a typo); the
    switches refold and its tests read directly (the C scorer's, CI's) are not such."""
    from refold.config import unknown_env

    environ = {"REFOLD_NATIVE": "0", "REFOLD_REQUIRE_NATIVE": "1", "REFOLD_REQUIRE_POSTGRES": "1",
               "REFOLD_READAHEAD": "0", "REFOLD_DEBUG": "1", "REFOLD_TRESHOLD_PERCENT": "0.5", "HOME": "/root"}
    assert unknown_env(environ) == ["REFOLD_TRESHOLD_PERCENT"]
