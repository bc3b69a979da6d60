"""Retrieval quality: refold fts / vector / hybrid against a BM25 baseline, questions verbatim.

Run:
  python bench/bench_retrieval.py memorybank /work/data/retrieval/memorybank --lang en
  python bench/bench_retrieval.py memorybank /work/data/retrieval/memorybank --lang cn
  python bench/bench_retrieval.py longmemeval /work/data/retrieval/longmemeval/pdc_longmemeval_s.json
  python bench/bench_retrieval.py realtalk /work/data/retrieval/realtalk [--names] [--whole]
  any of them with --postgres postgresql://127.0.0.1:5432/test (a new schema, dropped after)
  options: --modes bm25,fts,vector,hybrid  --split dev|test|all  --rrf-k 60 --weights 1,1
           --generic-weight 1  --undated

Data (kept outside the repository; fetch it yourself):

- **MemoryBank** (English and Chinese; github.com/zhongwanjun/MemoryBank-SiliconFriend, MIT,
  commit cf61c41): 15 users, 10 days of chat each, 100 probing questions per language.
  ``eval_data/en/memory_bank_en.json``, ``eval_data/en/probing_questions_en.jsonl`` and the
  ``cn`` pair, copied into one directory::

      git clone https://github.com/zhongwanjun/MemoryBank-SiliconFriend mb
      cp mb/eval_data/en/*.json* mb/eval_data/cn/*.json* /work/data/retrieval/memorybank/

  The set ships no evidence. ``bench/data/memorybank_evidence.json`` holds it: for each
  question, the query/response pairs (day and index) stating the answer, labelled by hand from
  the English text before any retriever ran; Chinese reuses them where the translation is
  pair-aligned (checked day by day) and lists its own where it is not. Questions with no
  evidence in the conversation (one in English) are left out.
- **LongMemEval** format (``question``, ``haystack_sessions`` of ``{"role", "content",
  "has_answer"?}`` turns, ``haystack_session_ids``, ``answer_session_ids``; MIT,
  github.com/xiaowu0162/LongMemEval). The official files live on Hugging Face, not GitHub; the
  one GitHub copy found is a 3-instance excerpt of ``longmemeval_s`` in
  github.com/MuhammadNoor7/Parallel-Hybrid-Retrieval-Enhancing-Temporal-RAG-via-Concurrent-Graphiti-and-Semantic-Search
  (MIT, commit 3d2d10e, ``data/longmemeval_s.json``), whose instances carry extra
  ``questions``/``answers``/``answer_session_ids`` lists (26 questions over 1,218 turns)::

      git clone <that repo> pdc && git -C pdc show 3d2d10e:data/longmemeval_s.json \\
          > /work/data/retrieval/longmemeval/pdc_longmemeval_s.json

  Both shapes (``question`` or ``questions``) are read. Its sessions are not dated here.
- **REALTALK** (github.com/danny911kr/REALTALK, commit b903e06; the repository states no
  licence, so it is only read here, never copied in): 10 real 21-day messaging-app chats
  between two people, 8,944 messages, 728 questions with evidence message ids (726 with
  evidence), in LoCoMo's layout. Only ``data/Chat_*.json``; its ``data/locomo/`` is LoCoMo,
  which is reserved for acceptance and never read::

      git clone https://github.com/danny911kr/REALTALK rt && mkdir -p /work/data/retrieval/realtalk
      cp rt/data/Chat_*.json /work/data/retrieval/realtalk/

No second Chinese or Japanese set is used: the one found with questions and evidence labels
(PerLTQA, github.com/Elvin-Yiming-Du/PerLTQA, Chinese) is CC BY-NC 4.0, not permissive.

Layout, as an agent's archive would hold it: MemoryBank is **one archive** with one
``--source`` per user (one refold session per day, messages user/assistant in order, each
session and its messages dated at noon local time of its day, as a ledger written that day
holds them; ``--undated`` stores them at import time instead); each question is asked
verbatim with that user's source as the filter. About a third of the questions name a day
("On May 2nd, …", "在5月2号…"); refold ranks the messages written that day as one more term
(``refold.search.dates``), which the BM25 baseline, reading text only, cannot. A LongMemEval instance is
its own archive (one session per haystack session). Every method ranks the same messages: the
baseline is Okapi BM25 (``rank_bm25``, default k1/b) over the messages of that source — words
lower-cased and Porter-stemmed (by SQLite FTS5's own ``porter`` tokenizer, the stemmer of
refold's index), no stop list; CJK text as its characters plus character bigrams. ``bm25raw``
is the same without stemming.

Scores over the top 10 messages: hit@5 / hit@10 (an evidence message ranked there), MRR
(1/rank of the first one) and coverage@10 (the share of the question's evidence units — a
MemoryBank pair, a LongMemEval ``has_answer`` turn — with a message in the top 10). A unit's
messages are its user turn and the reply; for LongMemEval questions that only name evidence
sessions, every turn of those sessions counts and coverage is over sessions.

Splits, for tuning without fooling ourselves: MemoryBank users 0–6 are ``dev`` (tune there),
7–14 ``test`` (report there); the split is by user, so no conversation is in both.
"""

