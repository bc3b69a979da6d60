"""Memory flush and consolidation (issue 13): a short session saying "Remember that …" is
flushed to memory; near-duplicates are flagged instead of added."""

from __future__ import annotations

from pathlib import Path

from refold.memory import MemoryWriter, open_file_store
from refold.memory.review import MemoryReviewer, near_duplicate

SESSION = [
    {"role": "user", "content": "Remember that the staging database listens on port 5433."},
    {"role": "assistant", "content": "Noted."},
    {"role": "user", "content": "Run the migrations."},
    {"role": "assistant", "content": "Done."},
    {"role": "user", "content": "Thanks, bye."},
]


def test_flush_saves_a_short_session_before_it_ends(tmp_path: Path) -> None:
    writer = MemoryWriter(open_file_store(tmp_path))
    reviewer = MemoryReviewer(writer)  # 3 turns: far below the background threshold
    for i in range(3):
        assert reviewer.note_turn(SESSION[: 2 * i + 1]) is None
    report = reviewer.flush(SESSION)
    texts = [e.text for e in writer.store.read("memory").entries]
    assert any("port 5433" in t for t in texts), (texts, report)


def test_flush_respects_the_approval_mode(tmp_path: Path) -> None:
    writer = MemoryWriter(open_file_store(tmp_path), mode="stage")
    report = MemoryReviewer(writer).flush(SESSION)
    assert report.staged and not writer.store.read("memory").entries


def test_near_duplicates_are_flagged_not_added(tmp_path: Path) -> None:
    assert near_duplicate("Prefers pytest -q over verbose output.",
                          ["Prefers `pytest -q` (quiet) output"]) is not None
    assert near_duplicate("Prefers tabs over spaces.", ["Prefers pytest -q output"]) is None
    writer = MemoryWriter(open_file_store(tmp_path))
    reviewer = MemoryReviewer(writer)
    reviewer.flush([{"role": "user", "content": "I prefer pytest -q over verbose output."}])
    again = reviewer.flush([{"role": "user", "content": "I prefer `pytest -q` (quiet) output."}])
    assert len(writer.store.read("user").entries) == 1
    assert again.duplicates and not again.saved


def test_different_facts_are_not_duplicates() -> None:
    assert near_duplicate("Use pnpm, not npm (user correction)",
                          ["Use npm, not yarn (user correction)"]) is None
    assert near_duplicate("Staging is wiped every Sunday.",
                          ["Production is backed up every Sunday."]) is None


def test_a_dot_inside_a_name_does_not_end_the_sentence() -> None:
    from refold.memory.review import extract_candidates

    said = ("Remember that the demo server is demo.internal:8443. Also remember: config lives "
            "in settings.toml. I prefer Node 20.1 over 18.")
    found = [c.content for c in extract_candidates([{"role": "user", "content": said}])]
    assert found == ["The demo server is demo.internal:8443.",
                     "Config lives in settings.toml.", "Prefers Node 20.1 over 18."]
