"""Known-item search: a line pasted word for word from an agent's tool output or observation.

Run: python bench/bench_pasted.py [--root /work/data/trajectories] [--seed 7] [--queries 300]
                                  [--misses]

The public trajectories of ``bench/trajectories.py`` (fetch them as it says) go into one
archive, a session each. Lines of 25-160 characters with four or more words are drawn from
the tool results and observations (seeded), keeping those that one to three messages hold;
each is asked verbatim. A hit is a message holding the line. Reported: hit@1, hit@10 and MRR
for refold's word search (``--mode fts``) and for the BM25 baseline of ``bench_retrieval.py``
(Okapi BM25 over the same messages, Porter-stemmed, no stop list).
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from bench_retrieval import Porter, bm25_tokens
from trajectories import DEFAULT_ROOT, load_all

from refold.search.vectors import hybrid_search
from refold.store import SearchQuery
from refold.store.sqlite import SQLiteStore

K = 10
_WORD = re.compile(r"[A-Za-z]{2,}")


def text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        content = "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
    return content or ""


def pasted_lines(messages: list[tuple[str, int, str, str]], seed: int, count: int
                 ) -> list[tuple[str, set[tuple[str, int]]]]:
    """(line, the messages holding it) for up to ``count`` lines drawn with ``seed``."""
    lines = sorted({line.strip() for _, _, text, role in messages if role in ("tool", "user")
                    for line in text.splitlines()
                    if 25 <= len(line.strip()) <= 160 and len(_WORD.findall(line)) >= 4})
    random.Random(seed).shuffle(lines)
    out = []
    for line in lines:
        holders = {(sid, seq) for sid, seq, text, _ in messages if line in text}
        if 1 <= len(holders) <= 3:
            out.append((line, holders))
            if len(out) >= count:
                break
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=DEFAULT_ROOT)
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--misses", action="store_true", help="print the lines not ranked first")
    args = parser.parse_args()
    from rank_bm25 import BM25Okapi

    trajectories = load_all(args.root)
    with tempfile.TemporaryDirectory() as tmp:
        store = SQLiteStore(f"{tmp}/archive.db", synchronous="OFF")
        messages: list[tuple[str, int, str, str]] = []
        for traj in trajectories:
            session = store.create_session(title=None, source="bench")
            store.sync_messages(session.id, traj.messages)
            messages += [(session.id, seq, text_of(m), str(m.get("role")))
                         for seq, m in enumerate(traj.messages, start=1)]
        queries = pasted_lines(messages, args.seed, args.queries)
        print(f"{len(trajectories)} trajectories, {len(messages)} messages, "
              f"{len(queries)} pasted lines (seed {args.seed})")
        porter = Porter()
        model = BM25Okapi([t or ["_"] for t in bm25_tokens([t for _, _, t, _ in messages],
                                                           porter)])
        ranks: dict[str, list[int | None]] = {"fts": [], "bm25": []}
        for line, holders in queries:
            hits = hybrid_search(store, SearchQuery(line, limit=K, window=0), mode="fts")
            mine = next((r for r, h in enumerate(hits) if (h.session_id, h.seq) in holders), None)
            ranks["fts"].append(mine)
            if args.misses and mine != 0:
                print(f"  rank {mine}: {line!r}")
            scores = model.get_scores(bm25_tokens([line], porter)[0])
            order = sorted((i for i in range(len(messages)) if scores[i] > 0),
                           key=lambda i: (-scores[i], -i))[:K]
            ranks["bm25"].append(next((r for r, i in enumerate(order)
                                       if messages[i][:2] in holders), None))
        store.close()
    for mode, found in ranks.items():
        n = max(1, len(found))
        print(f"  {mode:5} hit@1 {sum(r == 0 for r in found) / n:.3f}  "
              f"hit@10 {sum(r is not None for r in found) / n:.3f}  "
              f"MRR {sum(1 / (r + 1) for r in found if r is not None) / n:.3f}")


if __name__ == "__main__":
    main()
