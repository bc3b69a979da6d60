"""A database target that reads as a URL but is none refold knows is refused, never a file: a
PostgreSQL URL with a slash missing (``postgresql:/host/db``) became a SQLite file named so
in the working directory, and ``refold migrate`` into it said "verification ok"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from main_exit import run_main as _main

from refold.errors import InvalidInput
from refold.store import open_store, sqlite_file_of

TYPOS = ["postgresql:/postgres@127.0.0.1/test", "postgresql//postgres@127.0.0.1/test",
         "postgres:/h/db", "sqlite:/tmp/x.db", "sqlite:relative.db", "SQLite:x.db",
         "https://example.com/db", "sqlite://tmp/a.db", "sqlite://", "sqlite:///"]


@pytest.mark.parametrize("target", TYPOS)
def test_a_url_refold_does_not_read_is_refused(target: str) -> None:
    with pytest.raises(InvalidInput) as raised:
        sqlite_file_of(target)
    assert raised.value.hint is not None
    assert "sqlite:///" in raised.value.hint or "sqlite:///" in str(raised.value)


def test_what_names_a_sqlite_file(tmp_path: Path) -> None:
    assert sqlite_file_of(f"sqlite:///{tmp_path}/a.db") == f"{tmp_path}/a.db"  # ////abs
    assert sqlite_file_of("sqlite:///tmp/a.db") == "/tmp/a.db"  # three slashes: absolute
    assert sqlite_file_of("sqlite:///~/a.db") == str(Path.home() / "a.db")
    for path in ("a.db", "dir/a.db", "./postgresql:/x", ":memory:", "C:\\x\\a.db", "C:/a.db",
                 "/abs/a.db", "sqlite/a.db", "postgres/a.db"):
        assert sqlite_file_of(path) == path


def test_a_password_in_a_mistyped_url_is_not_shown(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)  # (where the file it was taken for would be made)
    with pytest.raises(InvalidInput) as raised:
        open_store("postgresql:/user:s3cret@host/db")
    assert "s3cret" not in str(raised.value) and "***" in str(raised.value)


@pytest.mark.parametrize("target", ["postgresql:/postgres@127.0.0.1/test",
                                    "postgresql//postgres@127.0.0.1/test", "sqlite:x.db",
                                    "sqlite://tmp/a.db"])
def test_import_into_a_mistyped_url_stores_nothing(
        target: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("REFOLD_HOME", "REFOLD_DB"):
        monkeypatch.delenv(name, raising=False)
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    (work / "t.json").write_text(json.dumps([{"role": "user", "content": "hi"}]))
    code, out, err = _main(capsys, "--home", str(tmp_path / "home"), "--db", target,
                           "import", "t.json")
    assert code == 2, (out, err)
    assert err.startswith("error: ") and len(err.strip().splitlines()) == 1, err
    assert sorted(p.name for p in work.rglob("*")) == ["t.json"]  # no SQLite file made


def test_migrate_to_a_mistyped_url_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    for name in ("REFOLD_HOME", "REFOLD_DB"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.chdir(tmp_path)
    home = tmp_path / "home"
    sample = Path(__file__).resolve().parents[2] / "src/refold/data/sample_session.jsonl"
    assert _main(capsys, "--home", str(home), "import", str(sample))[0] == 0
    for args in (("--to", "postgresql:/postgres@127.0.0.1:5432/test?schema=x"),
                 ("--from", "sqlite:src.db", "--to", str(tmp_path / "b.db"))):
        code, out, err = _main(capsys, "--home", str(home), "migrate", *args)
        assert code == 2 and "verification" not in out, (out, err)
        assert "mistyped" in err
    assert not (tmp_path / "postgresql:").exists() and not (tmp_path / "b.db").exists()


@pytest.mark.parametrize(("target", "shown"), [
    ("postgresql:postgres@127.0.0.1/test", "postgresql:postgres@127.0.0.1/test"),
    ("postgresql:/user:s3cret@host/db", "postgresql:/user:***@host/db"),
    ("postgresql//u:pw@h/db", "postgresql//u:***@h/db")])
def test_a_refused_urls_password_is_hidden_and_its_user_shown(target: str, shown: str) -> None:
    """The user name was masked as if it were the password (``postgresql:***@127.0.0.1``)."""
    from refold.errors import InvalidInput
    from refold.store import sqlite_file_of

    with pytest.raises(InvalidInput) as caught:
        sqlite_file_of(target)
    assert repr(shown) in str(caught.value) and "s3cret" not in str(caught.value)
