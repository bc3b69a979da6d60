"""``refold doctor`` exits 1 on a failed check and ``--repair`` fixes what it safely can
(issue 14); a search on a damaged index says so instead of "no matches"."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from main_exit import run_main as _main

from refold.errors import InvalidInput
from refold.store import SearchQuery, Store, open_store

SAMPLE = Path(__file__).resolve().parents[2] / "src" / "refold" / "data" / "sample_session.jsonl"


@pytest.fixture
def damaged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
            capsys: pytest.CaptureFixture[str]) -> Path:
    for name in ("REFOLD_HOME", "REFOLD_DB"):
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"
    assert _main(capsys, "--home", str(home), "import", str(SAMPLE))[0] == 0
    conn = sqlite3.connect(home / "refold.db")
    conn.execute("INSERT INTO messages_fts(messages_fts) VALUES ('delete-all')")
    conn.commit()
    conn.close()
    return home


def test_doctor_exits_1_on_a_failed_check(damaged: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _main(capsys, "--home", str(damaged), "doctor", "--json")
    report = json.loads(out)
    assert code == 1 and report["ok"] is False
    assert any("messages_fts holds 0 of 36 rows" in p for p in report["database"]["problems"])


def test_search_on_a_damaged_index_says_so(damaged: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _main(capsys, "--home", str(damaged), "search", "currency")
    assert code == 1 and "no matches" not in out
    assert "search index is damaged" in err and "refold doctor --repair" in err


def test_doctor_repair_backs_up_then_rebuilds(damaged: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = _main(capsys, "--home", str(damaged), "doctor", "--repair", "--json")
    report = json.loads(out)
    assert code == 0 and report["ok"] is True, report
    backup = Path(report["repair"]["backup"])
    assert backup.name.startswith("refold.db.bak-") and backup.parent == damaged
    copy = sqlite3.connect(backup)  # the backup is the state before the repair
    assert copy.execute("SELECT count(*) FROM messages").fetchone()[0] == 36
    assert copy.execute("SELECT count(*) FROM messages_fts_docsize").fetchone()[0] == 0
    copy.close()
    code, out, _ = _main(capsys, "--home", str(damaged), "search", "currency", "--json")
    assert code == 0 and json.loads(out)


def test_rebuild_search_indexes_on_each_backend(store: Store) -> None:
    session = store.create_session(title="t")
    store.append_messages(session.id, [{"role": "user", "content": "the currency rounding bug"},
                                       {"role": "user", "content": "退款金额不对"}])
    store.rebuild_search_indexes()
    assert store.integrity_check() == []
    assert [h.seq for h in store.search(SearchQuery("currency"))] == [1]
    assert [h.seq for h in store.search(SearchQuery("退款"))] == [2]


@pytest.mark.postgres
def test_doctor_repair_on_postgres_recounts(postgres_store: Store, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    import psycopg

    store = postgres_store
    session = store.create_session(title="t")
    store.append_messages(session.id, [{"role": "user", "content": "one"}])
    schema = store.schema  # type: ignore[attr-defined]
    url = f"{store.url}{'&' if '?' in store.url else '?'}schema={schema}" \
        if "schema=" not in store.url else store.url
    with psycopg.connect(store.url.split("?")[0]) as conn:
        conn.execute(f'UPDATE "{schema}".sessions SET message_count = 7')
    home = str(tmp_path / "home")
    code, out, _ = _main(capsys, "--home", home, "--db", url, "doctor", "--json")
    assert code == 1
    code, out, _ = _main(capsys, "--home", home, "--db", url, "doctor", "--repair", "--json")
    report = json.loads(out)
    assert code == 0 and report["repair"]["backup"] is None, report
    assert store.get_session(session.id).message_count == 1


def test_backup_refuses_an_in_memory_database() -> None:
    store = open_store(":memory:")
    try:
        with pytest.raises(InvalidInput, match="in-memory"):
            store.backup("/tmp/nowhere.db")
    finally:
        store.close()
