"""Each message a Hermes agent said lands in refold's ledger once: across Hermes' own
compressions while the memory provider syncs every turn, and across a resume whose history
Hermes restores from its own database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from refold.integrations.hermes import Backend, RefoldContextEngine, RefoldMemoryProvider
from refold.store import Store

SYSTEM = {"role": "system", "content": "You are Hermes."}

# Hermes' state module imports its top-level ``tools`` package, which refold's tests/tools
# shadows inside pytest: the round trip through its database runs in a child interpreter
RESTORE = """
import json, sys
from pathlib import Path
from hermes_state import SessionDB
live = json.load(open(sys.argv[1]))
db = SessionDB(Path(sys.argv[2]).resolve())
db.create_session("S2", "cli")
for m in live:
    db.append_message("S2", m["role"], content=m.get("content") or None,
                      tool_name=m.get("name"), tool_calls=m.get("tool_calls"),
                      tool_call_id=m.get("tool_call_id"))
print(json.dumps(db.get_messages_as_conversation("S2")))
db.close()
"""


def restored_by_hermes(live: list[dict[str, Any]], tmp: Path) -> list[dict[str, Any]]:
    """``live`` stored in Hermes' own database and read back as a resume reads it."""
    (tmp / "live.json").write_text(json.dumps(live))
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2] / "src"))
    done = subprocess.run([sys.executable, "-c", RESTORE, "live.json", "state.db"], cwd=tmp,
                          env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return list(json.loads(done.stdout.strip().splitlines()[-1]))


def _turn(n: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"Turn {n}: " + "log line ok " * 120},
            {"role": "assistant", "content": f"Answer {n}."}]


def test_turns_synced_after_a_compress_are_stored_once(
        make_backend: Callable[[int], Backend], store: Store) -> None:
    """Hermes calls ``sync_turn`` with its whole history after every turn (which compacts in
    refold past the threshold, a view Hermes never sees) and ``compress`` when it decides to;
    it then carries on with the view ``compress`` returned. The history was rebuilt around
    refold's newest checkpoint instead of the one Hermes holds: it read as an edit, the turns
    since were rewound and stored again at every sync (51 user rows for 34 turns said, 387 for
    62)."""
    backend = make_backend(8000)
    context, memory = RefoldContextEngine(backend), RefoldMemoryProvider(backend)
    context.on_session_start("S1", model="gpt-4o-mini", context_length=8000)
    memory.initialize("S1")
    history: list[dict[str, object]] = [SYSTEM]
    said = 0
    for _ in range(2):
        for _ in range(20):
            history += _turn(said)
            said += 1
            memory.sync_turn("", "", session_id="S1", messages=history)
        history = context.compress([*history, {"role": "user", "content": f"Turn {said}: now"}])
        history.append({"role": "assistant", "content": f"Answer {said}."})
        said += 1
        memory.sync_turn("", "", session_id="S1", messages=history)
    session = backend.runtime("S1").session_id
    users = [str(r.message["content"]).split(":")[0] for r in store.get_messages(session)
             if r.message["role"] == "user"]
    assert len(store.list_checkpoints(session)) >= 2  # both sides compacted
    assert [k for k, v in Counter(users).items() if v > 1] == []
    assert users == [f"Turn {n}" for n in range(said)]
    assert store.list_rewinds(session) == []


def test_a_session_hermes_restores_from_its_database_is_not_stored_again(
        make_backend: Callable[[int], Backend], store: Store, tmp_path: Path) -> None:
    """``hermes --resume`` and the gateway restore a session with Hermes' own
    ``SessionDB.get_messages_as_conversation``: its tool messages come back without ``name``
    (Hermes keeps ``tool_name``). Refold took that for an edit, rewound the conversation from
    the first tool result and stored it again."""
    backend = make_backend(128_000)
    call = {"id": "c1", "type": "function",
            "function": {"name": "terminal", "arguments": '{"command": "ls"}'}}
    live = [SYSTEM, {"role": "user", "content": "list the files"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "name": "terminal", "tool_call_id": "c1", "content": "a.py b.py"},
            {"role": "assistant", "content": "Two files: a.py and b.py."}]
    backend.sync("S2", live)
    restored = restored_by_hermes(live[1:], tmp_path)
    assert [m["role"] for m in restored] == ["user", "assistant", "tool", "assistant"]
    assert "name" not in restored[2]  # what made it look edited
    backend.sync("S2", [SYSTEM, *restored, {"role": "user", "content": "and now?"}])
    session = backend.runtime("S2").session_id
    rows = store.get_messages(session, include_inactive=True)
    assert [r.message.get("content") for r in rows] == [
        "list the files", "", "a.py b.py", "Two files: a.py and b.py.", "and now?"]
    assert all(r.active for r in rows) and store.list_rewinds(session) == []


def test_a_session_that_never_says_anything_leaves_no_session(
        make_backend: Callable[[int], Backend], store: Store) -> None:
    """Hermes forks each session for its background memory review and starts the fork's
    context engine, which never hands over a message: each left an empty ``hermes:<id>``
    session in ``refold sessions list``."""
    backend = make_backend(128_000)
    context = RefoldContextEngine(backend)
    context.on_session_start("review-fork", model="gpt-4o-mini", context_length=128_000)
    context.on_session_end("review-fork", [])
    assert store.list_sessions() == []
    context.on_session_start("S3", model="gpt-4o-mini", context_length=128_000)
    backend.sync("S3", [SYSTEM, {"role": "user", "content": "hello"}])
    assert [s.title for s in store.list_sessions()] == ["hermes:S3"]
