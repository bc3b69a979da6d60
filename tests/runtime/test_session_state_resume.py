"""A session's task state outlives its runtime: the library's ``prepare(system_prompt=)`` is
recorded, a resumed runtime starts with the recorded system prompt, and a branch or fork
starts with the system prompt and todo list as they were at the fork point."""

from __future__ import annotations

import time
from typing import Any

from click.testing import CliRunner

from refold.runtime import Engine
from refold.store import Store
from refold.tools import agent_tools, load_todos

from ._helpers import WINDOW


def _engine(store: Store) -> Engine:
    return Engine(store, model="gpt-4o-mini", context_length=WINDOW,
                  background_precompact=False)


def _prompts(store: Store, session_id: str) -> list[str]:
    return [e.payload["text"] for e in store.list_events(session_id, "system_prompt")]


def test_a_library_system_prompt_is_recorded_once_and_restored_on_resume(store: Store) -> None:
    with _engine(store) as engine:
        rt = engine.open_session(new=True, title="lib")
        rt.prepare([{"role": "user", "content": "hi"}], system_prompt="Be brief.")
        rt.record({"role": "assistant", "content": "Hello."})
        rt.prepare([{"role": "user", "content": "again"}], system_prompt="Be brief.")
        rt.record({"role": "assistant", "content": "Hi again."})
        session_id = rt.session_id
    assert _prompts(store, session_id) == ["Be brief."]  # recorded when it changes only

    with _engine(store) as engine:
        resumed = engine.open_session("lib")
        prepared = resumed.prepare([{"role": "user", "content": "and now?"}])  # no prompt given
        assert prepared.messages[0] == {"role": "system", "content": "Be brief."}
        assert resumed.context_breakdown()["parts"]["system"] > 0
        resumed.prepare([{"role": "user", "content": "terse?"}], system_prompt="Be terse.")
    assert _prompts(store, session_id) == ["Be brief.", "Be terse."]


def test_a_new_session_has_no_system_prompt_until_one_is_given(store: Store) -> None:
    with _engine(store) as engine:
        rt = engine.open_session(new=True)
        prepared = rt.prepare([{"role": "user", "content": "hi"}])
        assert prepared.messages[0]["role"] == "user"
        assert _prompts(store, rt.session_id) == []


def _session_with_state(store: Store, engine: Engine) -> tuple[str, int]:
    """A session whose prompt and todo list change after message seq ``cut``."""
    rt = engine.open_session(new=True, title="work")
    tools = agent_tools(store, session_id=lambda: rt.session_id)
    history: list[dict[str, Any]] = [{"role": "system", "content": "Prompt one."},
                                     {"role": "user", "content": "start"}]
    tools.call("todo", {"todos": [{"id": "1", "content": "first", "status": "in_progress"}]})
    rt.prepare_history(list(history))
    history.append({"role": "assistant", "content": "started"})
    rt.record(history[-1])
    cut = store.last_message(rt.session_id).seq  # type: ignore[union-attr]
    time.sleep(0.01)  # the later state is recorded strictly after the cut row
    history[0] = {"role": "system", "content": "Prompt two."}
    history.append({"role": "user", "content": "go on"})
    tools.call("todo", {"todos": [{"id": "1", "content": "first", "status": "completed"}]})
    rt.prepare_history(list(history))
    rt.record({"role": "assistant", "content": "done"})
    return rt.session_id, cut


def test_a_branch_starts_with_the_state_at_its_branch_point(store: Store) -> None:
    with _engine(store) as engine:
        parent, cut = _session_with_state(store, engine)
        assert _prompts(store, parent) == ["Prompt one.", "Prompt two."]
        branch = engine.open_session(parent, branch_at=cut, title="alt")
        child = branch.session_id
        assert child != parent
        assert _prompts(store, child) == ["Prompt one."]
        assert [t["status"] for t in load_todos(store, child)] == ["in_progress"]
        prepared = branch.prepare([{"role": "user", "content": "other way"}])
        assert prepared.messages[0] == {"role": "system", "content": "Prompt one."}
        whole = engine.open_session(parent, branch_at=None)  # a plain resume: no fork
        assert whole.session_id == parent


def test_cli_fork_carries_the_state_too(store: Store, tmp_path: Any) -> None:
    from refold.cli.main import cli

    with _engine(store) as engine:
        parent, cut = _session_with_state(store, engine)
    url = getattr(store, "url", None)
    if not isinstance(url, str) or url == ":memory:":
        return  # the CLI opens the store by URL: only file and server stores apply
    runner = CliRunner()
    at = runner.invoke(cli, ["--home", str(tmp_path), "--db", url, "sessions", "fork", parent,
                             "--at", str(cut), "--json"])
    assert at.exit_code == 0, at.output
    whole = runner.invoke(cli, ["--home", str(tmp_path), "--db", url, "sessions", "fork",
                                parent, "--branch", "--json"])
    assert whole.exit_code == 0, whole.output
    import json

    early, late = json.loads(at.output)["id"], json.loads(whole.output)["id"]
    assert _prompts(store, early) == ["Prompt one."]
    assert [t["status"] for t in load_todos(store, early)] == ["in_progress"]
    assert _prompts(store, late) == ["Prompt two."]
    assert [t["status"] for t in load_todos(store, late)] == ["completed"]