from __future__ import annotations

import argparse
import datetime
import json
import re
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from refold.search.query import cjk_grams, has_cjk
from refold.store import SearchQuery, Store
from refold.store.sqlite import SQLiteStore

K = 10
DEV_USERS = 7
_WORD = re.compile(r"[^\W_]+")
EVIDENCE = Path(__file__).parent / "data" / "memorybank_evidence.json"


@dataclass
class Conversation:
    source: str
    sessions: list[list[tuple[str, str, str]]]  # per session: (role, text, unit key)
    dates: list[str] = field(default_factory=list)  # per session: its day (YYYY-MM-DD), if known
    times: list[list[float]] = field(default_factory=list)  # per session: each turn's time
    names: list[list[str]] = field(default_factory=list)  # per session: each turn's speaker


@dataclass
class Question:
    text: str
    source: str
    units: set[str]  # evidence unit keys
    split: str


@dataclass
class Archive:
    conversations: list[Conversation]
    questions: list[Question] = field(default_factory=list)


# ---------------------------------------------------------------- data adapters

def memorybank(root: Path, lang: str) -> list[Archive]:
    bank = root / f"memory_bank_{lang}.json"
    probes = root / f"probing_questions_{lang}.jsonl"
    for path in (bank, probes):
        if not path.exists():
            sys.exit(f"error: {path} does not exist (see the docstring for where to get it)")
    users = json.loads(bank.read_text(encoding="utf-8"))
    asked: dict[str, list[str]] = {}
    for line in probes.read_text(encoding="utf-8").splitlines():
        if line.strip():
            asked.update({k.strip(): v for k, v in json.loads(line).items()})
    labels = json.loads(EVIDENCE.read_text(encoding="utf-8"))
    english = list(labels["en"])  # user order is the same in both languages
    archive = Archive([])
    for n, (name, user) in enumerate(users.items()):
        source = f"user-{n:02d}"
        sessions, dates = [], []
        for day, pairs in user["history"].items():
            dates.append(day)
            turns = []
            for i, pair in enumerate(pairs):
                key = f"{day[5:]}#{i}"
                turns.append(("user", str(pair.get("query") or " "), key))
                turns.append(("assistant", str(pair.get("response") or " "), key))
            sessions.append(turns)
        archive.conversations.append(Conversation(source, sessions, dates))
        evidence = labels["en"][english[n]]
        overrides = labels["cn_overrides"].get(english[n], {}) if lang == "cn" else {}
        for q, text in enumerate(asked.get(name.strip(), [])):
            units = set(overrides.get(str(q), evidence[q] if q < len(evidence) else []))
            if units:
                archive.questions.append(Question(text, source, units,
                                                  "dev" if n < DEV_USERS else "test"))
    return [archive]


