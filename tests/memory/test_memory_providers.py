"""Providers and the manager: frozen block, one external provider, routing, isolation,
background worker, shutdown order, entry-point loading."""

from __future__ import annotations

import json
import logging
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from refold.errors import InvalidInput, NotFound
from refold.memory import open_file_store
from refold.memory.manager import MemoryManager
from refold.memory.provider import (
    BuiltinMemoryProvider,
    MemoryProvider,
    available_providers,
    load_provider,
)
from refold.testing.memory import FailingProvider, RecordingProvider, in_memory_store


class RecordingBuiltin(BuiltinMemoryProvider):
    def __init__(self, *args: Any, log: list[str], **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.log = log

    def shutdown(self) -> None:
        self.log.append("builtin.shutdown")


@pytest.fixture
def builtin(tmp_path: Path) -> BuiltinMemoryProvider:
    store = open_file_store(tmp_path)
    store.add("memory", "repo uses pnpm")
    return BuiltinMemoryProvider(store)


def test_protocol_is_implemented() -> None:
    assert isinstance(RecordingProvider(), MemoryProvider)
    assert isinstance(BuiltinMemoryProvider(in_memory_store()), MemoryProvider)


def test_builtin_block_is_frozen_while_the_tool_writes(builtin: BuiltinMemoryProvider) -> None:
    manager = MemoryManager(builtin)
    block = manager.system_prompt_block()
    assert "repo uses pnpm" in block
    result = json.loads(manager.handle_tool_call("memory", {"action": "add", "target": "memory",
                                                            "content": "CI is GitHub Actions"}))
    assert result["success"]
    assert manager.system_prompt_block() == block and builtin.system_prompt_block() in block
    assert "CI is GitHub Actions" in BuiltinMemoryProvider(builtin.store).system_prompt_block()
    manager.shutdown()


def test_second_external_provider_is_refused(builtin: BuiltinMemoryProvider) -> None:
    manager = MemoryManager(builtin)
    manager.add_provider(RecordingProvider("honcho"))
    with pytest.raises(InvalidInput, match="'honcho' is active, 'mem0' was refused"):
        manager.add_provider(RecordingProvider("mem0"))
    assert [p.name for p in manager.providers] == ["builtin", "honcho"]
    manager.shutdown()


def test_blocks_merge_and_tools_route_first_wins(builtin: BuiltinMemoryProvider,
                                                 caplog: pytest.LogCaptureFixture) -> None:
    manager = MemoryManager(builtin)
    with caplog.at_level(logging.WARNING):
        manager.add_provider(RecordingProvider("ext", tools=("memory", "recall")))
    assert "already provides it" in caplog.text
    block = manager.system_prompt_block()
    assert block.index("<env_memory>") < block.index("<ext>external memory</ext>")
    assert [s["function"]["name"] for s in manager.tool_schemas()] == ["memory", "recall"]
    assert json.loads(manager.handle_tool_call("recall", "{}"))["provider"] == "ext"
    memory = json.loads(manager.handle_tool_call("memory", {"action": "read", "target": "user"}))
    assert memory["success"] and "entries" in memory  # the builtin answered
    assert not json.loads(manager.handle_tool_call("nope", "{}"))["success"]
    manager.shutdown()


def test_failing_provider_is_isolated(builtin: BuiltinMemoryProvider,
                                     caplog: pytest.LogCaptureFixture) -> None:
    manager = MemoryManager(builtin)
    broken = FailingProvider("flaky")
    with caplog.at_level(logging.WARNING):
        manager.add_provider(broken)
        block = manager.system_prompt_block()
        assert "repo uses pnpm" in block
        answer = json.loads(manager.handle_tool_call("recall", "{}"))
        assert not answer["success"]  # its tool_schemas failed: it offers no tools
        manager.sync_turn([{"role": "user", "content": "hi"}])
        manager.queue_prefetch("pnpm")
        manager.flush()
        assert manager.take_prefetched() == ""
        assert manager.on_pre_compress([]) == ""
        manager.on_session_end()
        manager.shutdown()
    assert "memory provider flaky failed in system_prompt_block" in caplog.text
    assert "flaky is down" not in caplog.text  # the detail stays at DEBUG


def test_sync_and_prefetch_run_on_the_worker(builtin: BuiltinMemoryProvider) -> None:
    manager = MemoryManager(builtin)
    ext = RecordingProvider("ext")
    manager.add_provider(ext)
    manager.sync_turn([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}])
    manager.queue_prefetch("deploy")
    manager.flush()
    assert ext.sync_threads == ["refold-memory"]
    assert ext.calls == ["ext.sync_turn:2", "ext.prefetch"]
    assert manager.take_prefetched() == "ext recalls deploy"
    assert manager.take_prefetched() == ""
    assert manager.on_pre_compress([]) == "ext keeps a note"
    manager.shutdown()


