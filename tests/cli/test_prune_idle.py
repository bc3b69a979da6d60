"""``refold sessions prune --older-than N`` deletes idle lineages, ended or not: a chat ends its
session when the user leaves it, and a session with no activity for N days counts as ended
(imported and proxy sessions never end otherwise). A lineage with recent activity is kept
whole, and prune says so."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

from refold.cli.main import cli
from refold.store import Store
from refold.store.sqlite import SQLiteStore
from refold.testing import serve


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in ("REFOLD_HOME", "REFOLD_DB", "REFOLD_UPSTREAM"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path / "home"


def run(home: Path, *args: str, input: str | None = None) -> Result:
    result = CliRunner().invoke(cli, ["--home", str(home), *args], input=input)
    assert result.exit_code == 0, (result.output, result.exception)
    return result


def chat(home: Path, upstream: str, *lines: str) -> Result:
    return run(home, "chat", "--upstream", upstream, "--no-tools",
               input="\n".join(lines) + "\n")


def import_old(home: Path, tmp_path: Path, title: str = "kiwis") -> None:
    """A conversation from 2020 (its messages say when they were said)."""
    path = tmp_path / f"{title}.jsonl"
    path.write_text("\n".join(json.dumps(m) for m in [
        {"role": "user", "content": "old question about kiwis",
         "created_at": "2020-01-01T10:00:00Z"},
        {"role": "assistant", "content": "old answer about kiwis",
         "created_at": "2020-01-01T10:01:00Z"}]) + "\n", encoding="utf-8")
    run(home, "import", str(path), "--title", title)


def ends(home: Path) -> list[tuple[str | None, str | None]]:
    """(title, end reason) of each session, oldest first."""
    store = SQLiteStore(str(home / "refold.db"))
    try:
        return [(s.title, s.end_reason) for s in reversed(store.list_sessions())]
    finally:
        store.close()


def prune_json(home: Path, *args: str) -> Any:
    return json.loads(run(home, "sessions", "prune", *args, "--yes", "--json").output)


def test_chat_ends_its_session_on_quit_end_of_input_and_switching(home: Path) -> None:
    with serve(default=lambda body: "ok") as up:
        chat(home, up.base_url, "hi", "/new second", "hello", "/quit")
        chat(home, up.base_url, "/resume second", "/new third", "/resume second")  # then EOF
    assert ends(home) == [(None, "chat switch"), ("second", "chat exit"),
                          (None, "chat switch"), ("third", "chat switch")]


def test_prune_takes_a_chat_once_the_user_left_it(home: Path) -> None:
    with serve(default=lambda body: "ok") as up:
        chat(home, up.base_url, "hi", "/quit")
    time.sleep(0.01)
    out = prune_json(home, "--older-than", "0")
    assert out["deleted_sessions"] == 1 and out["kept_live"] == []


def test_prune_takes_an_old_session_nothing_ended(home: Path, tmp_path: Path) -> None:
    """An import dated 2020 gave "deleted 0 session(s)": nothing ever ends an import."""
    import_old(home, tmp_path)
    run(home, "import", "-", "--title", "fresh",
        input=json.dumps({"role": "user", "content": "today"}) + "\n")
    result = run(home, "sessions", "prune", "--older-than", "30", "--yes")
    assert result.output.splitlines()[-1] == "deleted 1 session(s)"
    assert [title for title, _ in ends(home)] == ["fresh"]


def test_prune_keeps_an_old_lineage_whose_branch_is_active_and_says_why(
        home: Path, tmp_path: Path) -> None:
    import_old(home, tmp_path)
    run(home, "sessions", "fork", "kiwis", "--title", "kiwis today")
    result = run(home, "sessions", "prune", "--older-than", "30", "--yes")
    assert "deleted 0 session(s)" in result.output
    assert ("kept 1 lineage(s) with sessions idle for more than 30 days as live — 1: a session "
            "in it was active within the last 30 days") in result.output
    assert "keeping: " in result.output and "(kiwis)" in result.output
    out = prune_json(home, "--older-than", "30")
    assert out["deleted_sessions"] == 0 and out["lineages"] == []
    assert [(len(k["sessions"]), k["reason"]) for k in out["kept_live"]] == [(2, "recent")]
    assert [title for title, _ in ends(home)] == ["kiwis", "kiwis today"]


def test_prune_says_when_nothing_is_old_enough(home: Path) -> None:
    run(home, "import", "-", input=json.dumps({"role": "user", "content": "today"}) + "\n")
    result = run(home, "sessions", "prune", "--older-than", "7", "--dry-run")
    assert result.output.splitlines()[-1] == (
        "would delete 0 session(s): no session has been idle for more than 7 days")


def test_an_idle_session_counts_as_ended_and_one_in_use_is_kept(store: Store) -> None:
    from refold.store.lifecycle import prunable_lineages

    idle = store.create_session(title="idle proxy conversation")
    store.append_messages(idle.id, [{"role": "user", "content": "hello"}])
    later = time.time() + 2 * 86400
    assert [[s.id for s in lin.sessions] for lin in prunable_lineages(store, 1, now=later)] \
        == [[idle.id]]
    assert prunable_lineages(store, 3, now=later) == []  # not three days idle
    # in use: not ended, or written to after it ended (a chat resumed), in the last hour
    resumed = store.create_session(title="resumed chat")
    store.end_session(resumed.id, "chat exit")
    time.sleep(0.01)
    store.append_messages(resumed.id, [{"role": "user", "content": "back again"}])
    time.sleep(0.01)
    assert prunable_lineages(store, 0) == []
    store.end_session(resumed.id, "chat exit")
    store.end_session(idle.id, "chat exit")
    time.sleep(0.01)
    assert len(prunable_lineages(store, 0)) == 2
