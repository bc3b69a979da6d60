"""`refold search` without click prints what the click command prints, and leaves to click every
command line it cannot parse exactly (issue 14 item 8: a search under 100 ms)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from refold.cli import main as entry
from refold.cli.searching import fast_search

SAMPLE = Path(__file__).resolve().parents[2] / "src" / "refold" / "data" / "sample_session.jsonl"


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("fast-search-home")
    env = {**os.environ, "REFOLD_HOME": str(path)}
    env.pop("REFOLD_DB", None)
    subprocess.run([sys.executable, "-m", "refold.cli.main", "import", str(SAMPLE)], env=env,
                   check=True, capture_output=True, timeout=60)
    return path


def _both(args: list[str], home: Path, monkeypatch: pytest.MonkeyPatch,
          capsys: pytest.CaptureFixture[str]) -> tuple[tuple[int, str, str], tuple[int, str, str]]:
    """(status, stdout, stderr) of the click-free path and of click, for one command line."""
    monkeypatch.setenv("REFOLD_HOME", str(home))
    monkeypatch.delenv("REFOLD_DB", raising=False)
    results = []
    for run in (entry._run, entry._run_click):
        status = run(list(args))
        out, err = capsys.readouterr()
        results.append((status, out, err))
    return results[0], results[1]


PLAIN = [
    ["search", "currency"],
    ["search", "currency", "--limit", "3"],
    ["search", "--limit=2", "currency", "--window", "0"],
    ["search", "currency", "--json", "--limit", "2"],
    ["search", "退款", "--role", "assistant"],
    ["search", "currency", "--sort", "recency", "--all", "--mode", "fts"],
    ["search", "currency", "--since", "2000-01-01", "--until", "30d"],  # none before 30 days ago
    ["search", "currency", "--since", "1w"],
    ["search", "no such words anywhere here"],
    ["search", "currency", "--session", "sample_session", "--source", "import"],
    ["search", "currency", "--limit", "5", "--limit", "1"],  # the last one wins, as in click
]


@pytest.mark.parametrize("args", PLAIN, ids=[" ".join(a) for a in PLAIN])
def test_plain_searches_print_what_click_prints(args: list[str], home: Path,
                                                monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert fast_search(args) is not None  # this command line takes the click-free path
    fast, slow = _both(args, home, monkeypatch, capsys)
    assert fast == slow
    assert fast[0] == 0 and fast[1]
    if "--json" in args:
        assert isinstance(json.loads(fast[1]), list)


def test_global_options_before_search(home: Path, tmp_path: Path,
                                      monkeypatch: pytest.MonkeyPatch,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    db = str(home / "refold.db")
    for args in (["--db", db, "search", "currency"], [f"--home={home}", "search", "currency"],
                 ["--home", str(tmp_path), "--db", db, "--set", "threshold_percent=0.6",
                  "search", "currency", "--limit", "1"]):
        assert fast_search(args) is not None
        fast, slow = _both(args, tmp_path, monkeypatch, capsys)
        assert fast == slow and "sample_session" in fast[1]


@pytest.mark.parametrize("args", [
    ["search"], ["search", "--help"], ["-v", "search", "x"], ["search", "x", "--limit", "0"],
    ["search", "x", "--limit", "many"], ["search", "x", "--role", "robot"],
    ["search", "x", "--since", "yesterday"], ["search", "x", "--nope"], ["search", "a", "b"],
    ["search", "x", "--limit"], ["search", "--", "-x"], ["search", "-x"], ["search", "x", "-h"],
    ["search", "x", "--json=yes"], ["--home"], ["sessions", "list"], ["--bogus", "search", "x"],
])
def test_anything_else_goes_to_click(args: list[str]) -> None:
    assert fast_search(args) is None


def test_errors_are_clicks_and_refolds(home: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("REFOLD_HOME", str(home))
    assert entry._run(["search", "x", "--limit", "0"]) == 2
    assert "Invalid value for '--limit'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:  # a RefoldError renders as one line
        entry.main(["search", "x", "--session", "no-such-session"])
    assert exit_info.value.code != 0
    err = capsys.readouterr().err
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1


def test_a_missing_database_is_not_created_by_a_search(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "typo.db"
    with pytest.raises(SystemExit) as exit_info:
        entry.main(["--db", str(target), "search", "x"])
    assert exit_info.value.code == 1 and "no database at" in capsys.readouterr().err
    assert not target.exists()


def test_a_search_and_version_start_without_click_or_dataclasses(home: Path) -> None:
    env = {**os.environ, "REFOLD_HOME": str(home)}
    env.pop("REFOLD_DB", None)
    heavy = ("click", "dataclasses", "inspect", "logging", "hashlib", "tomllib")
    for argv in (["search", "currency"], ["--version"]):
        code = ("import sys; from refold.cli.main import main\n"
                f"try:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
                f"print(sorted(m for m in {heavy!r} if m in sys.modules), file=sys.stderr)")
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env=env, timeout=60)
        assert proc.stdout, proc.stderr
        assert proc.stderr.splitlines()[-1] == "[]", proc.stderr


def test_a_home_that_is_a_file_is_a_clear_error_on_every_path(tmp_path: Path) -> None:
    home = tmp_path / "not-a-dir"
    home.write_text("x")
    env = {k: v for k, v in os.environ.items() if not k.startswith("REFOLD_")}
    for argv, extra in ((["--home", str(home), "search", "x"], {}),
                        (["search", "x"], {"REFOLD_HOME": str(home)}),
                        (["sessions", "list"], {"REFOLD_HOME": str(home)})):
        proc = subprocess.run([sys.executable, "-m", "refold.cli.main", *argv],
                              capture_output=True, text=True, timeout=60, env={**env, **extra})
        assert proc.returncode == 2, proc.stderr
        assert "is a file, not a directory" in proc.stderr and "Traceback" not in proc.stderr
    assert home.read_text() == "x"


@pytest.mark.parametrize("snippet, query, shown", [
    ("we [deploying] now", "deployed", "we <deploying> now"),  # the stemmer's match
    ("a [Café] here", "cafe", "a <Café> here"),  # accents folded, as the index folds them
    ('order["id"] and [identity]', "identity", 'order["id"] and <identity>'),
    ("x [deep] y", "deployed", "x [deep] y"),  # content's own brackets stay
])
def test_every_match_the_store_marked_is_highlighted(snippet: str, query: str,
                                                     shown: str) -> None:
    """A match spelled otherwise than the query (stemmed, accented) was printed with the
    store's literal brackets, exact ones in bold."""
    from refold.cli.searching import highlight

    assert highlight(snippet, query, lambda s: f"<{s}>") == shown


