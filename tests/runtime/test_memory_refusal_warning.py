"""A background memory review's refused write is said on the session's next turn: an explicit
"Remember that …" refused for a full memory was said nowhere (no warning, no log line), while
the user believed it saved."""

from __future__ import annotations

from pathlib import Path

from refold.runtime.engine import Engine
from refold.store import Store


def test_a_refused_remember_reaches_the_next_turns_warnings(sqlite_store: Store,
                                                            tmp_path: Path) -> None:
    memories = tmp_path / "memories"
    memories.mkdir()
    full = [f"Fact number {i:02d} about the system is recorded here for the test run"
            for i in range(32)]  # 2,173 of MEMORY.md's 2,200 characters
    (memories / "MEMORY.md").write_text("\n§\n".join(full) + "\n", encoding="utf-8")
    engine = Engine(sqlite_store, model="gpt-4o-mini", context_length=100_000,
                    memory_dir=memories, background_precompact=False)
    reviewer = engine.memory.manager.reviewer
    reviewer.every_turns = 1
    rt = engine.open_session(new=True)
    rt.prepare([{"role": "user", "content": "Remember that the staging cluster is named "
                                            "kestrel-blue and lives in eu-west-3."}])
    rt.record({"role": "assistant", "content": "Noted."})
    for thread in list(reviewer._threads):
        thread.join(10)
    warned = rt.prepare([{"role": "user", "content": "next"}]).warnings
    assert any("memory review did not save 1 entry" in w and "would exceed the limit" in w
               for w in warned), warned
    assert "kestrel" not in (memories / "MEMORY.md").read_text(encoding="utf-8")
    assert not any("memory review" in w
                   for w in rt.prepare([{"role": "user", "content": "again"}]).warnings)
    engine.close()