def longmemeval(path: Path) -> list[Archive]:
    if not path.exists():
        sys.exit(f"error: {path} does not exist (a LongMemEval-format JSON file)")
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, list) or not data or "haystack_sessions" not in data[0]:
        sys.exit(f"error: {path} is not a LongMemEval-format list of instances")
    archives = []
    for n, item in enumerate(data):
        ids = item.get("haystack_session_ids") or [str(i) for i in
                                                   range(len(item["haystack_sessions"]))]
        sessions, labelled = [], []
        for sid, session in zip(ids, item["haystack_sessions"], strict=False):
            turns = []
            for t, turn in enumerate(session):
                role = turn.get("role") if turn.get("role") in ("user", "assistant") else "user"
                turns.append((str(role), str(turn.get("content") or " "), f"{sid}#{t}"))
                if turn.get("has_answer"):
                    labelled.append(f"{sid}#{t}")
            sessions.append(turns)
        source = f"lme-{n:03d}"
        archive = Archive([Conversation(source, sessions)])
        texts = item.get("questions") or [item["question"]]
        answers = item.get("answer_session_ids") or []
        if answers and isinstance(answers[0], str):
            answers = [answers]
        for q, text in enumerate(texts):
            evidence_sessions = set(answers[q]) if q < len(answers) else set()
            if q == 0 and labelled:
                units = set(labelled)
            else:  # session-level evidence: a unit per session
                units = {f"{sid}#*" for sid in ids if sid in evidence_sessions}
            if units and "_abs" not in str(item.get("question_id", "")):
                archive.questions.append(Question(str(text), source, units, "test"))
        archives.append(archive)
    return archives


def realtalk(root: Path, names: bool) -> list[Archive]:
    """REALTALK (github.com/danny911kr/REALTALK, commit b903e06): 10 real 21-day chats between
    two people, ``data/Chat_*.json`` (LoCoMo's layout: ``session_N`` lists of ``{speaker,
    clean_text, date_time, dia_id}``, ``qa`` with ``evidence`` dia ids). One source per chat,
    one session per ``session_N``; the first speaker is the user, the other the assistant;
    each message dated by its own ``date_time``. With ``names`` each message carries its
    speaker as its ``name`` (refold indexes it as "Emi: ..."; the baseline reads the same
    text). Chats 1-5 are
    ``dev``, 6-10 ``test``. The repository's ``data/locomo/`` copy is LoCoMo: not read."""
    files = sorted(root.glob("Chat_*.json"), key=lambda p: int(p.name.split("_")[1]))
    if not files:
        sys.exit(f"error: no Chat_*.json in {root} (see the docstring for where to get it)")
    archive = Archive([])
    for path in files:
        number = int(path.name.split("_")[1])
        data = json.loads(path.read_text(encoding="utf-8"))
        first = str(data.get("name", {}).get("speaker_1", "")).strip().lower()
        source = f"chat-{number:02d}"
        sessions, dates, times, who = [], [], [], []
        n = 1
        while isinstance(data.get(f"session_{n}"), list):
            turns, stamps, speakers = [], [], []
            for turn in data[f"session_{n}"]:
                text = str(turn.get("clean_text") or "").strip()
                if turn.get("blip_caption"):
                    text = f"{text} [shares a photo: {turn['blip_caption']}]".strip()
                speaker = str(turn.get("speaker") or "").strip()
                role = "user" if speaker.lower() == first else "assistant"
                turns.append((role, text or " ", str(turn.get("dia_id"))))
                speakers.append(speaker if names else "")
                stamps.append(datetime.datetime.strptime(
                    str(turn["date_time"]), "%d.%m.%Y, %H:%M:%S").timestamp())
            sessions.append(turns)
            times.append(stamps)
            who.append(speakers)
            dates.append(datetime.date.fromtimestamp(stamps[0]).isoformat() if stamps else "")
            n += 1
        archive.conversations.append(Conversation(source, sessions, dates, times, who))
        for qa in data.get("qa", []):
            units = {str(e) for e in qa.get("evidence") or []}
            if units and qa.get("question"):
                archive.questions.append(Question(str(qa["question"]), source, units,
                                                  "dev" if number <= 5 else "test"))
    return [archive]


# ---------------------------------------------------------------- baseline

_CJK_RUN = re.compile(r"[\u3040-\u30ff\u3400-\u9fff\uac00-\ud7af\uf900-\ufaff]+")


