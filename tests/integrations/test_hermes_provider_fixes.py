"""The Hermes-Agent memory provider as Hermes really runs it: its memory-plugin loader reading
the plugin file the README documents, two writers creating one Hermes session's refold session
at once, and recall across a session switch and across a gateway's chats."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from plugins.memory import find_provider_dir, load_memory_provider

from refold.integrations.hermes import Backend, RefoldMemoryProvider
from refold.runtime.engine import Engine
from refold.runtime.session import SessionRuntime
from refold.store import Store, open_store

ROOT = Path(__file__).parents[2]


def documented_plugin_file() -> str:
    """The one line the README says to put in ``$HERMES_HOME/plugins/refold/__init__.py``."""
    found = re.search(r"`\$HERMES_HOME/plugins/refold/__init__\.py`\s+containing\s+`([^`]+)`",
                      (ROOT / "README.md").read_text())
    assert found is not None, "README.md no longer documents the Hermes memory plugin file"
    return found.group(1)


def test_hermes_memory_loader_loads_the_plugin_file_the_readme_documents(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Hermes' own loader, directory scan included: it skips a plugin directory whose
    ``__init__.py`` does not name ``MemoryProvider``, and ``memory.provider: refold`` then
    silently runs with no memory provider."""
    line = documented_plugin_file()
    plugin = tmp_path / "hermes" / "plugins" / "refold"
    plugin.mkdir(parents=True)
    (plugin / "__init__.py").write_text(line + "\n")
    monkeypatch.setenv("HERMES_HOME", str(tmp_path / "hermes"))
    module = "_hermes_user_memory.refold"  # where Hermes imports a user-installed provider
    sys.modules.pop(module, None)
    try:
        assert find_provider_dir("refold") == plugin
        provider = load_memory_provider("refold")
    finally:
        sys.modules.pop(module, None)
    assert isinstance(provider, RefoldMemoryProvider)
    assert provider.name == "refold" and provider.is_available()
    # the module's docstring and constant say the same line
    from refold.integrations import hermes

    assert line + "\n" == hermes.MEMORY_PLUGIN_INIT
    assert line in (hermes.__doc__ or "")


# -- two writers, one new Hermes session ------------------------------------------------------

@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def twin_stores(request: pytest.FixtureRequest,
                tmp_path: Path) -> Iterator[tuple[Store, Store]]:
    """Two connections to one database, as two processes have."""
    if request.param == "sqlite":
        path = str(tmp_path / "refold.db")
        stores = (open_store(path), open_store(path))
        yield stores
    else:
        from refold.store.postgres import PostgresStore

        url = request.getfixturevalue("postgres_url")
        schema = f"t_{uuid.uuid4().hex[:12]}"
        first = PostgresStore(url, schema=schema)
        stores = (first, PostgresStore(url, schema=schema))
        yield stores
        first.drop_schema()
    for store in stores:
        store.close()


def racing(engine: Engine, barrier: threading.Barrier) -> Callable[..., SessionRuntime]:
    """``engine.open_session`` that creates a session only once both writers looked its title
    up and found nothing: the race, every time."""
    real = engine.open_session

    def open_session(ref: str | None = None, **kwargs: Any) -> SessionRuntime:
        if kwargs.get("new"):
            barrier.wait()
        return real(ref, **kwargs)

    return open_session