def test_shutdown_in_reverse_order(tmp_path: Path) -> None:
    calls: list[str] = []
    manager = MemoryManager(RecordingBuiltin(open_file_store(tmp_path), log=calls))
    manager.add_provider(RecordingProvider("ext", calls=calls))
    manager.on_session_end()
    manager.shutdown()
    assert calls == ["ext.on_session_end", "ext.shutdown", "builtin.shutdown"]


PROVIDER_MODULE = '''
import json

class EchoProvider:
    def __init__(self, prefix="echo"):
        self.name = "echo"
        self.prefix = prefix
    def system_prompt_block(self): return f"<echo>{self.prefix}</echo>"
    def prefetch(self, query): return f"{self.prefix}:{query}"
    def sync_turn(self, messages): pass
    def on_pre_compress(self, messages): return ""
    def on_session_end(self): pass
    def tool_schemas(self): return []
    def handle_tool_call(self, name, arguments): return json.dumps({"success": False})
    def shutdown(self): pass

def not_a_provider(**config):
    return object()
'''


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    site = tmp_path / "site"
    dist = site / "refold_echo-0.1.dist-info"
    dist.mkdir(parents=True)
    (site / "refold_echo_provider.py").write_text(PROVIDER_MODULE, encoding="utf-8")
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: refold-echo\nVersion: 0.1\n",
                                   encoding="utf-8")
    (dist / "entry_points.txt").write_text(
        "[refold.memory_providers]\necho = refold_echo_provider:EchoProvider\n"
        "bogus = refold_echo_provider:not_a_provider\n"
        "missing = refold_echo_provider_gone:Nothing\n", encoding="utf-8")
    monkeypatch.syspath_prepend(str(site))
    yield site
    sys.modules.pop("refold_echo_provider", None)


def test_providers_load_through_entry_points(installed: Path, builtin: BuiltinMemoryProvider) -> None:
    assert {"echo", "bogus", "missing"} <= set(available_providers())
    provider = load_provider("echo", prefix="hello")
    assert provider.system_prompt_block() == "<echo>hello</echo>"
    manager = MemoryManager(builtin)
    manager.add_provider(provider)
    assert "<echo>hello</echo>" in manager.system_prompt_block()
    manager.shutdown()


def test_entry_point_errors_are_clear(installed: Path) -> None:
    with pytest.raises(NotFound, match="no memory provider named 'zzz'"):
        load_provider("zzz")
    with pytest.raises(InvalidInput, match="does not implement MemoryProvider"):
        load_provider("bogus")
    with pytest.raises(InvalidInput, match="failed to load"):
        load_provider("missing")


def test_shutdown_is_idempotent(tmp_path: Path) -> None:
    calls: list[str] = []
    manager = MemoryManager(RecordingBuiltin(open_file_store(tmp_path), log=calls))
    manager.shutdown()
    manager.shutdown()
    assert calls == ["builtin.shutdown"]


def test_a_provider_declaring_sync_inline_syncs_in_place(builtin: BuiltinMemoryProvider) -> None:
    """``sync_inline`` (the builtin's cheap budget reset): called on the caller's thread, done
    when ``sync_turn`` returns; a provider without it goes to the worker (test above)."""
    manager = MemoryManager(builtin)
    inline = RecordingProvider("inline")
    inline.sync_inline = True  # type: ignore[attr-defined]
    manager.add_provider(inline)
    builtin.tool.failures = 3
    manager.sync_turn([{"role": "user", "content": "a"}])
    assert inline.sync_threads == [threading.current_thread().name]  # done already, here
    assert builtin.tool.failures == 0  # the builtin's budget was reset in place too
    manager.shutdown()