class Porter:
    """Porter-stemmed words through SQLite's own FTS5 ``porter`` tokenizer (the stemmer refold's
    index uses; no other package needed): each text goes into an in-memory FTS5 table and its
    tokens come back, in order, from ``fts5vocab``."""

    def __init__(self) -> None:
        import sqlite3

        self.db = sqlite3.connect(":memory:")
        self.db.execute("CREATE VIRTUAL TABLE t USING fts5(x, tokenize='porter unicode61 "
                        "remove_diacritics 2')")
        self.db.execute("CREATE VIRTUAL TABLE v USING fts5vocab(t, instance)")

    def __call__(self, texts: list[str]) -> list[list[str]]:
        self.db.execute("DELETE FROM t")
        self.db.executemany("INSERT INTO t(rowid, x) VALUES (?, ?)",
                            [(i, _CJK_RUN.sub(" ", t)) for i, t in enumerate(texts)])
        out: list[list[str]] = [[] for _ in texts]
        for term, doc, _col, _offset in self.db.execute(
                "SELECT term, doc, col, offset FROM v ORDER BY doc, offset"):
            out[int(doc)].append(str(term))
        return out


def bm25_tokens(texts: list[str], porter: Porter | None) -> list[list[str]]:
    """The baseline's tokens: words lower-cased (Porter-stemmed with ``porter``, else split on
    non-letters), CJK text as characters and character bigrams."""
    if porter is not None:
        words = porter(texts)
    else:
        words = [[w.lower() for w in _WORD.findall(_CJK_RUN.sub(" ", t))] for t in texts]
    return [w + (cjk_grams(t).split() if has_cjk(t) else []) for w, t in zip(words, texts,
                                                                                strict=True)]


# ---------------------------------------------------------------- running

MISSES = False  # --misses


def score(ranked: list[str | None], units: set[str]) -> dict[str, float]:
    """``ranked``: the unit key of each of the top messages (None: not evidence-bearing)."""
    def relevant(key: str | None) -> bool:
        return key is not None and (key in units or key.split("#")[0] + "#*" in units)

    top = ranked[:K]
    first = next((r for r, key in enumerate(top) if relevant(key)), None)
    found = {key for key in top if key in units}
    found |= {key.split("#")[0] + "#*" for key in top if key and key.split("#")[0] + "#*" in units}
    return {"hit@5": float(any(relevant(k) for k in top[:5])),
            "hit@10": float(first is not None),
            "mrr": 0.0 if first is None else 1.0 / (first + 1),
            "coverage@10": len(found) / len(units)}


def _noon(day: str) -> float:
    """Noon (local time) of ``day``: when an archive written that day holds its messages."""
    return datetime.datetime.strptime(day[:10], "%Y-%m-%d").replace(hour=12).timestamp()


def build(store: Store, archive: Archive, *, dated: bool = True
          ) -> tuple[dict[tuple[str, int], str], dict[str, list[tuple[str, str]]]]:
    """Store every conversation through the Store API, as an import does (each message at its
    own time, else its session's day at noon plus a second a message; at import time unless
    ``dated``); returns (session id, seq) → unit key and, per source, every message as (unit
    key, text) in store order (the baseline's corpus)."""
    keys: dict[tuple[str, int], str] = {}
    corpus: dict[str, list[tuple[str, str]]] = {}
    for conv in archive.conversations:
        for n, turns in enumerate(conv.sessions):
            if not turns:
                continue
            speakers = conv.names[n] if n < len(conv.names) else []
            if len(speakers) != len(turns):
                speakers = [""] * len(turns)
            times: list[float | None] | None = None
            if dated and n < len(conv.times) and len(conv.times[n]) == len(turns):
                times = list(conv.times[n])
            elif dated and n < len(conv.dates) and conv.dates[n]:
                times = [_noon(conv.dates[n]) + seq for seq in range(1, len(turns) + 1)]
            session = store.create_session(title=None, source=conv.source,
                                           started_at=times[0] if times else None)
            store.sync_messages(session.id, [
                {"role": r, "content": t, **({"name": who} if who else {})}
                for (r, t, _), who in zip(turns, speakers, strict=True)], created_at=times)
            for seq, ((_, text, key), who) in enumerate(zip(turns, speakers, strict=True),
                                                        start=1):
                keys[(session.id, seq)] = key
                corpus.setdefault(conv.source, []).append((key, f"{who}: {text}" if who
                                                           else text))
    return keys, corpus


