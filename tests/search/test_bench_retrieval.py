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
