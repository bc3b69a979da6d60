"""What finding ASCII words glued inside CJK text costs a search (SQLite).

Chinese and Japanese write ASCII words straight against their text (``用pytest跑``); the word
index keeps such a run as one token, so a query's plain words are also looked for through the
trigram index (``refold.store.sqlite.natural.glued_scores``). This prints search p50 / max on
two synthetic Chinese archives, with those lookups and, in the same run, without them (the
baseline: the same store and queries, ``glued_words`` returning nothing; it finds none of the
glued messages, and a search that finds nothing also checks the index for damage, ~9 ms here):

- ``half``: 40,000 messages of random CJK characters, every other one holding ``用API``;
- ``dense``: 40,000 messages each holding four words of a ten-word vocabulary glued
  (``…部署test中…``), the worst case: every query word is glued in thousands of messages.

    python bench/bench_glued.py [--messages 40000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import refold.search.natural as natural
from refold.store import SearchQuery
from refold.store.sqlite import SQLiteStore

HAN = ("的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过"
       "子说产种面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体"
       "制机当使点从业本去把性好应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各重新线内")
VOCABULARY = ["test", "error", "file", "config", "build", "deploy", "server", "commit", "branch",
              "python"]
QUERIES = {
    "half": ["API", "where is the API?", "API 测试"],
    "dense": ["test", "why did the test fail with a config error?",
              "build deploy server commit branch"],
}


def han(rng: random.Random, low: int, high: int) -> str:
    return "".join(rng.choice(HAN) for _ in range(rng.randint(low, high)))


def half(rng: random.Random, n: int) -> str:
    return han(rng, 20, 20) + ("用API" if n % 2 else "") + han(rng, 10, 10)


def dense(rng: random.Random, n: int) -> str:
    return "".join(han(rng, 3, 8) + rng.choice(VOCABULARY) for _ in range(4))


def build(path: Path, make: Callable[[random.Random, int], str], total: int) -> SQLiteStore:
    store = SQLiteStore(str(path), synchronous="OFF")
    rng = random.Random(1)
    session = store.create_session()
    for start in range(0, total, 2000):
        store.append_messages(session.id, [{"role": "user", "content": make(rng, n)}
                                           for n in range(start, min(start + 2000, total))])
    store.seal_word_index()
    store.search(SearchQuery("warm up"))
    return store


def timed(store: SQLiteStore, query: str, rounds: int) -> list[float]:
    out = []
    for _ in range(rounds):
        start = time.perf_counter()
        store.search(SearchQuery(query))
        out.append((time.perf_counter() - start) * 1000)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=40_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    glued_words = natural.glued_words
    with tempfile.TemporaryDirectory() as tmp:
        for name, make in (("half", half), ("dense", dense)):
            store = build(Path(tmp) / f"{name}.db", make, args.messages)
            print(f"{name}: {args.messages:,} messages; search ms p50 / max, with the glued "
                  "lookups | without (same run)")
            for query in QUERIES[name]:
                with_, without = [], []
                for _ in range(args.rounds):  # alternated, so both see the same machine
                    natural.glued_words = glued_words
                    with_ += timed(store, query, 1)
                    natural.glued_words = lambda words: ()
                    without += timed(store, query, 1)
                missed = len(store.search(SearchQuery(query)))
                natural.glued_words = glued_words
                hits = len(store.search(SearchQuery(query)))
                print(f"  {query!r:50} {statistics.median(with_):6.1f} / {max(with_):6.1f}"
                      f" | {statistics.median(without):6.1f} / {max(without):6.1f}"
                      f"  (hits: {hits} | {missed})")
            store.close()


if __name__ == "__main__":
    main()