def _open_store(tmp: str, postgres: str | None) -> Store:
    """A fresh archive: SQLite in ``tmp``, or a new schema on the PostgreSQL at ``postgres``."""
    if postgres is None:
        return SQLiteStore(str(Path(tmp) / "archive.db"), synchronous="OFF")
    import uuid

    from refold.store.postgres import PostgresStore

    return PostgresStore(postgres, schema=f"bench_{uuid.uuid4().hex[:12]}")


def run(archives: list[Archive], modes: list[str], split: str, rrf_k: int,
        weights: tuple[float, float], dated: bool = True, whole: bool = False,
        postgres: str | None = None, generic_weight: float | None = None
        ) -> tuple[dict[str, dict[str, dict[str, float]]], dict[str, int], float]:
    """Mean scores per split (``dev``/``test`` and ``all``) and mode, question counts per split,
    and the seconds spent embedding. ``whole``: each question is asked of the whole archive
    (no source filter; the baseline ranks every message of it) and only its own source's
    evidence counts. ``generic_weight``: the vector index's (default: refold's)."""
    from rank_bm25 import BM25Okapi

    from refold.search.vectors import hybrid_search, index_for

    totals: dict[str, dict[str, dict[str, float]]] = {}
    counted: dict[str, int] = {}
    embed_seconds = 0.0
    for archive in archives:
        questions = [q for q in archive.questions if split in ("all", q.split)]
        if not questions:
            continue
        with tempfile.TemporaryDirectory() as tmp:
            store = _open_store(tmp, postgres)
            try:
                keys, corpus = build(store, archive, dated=dated)
                if any(m.startswith(("vector", "hybrid")) for m in modes):
                    started = time.perf_counter()
                    index_for(store).backfill(batch=32)
                    embed_seconds += time.perf_counter() - started
                    if generic_weight is not None:
                        index_for(store).generic_weight = generic_weight
                if whole:  # one corpus; a unit key names its source ("chat-01|D1:6")
                    source_of = {sid: store.get_session(sid).source for sid in {s for s, _ in keys}}
                    keys = {at: f"{source_of[at[0]]}|{key}" for at, key in keys.items()}
                    corpus = {"*": [(f"{src}|{key}", text) for src, msgs in corpus.items()
                                    for key, text in msgs]}
                porter = Porter()
                models = {(mode, src): BM25Okapi([t or ["_"] for t in bm25_tokens(
                              [t for _, t in msgs], porter if mode == "bm25" else None)])
                          for src, msgs in corpus.items()
                          for mode in modes if mode in ("bm25", "bm25raw")}
                for question in questions:
                    if whole:
                        units = {f"{question.source}|{u}" for u in question.units}
                        question = Question(question.text, "*", units, question.split)
                    for mode in modes:
                        if mode in ("bm25", "bm25raw"):
                            msgs = corpus[question.source]
                            tokens = bm25_tokens([question.text],
                                                 porter if mode == "bm25" else None)
                            scores = models[(mode, question.source)].get_scores(tokens[0])
                            order = sorted((i for i in range(len(msgs)) if scores[i] > 0),
                                           key=lambda i: (-scores[i], -i))[:K]  # matches only
                            ranked: list[str | None] = [msgs[i][0] for i in order]
                        else:
                            query = SearchQuery(question.text, limit=K, window=0,
                                                source=None if whole else question.source)
                            kind, k, w = mode, rrf_k, weights
                            if mode.startswith("hybrid:"):  # hybrid:K:W1:W2, a grid point
                                kind, k_text, w1, w2 = mode.split(":")
                                k, w = int(k_text), (float(w1), float(w2))
                            hits = hybrid_search(
                                store, query, mode=kind, k=k,  # type: ignore[arg-type]
                                weights=w)
                            ranked = [keys.get((h.session_id, h.seq)) for h in hits]
                        if MISSES and not score(ranked, question.units)["hit@10"]:
                            print(f"  miss [{mode}, {question.split}] {question.text}")
                        for part in {question.split, "all"}:
                            table = totals.setdefault(part, {}).setdefault(mode, {})
                            for name, value in score(ranked, question.units).items():
                                table[name] = table.get(name, 0.0) + value
                    for part in {question.split, "all"}:
                        counted[part] = counted.get(part, 0) + 1
            finally:  # a failed run leaves no schema behind
                if postgres is not None:
                    store.drop_schema()  # type: ignore[attr-defined]
                store.close()
    means = {part: {m: {k: v / counted[part] for k, v in t.items()} for m, t in by_mode.items()}
             for part, by_mode in totals.items()}
    return means, counted, embed_seconds


