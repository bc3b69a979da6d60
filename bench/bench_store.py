"""Print the SQLite store's figures: durable append vs raw insert, bulk import, search, projection.

Run:  python bench/bench_store.py [--messages 1000000] [--cache DIR] [--only append,import,...]

- append: one durable ``append_messages`` (synchronous=FULL, its own transaction) vs raw sqlite3
  autocommit INSERTs of the same row, interleaved in the same run: into the same schema, and
  into the same schema plus the synchronous FTS insert trigger of schema <= 6 (issue #12's
  baseline). p50, mean (the store's batch indexing included) and CPU ratios (target <= 1.3x).
- import: ``sync_messages`` of a 100k-message history into a fresh session (msgs/s).
- search: p50/p95 on an archive of ``--messages`` rows (built once into ``--cache``): real
  English sentences from this Python's standard-library docstrings and comments, 1-3 per
  message, 30% with a ticket/build number, 10% Chinese (``message_text``). Query sets:
  questions around corpus words, opening words of stored sentences as questions, Chinese
  questions, single words, the 10 commonest words, CJK 1-4 characters; each next to the same
  query as bare sqlite3 asks it (``_raw_baseline``), and ``--cold`` first searches in fresh
  processes with the file's pages dropped from the page cache (posix_fadvise), then again on
  a copy with ``--cold-tail`` more messages stored but not sealed (the tail a fresh process's
  first search covers between two seals). "Warm" means
  the file is in the OS page cache: it is read through once first (an earlier run's cold
  phase leaves it evicted, which made "warm" figures depend on what ran before). Targets for
  sentences: p50 < 10 ms, p95 < 25 ms at 1M. Default SearchQuery (limit 20, window 1).
- hybrid: ``--only hybrid``, at ``--hybrid-messages`` (random unit vectors stand in for the
  model's; its query embedding and throughput are timed apart when the extra is installed).
- projection: ``projection()`` of a session with ``--archive`` archived rows before its
  checkpoint vs one with 100 rows, same tail (must not grow with the archive).
"""

from __future__ import annotations

import argparse
import os
import random
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from refold.messages.model import message_identity
from refold.store import CheckpointDraft, SearchQuery
from refold.store.sqlite import SQLiteStore, indexer, wordindex
from refold.store.sqlite.rows import message_columns

SYLLABLES = ["ka", "to", "re", "mi", "lan", "dor", "sel", "vi", "con", "fig", "ser", "ver",
             "dep", "loy", "tra", "ce", "log", "po", "qui", "nex", "bu", "ild", "ar", "ch"]
CJK_CHARS = ("的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能"
             "下过子说产种面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量"
             "都两体制机当使点从业本去把性好应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各重"
             "新线内数正心反你明看原又么利比或但质气第向道命此变条只没结解问意建月公无系军很情者最立代想已"
             "通并提直题党程展五果料象员革位入常文总次品式活设及管特件长求老头基资边流路级少图山统接知较将"
             "组见计别她手角期根论运农指几九区强放决西被干做必战先回则任取据处队南给色光门即保治北造百规热"
             "领七海口东导器压志世金增争济阶油思术极交受联什认六共权收证改清己美再采转更单风切打白教速花带"
             "安场身车例真务具万每目至达走积示议声报斗完类八离华名确才科张信马节话米整空元况今集温传土许步")


def words(rng: random.Random, n: int) -> list[str]:
    vocab = ["".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4))) for _ in range(n)]
    return sorted(set(vocab))


def english(rng: random.Random, vocab: list[str], weights: list[float], n: int = 25) -> str:
    return " ".join(rng.choices(vocab, weights, k=n))


def chinese(rng: random.Random, n: int = 40) -> str:
    return "".join(rng.choice(CJK_CHARS) for _ in range(n))


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    return (statistics.median(ordered) * 1000,
            ordered[min(len(ordered) - 1, int(len(ordered) * 0.95))] * 1000)