def test_the_when_column_has_the_whole_year(home: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    """`refold search` dated hits "26-12-06 08:25" (two-digit year first, a day of 2006 or of
    2026?) where every other table prints 2026-12-06."""
    import re

    fast, _ = _both(["search", "currency", "--limit", "1"], home, monkeypatch, capsys)
    row = fast[1].splitlines()[1]
    assert re.search(r"  \d{4}-\d\d-\d\d \d\d:\d\d  ", row), row


DASHED = [
    ["search", "-W error"],  # a query that starts with "-" but holds a space: no option does
    ["search", "-W error", "--limit", "2"],
    ["search", "--limit", "2", "-W error", "--json"],
]


@pytest.mark.parametrize("args", DASHED, ids=[" ".join(a) for a in DASHED])
def test_a_query_that_starts_with_a_dash_is_a_query(args: list[str], home: Path,
                                                   monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """``refold search "-W error"`` (searching for a flag someone passed) was click's
    "No such option: -W" on both paths."""
    assert fast_search(args) is not None
    fast, slow = _both(args, home, monkeypatch, capsys)
    assert fast == slow
    assert fast[0] == 0 and "No such option" not in fast[2]


def test_an_unknown_option_says_how_to_search_for_a_dashed_word(
        home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("REFOLD_HOME", str(home))
    assert entry._run(["search", "-staging"]) == 2
    assert "refold search -- -staging" in capsys.readouterr().err
    assert entry._run(["search", "--", "-staging"]) == 0  # the way it names
    capsys.readouterr()
    assert entry._run(["search", "currency", "--limt", "2"]) == 2  # a misspelt option: click's
    err = capsys.readouterr().err
    assert "Did you mean '--limit'?" in err and "goes after '--'" not in err


def test_python_dash_m_refold_is_the_refold_command(home: Path) -> None:
    """``python -m refold …`` runs the same command as the ``refold`` script (a venv whose
    scripts are not on PATH, ``subprocess`` callers, ``uv run python -m refold``)."""
    env = {**os.environ, "REFOLD_HOME": str(home)}
    env.pop("REFOLD_DB", None)
    version = subprocess.run([sys.executable, "-m", "refold", "--version"], capture_output=True,
                             text=True, env=env, timeout=60)
    assert version.returncode == 0 and version.stdout.startswith("refold, version ")
    found = subprocess.run([sys.executable, "-m", "refold", "search", "currency", "--json"],
                           capture_output=True, text=True, env=env, timeout=60)
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)