def _archives(args: argparse.Namespace) -> Iterator[Archive]:
    if args.kind == "memorybank":
        yield from memorybank(args.path, args.lang)
    elif args.kind == "realtalk":
        yield from realtalk(args.path, args.names)
    else:
        yield from longmemeval(args.path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("kind", choices=["memorybank", "longmemeval", "realtalk"])
    parser.add_argument("path", type=Path, help="MemoryBank or REALTALK directory, or LongMemEval JSON")
    parser.add_argument("--names", action="store_true",
                        help="REALTALK: each message carries its speaker as its name")
    parser.add_argument("--lang", default="en", choices=["en", "cn"], help="MemoryBank only")
    parser.add_argument("--modes", default="bm25,fts",
                        help="bm25,bm25raw,fts,vector,hybrid; hybrid:K:W1:W2 is hybrid with "
                             "RRF k=K and weights W1 (words), W2 (vectors), for tuning")
    parser.add_argument("--split", default="all", choices=["dev", "test", "all"])
    parser.add_argument("--rrf-k", type=int, default=None, help="hybrid RRF k (default: refold's)")
    parser.add_argument("--weights", default=None, help="hybrid weights fts,vector")
    parser.add_argument("--generic-weight", type=float, default=None,
                        help="vector side: the share of a message's cosine to an empty query "
                             "taken off its cosine to the question (default: refold's)")
    parser.add_argument("--misses", action="store_true",
                        help="print each question a mode misses at hit@10")
    parser.add_argument("--postgres", metavar="URL", default=None,
                        help="build each archive in a new schema on this PostgreSQL (dropped "
                             "after), not in SQLite")
    parser.add_argument("--whole", action="store_true",
                        help="ask each question of the whole archive, not its own source")
    parser.add_argument("--undated", action="store_true",
                        help="store every message at import time, not on its session's day")
    args = parser.parse_args()
    global MISSES
    MISSES = args.misses
    from refold.search.vectors import GENERIC_WEIGHT, RRF_K, WEIGHTS

    rrf_k = args.rrf_k if args.rrf_k is not None else RRF_K
    weights = (tuple(float(w) for w in args.weights.split(",")) if args.weights
               else WEIGHTS)
    modes = [m for m in args.modes.split(",") if m]
    started = time.perf_counter()
    results, counted, embed = run(list(_archives(args)), modes, args.split, rrf_k,
                                  weights, not args.undated, args.whole,
                                  args.postgres, args.generic_weight)  # type: ignore[arg-type]
    label = f"{args.kind} {args.lang if args.kind == 'memorybank' else args.path.name}"
    label += " (undated)" if args.undated else ""
    label += " (whole archive, no source filter)" if args.whole else ""
    label += " (PostgreSQL)" if args.postgres else ""
    label += " (speakers as message names)" if args.names else ""
    print(f"{label}: questions asked verbatim ({time.perf_counter() - started:.0f} s, "
          f"embedding {embed:.0f} s; hybrid k={rrf_k} weights={weights[0]:g},{weights[1]:g}; "
          f"generic weight {GENERIC_WEIGHT if args.generic_weight is None else args.generic_weight:g})")
    for part in ("dev", "test", "all"):
        if part not in results or (part == "all" and len(results) == 2):
            continue  # "all" equals the only split present
        print(f"  split {part}, {counted[part]} questions")
        print(f"    {'mode':7} {'hit@5':>6} {'hit@10':>6} {'MRR':>6} {'cov@10':>6}")
        for mode, r in results[part].items():
            print(f"    {mode:7} {r.get('hit@5', 0):6.3f} {r.get('hit@10', 0):6.3f} "
                  f"{r.get('mrr', 0):6.3f} {r.get('coverage@10', 0):6.3f}")
        if "bm25" in results[part]:
            deltas = [f"{mode} {(r['hit@10'] - results[part]['bm25']['hit@10']) * 100:+.1f}"
                      for mode, r in results[part].items() if mode != "bm25"]
            print(f"    hit@10 vs bm25 (points): {', '.join(deltas)}")

if __name__ == "__main__":
    main()
