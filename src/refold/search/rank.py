"""Ranking pieces both backends share: BM25 weights, the all-terms/phrase boost, recency
tie-breaks, one hit per message along a lineage, and session titles first.

Pure functions over ids, scores and hits; the backends feed them from their indexes.

- ``bm25`` is Okapi BM25 for a term present once (``tf = 1``): the CJK terms' indexes (the
  gram index stores each gram once per message) and PostgreSQL's per-term tests give presence,
  not counts. SQLite's word index uses FTS5's own ``bm25()`` (true term frequencies).
- ``filtered_total``: the collection size that goes with document frequencies counted on the
  rows a query's filters allow (a source, a session, a tenant). IDF needs both counted over the
  same collection; the highest id with filtered counts makes every term look rare in a small
  source and flattens the weights (a common CJK bigram weighed nearly what a rare one did).
  Counting the filtered rows would cost a scan, so the size is estimated from the terms' own
  postings: the highest id scaled by the share of their postings the filters keep.
- ``boosted``: a message holding every term is worth ``1 + BOOST_ALL`` times its score, one
  holding an adjacent pair of the query's words as a phrase ``BOOST_PHRASE`` more.
- ``best_first``: score descending, then newest (highest id) first — the same order on both
  backends, whatever the index returns first.
- ``collapse_copies``: forks copy rows and compaction children carry rows forward, so one
  message can exist once per lineage copy. Hits with the same role and text in sessions of the
  same lineage (same root ancestor) collapse into the best-ranked one, which lists every
  session holding it (``SearchHit.lineage``).
- ``titles_first``: hits in sessions whose title holds every query term come first (stable).
- ``verbatim_first``: hits whose text holds the whole query word for word (case and runs of
  whitespace aside) come before the others (stable): a pasted error line or code line finds
  the message it came from first, ahead of messages that share more of its words elsewhere.
  Only for a query of at least ``VERBATIM_MIN_CHARS`` characters with a space or CJK text in
  it (a word or two holds no more than the index already scored).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping

from refold import _records as records
from refold.store.base import SearchHit

K1 = 1.2
B = 0.75
BOOST_ALL = 0.5
BOOST_PHRASE = 0.25
VERBATIM_MIN_CHARS = 12
_EDGES = " \t\r\n\"'`.?!,;:。？！，；：「」“”‘’"


def idf(total: int, df: int) -> float:
    """BM25's inverse document frequency (never negative)."""
    total = max(total, df, 1)
    return math.log(1.0 + (total - df + 0.5) / (df + 0.5))


def filtered_total(total: int, kept: list[int], every: list[int]) -> int:
    """``total`` (all messages) scaled by ``sum(kept) / sum(every)``: each term's postings
    with the filters and without them. Unfiltered (``kept == every``) it is ``total``."""
    found = sum(every)
    if found <= 0:
        return total
    return max(1, max(kept, default=0), round(total * min(1.0, sum(kept) / found)))


def presence_weight(length: float, average: float) -> float:
    """BM25's term-frequency factor for one occurrence in a document of ``length``."""
    norm = 1.0 - B + B * (length / average if average > 0 else 1.0)
    return (K1 + 1.0) / (1.0 + K1 * norm)


def boosted(score: float, *, has_all: bool, has_phrase: bool) -> float:
    return score * (1.0 + (BOOST_ALL if has_all else 0.0) + (BOOST_PHRASE if has_phrase else 0.0))


def best_first(scores: Mapping[int, float], limit: int) -> list[int]:
    """Ids by score descending, ties broken by recency (higher id first)."""
    return sorted(scores, key=lambda i: (-scores[i], -i))[:limit]


# instructions an agent harness sends in every conversation (Claude Code's agent and skills
# list, ~6 KB, as a system message of each): one hit for all the sessions holding the text
SHARED_ROLES = frozenset({"system", "developer"})


class Roots(dict[str, str]):
    """Each session's lineage root (a store's ``lineage_roots``), and which of the sessions are
    an agent's side calls (``side``: ``refold.server.agents``)."""

    def __init__(self, pairs: Iterable[tuple[str, str]] = (),
                 side: Iterable[str] = ()) -> None:
        super().__init__(pairs)
        self.side = frozenset(side)


