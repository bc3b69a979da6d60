"""Consolidation (issue 13 item 7): near-duplicates by normalised-token similarity, last-used
times on both backends, and ``memory stats`` saying when consolidation would help."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from refold.cli.main import cli
from refold.llm import HttpChatClient
from refold.memory import DBMemoryStore, MemoryStore, MemoryWriter, open_file_store
from refold.memory.review import MemoryReviewer
from refold.memory.similarity import duplicate_pairs, near_duplicate
from refold.store import Store
from refold.testing import ScriptedReply, serve

DAY = 86_400.0

SAME = [
    ("Prefers pytest -q over verbose output.", "Prefers `pytest -q` (quiet) output"),
    ("Uses pnpm for installs", "Always uses pnpm to install packages"),
    ("The staging database listens on port 5433.", "Staging database listens on port 5433"),
    ("用户喜欢简短的回答", "用户喜欢简短回答"),
    # the demo's background review saved this beside the agent's own entry: the framing words
    # ("for the future", "our", "so", "here") made the two look different
    ("For the future: our CI runs with -W error, so deprecation warnings are failures here.",
     "acme-billing: CI runs pytest with -W error — deprecation warnings fail the build."),
]
DIFFERENT = [
    ("Prefers tabs over spaces.", "Prefers pytest -q output"),
    ("Use pnpm, not npm (user correction)", "Use npm, not yarn (user correction)"),
    ("Staging is wiped every Sunday.", "Production is backed up every Sunday."),
    ("The staging database listens on port 5433.",
     "The production database listens on port 5432."),
    ("用户喜欢深色主题", "用户喜欢简短的回答"),
    ("Prefers pytest -q", "Uses pytest-xdist for parallel tests"),
    ("Name: Alice", "Works at Acme"),
    ("Staging is on port 5433", "Staging uses port 5434"),  # another number: another fact
    ("Retries 3 times with backoff", "Retries 5 times with backoff"),
]


@pytest.mark.parametrize(("a", "b"), SAME)
def test_near_duplicates_match(a: str, b: str) -> None:
    assert near_duplicate(a, [b]) == b and near_duplicate(b, [a]) == a


@pytest.mark.parametrize(("a", "b"), DIFFERENT)
def test_unrelated_entries_do_not_match(a: str, b: str) -> None:
    assert near_duplicate(a, [b]) is None and near_duplicate(b, [a]) is None


def test_repeating_one_clause_of_an_entry_is_a_duplicate_but_saying_more_is_not() -> None:
    """The demo's agent saved "Prefers `pytest -q` (quiet) output; wants minimal diffs." and
    its background review then added "Prefers pytest -q over verbose output." beside it."""
    entry = "Prefers `pytest -q` (quiet) output; wants minimal diffs."
    assert near_duplicate("Prefers pytest -q over verbose output.", [entry]) == entry
    assert near_duplicate("Wants minimal diffs", [entry]) == entry
    # the candidate holds a fact the entry lacks: it is not a repeat of it
    assert near_duplicate(entry, ["Prefers pytest -q over verbose output."]) is None
    assert near_duplicate("Wants minimal diffs and signed commits", [entry]) is None
    # one clause with the same words but another number is another fact
    assert near_duplicate("Staging port is 5433", ["Staging on port 5433; prod on 5432"]) \
        == "Staging on port 5433; prod on 5432"
    assert near_duplicate("Staging port is 5434", ["Staging on port 5433; prod on 5432"]) is None


def test_duplicate_pairs_finds_only_the_pair() -> None:
    texts = ["Prefers pytest -q over verbose output.", "Name: Alice",
             "Prefers `pytest -q` (quiet) output", "Staging is wiped every Sunday."]
    assert duplicate_pairs(texts) == [(0, 2)]


def test_llm_review_add_of_a_near_duplicate_is_refused_with_a_merge_hint(
        tmp_path: Path) -> None:
    writer = MemoryWriter(open_file_store(tmp_path))
    writer.store.add("user", "Prefers `pytest -q` (quiet) output")
    add = {"id": "a", "type": "function", "function": {"name": "memory", "arguments": json.dumps(
        {"action": "add", "target": "user", "content": "Prefers pytest -q over verbose output."})}}
    with serve([ScriptedReply(content=None, tool_calls=[add]), "done"]) as server:
        chat = HttpChatClient(server.base_url)
        report = MemoryReviewer(writer, chat=chat, model="m").flush(
            [{"role": "user", "content": "I prefer pytest -q over verbose output."}])
        chat.close()
        answer = next(m for m in server.llm.requests[1]["messages"] if m["role"] == "tool")
    assert [e.text for e in writer.store.read("user").entries] == [
        "Prefers `pytest -q` (quiet) output"]
    assert report.duplicates and not report.saved
    assert "near-duplicate" in answer["content"] and "replace" in answer["content"]


# -- last-used times on both backends ----------------------------------------------------------

@pytest.fixture(params=["file", "db"])
def memory(request: pytest.FixtureRequest, tmp_path: Path, store: Store) -> MemoryStore:
    if request.param == "file":
        return open_file_store(tmp_path / "memories")
    return DBMemoryStore(store, "p")


def test_mark_used_stamps_only_the_named_entries(memory: MemoryStore) -> None:
    memory.add("memory", "first fact")
    memory.add("memory", "second fact")
    text_before = [(e.text, e.updated_at) for e in memory.read("memory").entries]
    assert memory.mark_used("memory", ["second fact", "not stored"], now=1234.5) == 1
    entries = memory.read("memory").entries
    assert [(e.text, e.updated_at) for e in entries] == text_before  # nothing else changed
    assert [e.last_used_at for e in entries] == [0.0, 1234.5]
    memory.replace("memory", "second", "second fact, reworded")
    assert memory.read("memory").entries[1].last_used_at == 1234.5  # kept by a replace


def test_stats_flag_duplicates_stale_entries_and_the_limit(memory: MemoryStore) -> None:
    memory.clock = lambda: 100 * DAY
    memory.add("user", "Prefers `pytest -q` (quiet) output")
    memory.add("user", "Prefers pytest -q over verbose output.")
    memory.add("memory", "Staging is wiped every Sunday.")
    memory.mark_used("memory", ["Staging is wiped every Sunday."], now=50 * DAY)
    stats = memory.stats(stale_days=30)
    user, notes = stats["user"], stats["memory"]
    assert len(user["duplicates"]) == 1 and user["consolidate"]
    assert any("near-duplicate" in line for line in user["advice"])
    assert user["stale"] == [] and user["never_used"] == 2  # new, never used: not stale yet
    assert notes["stale"] and not notes["duplicates"] and not notes["consolidate"]
    assert notes["last_used_at"] == 50 * DAY


def test_stats_say_consolidation_helps_near_the_limit(tmp_path: Path) -> None:
    memory = open_file_store(tmp_path, limits={"memory": 100})
    memory.add("memory", "x" * 45)
    memory.add("memory", "Deploys freeze on Fridays.")
    memory.add("memory", "CI: Node 20")  # 45 + 3 + 26 + 3 + 11 = 88 of 100 characters
    stats = memory.stats()["memory"]
    assert stats["percent"] >= 80 and stats["consolidate"] and not stats["duplicates"]
    assert any("limit" in line for line in stats["advice"])


def test_old_sidecars_without_last_used_still_load(tmp_path: Path) -> None:
    memory = open_file_store(tmp_path)
    memory.add("memory", "a fact")
    meta_path = tmp_path / ".MEMORY.md.meta.json"
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    meta["entries"] = {k: v[:2] for k, v in meta["entries"].items()}  # the old two-stamp form
    meta_path.write_text(json.dumps(meta), encoding="utf-8")
    (entry,) = memory.read("memory").entries
    assert entry.text == "a fact" and entry.last_used_at == 0.0 and not memory.read(
        "memory").drift


def test_cli_stats_reports_consolidation(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("REFOLD_HOME", "REFOLD_DB", "REFOLD_MEMORY_APPROVAL"):
        monkeypatch.delenv(name, raising=False)
    home = tmp_path / "home"

    def run(*args: str) -> Any:
        result = CliRunner().invoke(cli, ["--home", str(home), "memory", *args])
        assert result.exit_code == 0, (result.output, result.exception)
        return result.output

    run("add", "-t", "user", "Prefers `pytest -q` (quiet) output")
    run("add", "-t", "user", "Prefers pytest -q over verbose output.")
    human = run("stats")
    assert "1 near-duplicate pair(s)" in human and "consolidation would help" in human
    data = json.loads(run("stats", "--json", "--stale-days", "0"))
    assert data["user"]["consolidate"] and len(data["user"]["stale"]) == 2
    assert data["memory"]["entries"] == 0 and not data["memory"]["consolidate"]
    bad = CliRunner().invoke(cli, ["--home", str(home), "memory", "stats", "--stale-days", "-1"])
    assert bad.exit_code == 2 and "Traceback" not in bad.output