def test_two_writers_creating_one_hermes_session_at_once_both_store_into_it(
        twin_stores: tuple[Store, Store], monkeypatch: pytest.MonkeyPatch) -> None:
    """The loser of the title (Conflict at creation) opens the winner's session and stores its
    turn there: nothing raised, nothing lost."""
    barrier = threading.Barrier(2, timeout=30)
    engines = [Engine(s, model="gpt-4o-mini", context_length=128_000,
                      background_precompact=False) for s in twin_stores]
    errors: list[str] = []

    def writer(engine: Engine, tag: str) -> None:
        monkeypatch.setattr(engine, "open_session", racing(engine, barrier))
        provider = RefoldMemoryProvider(Backend(engine))
        provider.initialize("sess-1", hermes_home="/unused")
        try:
            provider.sync_turn(f"question from {tag}", f"answer to {tag}", session_id="sess-1")
        except Exception as exc:
            errors.append(f"{tag}: {type(exc).__name__}: {exc}")
        provider.shutdown()

    threads = [threading.Thread(target=writer, args=(e, tag))
               for e, tag in zip(engines, "PQ", strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for engine in engines:
        engine.close()
    assert errors == []
    sessions = twin_stores[0].list_sessions()
    assert [s.title for s in sessions] == ["hermes:sess-1"]
    rows = twin_stores[0].get_messages(sessions[0].id, include_inactive=True)
    assert all(r.active for r in rows)  # neither turn rewound by the other
    assert sorted(str(r.message["content"]) for r in rows) == [
        "answer to P", "answer to Q", "question from P", "question from Q"]


RACER = """
import sys, time
from pathlib import Path
from refold.integrations.hermes import RefoldMemoryProvider
db, tag, gate = sys.argv[1], sys.argv[2], Path(sys.argv[3])
provider = RefoldMemoryProvider(db=db)
provider.initialize("sess-1", hermes_home="/unused")
engine = provider._backend.engine
real = engine.open_session
def open_session(ref=None, **kwargs):
    if kwargs.get("new"):  # both looked the title up: create at the same moment
        (gate / tag).touch()
        deadline = time.time() + 30
        while len(list(gate.iterdir())) < 2 and time.time() < deadline:
            time.sleep(0.005)
    return real(ref, **kwargs)
engine.open_session = open_session
provider.sync_turn(f"question from {tag}", f"answer to {tag}", session_id="sess-1")
provider.shutdown()
print("ok")
"""


def test_two_processes_creating_one_hermes_session_at_once_both_store_into_it(
        tmp_path: Path) -> None:
    """The same race between two processes on one SQLite file (a gateway restarted while the
    old one drains)."""
    db, gate = tmp_path / "refold.db", tmp_path / "gate"
    gate.mkdir()
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    procs = [subprocess.Popen([sys.executable, "-c", RACER, str(db), tag, str(gate)],
                              cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for tag in "PQ"]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0 and out.strip() == "ok", err[-2000:]
    store = open_store(str(db))
    try:
        sessions = store.list_sessions()
        assert [s.title for s in sessions] == ["hermes:sess-1"]
        rows = store.get_messages(sessions[0].id, include_inactive=True)
        assert all(r.active for r in rows)  # neither turn rewound by the other
        assert sorted(str(r.message["content"]) for r in rows) == [
            "answer to P", "answer to Q", "question from P", "question from Q"]
    finally:
        store.close()


# -- recall: the session asking is never recalled to itself -----------------------------------

@pytest.fixture
def backend(make_backend: Callable[[int], Backend]) -> Backend:
    return make_backend(128_000)


def test_turns_handed_over_without_their_history_are_appended(backend: Backend) -> None:
    """``sync_turn`` without ``messages`` (the two processes above; a host that hands over the
    turn alone): each turn goes after what is stored, not read as the whole conversation
    (which rewound the turns before it); a full history afterwards stores only what is new."""
    provider = RefoldMemoryProvider(backend)
    provider.initialize("s", hermes_home="/unused")
    provider.sync_turn("q1", "a1", session_id="s")
    provider.sync_turn("q2", "a2", session_id="s")
    history = [m for n in (1, 2, 3) for m in ({"role": "user", "content": f"q{n}"},
                                              {"role": "assistant", "content": f"a{n}"})]
    provider.sync_turn("q3", "a3", session_id="s", messages=history)
    store = backend.engine.store
    (session,) = store.list_sessions()
    rows = store.get_messages(session.id, include_inactive=True)
    assert [(r.message["content"], r.active) for r in rows] == [
        (c, True) for c in ("q1", "a1", "q2", "a2", "q3", "a3")]


def test_after_a_session_switch_the_new_session_recalls_the_one_left_not_itself(
        backend: Backend) -> None:
    """Hermes' ``/new`` (``on_session_switch(new, parent_session_id=old, reset=True)``, as its
    MemoryManager calls it) makes the new id the current session; the old one is recalled."""
    provider = RefoldMemoryProvider(backend)
    provider.initialize("s1", hermes_home="/unused", platform="cli")
    provider.sync_turn("Our staging database is on port 6543.", "Noted.", session_id="s1")
    provider.on_session_switch("s2", parent_session_id="s1", reset=True, reason="new_session")
    provider.sync_turn("I like port numbers in hex, e.g. 0x1990.", "OK.", session_id="s2")
    for asked in ({"session_id": "s2"}, {}):  # Hermes names the session; a caller may not
        recall = provider.prefetch("port", **asked)
        assert "6543" in recall and "hermes:s1" in recall, recall
        assert "0x1990" not in recall and "hermes:s2" not in recall, recall
    assert provider.session_id == "s2"
    # a compression's rotation: the logical conversation goes on under a third id
    provider.on_session_switch("s3", parent_session_id="s2")
    provider.sync_turn("Which port again?", "6543.", session_id="s3")
    recall = provider.prefetch("port", session_id="s3")
    assert "0x1990" in recall and "6543" in recall and "Which port" not in recall, recall
    provider.shutdown()
    titles = sorted(str(s.title) for s in backend.engine.store.list_sessions())
    assert titles == ["hermes:s1", "hermes:s2", "hermes:s3"]


def test_a_gateway_recalls_each_chats_other_sessions_never_the_chat_itself(
        backend: Backend) -> None:
    """One provider serving two chats: ``prefetch``'s ``session_id`` is the chat asking."""
    provider = RefoldMemoryProvider(backend)
    provider.initialize("chat-A", hermes_home="/unused", platform="telegram")
    provider.sync_turn("My secret project is Bluebird.", "Got it.", session_id="chat-A")
    provider.sync_turn("Project deadline is Friday.", "Got it.", session_id="chat-B")
    for_b = provider.prefetch("project", session_id="chat-B")
    assert "Bluebird" in for_b and "Friday" not in for_b, for_b
    for_a = provider.prefetch("project", session_id="chat-A")
    assert "Friday" in for_a and "Bluebird" not in for_a, for_a
    # a chat stored by an earlier run (no runtime open here) is still the chat asking
    backend.close("chat-B")
    for_b = provider.prefetch("project", session_id="chat-B")
    assert "Bluebird" in for_b and "Friday" not in for_b, for_b
    provider.shutdown()