def collapse_copies(hits: Iterable[SearchHit], roots: Mapping[str, str]) -> list[SearchHit]:
    """One hit per message per lineage: a copy in another session of the same lineage folds
    into the first (best-ranked) hit; equal messages within one session stay separate. A
    system (or developer) message folds across every session holding the same text
    (``SHARED_ROLES``): an agent's boilerplate instructions, stored once per conversation,
    otherwise filled a search's hits for its common words, one per session. A copy in an
    agent's side call (its title call holds the user's prompt) shows as the conversation's
    copy when the lineage has one (``Roots.side``), in the rank of the best; any other hit of
    a side call is left out beside a hit of its conversation's lineage."""
    side = roots.side if isinstance(roots, Roots) else frozenset()
    kept: dict[tuple[str, str, str], list[int]] = {}
    out: list[SearchHit] = []
    for hit in hits:
        root = "" if hit.role in SHARED_ROLES else roots.get(hit.session_id, hit.session_id)
        key = (root, hit.role, hit.content)
        slots = kept.setdefault(key, [])
        target = next((i for i in slots if hit.session_id not in out[i].lineage), None)
        if target is None:
            slots.append(len(out))
            out.append(records.replace(hit, lineage=(hit.session_id,)))
        elif out[target].session_id in side and hit.session_id not in side:
            out[target] = records.replace(hit, score=out[target].score,
                                          lineage=(hit.session_id, *out[target].lineage))
        else:
            first = out[target]
            out[target] = records.replace(first, lineage=(*first.lineage, hit.session_id))
    if side:  # a side call only repeats its conversation (Claude Code's title call wraps the
        # prompt in "<session>…</session> Write the title…"): beside a hit of the
        # conversation's lineage it is no hit of its own
        held = {roots.get(h.session_id, h.session_id) for h in out if h.session_id not in side}
        out = [h for h in out if h.session_id not in side
               or roots.get(h.session_id, h.session_id) not in held]
    return out


def titles_first(hits: list[SearchHit], needles: list[str]) -> list[SearchHit]:
    """Hits whose session title holds every needle (case-insensitive) move to the front."""
    lowered = [n.lower() for n in needles if n]
    if not lowered:
        return hits

    def matches(hit: SearchHit) -> bool:
        title = (hit.session_title or "").lower()
        return bool(title) and all(n in title for n in lowered)

    return sorted(hits, key=lambda h: not matches(h))


def _verbatim_parts(text: str) -> list[str] | None:
    """The lower-cased words ``verbatim_pattern`` joins, or None for a query too short."""
    core = text.strip().strip(_EDGES).lower()
    parts = core.split()
    if len(core) < VERBATIM_MIN_CHARS or (len(parts) < 2 and core.isascii()):
        return None
    return parts


def verbatim_pattern(text: str) -> re.Pattern[str] | None:
    """A pattern finding ``text`` word for word in lower-cased text (its whitespace runs match
    any whitespace run; surrounding quotes and sentence punctuation dropped), or None when the
    query is too short to say more than its words (``verbatim_first``)."""
    parts = _verbatim_parts(text)
    return None if parts is None else re.compile(r"\s+".join(map(re.escape, parts)))


def verbatim_first(hits: list[SearchHit], text: str) -> list[SearchHit]:
    """Hits holding the query ``text`` word for word move to the front (stable). A hit that
    lacks one of its words cannot hold it: when every hit lacks one (a question typed as a
    sentence), no pattern is compiled (a new one costs a search ~0.1 ms)."""
    parts = _verbatim_parts(text)
    if parts is None or len(hits) < 2:
        return hits
    lowered = [hit.content.lower() for hit in hits]
    maybe = [all(part in low for part in parts) for low in lowered]
    if not any(maybe):
        return hits
    pattern = re.compile(r"\s+".join(map(re.escape, parts)))
    held = [m and pattern.search(low) is not None for m, low in zip(maybe, lowered, strict=True)]
    if not any(held) or all(held):
        return hits
    return [hit for hit, h in zip(hits, held, strict=True) if h] + \
        [hit for hit, h in zip(hits, held, strict=True) if not h]