# -- append ------------------------------------------------------------------------------------
_RAW_INSERT = ("INSERT INTO messages (session_id, seq, role, message, text, tool_call_id, "
               "token_count, created_at, active, identity, has_cjk) "
               "VALUES ('s', ?, ?, ?, ?, ?, NULL, ?, 1, ?, ?)")
# the insert trigger every row paid inside its commit before migration 7 (and Hermes' pays)
_SYNC_FTS_TRIGGER = """CREATE TRIGGER raw_fts_insert AFTER INSERT ON messages BEGIN
    INSERT INTO messages_fts(rowid, text) VALUES (new.id, new.text);
    INSERT INTO messages_trigram(rowid, text) SELECT new.id, new.text WHERE new.has_cjk = 1;
END"""


def _raw_db(path: Path, fts_trigger: bool) -> sqlite3.Connection:
    SQLiteStore(str(path)).close()  # the same schema and indexes
    raw = sqlite3.connect(str(path), isolation_level=None)
    for pragma in ("journal_mode=WAL", "synchronous=FULL", "foreign_keys=ON"):
        raw.execute(f"PRAGMA {pragma}")
    raw.execute("INSERT INTO sessions (id, started_at) VALUES ('s', 0)")
    if fts_trigger:
        raw.execute(_SYNC_FTS_TRIGGER)
    return raw


def bench_append(tmp: Path, count: int) -> None:
    """One durable append per message, interleaved with two raw sqlite3 baselines (autocommit
    INSERT, synchronous=FULL, WAL): into the same schema (no index work on the row's commit),
    and into the same schema plus the synchronous FTS insert trigger refold used before
    indexing moved off the commit path (the baseline the 1.96x of issue #12 was taken
    against). The store's mean includes the batches its appends index (every TAIL_ROWS)."""
    from refold.store.sqlite.indexer import TAIL_ROWS

    store = SQLiteStore(str(tmp / "append.db"))
    session = store.create_session()
    plain, synced = _raw_db(tmp / "raw.db", False), _raw_db(tmp / "raw-fts.db", True)
    ours: list[float] = []
    base: list[float] = []
    base_fts: list[float] = []
    previous = None
    cpu = {"ours": 0.0, "plain": 0.0}
    for i in range(count):
        message = {"role": "user", "content": f"append benchmark message number {i} 中文"
                   if i % 10 == 0 else f"append benchmark message number {i} about {i % 97}"}
        c0, start = time.process_time(), time.perf_counter()
        store.append_messages(session.id, [message])
        ours.append(time.perf_counter() - start)
        cpu["ours"] += time.process_time() - c0
        previous = message_identity(message, previous)
        for raw, into in ((plain, base), (synced, base_fts)):
            c0, start = time.process_time(), time.perf_counter()
            role, body, text, tool_call_id, cjk = message_columns(message)
            raw.execute(_RAW_INSERT, (i + 1, role, body, text, tool_call_id, time.time(),
                                      previous, cjk))
            into.append(time.perf_counter() - start)
            if raw is plain:
                cpu["plain"] += time.process_time() - c0
    start = time.perf_counter()
    store.search(SearchQuery("benchmark"))  # indexes whatever tail is left (< TAIL_ROWS rows)
    tail = time.perf_counter() - start
    store.close()
    plain.close()
    synced.close()
    o50, o95 = percentiles(ours)
    b50, b95 = percentiles(base)
    f50, f95 = percentiles(base_fts)
    mean_ours = (sum(ours) + tail) / count
    print(f"append (durable, synchronous=FULL, n={count}, index batch every {TAIL_ROWS}):")
    print(f"  store                        p50 {o50:.3f} ms  p95 {o95:.3f} ms  "
          f"mean {mean_ours * 1000:.3f} ms (batches and the last tail included)")
    print(f"  raw INSERT+commit            p50 {b50:.3f} ms  p95 {b95:.3f} ms  "
          f"mean {sum(base) / count * 1000:.3f} ms")
    print(f"  raw INSERT+commit, sync FTS  p50 {f50:.3f} ms  p95 {f95:.3f} ms  "
          f"mean {sum(base_fts) / count * 1000:.3f} ms")
    print(f"  ratio vs raw INSERT: p50 {o50 / b50:.2f}x, mean {mean_ours * count / sum(base):.2f}x"
          f", CPU {cpu['ours'] / cpu['plain']:.2f}x | vs raw INSERT with synchronous FTS "
          f"(issue #12's baseline): p50 {o50 / f50:.2f}x, mean "
          f"{mean_ours * count / sum(base_fts):.2f}x (target <= 1.3x)")


