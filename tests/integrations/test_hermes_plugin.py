"""The Hermes-Agent plugin against the real ``hermes-agent`` package: its plugin context and
manager, its memory-plugin loader's context, its base classes, and its own checks of what a
compress returns — over a real agent transcript and both store backends."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from agent.context_engine import ContextEngine
from agent.conversation_compression import _supported_compression_kwargs
from agent.memory_provider import MemoryProvider
from hermes_cli.plugins import PluginContext, PluginManager, PluginManifest
from plugins.memory import _ProviderCollector

from refold.integrations.hermes import (
    Backend,
    RefoldContextEngine,
    RefoldMemoryProvider,
    register,
)
from refold.store import Store

TRANSCRIPT = Path(__file__).parent / "data" / "mini_swe_agent_github_issue.traj.json"

# Hermes' compressor checks import its top-level ``tools`` package, which refold's tests/tools
# shadows inside pytest (tests/ is on sys.path for the root conftest): they run in a child
# interpreter whose path has only refold's src and the venv
HERMES_CHECKS = """
import copy, json, sys
from agent.context_compressor import ContextCompressor
from agent.conversation_compression import _is_real_user_message
out = json.load(open(sys.argv[1]))
sanitizer = ContextCompressor.__new__(ContextCompressor)
print(json.dumps({"real_user": any(_is_real_user_message(m) for m in out),
                  "sanitized_unchanged": sanitizer._sanitize_tool_pairs(copy.deepcopy(out)) == out}))
"""


def hermes_checks(out: list[dict[str, Any]], tmp: Path) -> dict[str, bool]:
    path = tmp / "compressed.json"
    path.write_text(json.dumps(out))
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2] / "src"))
    done = subprocess.run([sys.executable, "-c", HERMES_CHECKS, str(path)], cwd=tmp, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


@pytest.fixture
def backend(make_backend: Callable[[int], Backend]) -> Backend:
    return make_backend(2_000)


def transcript() -> list[dict[str, Any]]:
    return json.loads(TRANSCRIPT.read_text())


def ledger(store: Store) -> list[dict[str, Any]]:
    sessions = store.list_sessions()
    assert len(sessions) == 1, [s.title for s in sessions]
    return [r.message for r in store.get_messages(sessions[0].id)]


def test_register_with_hermes_plugin_context_and_memory_loader() -> None:
    manager = PluginManager()
    ctx = PluginContext(PluginManifest(name="refold", source="entrypoint"), manager)
    register(ctx)
    engine = manager._context_engine
    assert isinstance(engine, ContextEngine) and isinstance(engine, RefoldContextEngine)
    assert engine.name == "refold"
    collector = _ProviderCollector()
    register(collector)
    assert isinstance(collector.provider, MemoryProvider)
    assert collector.provider.name == "refold" and collector.provider.is_available()


def test_compress_a_real_transcript_as_hermes_does(backend: Backend, store: Store,
                                                  tmp_path: Path) -> None:
    engine = RefoldContextEngine(backend)
    engine.on_session_start("cli-1", platform="cli")
    messages = transcript()
    engine.update_from_response({"prompt_tokens": 2_400, "completion_tokens": 50,
                                 "total_tokens": 2_450})
    assert engine.should_compress() and engine.threshold_tokens < 2_400
    before = copy.deepcopy(messages)
    kwargs = _supported_compression_kwargs(engine.compress, current_tokens=2_400,
                                           focus_topic=None, force=False, memory_context="")
    out = engine.compress(messages, **kwargs)
    # what Hermes' compress_context checks: not empty, progress made, the input untouched,
    # a real user turn left, no orphaned tool pairs (its own sanitizer changes nothing)
    assert out and out != before and messages == before
    assert out[0] == messages[0]  # Hermes' system message first, as it was
    assert hermes_checks(out, tmp_path) == {"real_user": True, "sanitized_unchanged": True}
    ops = backend.engine.ops
    assert ops.count(out, None) < ops.count(messages, None)
    assert out[-1] == messages[-1]  # the newest turn kept verbatim
    assert all(not any(k.startswith("_") for k in m) for m in out)
    assert engine.compression_count == 1
    # the ledger holds the whole conversation, once
    assert [m["content"] for m in ledger(store)] == [m["content"] for m in messages[1:]]

    # Hermes goes on with the compressed list: the next turn and its sync store only the new
    later = [*out, {"role": "assistant", "content": "THOUGHT: done.\n\n```mswea_bash_command\n"
                                                    "echo COMPLETE\n```"},
             {"role": "user", "content": "Thanks, that fixed it."}]
    RefoldMemoryProvider(backend).sync_turn("", "", session_id="cli-1", messages=later)
    stored = ledger(store)
    assert len(stored) == len(messages) - 1 + 2
    assert stored[-1]["content"] == "Thanks, that fixed it."
    engine.on_session_end("cli-1", later)  # the same history again: nothing new
    assert len(ledger(store)) == len(stored)


def test_session_search_tool_and_cross_session_recall(backend: Backend, store: Store) -> None:
    engine = RefoldContextEngine(backend)
    engine.on_session_start("old")
    engine.on_session_end("old", [
        {"role": "system", "content": "You are helpful."},
        {"role": "user", "content": "Our staging database is on port 6543."},
        {"role": "assistant", "content": "Noted: staging uses port 6543."}])
    engine.on_session_start("new")
    provider = RefoldMemoryProvider(backend)
    provider.initialize("new", hermes_home="/unused", platform="cli")
    provider.sync_turn("Which port does staging use?", "Let me check.", session_id="new")
    recall = provider.prefetch("staging port")
    assert "6543" in recall and "hermes:old" in recall
    assert "Which port" not in recall  # the current session is not recalled to itself
    schemas = engine.get_tool_schemas()
    assert [s["name"] for s in schemas] == ["session_search"]
    assert set(schemas[0]["parameters"]["properties"]) >= {"query"}
    result = json.loads(engine.handle_tool_call("session_search", {"query": "staging port"}))
    assert "6543" in json.dumps(result)
    assert "error" in json.loads(engine.handle_tool_call("nope", {}))


DISCOVERY = """
import json, sys
sys.path.insert(0, sys.argv[1])
from hermes_cli.plugins import PluginContext, PluginManager
manager = PluginManager()
found = [m for m in manager._scan_entry_points() if m.name == "refold"]
module = manager._load_entrypoint_module(found[0])
module.register(PluginContext(found[0], manager))
print(json.dumps({"found": len(found), "engine": manager._context_engine.name}))
"""


def test_hermes_discovers_the_entry_point_declared_in_pyproject(tmp_path: Path) -> None:
    """What an install puts in the metadata (the pyproject's entry point, as a dist-info in a
    throwaway directory), found and loaded by Hermes' own plugin manager."""
    import tomllib

    project = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text())
    points = project["project"]["entry-points"]["hermes_agent.plugins"]
    assert points == {"refold": "refold.integrations.hermes"}
    dist = tmp_path / "site" / "refold_probe-0.0.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: refold-probe\nVersion: 0.0\n")
    (dist / "entry_points.txt").write_text(
        "[hermes_agent.plugins]\n" + "".join(f"{k} = {v}\n" for k, v in points.items()))
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).parents[2] / "src"),
               HERMES_HOME=str(tmp_path / "hermes"))
    done = subprocess.run([sys.executable, "-c", DISCOVERY, str(tmp_path / "site")],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    # the probe's entry point, plus refold's own where it is installed with its metadata (CI)
    assert result["found"] >= 1 and result["engine"] == "refold", result
