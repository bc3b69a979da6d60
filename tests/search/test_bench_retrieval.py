"""The retrieval bench's own arithmetic: metrics, baseline tokens, LongMemEval evidence units."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    path = Path(__file__).parents[2] / "bench" / "bench_retrieval.py"
    spec = importlib.util.spec_from_file_location("bench_retrieval", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench_retrieval"] = module
    spec.loader.exec_module(module)
    return module


def test_metrics_over_the_top_ten(bench: ModuleType) -> None:
    ranked = ["a#0", None, "e#1", "x#9", "e#2"] + ["y#0"] * 5 + ["e#3"]
    got = bench.score(ranked, {"e#1", "e#2", "e#3"})
    assert got == {"hit@5": 1.0, "hit@10": 1.0, "mrr": 1 / 3, "coverage@10": 2 / 3}
    assert bench.score(["a#0"] * 5 + ["e#1"], {"e#1"})["hit@5"] == 0.0
    assert bench.score(["a#0"] * 10 + ["e#1"], {"e#1"})["hit@10"] == 0.0  # rank 11: a miss
    # session-level evidence: any turn of the session counts, coverage counts sessions
    assert bench.score(["s1#4", "s1#5"], {"s1#*", "s2#*"}) == {
        "hit@5": 1.0, "hit@10": 1.0, "mrr": 1.0, "coverage@10": 0.5}


def test_baseline_tokens(bench: ModuleType) -> None:
    porter = bench.Porter()
    [english, chinese] = bench.bm25_tokens(["Support groups met", "我们部署"], porter)
    assert english == ["support", "group", "met"]
    assert chinese == ["我", "我们", "们", "们部", "部", "部署", "署"]
    assert bench.bm25_tokens(["Support groups"], None) == [["support", "groups"]]


def test_longmemeval_turn_and_session_evidence(bench: ModuleType, tmp_path: Path) -> None:
    item = {"question_id": "q1", "questions": ["where did I go?", "what did I eat?"],
            "answer_session_ids": [["s2"], ["s1"]],
            "haystack_session_ids": ["s1", "s2"],
            "haystack_sessions": [
                [{"role": "user", "content": "I ate soup"}, {"role": "assistant", "content": "ok"}],
                [{"role": "user", "content": "I went to Oslo", "has_answer": True}]]}
    path = tmp_path / "lme.json"
    path.write_text(json.dumps([item]), encoding="utf-8")
    [archive] = bench.longmemeval(path)
    first, second = archive.questions
    assert first.units == {"s2#0"}  # has_answer labels the first question's turns
    assert second.units == {"s1#*"}  # the others only name sessions
    assert [len(s) for s in archive.conversations[0].sessions] == [2, 1]


def test_realtalk_sessions_speakers_times_and_evidence(bench: ModuleType, tmp_path: Path) -> None:
    chat = {"name": {"speaker_1": "Emi", "speaker_2": "elise"},
            "session_1": [
                {"clean_text": "Hey! How are you?", "speaker": "Emi", "dia_id": "D1:1",
                 "date_time": "29.12.2023, 22:42:04"},
                {"clean_text": "Look", "speaker": "elise", "dia_id": "D1:2",
                 "date_time": "30.12.2023, 00:32:20", "blip_caption": "a bar with stools"}],
            "session_1_date_time": "29.12.2023, 22:42:04",
            "qa": [{"question": "Where was Elise?", "evidence": ["D1:2"], "category": 1},
                   {"question": "No evidence?", "evidence": [], "category": 3}]}
    for number in (1, 6):
        (tmp_path / f"Chat_{number}_Emi_Elise.json").write_text(json.dumps(chat), "utf-8")
    (tmp_path / "locomo").mkdir()  # the repository's LoCoMo copy: never read
    (tmp_path / "locomo" / "Chat_1_X_Y.json").write_text("not json", "utf-8")
    [archive] = bench.realtalk(tmp_path, names=True)
    first, sixth = archive.conversations
    assert (first.source, sixth.source) == ("chat-01", "chat-06")
    assert first.sessions == [[("user", "Hey! How are you?", "D1:1"),
                               ("assistant", "Look [shares a photo: a bar with stools]", "D1:2")]]
    assert first.names == [["Emi", "elise"]] and first.dates == ["2023-12-29"]
    assert first.times[0][1] - first.times[0][0] == 6616  # each turn at its own time
    assert [(q.source, q.units, q.split) for q in archive.questions] == [
        ("chat-01", {"D1:2"}, "dev"), ("chat-06", {"D1:2"}, "test")]
    [unnamed] = bench.realtalk(tmp_path, names=False)
    assert unnamed.conversations[0].names == [["", ""]]
    from refold.store.sqlite import SQLiteStore

    store = SQLiteStore(str(tmp_path / "a.db"))
    keys, corpus = bench.build(store, archive)
    assert corpus["chat-01"][1] == ("D1:2", "elise: Look [shares a photo: a bar with stools]")
    [hit] = store.search(bench.SearchQuery("where was elise", source="chat-06", window=0))
    assert keys[(hit.session_id, hit.seq)] == "D1:2"
    assert hit.created_at == sixth.times[0][1]
    store.close()


def _two_chats(tmp_path: Path) -> None:
    def chat(text: str) -> dict[str, object]:
        return {"name": {"speaker_1": "A", "speaker_2": "B"},
                "session_1": [{"clean_text": text, "speaker": "B", "dia_id": "D1:2",
                               "date_time": "29.12.2023, 22:43:04"}] + [
                    {"clean_text": filler, "speaker": "A", "dia_id": f"D1:{n}",
                     "date_time": "29.12.2023, 22:44:04"}
                    for n, filler in enumerate(["hello", "good morning", "see you", "nice day",
                                                "how are you"], start=3)],
                "qa": [{"question": "where is the red kayak kept?", "evidence": ["D1:2"]}]}
    # chat 1's answer is elsewhere; chat 6 holds the words at the same dia id
    (tmp_path / "Chat_1_A_B.json").write_text(json.dumps(chat("garage")), "utf-8")
    (tmp_path / "Chat_6_A_B.json").write_text(json.dumps(chat("the red kayak is kept "
                                                              "in the shed")), "utf-8")


def test_whole_archive_questions_count_only_their_own_sources_evidence(
        bench: ModuleType, tmp_path: Path) -> None:
    _two_chats(tmp_path)
    archives = bench.realtalk(tmp_path, names=False)
    filtered, _, _ = bench.run(archives, ["bm25", "fts"], "all", 10, (1.0, 1.0))
    whole, counted, _ = bench.run(archives, ["bm25", "fts"], "all", 10, (1.0, 1.0),
                                  whole=True)
    assert counted["all"] == 2
    for mode in ("bm25", "fts"):
        # chat 6's question finds its answer either way; chat 1's finds nothing in its own
        # chat, and asked of the whole archive finds chat 6's D1:2, which is not its evidence
        # (the same dia id in another chat must not count)
        assert filtered["all"][mode]["hit@10"] == 0.5
        assert whole["all"][mode]["hit@10"] == 0.5 and whole["all"][mode]["mrr"] == 0.5


def test_the_bench_builds_the_same_archive_on_postgres(bench: ModuleType, tmp_path: Path,
                                                      postgres_url: str) -> None:
    """Through the Store API only, so PostgreSQL holds the archive as SQLite does (its schema
    dropped after)."""
    _two_chats(tmp_path)
    archives = bench.realtalk(tmp_path, names=True)
    on_sqlite, _, _ = bench.run(archives, ["fts"], "all", 10, (1.0, 1.0), whole=True)
    on_postgres, counted, _ = bench.run(archives, ["fts"], "all", 10, (1.0, 1.0), whole=True,
                                        postgres=postgres_url)
    assert counted["all"] == 2
    assert on_postgres == on_sqlite
    assert on_postgres["all"]["fts"]["hit@10"] == 0.5
