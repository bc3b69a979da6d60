"""``refold config show`` prints a valid refold.toml that gives the same settings back (its
``[general]`` table included); unknown keys list each valid key once; out-of-range values
(a window of -5 tokens, a trigger at 200% of it) are refused where settings are loaded, with
exit 2 and one line naming the setting and its range."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from refold.cli.main import cli, main
from refold.config import load_settings
from refold.errors import InvalidInput

SETS = ("context_length=32000", "model=my-model", "threshold_percent=0.6",
        "memory.enabled=false", "recall.limit=5", "serve.port=9000",
        "summarizer.timeout=30", "timeout_cooldowns=10,20",
        'overrides=[{"match": "gpt-4o", "threshold_percent": 0.7}]',
        'pricing={"my model": {"input": 0.5, "output": 1.5}}',
        "upstream_api_key=sk-very-secret", "api_keys=a,b",
        "memory_profile=quote \" back\\slash \x7f tab\t")


@pytest.fixture(autouse=True)
def _no_refold_env(monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for name in [k for k in os.environ if k.startswith("REFOLD_")]:
        monkeypatch.delenv(name)


def _show(home: Path, *args: str, json_out: bool = False) -> Any:
    prefix = ["--home", str(home)]
    for item in args:
        prefix += ["--set", item]
    result = CliRunner().invoke(cli, [*prefix, "config", "show",
                                      *(["--json"] if json_out else [])])
    assert result.exit_code == 0, (result.output, result.exception)
    return json.loads(result.stdout) if json_out else result.stdout


def _exit(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    with pytest.raises(SystemExit) as done:
        main(list(args))
    return int(done.value.code or 0), capsys.readouterr().err


def test_config_show_reads_back_as_refold_toml(tmp_path: Path) -> None:
    text = _show(tmp_path / "a", *SETS)
    assert text.startswith("[general]\n")
    tomllib.loads(text)  # valid TOML, comments and all
    home = tmp_path / "b"
    home.mkdir()
    (home / "refold.toml").write_text(text, encoding="utf-8")
    before = {r["name"]: r["value"] for r in _show(tmp_path / "a", *SETS, json_out=True)[
        "settings"]}
    after = {r["name"]: r for r in _show(home, json_out=True)["settings"]}
    # secrets are masked in the output, so they are printed commented out: never read back
    # as "***"
    for name in ("upstream_api_key", "api_keys"):
        assert after[name]["source"] == "default", name
        assert f"\n# {name} " in text
    for name, value in before.items():
        if name in ("home", "upstream_api_key", "api_keys"):
            continue
        assert after[name]["value"] == value, name
    assert after["context_length"]["source"] == str(home / "refold.toml")
    assert after["overrides"]["value"] == [{"match": "gpt-4o", "threshold_percent": 0.7,
                                            "context_length": None,
                                            "threshold_tokens_cap": None}]


def test_a_general_table_is_accepted_in_refold_toml_and_by_set(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "refold.toml").write_text('[general]\ncontext_length = 32000\nmodel = "m"\n',
                                      encoding="utf-8")
    settings = load_settings({"home": str(home)}, {})
    assert (settings.context_length, settings.model) == (32000, "m")
    assert settings.source_of("context_length") == str(home / "refold.toml")
    flagged = load_settings({"home": str(tmp_path)}, {}, sets=["general.context_length=9000"])
    assert flagged.context_length == 9000
    (home / "refold.toml").write_text("[general]\nthreshold_percent = 0.6\n", encoding="utf-8")
    with pytest.raises(InvalidInput, match=r"belongs in \[compaction\]"):
        load_settings({"home": str(home)}, {})
    (home / "refold.toml").write_text("general = 3\n", encoding="utf-8")
    with pytest.raises(InvalidInput, match=r"must be a table"):
        load_settings({"home": str(home)}, {})


def test_an_unknown_key_lists_each_valid_key_once(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "refold.toml").write_text("summarise = 1\n", encoding="utf-8")
    with pytest.raises(InvalidInput) as err:
        load_settings({"home": str(home)}, {})
    valid = (err.value.hint or "").split("valid keys: ", 1)[1].split(", ")
    assert len(valid) == len(set(valid)), [k for k in valid if valid.count(k) > 1]
    assert "summarizer" in valid and "general" in valid and "refold" in valid


@pytest.mark.parametrize(("where", "needle"), [
    ("--set context_length=-5", "context_length = '-5' (from flag --set context_length): "
                                "must be above 0"),
    ("--set threshold_percent=2", "threshold_percent = '2' (from flag --set "
                                  "threshold_percent): must be above 0 and at most 1"),
    ("--set compaction.threshold_percent=0", "must be above 0 and at most 1"),
    ("--set max_trigger_percent=1.5", "max_trigger_percent = '1.5'"),
    ("env REFOLD_CONTEXT_LENGTH=0", "context_length = '0' (from env REFOLD_CONTEXT_LENGTH)"),
    ("toml [general]\ncontext_length = -1", "context_length = -1 (from "),
    ("toml [compaction]\nthreshold_percent = 1.01", "threshold_percent = 1.01 (from "),
    ('--set overrides=[{"match": "m", "threshold_percent": 3}]',
     "(from flag --set overrides): threshold_percent = 3.0: must be above 0 and at most 1"),
])
def test_out_of_range_settings_are_refused_where_they_are_loaded(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
        where: str, needle: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    args = ["--home", str(home)]
    if where.startswith("--set "):
        args += ["--set", where.removeprefix("--set ")]
    elif where.startswith("env "):
        name, _, value = where.removeprefix("env ").partition("=")
        monkeypatch.setenv(name, value)
    else:
        (home / "refold.toml").write_text(where.removeprefix("toml ") + "\n", encoding="utf-8")
    for command in (["config", "show"], ["context", "any"]):
        code, err = _exit(capsys, *args, *command)
        assert code == 2, (command, err)
        assert err.startswith("error: bad setting ") and len(err.splitlines()) == 1, err
        assert needle in err, err
        assert "Traceback" not in err


def test_in_range_edges_are_accepted(tmp_path: Path) -> None:
    settings = load_settings({"home": str(tmp_path)}, {}, sets=[
        "context_length=1", "threshold_percent=1", "max_trigger_percent=1",
        "small_window_floor_percent=0.01"])
    assert settings.context_length == 1 and settings.compaction.threshold_percent == 1.0
