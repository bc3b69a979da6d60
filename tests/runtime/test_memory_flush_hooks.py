"""Memory flush through the runtime (issue 13 item 7): a checkpoint commit and a session's end
queue a review of the rows not flushed yet; the watermark is a durable event; a span a dead
process compacted is flushed when the session is opened again; entries a used snapshot showed
get a last-used time."""

from __future__ import annotations

import time
from pathlib import Path

from refold.compaction import CompactionPolicy
from refold.llm import HttpChatClient
from refold.memory import open_file_store
from refold.runtime import Engine, SessionRuntime
from refold.runtime.memory_flush import EVENT
from refold.runtime.memory_link import MemoryLink
from refold.store import Store
from refold.testing import ScriptedReply, serve

from ._helpers import WINDOW, answer, tool_turn

SYSTEM = "You are a test agent."
SHORT = ["Remember that the staging database listens on port 5433.",
         "记住：发布在周五冻结。", "Run the migrations, thanks."]


def _texts(memories: Path) -> str:
    return "".join(p.read_text(encoding="utf-8") for p in memories.glob("*.md"))


def _flushes(store: Store, session_id: str) -> list[dict[str, object]]:
    return [e.payload for e in store.list_events(session_id, EVENT)]


def _wait_for(check, seconds: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + seconds
    while not check():
        assert time.monotonic() < deadline, "condition never reached"
        time.sleep(0.01)


def _talk(rt: SessionRuntime, lines: list[str]) -> None:
    for text in lines:
        rt.prepare([{"role": "user", "content": text}], system_prompt=SYSTEM)
        rt.record({"role": "assistant", "content": "ok"})


def test_a_three_turn_session_is_flushed_when_it_closes(store: Store, tmp_path: Path) -> None:
    memories = tmp_path / "memories"
    engine = Engine(store, model="gpt-4o-mini", context_length=32_000, memory_dir=memories)
    rt = engine.open_session(new=True)
    _talk(rt, SHORT)
    assert "5433" not in _texts(memories)  # 3 turns: no background review ran
    rt.close()  # the library's session end
    _wait_for(lambda: bool(_flushes(store, rt.session_id)))
    engine.close()
    saved = _texts(memories)
    assert "port 5433" in saved and "发布在周五冻结" in saved, saved
    (flush,) = _flushes(store, rt.session_id)
    assert flush["reason"] == "session_end" and flush["through_seq"] == 6
    assert flush["saved"] == 2 and flush["mode"] == "extractor"
    assert store.get_session(rt.session_id).message_count == 6  # the ledger is untouched


def test_engine_close_flushes_open_sessions_like_chat_exit(store: Store, tmp_path: Path) -> None:
    memories = tmp_path / "memories"
    with Engine(store, model="gpt-4o-mini", context_length=32_000,
                memory_dir=memories) as engine:
        rt = engine.open_session(new=True)
        _talk(rt, SHORT[:1])
    assert "port 5433" in _texts(memories)  # `refold chat` closes its engine on exit
    assert [f["reason"] for f in _flushes(store, rt.session_id)] == ["session_end"]


def test_a_checkpoint_flushes_the_span_it_replaces(store: Store, tmp_path: Path) -> None:
    memories = tmp_path / "memories"
    engine = Engine(store, model="gpt-4o-mini", context_length=WINDOW, memory_dir=memories,
                    background_precompact=False)
    rt = engine.open_session(new=True)
    _talk(rt, ["Remember that CI runs on Node 20."])
    i = 0
    while not store.list_checkpoints(rt.session_id):
        assert i < 200
        rt.prepare(tool_turn(i, size=100), system_prompt=SYSTEM)
        rt.record(answer(i))
        i += 1
    _wait_for(lambda: bool(_flushes(store, rt.session_id)))
    assert "CI runs on Node 20" in _texts(memories)  # before the session ends
    (flush,) = _flushes(store, rt.session_id)
    checkpoint = store.latest_checkpoint(rt.session_id)
    assert checkpoint is not None
    assert flush["reason"] == "compaction"
    assert int(str(flush["through_seq"])) == checkpoint.tail_start_seq - 1
    rt.close()
    engine.close()
    reasons = [f["reason"] for f in _flushes(store, rt.session_id)]
    assert reasons == ["compaction", "session_end"]  # the end covers only the rest
    assert _texts(memories).count("CI runs on Node 20") == 1


def test_stage_mode_stages_once_and_writes_nothing(store: Store, tmp_path: Path) -> None:
    memory = MemoryLink.for_store(open_file_store(tmp_path / "memories"), approval="stage")
    engine = Engine(store, model="gpt-4o-mini", context_length=32_000, memory=memory)
    rt = engine.open_session(new=True)
    _talk(rt, SHORT[:1])
    rt.close()
    again = engine.open_session(rt.session_id)  # resumed: the same fact said again
    _talk(again, SHORT[:1])
    again.close()
    engine.close()
    writer = memory.manager.builtin.writer
    assert not writer.store.read("memory").entries
    pending = [p.summary for p in writer.pending()]
    assert len(pending) == 1 and "5433" in pending[0], pending


def test_a_span_compacted_by_a_dead_process_is_flushed_on_open(store: Store,
                                                               tmp_path: Path) -> None:
    dead = Engine(store, model="gpt-4o-mini", context_length=WINDOW)  # no memory: no flush
    rt = dead.open_session(new=True)
    _talk(rt, ["Remember that the VPN drops at midnight."])
    i = 0
    while not store.list_checkpoints(rt.session_id):
        assert i < 200
        rt.prepare(tool_turn(i, size=100), system_prompt=SYSTEM)
        rt.record(answer(i))
        i += 1
    dead.close()
    memories = tmp_path / "memories"
    engine = Engine(store, model="gpt-4o-mini", context_length=WINDOW, memory_dir=memories)
    engine.open_session(rt.session_id)
    _wait_for(lambda: bool(_flushes(store, rt.session_id)))
    assert "VPN drops at midnight" in _texts(memories)
    assert _flushes(store, rt.session_id)[0]["reason"] == "recovery"
    engine.close()


def test_rotation_flushes_the_parent_and_never_rereads_the_carried_rows(
        store: Store, tmp_path: Path) -> None:
    memories = tmp_path / "memories"
    engine = Engine(store, model="gpt-4o-mini", context_length=WINDOW, memory_dir=memories,
                    background_precompact=False,
                    policy=CompactionPolicy(rotate_on_compaction=True))
    rt = engine.open_session(new=True)
    parent = rt.session_id
    _talk(rt, ["Remember that the cache is Redis 7."])
    i = 0
    while rt.session_id == parent:
        assert i < 200
        rt.prepare(tool_turn(i, size=100), system_prompt=SYSTEM)
        rt.record(answer(i))
        i += 1
    _wait_for(lambda: bool(_flushes(store, parent)))
    assert "cache is Redis 7" in _texts(memories)
    assert _flushes(store, parent)[0]["through_seq"] == store.last_message(parent).seq
    rt.close()
    engine.close()
    child = _flushes(store, rt.session_id)
    assert all(int(str(f["saved"])) == 0 and int(str(f["duplicates"])) == 0 for f in child)


def test_an_llm_reviewer_flushes_over_a_real_socket(store: Store, tmp_path: Path) -> None:
    call = {"id": "c1", "type": "function", "function": {
        "name": "memory",
        "arguments": '{"action": "add", "target": "memory", "content": "Staging DB: port 5433"}'}}
    with serve([ScriptedReply(content=None, tool_calls=[call]),
                ScriptedReply(content="saved")]) as server:
        chat = HttpChatClient(server.base_url)
        memory = MemoryLink.for_store(open_file_store(tmp_path / "memories"), chat_client=chat)
        engine = Engine(store, model="gpt-4o-mini", context_length=32_000, memory=memory)
        rt = engine.open_session(new=True)
        _talk(rt, SHORT[:1])
        rt.close()
        engine.close()
        review = server.llm.requests[0]
    assert "port 5433" in review["messages"][-1]["content"]  # the span was sent
    assert [t["function"]["name"] for t in review["tools"]] == ["memory"]
    assert "Staging DB: port 5433" in _texts(tmp_path / "memories")
    (flush,) = _flushes(store, rt.session_id)
    assert flush["mode"] == "llm" and flush["saved"] == 1


def test_a_used_snapshot_stamps_its_entries_last_used(store: Store, tmp_path: Path) -> None:
    memories = tmp_path / "memories"
    files = open_file_store(memories)
    files.add("memory", "The staging DB listens on 5433.")
    assert files.read("memory").entries[0].last_used_at == 0.0
    before = time.time()
    with Engine(store, model="gpt-4o-mini", context_length=32_000,
                memory_dir=memories) as engine:
        rt = engine.open_session(new=True)
        rt.prepare([{"role": "user", "content": "hi"}], system_prompt=SYSTEM)
        assert files.read("memory").entries[0].last_used_at == 0.0  # not used until a turn
        rt.record({"role": "assistant", "content": "hello"})
    (entry,) = files.read("memory").entries
    assert entry.last_used_at >= before and entry.updated_at < before


def test_a_runtime_dropped_without_close_is_flushed_when_the_engine_closes(
        store: Store, tmp_path: Path) -> None:
    import gc

    memories = tmp_path / "memories"
    engine = Engine(store, model="gpt-4o-mini", context_length=32_000, memory_dir=memories)
    rt = engine.open_session(new=True)
    session_id = rt.session_id
    _talk(rt, ["Remember that logs rotate hourly."])
    del rt  # like a runtime the proxy evicted while a request still held it
    gc.collect()
    assert "rotate hourly" not in _texts(memories)
    engine.close()
    assert "Logs rotate hourly." in _texts(memories)
    assert [f["reason"] for f in _flushes(store, session_id)] == ["session_end"]