# -- bulk import -------------------------------------------------------------------------------
def bench_import(tmp: Path, count: int) -> None:
    rng = random.Random(7)
    vocab = words(rng, 20000)
    weights = [1 / (i + 1) for i in range(len(vocab))]
    history = [{"role": "user" if i % 2 == 0 else "assistant",
                "content": chinese(rng) if i % 4 == 3 else english(rng, vocab, weights)}
               for i in range(count)]
    store = SQLiteStore(str(tmp / "import.db"))
    session = store.create_session()
    start = time.perf_counter()
    result = store.sync_messages(session.id, history)
    elapsed = time.perf_counter() - start
    start = time.perf_counter()
    again = store.sync_messages(session.id, history)
    resync = time.perf_counter() - start
    proxy = store.create_session()
    turns = history[:1000]
    store.sync_messages(proxy.id, turns)
    samples = []
    for i in range(1000, 1030):  # a proxy re-sends the whole history plus one new message
        turns = history[:i + 1]
        start = time.perf_counter()
        store.sync_messages(proxy.id, turns)
        samples.append(time.perf_counter() - start)
    store.close()
    print(f"bulk import: {len(result.appended)} messages in {elapsed:.2f} s = "
          f"{len(result.appended) / elapsed:,.0f} msgs/s; re-import of the same history "
          f"(skipped {again.skipped}) {resync:.2f} s")
    print(f"proxy-style sync of a ~1000-message history with 1 new message: "
          f"p50 {percentiles(samples)[0]:.2f} ms")


# -- search ------------------------------------------------------------------------------------
CORPUS_VERSION = 2  # bump when the generator changes (the cached file name carries it)


