"""References in ``prepare()``: the ledger keeps what was typed, the request carries the
expansion — the same bytes every turn and after a restart — and warnings reach ``Prepared``."""

from __future__ import annotations

from pathlib import Path

from refold.references import local_expander
from refold.references.link import EVENT_KIND
from refold.runtime import Engine
from refold.store import Store


def engine(store: Store, root: Path) -> Engine:
    refs = local_expander(store=store, cwd=root, spill_dir=root.parent / "spill")
    return Engine(store, model="m", context_length=8000, references=refs)


def test_prepare_expands_what_is_sent_and_stores_what_was_typed(
        store: Store, tmp_path: Path) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "app.py").write_text("def total(): return 42\n")
    typed = "why @file:app.py and @file:../secret.txt?"
    with engine(store, root) as eng:
        rt = eng.open_session(new=True, title="t")
        first = rt.prepare([{"role": "user", "content": typed}])
        sent = first.messages[-1]["content"]
        assert "def total(): return 42" in sent and sent.startswith(typed)
        assert first.warnings == ["@file:../secret.txt: refused: outside the working "
                                  f"directory {root.resolve()}"]
        assert [m.message["content"] for m in store.get_messages(rt.session_id)] == [typed]
        assert len(store.list_events(rt.session_id, EVENT_KIND)) == 1
        rt.record({"role": "assistant", "content": "it returns 42"})
        second = rt.prepare([{"role": "user", "content": "thanks"}])
        assert second.messages[0]["content"] == sent  # byte-identical: caches stay warm
        assert second.warnings == []  # reported once, with the turn that attached it
        assert second.tokens > 20
    (root / "app.py").write_text("changed on disk\n")
    with engine(store, root) as eng:  # a restart: the model sees what it already read
        rt = eng.open_session("t")
        again = rt.prepare([])
        assert again.messages[0]["content"] == sent
    assert len(store.list_events(rt.session_id, EVENT_KIND)) == 1


def test_the_expansion_counts_toward_the_budget(sqlite_store: Store, tmp_path: Path) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "big.txt").write_text(" ".join(f"w{i}" for i in range(5000)))
    with engine(sqlite_store, root) as eng:
        rt = eng.open_session(new=True)
        plain = rt.prepare([{"role": "user", "content": "hello"}])
        rt.record({"role": "assistant", "content": "hi"})
        big = rt.prepare([{"role": "user", "content": "read @file:big.txt"}])
        assert big.tokens - plain.tokens > 3000  # ~4K tokens attached (50% of 8K)
        assert any("cut from" in w for w in big.warnings)


def test_proxy_mode_history_resent_is_stored_once(sqlite_store: Store, tmp_path: Path) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "notes.md").write_text("deploy on fridays\n")
    history = [{"role": "user", "content": "summarize @file:notes.md"}]
    with engine(sqlite_store, root) as eng:
        rt = eng.open_session(new=True)
        first = rt.prepare_history(list(history))
        assert first is not None and "deploy on fridays" in first.messages[-1]["content"]
        rt.record({"role": "assistant", "content": "deploys happen on fridays"})
        history += [{"role": "assistant", "content": "deploys happen on fridays"},
                    {"role": "user", "content": "ok"}]
        second = rt.prepare_history(list(history))
        assert second is not None
        assert second.messages[0]["content"] == first.messages[-1]["content"]
        stored = [m.message["content"] for m in sqlite_store.get_messages(rt.session_id)]
        assert stored == [h["content"] for h in history]  # as typed, once each


def test_a_session_reference_in_prepare_names_the_spill(store: Store, tmp_path: Path) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    with engine(store, root) as eng:
        old = eng.open_session(new=True, title="payments")
        old.prepare([{"role": "user", "content": "the refund cap is 500 EUR"}])
        old.record({"role": "assistant", "content": "noted: cap 500 EUR"})
        rt = eng.open_session(new=True, title="next")
        out = rt.prepare([{"role": "user", "content": "per @session:payments, what cap?"}])
        sent = out.messages[-1]["content"]
        assert "--- Referenced sessions ---" in sent and "cap 500 EUR" in sent
        assert "spill_id" in sent and out.warnings == []
