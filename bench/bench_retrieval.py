"""Retrieval quality: refold fts / vector / hybrid against a BM25 baseline, questions verbatim.

Run:  python bench/bench_retrieval.py DATA.json [--questions N] [--modes fts,bm25,vector,hybrid]

DATA is a LongMemEval-format file (a JSON list of instances with ``question``,
``haystack_sessions`` — lists of ``{"role", "content", "has_answer"?}`` turns —,
``haystack_session_ids`` and ``answer_session_ids``); any public set of long multi-session
conversations with questions and evidence can be written in that shape. Keep it outside the
repository (e.g. under /work/data/), and say where it came from when you report figures.

Each instance gets its own fresh SQLite store holding its haystack (one refold session per
haystack session); the question is asked exactly as written. A hit is relevant when it is an
evidence turn (``has_answer``), or, for instances without turn labels, a turn of an evidence
session. Printed per mode: hit@5, hit@10 (a relevant turn in the top k), MRR (first relevant
rank, over the top 10) and evidence coverage@10 (the share of evidence turns in the top 10).
The baseline is Okapi BM25 (``rank_bm25``) over the same turns, words lower-cased and split
on non-letters, CJK text as characters and character pairs. ``vector``/``hybrid`` need the
``refold[embed]`` extra (every turn is embedded, which takes a while on a small CPU).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from refold.search.query import cjk_grams, has_cjk
from refold.store import SearchQuery
from refold.store.sqlite import SQLiteStore

K = 10
_WORD = re.compile(r"[^\W_]+")


def load(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        sys.exit(f"error: {path} does not exist (a LongMemEval-format JSON file; see --help)")
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, list) or not data or "haystack_sessions" not in data[0]:
        sys.exit(f"error: {path} is not a LongMemEval-format list of instances")
    return data


def bm25_tokens(text: str) -> list[str]:
    words = [w.lower() for w in _WORD.findall(text) if not has_cjk(w)]
    return words + (cjk_grams(text).split() if has_cjk(text) else [])


def build(store: SQLiteStore, item: dict[str, Any]) -> tuple[list[tuple[str, int]], set[int]]:
    """Store the haystack; returns every turn's (session, seq) and the relevant turns' indexes."""
    turns: list[tuple[str, int]] = []
    relevant: set[int] = set()
    evidence_sessions = set(item.get("answer_session_ids") or [])
    labelled = any(t.get("has_answer") for s in item["haystack_sessions"] for t in s)
    ids = item.get("haystack_session_ids") or [str(i) for i in range(len(item["haystack_sessions"]))]
    for sid, session in zip(ids, item["haystack_sessions"], strict=False):
        stored = store.create_session(title=None, source="bench")
        messages = [{"role": t["role"] if t["role"] in ("user", "assistant") else "user",
                     "content": str(t.get("content") or " ")} for t in session]
        store.append_messages(stored.id, messages)
        for seq, turn in enumerate(session, start=1):
            if (turn.get("has_answer") if labelled else sid in evidence_sessions):
                relevant.add(len(turns))
            turns.append((stored.id, seq))
    return turns, relevant


def score(ranked: list[int], relevant: set[int]) -> dict[str, float]:
    top = ranked[:K]
    first = next((r for r, i in enumerate(top) if i in relevant), None)
    return {"hit@5": float(any(i in relevant for i in top[:5])),
            "hit@10": float(first is not None),
            "mrr": 0.0 if first is None else 1.0 / (first + 1),
            "coverage@10": len(relevant & set(top)) / len(relevant) if relevant else 0.0}


def run(data: list[dict[str, Any]], modes: list[str]) -> dict[str, dict[str, float]]:
    from rank_bm25 import BM25Okapi

    totals: dict[str, dict[str, float]] = {m: {} for m in modes}
    counted = 0
    started = time.perf_counter()
    for n, item in enumerate(data, start=1):
        with tempfile.TemporaryDirectory() as tmp:
            store = SQLiteStore(str(Path(tmp) / "q.db"), synchronous="OFF")
            turns, relevant = build(store, item)
            if not relevant:
                store.close()
                continue  # an abstention question: nothing to find
            position = {key: i for i, key in enumerate(turns)}
            texts = [str(t.get("content") or "") for s in item["haystack_sessions"] for t in s]
            for mode in modes:
                ranked = (_bm25(BM25Okapi, texts, item["question"]) if mode == "bm25"
                          else _refold(store, position, item["question"], mode))
                for key, value in score(ranked, relevant).items():
                    totals[mode][key] = totals[mode].get(key, 0.0) + value
            counted += 1
            store.close()
        if n % 20 == 0:
            print(f"  {n} questions, {time.perf_counter() - started:.0f} s", flush=True)
    return {m: {k: v / max(counted, 1) for k, v in t.items()} | {"questions": counted}
            for m, t in totals.items()}


def _bm25(cls: Any, texts: list[str], question: str) -> list[int]:
    model = cls([bm25_tokens(t) or ["_"] for t in texts])
    scores = model.get_scores(bm25_tokens(question))
    return sorted(range(len(texts)), key=lambda i: (-scores[i], -i))[:K]


def _refold(store: SQLiteStore, position: dict[tuple[str, int], int], question: str,
            mode: str) -> list[int]:
    from refold.search.vectors import hybrid_search, index_for

    query = SearchQuery(question, limit=K, window=0)
    if mode == "fts":
        hits = store.search(query)
    else:
        index_for(store).backfill(batch=64)
        hits = hybrid_search(store, query, mode=mode)  # type: ignore[arg-type]
    return [position[(h.session_id, h.seq)] for h in hits if (h.session_id, h.seq) in position]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("data", type=Path, help="LongMemEval-format JSON file")
    parser.add_argument("--questions", type=int, default=0, help="first N instances (0: all)")
    parser.add_argument("--modes", default="fts,bm25", help="fts,bm25,vector,hybrid")
    args = parser.parse_args()
    data = load(args.data)
    if args.questions:
        data = data[:args.questions]
    modes = [m for m in args.modes.split(",") if m]
    results = run(data, modes)
    print(f"{args.data.name}: {len(data)} instances")
    for mode, r in results.items():
        print(f"  {mode:7} hit@5 {r.get('hit@5', 0):.3f}  hit@10 {r.get('hit@10', 0):.3f}  "
              f"MRR {r.get('mrr', 0):.3f}  coverage@10 {r.get('coverage@10', 0):.3f}  "
              f"({int(r['questions'])} questions with evidence)")
    if "bm25" in results:
        for mode in results:
            if mode != "bm25":
                delta = (results[mode]["hit@10"] - results["bm25"]["hit@10"]) * 100
                print(f"  {mode} vs bm25: hit@10 {delta:+.1f} points")


if __name__ == "__main__":
    main()