def english_pool() -> list[str]:
    """Real English sentences: the docstrings and comments of this Python's standard library
    (public text that ships with every Python; ~35k sentences, ~11k distinct words, with the
    word frequencies of real prose). Deterministic for one Python version."""
    import re
    import sysconfig

    root = Path(sysconfig.get_paths()["stdlib"])
    docstring, comment = re.compile(r'"""(.*?)"""', re.S), re.compile(r"^\s*# ?(.+)$", re.M)
    code = re.compile(r"[{}=<>\\]|\w\(")
    out: list[str] = []
    for file in sorted(root.rglob("*.py")):
        if "test" in file.parts or "site-packages" in file.parts:
            continue
        try:
            source = file.read_text("utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        for chunk in docstring.findall(source) + comment.findall(source):
            for sentence in re.split(r"(?<=[.!?])\s+", " ".join(chunk.split())):
                if len(sentence.split()) >= 4 and len(sentence) < 300 \
                        and not code.search(sentence):
                    out.append(sentence)
    return out


def content_words(pool: list[str]) -> list[str]:
    """The pool's non-stop words, most frequent first."""
    import collections
    import re

    from refold.search.stopwords import is_stop_word

    counts = collections.Counter(w.lower() for s in pool for w in re.findall(r"[A-Za-z]{3,}", s))
    return [w for w, _ in counts.most_common() if not is_stop_word(w)]


def message_text(rng: random.Random, pool: list[str]) -> str:
    """A chat-sized message: 1-3 real sentences; 30% carry an identifier or a number (a long
    tail of rare tokens, as ticket numbers and names give real archives); 10% are Chinese."""
    if rng.random() < 0.1:
        return chinese(rng, rng.randint(8, 60))
    text = " ".join(rng.choice(pool) for _ in range(rng.choice((1, 1, 2, 3))))
    if rng.random() < 0.3:
        text += f" (ref {rng.choice(('PR', 'ticket', 'build', 'run'))}-{rng.randint(1, 400_000)})"
    return text


def build_corpus(path: Path, total: int) -> None:
    rng = random.Random(42)
    pool = english_pool()
    store = SQLiteStore(str(path) + ".part", synchronous="OFF")
    per_session = 1000
    start = time.perf_counter()
    for s in range(max(1, total // per_session)):
        session = store.create_session(source="bench", title=f"bench session {s}")
        batch = [{"role": "user" if i % 2 == 0 else "assistant",
                  "content": message_text(rng, pool)} for i in range(per_session)]
        store.append_messages(session.id, batch)
        if s % 100 == 99:
            print(f"  built {(s + 1) * per_session:,} rows, {time.perf_counter() - start:.0f} s",
                  flush=True)
    store.close()
    os.replace(str(path) + ".part", path)
    for suffix in ("-wal", "-shm"):
        Path(str(path) + ".part" + suffix).unlink(missing_ok=True)


def corpus_path(cache: Path, total: int) -> Path:
    path = cache / f"bench-store-v{CORPUS_VERSION}-{total}.db"
    if not path.exists():
        print(f"building the {total:,}-message search corpus at {path} (once) ...", flush=True)
        build_corpus(path, total)
    return path


def cjk_samples(store: SQLiteStore, rng: random.Random, n: int, sizes: tuple[int, int]
                ) -> list[str]:
    """Substrings of stored CJK messages (so the queries have answers)."""
    top = store.info()["messages"]
    out: list[str] = []
    conn = store.db.conn
    while len(out) < n:
        row = conn.execute("SELECT text FROM messages WHERE id >= ? AND has_cjk = 1 LIMIT 1",
                           (rng.randint(1, top),)).fetchone()
        if row:
            size = rng.randint(*sizes)
            start = rng.randint(0, len(row[0]) - size)
            out.append(row[0][start:start + size])
    return out


QUESTIONS = ["When did we talk about {0} and {1}?", "what was the {1} I mentioned for {0}",
             "Can you remind me how the {0} {1} went?",
             "Where did I put the {0} of the {1} {2}?", "why is {1} so slow"]


def english_questions(rng: random.Random, n: int, vocab: list[str] | None = None) -> list[str]:
    """Questions around the corpus's own content words: one from the head of the frequency
    list, one from the tail (``query_sets``' "sentence (en)"; ``bench_cold_search.py``)."""
    vocab = vocab if vocab is not None else content_words(english_pool())
    head, tail = vocab[20:400], vocab[2000:]
    return [rng.choice(QUESTIONS).format(rng.choice(head), rng.choice(tail), rng.choice(vocab))
            for _ in range(n)]


def query_sets(store: SQLiteStore, rng: random.Random, n: int) -> dict[str, list[str]]:
    """Queries with answers in the corpus: questions around its own content words (one from
    the head of the frequency list, one from the tail), the opening words of stored sentences
    asked as questions, single words, the commonest words, CJK substrings of 1-4 characters
    and Chinese questions."""
    pool = english_pool()
    vocab = content_words(pool)
    return {
        "sentence (en)": english_questions(rng, n, vocab),
        "sentence (real)": ["what about " + " ".join(rng.choice(pool).split()[:rng.randint(5, 9)])
                            + "?" for _ in range(n)],
        "sentence (zh)": [f"我们什么时候{a}了{b}吗？" for a, b in
                          zip(cjk_samples(store, rng, n, (2, 2)),
                              cjk_samples(store, rng, n, (3, 4)), strict=True)],
        "one word": [rng.choice(vocab[:5000]) for _ in range(n)],
        "common word": [vocab[i % 10] for i in range(min(n, 30))],
        "CJK 1-2 chars": [chinese(rng, rng.randint(1, 2)) for _ in range(n // 2)]
        + cjk_samples(store, rng, n - n // 2, (1, 2)),
        "CJK 3-4 chars": cjk_samples(store, rng, n, (3, 4)),
    }


def _raw_baseline(conn: sqlite3.Connection, label: str, text: str) -> None:
    """The same query as bare sqlite3 would ask it: the content words ORed, top 20 by FTS5
    bm25 (sentences, words); a CJK substring through its index, best or newest 20; a Chinese
    question's pieces, every posting of each (what ranking their union exactly must read)."""
    from refold.search.query import parse_query

    parsed = parse_query(text)
    if label.startswith("CJK"):
        gram = parsed.gram_plan()
        if gram is not None:
            conn.execute("SELECT rowid FROM messages_cjk_grams WHERE messages_cjk_grams MATCH ? "
                         "ORDER BY rowid DESC LIMIT 20", (gram.match,)).fetchall()
        else:
            conn.execute("SELECT rowid FROM messages_trigram WHERE messages_trigram MATCH ? "
                         "ORDER BY rank LIMIT 20", ('"' + text + '"',)).fetchall()
        return
    plan = parsed.natural
    terms = plan.words if plan is not None else tuple(parsed.terms)
    for piece in plan.cjk if plan is not None else ():
        # a union ranked exactly needs every posting of every piece: fetch them all
        table = "messages_cjk_grams" if len(piece) <= 2 else "messages_trigram"
        conn.execute(f"SELECT rowid FROM {table} WHERE {table} MATCH ?",
                     ('"' + piece + '"',)).fetchall()
    expr = " OR ".join(t.fts5() for t in terms if not t.cjk)
    if expr:
        conn.execute("SELECT rowid, rank FROM messages_fts WHERE messages_fts MATCH ? "
                     "ORDER BY rank LIMIT 20", (expr,)).fetchall()


def _load_file(path: Path) -> float:
    """Read the database file (and its WAL) through once, so its pages are in the OS page
    cache: what "warm" means here. Returns the seconds it took."""
    start = time.perf_counter()
    for name in (path, Path(str(path) + "-wal")):
        if name.exists():
            with open(name, "rb", buffering=0) as file:
                while file.read(1 << 20):
                    pass
    return time.perf_counter() - start


def _evict(path: Path) -> None:
    """Drop the database file's pages from the OS page cache (no root needed: posix_fadvise
    DONTNEED on the file; clean pages only, so the WAL is checkpointed first)."""
    for name in (path, Path(str(path) + "-wal")):
        if name.exists():
            fd = os.open(name, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def cold_one(path: str, text: str, following: str, preload: str) -> None:
    """(A child process.) Open the store and time one search on a cold page cache, then a
    second one with other words; with ``preload`` "1", NumPy is imported first, untimed (a
    long-running process, such as ``refold serve`` or an MCP server, has it already)."""
    if preload == "1":
        import numpy  # noqa: F401
    start = time.perf_counter()
    store = SQLiteStore(path, synchronous="NORMAL")
    opened = time.perf_counter()
    store.search(SearchQuery(text))
    done = time.perf_counter()
    store.search(SearchQuery(following))
    second = time.perf_counter()
    print(f"{(opened - start) * 1000:.3f} {(done - opened) * 1000:.3f} "
          f"{(second - done) * 1000:.3f}")
    store.close()


def bench_cold(path: Path, texts: list[str]) -> None:
    import subprocess
    import sys

    for preload in ("0", "1"):
        opens, searches, seconds = [], [], []
        for n, text in enumerate(texts):
            _evict(path)
            following = texts[(n + 1) % len(texts)]
            out = subprocess.run([sys.executable, __file__, "--cold-one", str(path), text,
                                  following, preload],
                                 check=True, capture_output=True, text=True).stdout.split()
            opens.append(float(out[0]) / 1000)
            searches.append(float(out[1]) / 1000)
            seconds.append(float(out[2]) / 1000)
        p50, p95 = percentiles(searches)
        s50, s95 = percentiles(seconds)
        o50, _ = percentiles(opens)
        how = ("fresh process and connection" if preload == "0"
               else "fresh process with NumPy imported first, untimed")
        print(f"  cold (page cache dropped for the file, {how}; n={len(texts)}): first search "
              f"p50 {p50:6.2f} ms  p95 {p95:6.2f} ms, then other words p50 {s50:6.2f} ms  "
              f"p95 {s95:6.2f} ms (opening the store p50 {o50:.1f} ms, not included)",
              flush=True)


def bench_search(cache: Path, total: int, queries: int, cold: int,
                 cold_tail: int = 0) -> None:
    path = corpus_path(cache, total)
    store = SQLiteStore(str(path), synchronous="NORMAL")
    store.search(SearchQuery("warm"))  # migrates and indexes once, if needed
    start = time.perf_counter()
    sealed = store.seal_word_index()  # what `refold index` does for an archive built before it
    if sealed:
        print(f"  sealed {sealed} word-index chunks in {time.perf_counter() - start:.1f} s")
    store.db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # all pages in the main file
    loaded = _load_file(path)
    print(f"  the file read into the page cache in {loaded:.1f} s (warm figures below)")
    print(f"search over {store.info()['messages']:,} messages ({path.name}); "
          f"p50/p95 in ms, warm cache unless marked cold; raw = bare sqlite3 on the same index")
    targets = {"sentence (en)": "p50 < 10, p95 < 25", "sentence (real)": "p50 < 10, p95 < 25",
               "sentence (zh)": "p50 < 10, p95 < 25"}
    sets = query_sets(store, random.Random(1), queries)
    conn = store.db.conn
    for label, texts in sets.items():
        for sort in ("relevance", "recency"):
            timings, raw, hits = [], [], 0
            for text in texts:
                start = time.perf_counter()
                hits += len(store.search(SearchQuery(text, sort=sort)))
                timings.append(time.perf_counter() - start)
                if sort == "relevance":
                    start = time.perf_counter()
                    _raw_baseline(conn, label, text)
                    raw.append(time.perf_counter() - start)
            p50, p95 = percentiles(timings)
            line = (f"  {label:15} {sort:9}: p50 {p50:7.2f}  p95 {p95:7.2f}  "
                    f"(avg {hits / len(texts):.1f} hits)")
            if raw:
                r50, r95 = percentiles(raw)
                line += f" | raw p50 {r50:7.2f}  p95 {r95:7.2f}"
            if label in targets and sort == "relevance":
                line += f"  target {targets[label]}"
            print(line, flush=True)
    if cold:
        bench_cold(path, sets["sentence (en)"][:cold])
    store.close()
    if cold and cold_tail:
        bench_cold_tail(path, cold_tail, sets["sentence (en)"][:cold])


def bench_cold_tail(path: Path, extra: int, texts: list[str]) -> None:
    """The cold figures again on a copy of the corpus with ``extra`` more messages stored and
    indexed but not sealed into the word index (an archive between two seals: the tail a
    fresh process's first search must cover). The messages are the corpus's own texts."""
    import shutil

    copy = path.with_name(path.stem + f"-tail{extra}.db")
    shutil.copyfile(path, copy)
    try:
        store = SQLiteStore(str(copy), synchronous="NORMAL")
        with store.db.read() as conn:
            chunks = wordindex.state(conn)[0]
            top = int(conn.execute("SELECT max(id) FROM messages").fetchone()[0])
            rows = [r[0] for r in conn.execute(
                "SELECT text FROM messages WHERE id % 97 = 0 LIMIT ?", (extra,))]
        session = store.create_session(title="tail").id
        for start in range(0, len(rows), 500):
            store.append_messages(session, [{"role": "user", "content": t}
                                            for t in rows[start:start + 500]])
        store.catch_up_index()
        with store.db.read() as conn:
            # (the rows above the sealed chunks and recent blocks: what a process tokenizes)
            tail = indexer.watermark(conn) - wordindex.sealed(conn).low + 1
            resealed = wordindex.state(conn)[0] != chunks
        store.db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        store.close()
        print(f"  a copy with {len(rows):,} more messages after id {top:,}: an unsealed tail of "
              f"{tail:,} rows{' (a chunk was sealed on the way)' if resealed else ''}",
              flush=True)
        bench_cold(copy, texts)
    finally:
        for name in (copy, Path(str(copy) + "-wal"), Path(str(copy) + "-shm")):
            name.unlink(missing_ok=True)


# -- projection --------------------------------------------------------------------------------
class _RandomEmbedder:
    """Unit vectors from a seeded generator: the scan and fusion cost without the model's."""

    model = "bench-random"
    dim = 384

    def __init__(self) -> None:
        import numpy as np

        self.np = np
        self.rng = np.random.default_rng(7)

    def _unit(self, n: int) -> Any:
        v = self.rng.standard_normal((n, self.dim)).astype("float32")
        return v / self.np.linalg.norm(v, axis=1, keepdims=True)

    def passages(self, texts: list[str]) -> Any:
        return self._unit(len(texts))

    def query(self, text: str) -> Any:
        return self._unit(1)[0]


def bench_hybrid(cache: Path, total: int, queries: int) -> None:
    """Hybrid search at ``total`` messages: random vectors stand in for the model's (the scan,
    fusion and word search are what is timed); the model's own query embedding is timed apart."""
    from refold.search.vectors import VectorIndex, hybrid_search

    path = corpus_path(cache, total)
    store = SQLiteStore(str(path), synchronous="NORMAL")
    index = VectorIndex(store, _RandomEmbedder())
    start = time.perf_counter()
    filled = index.backfill(batch=2000)
    size = os.path.getsize(path)
    print(f"hybrid over {store.info()['messages']:,} messages: {filled:,} vectors stored in "
          f"{time.perf_counter() - start:.1f} s (db now {size / 1e6:.0f} MB)")
    store.seal_word_index()  # as `refold index` does (else the first searches each seal one)
    texts = query_sets(store, random.Random(3), queries)["sentence (en)"]
    index.nearest("warm", 1)  # loads the vectors into memory once, as a long-lived process does
    timings = []
    for text in texts:
        start = time.perf_counter()
        hybrid_search(store, SearchQuery(text), mode="hybrid", index=index)
        timings.append(time.perf_counter() - start)
    p50, p95 = percentiles(timings)
    print(f"  hybrid (sentence queries): p50 {p50:.2f} ms  p95 {p95:.2f} ms (target p50 < 50 ms)")
    raw = []  # the same-run baseline: one bare NumPy scan of the same in-memory matrix
    for _ in texts:
        vector = index.embedder.query("")
        start = time.perf_counter()
        (index._matrix @ vector).argmax()
        raw.append(time.perf_counter() - start)
    p50, p95 = percentiles(raw)
    print(f"  baseline, a bare NumPy scan of the same vectors: p50 {p50:.2f} ms  p95 {p95:.2f} ms")
    parts = []  # the word side alone, as hybrid asks it (100 candidates, no window)
    for text in texts:
        start = time.perf_counter()
        store.search(SearchQuery(text, limit=100, window=0))
        parts.append(time.perf_counter() - start)
    p50, p95 = percentiles(parts)
    print(f"  the word search alone (limit 100, as hybrid asks it): p50 {p50:.2f} ms  "
          f"p95 {p95:.2f} ms (hybrid runs it beside the scan)")
    size = os.path.getsize(path)
    with store.db.read() as conn:
        blobs = conn.execute("SELECT count(*), coalesce(sum(length(vec)), 0) FROM "
                             "message_vectors WHERE model = ?", (index.embedder.model,)).fetchone()
    print(f"  index size: {blobs[0]:,} float16 vectors, {blobs[1] / 1e6:.0f} MB of blobs in a "
          f"{size / 1e6:.0f} MB database; {index._matrix.nbytes / 1e6:.0f} MB in memory (float32)")
    try:
        from refold.search.vectors import load_embedder

        model = load_embedder()
        model.query("warm up")
        timings = []
        for text in texts[:20]:
            start = time.perf_counter()
            model.query(text)
            timings.append(time.perf_counter() - start)
        p50, p95 = percentiles(timings)
        print(f"  + the model's query embedding ({model.model}): p50 {p50:.2f} ms p95 {p95:.2f} ms")
        start = time.perf_counter()
        vocab = words(random.Random(42), 2000)
        model.passages([english(random.Random(5), vocab, [1.0] * len(vocab)) for _ in range(32)])
        print(f"  embedding throughput: {32 / (time.perf_counter() - start):.1f} messages/s "
              "(one batch of 32, the default backfill batch)")
    except Exception as exc:  # the extra may be missing: say so, keep the figures above
        print(f"  (model not timed: {exc})")
    store.close()


def bench_projection(tmp: Path, archive: int) -> None:
    store = SQLiteStore(str(tmp / "projection.db"), synchronous="OFF")
    tail = 50

    def session_with(rows: int) -> str:
        session = store.create_session()
        for start in range(0, rows, 5000):
            store.append_messages(session.id, [
                {"role": "user", "content": f"archived row {i} with some words"}
                for i in range(start, min(rows, start + 5000))])
        store.add_checkpoint(session.id, CheckpointDraft("summary", 1, rows - tail,
                                                         rows - tail + 1))
        return session.id

    def timed(fn: Callable[[], Any], n: int = 300) -> float:
        samples = []
        for _ in range(n):
            start = time.perf_counter()
            fn()
            samples.append(time.perf_counter() - start)
        return percentiles(samples)[0]

    small, large = session_with(100), session_with(archive)
    small_ms = timed(lambda: store.projection(small))
    large_ms = timed(lambda: store.projection(large))
    assert len(store.projection(large).messages) == tail
    store.close()
    print(f"projection (tail {tail}): 100 rows p50 {small_ms:.3f} ms | {archive:,} archived rows "
          f"p50 {large_ms:.3f} ms | ratio {large_ms / small_ms:.2f}x (must not grow)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1_000_000, help="search corpus rows")
    parser.add_argument("--cache", type=Path,
                        default=Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
                        / "refold-bench")
    parser.add_argument("--appends", type=int, default=20_000)
    parser.add_argument("--import-messages", type=int, default=100_000)
    parser.add_argument("--hybrid-messages", type=int, default=100_000)
    parser.add_argument("--archive", type=int, default=100_000)
    parser.add_argument("--queries", type=int, default=200)
    parser.add_argument("--cold", type=int, default=30,
                        help="cold-cache searches (each in a fresh process)")
    parser.add_argument("--cold-tail", type=int, default=3000,
                        help="the cold searches again on a copy with this many more messages "
                             "unsealed (0: skip)")
    parser.add_argument("--cold-one", nargs=4, metavar=("DB", "QUERY", "NEXT", "PRELOAD"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--only", default="append,import,projection,search",
                        help="comma-separated sections to run")
    args = parser.parse_args()
    if args.cold_one:
        cold_one(*args.cold_one)
        return
    sections = set(args.only.split(","))
    args.cache.mkdir(parents=True, exist_ok=True)
    print(f"SQLite {sqlite3.sqlite_version}")
    with tempfile.TemporaryDirectory(dir=args.cache) as tmp:
        steps: Iterator[tuple[str, Callable[[], None]]] = iter([
            ("append", lambda: bench_append(Path(tmp), args.appends)),
            ("import", lambda: bench_import(Path(tmp), args.import_messages)),
            ("projection", lambda: bench_projection(Path(tmp), args.archive)),
            ("search", lambda: bench_search(args.cache, args.messages, args.queries, args.cold,
                                                args.cold_tail)),
            ("hybrid", lambda: bench_hybrid(args.cache, args.hybrid_messages, args.queries)),
        ])
        for name, step in steps:
            if name in sections:
                step()


if __name__ == "__main__":
    main()
