"""What the sliding-window lookup costs (``refold.runtime.window``), same-run comparisons.

1. Appending: the index of assistant rows by the start of their text (SQLite migration 13) is
   maintained on every stored reply. Two SQLite ledgers in one temp directory, one with the
   index dropped, take the same turns (a user message, then its reply, each appended after the
   tip as the proxy does) in alternating batches; CPU seconds per turn for each, and the ratio.
2. Looking up: ``find_window`` for a request that re-sends the tail of one of S stored
   conversations (the path only a request that would otherwise open a new conversation takes),
   and for one that continues none of them; CPU ms per lookup.

    python bench/bench_window_index.py [--turns 3000] [--sessions 2000]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from typing import Any

from refold.runtime.window import find_window
from refold.store.sqlite import SQLiteStore


def reply_text(i: int) -> str:
    return (f"Answer {i}: the file you asked about defines {i % 97} functions; the one that "
            "matters here parses the configuration and returns the settings object. " * 2)


def turns(store: SQLiteStore, session: str, start: int, count: int, tip: str | None) -> str | None:
    for i in range(start, start + count):
        user = {"role": "user", "content": f"question {i}: what does module {i} do?"}
        tip = store.append_messages(session, [user], expect_last=tip).appended[-1].identity
        answer = {"role": "assistant", "content": reply_text(i)}
        tip = store.append_messages(session, [answer], expect_last=tip).appended[-1].identity
    return tip


def bench_appends(root: str, total: int, batch: int = 100) -> None:
    stores = {name: SQLiteStore(os.path.join(root, f"{name}.db"), synchronous="NORMAL")
              for name in ("with", "without")}
    with stores["without"].db.write() as conn:
        conn.execute("DROP INDEX messages_reply_start")
    sessions = {name: s.create_session(title="bench").id for name, s in stores.items()}
    tips: dict[str, Any] = dict.fromkeys(stores)
    cpu = dict.fromkeys(stores, 0.0)
    done = 0
    while done < total:
        for name in ("with", "without") if (done // batch) % 2 == 0 else ("without", "with"):
            began = time.process_time()
            tips[name] = turns(stores[name], sessions[name], done, batch, tips[name])
            cpu[name] += time.process_time() - began
        done += batch
    per = {name: 1e3 * cpu[name] / total for name in cpu}
    print(f"appends: {total} turns (user + reply) each; CPU ms per turn: with the index "
          f"{per['with']:.3f}, without {per['without']:.3f}; ratio "
          f"{per['with'] / per['without']:.3f}")
    for store in stores.values():
        store.close()


def bench_lookup(root: str, sessions: int, rounds: int = 200) -> None:
    store = SQLiteStore(os.path.join(root, "lookup.db"), synchronous="NORMAL")
    system = "You are terse."
    ids = []
    for n in range(sessions):
        sid = store.create_session(title=f"conv-{n}").id
        store.append_event(sid, "system_prompt", {"text": system})
        store.append_messages(sid, [
            {"role": "user", "content": f"hello from conversation {n}"},
            {"role": "assistant", "content": "OK."},  # a reply many conversations share
            {"role": "user", "content": f"tell me about item {n}"},
            {"role": "assistant", "content": f"Item {n} is one of the items. " + reply_text(n)}])
        ids.append(sid)
    hit = [{"role": "system", "content": system},
           *[r.message for r in store.get_messages(ids[sessions // 2])[-2:]],
           {"role": "user", "content": "and then?"}]
    miss = [{"role": "system", "content": system},
            {"role": "user", "content": "something"},
            {"role": "assistant", "content": "OK."},
            {"role": "user", "content": "and then?"}]
    for name, history in (("continues one", hit), ("continues none", miss)):
        found = find_window(store, "", history)
        began = time.process_time()
        for _ in range(rounds):
            find_window(store, "", history)
        ms = 1e3 * (time.process_time() - began) / rounds
        print(f"lookup among {sessions} conversations, a window that {name} "
              f"({'found' if found else 'none found'}): {ms:.3f} CPU ms")
    store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=3000)
    parser.add_argument("--sessions", type=int, default=2000)
    args = parser.parse_args()
    print("load:", " ".join(f"{x:.2f}" for x in os.getloadavg()))
    with tempfile.TemporaryDirectory() as root:
        bench_appends(root, args.turns)
        bench_lookup(root, args.sessions)


if __name__ == "__main__":
    main()
