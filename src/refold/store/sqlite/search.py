"""Search over the SQLite ledger: FTS5 for words, trigram for CJK, a gram index for short CJK.

Paths (chosen by ``ParsedQuery.mode``, see ``refold.search.query``):
- ``fts``: ``messages_fts`` (porter + unicode61) MATCH; relevance is bm25, snippets from FTS5.
  A query matching more than ``RELEVANCE_WINDOW`` messages (a common word) is ranked by bm25
  over its newest ``RELEVANCE_WINDOW`` matches only; a query with a term estimated in more than
  ``BROAD_MATCHES`` messages (a stop word on a big archive: bm25 would cost O(its matches) for
  an IDF of about zero) is ordered newest first instead. Recency sort is always exact.
- ``trigram``: ``messages_trigram`` (CJK rows only) MATCH on the 3+ character needles, then
  ``instr`` checks for the shorter ones and the excluded ones; ranked like ``fts``.
- ``grams``: 1–2 character CJK needles (which no trigram can answer): the CJK gram index
  (``grams.py``) MATCH on them as tokens, newest first, each candidate re-checked with ``instr``.
- OR-groups with CJK: each group through its own path, merged newest first.
- ``scan``: the rest with CJK (needles mixing CJK and Latin in one word, or an OR-group that
  itself needs a scan), and a query of symbols only (``🎉``; over every row, not only CJK ones):
  ``instr`` over the CJK rows of the content table, newest first, in id-range chunks until
  ``limit`` hits are found or ``scan_budget_seconds`` has passed (then the newest hits found so
  far are returned). Within one session the scan is unchunked (bounded by the session).

Every search first indexes the rows appended since the last batch (``indexer.py``: appends
index off their commit path), so it sees every stored message.

Invariants: user text reaches SQL only as bound parameters or as FTS5 strings built by the
sanitizer; rewound rows are excluded unless ``include_inactive``; archived rows (before a
checkpoint) are ordinary rows and stay searchable; at most ``MAX_LIMIT`` hits per query.
"""

from __future__ import annotations

import sqlite3
import time
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable
from typing import Any, cast

from refold import _records as records
from refold._lazy import logger
from refold._records import dataclass
from refold.errors import StorageError
from refold.search.query import ParsedQuery, make_snippet, parse_query
from refold.search.rank import (
    SHARED_ROLES,
    Roots,
    best_first,
    collapse_copies,
    titles_first,
    verbatim_first,
)
from refold.store.base import SearchHit, SearchQuery
from refold.store.sqlite import cjklen, glued, indexer, readahead, wordindex, wordseal
from refold.store.sqlite.indexcheck import require_intact_index
from refold.store.sqlite.natural import (
    allowed_ids,
    filters,
    glued_exists,
    natural_scores,
    newest_ids,
)
from refold.store.sqlite.state import StateOps

log = logger(__name__)

MAX_LIMIT = 500
MAX_FETCH = 20_000  # rows fetched at most to fill ``limit`` hits after copies collapse
BROAD_MATCHES = 100_000  # a term in more messages than this is not ranked by bm25
BROAD_PROBE_ROWS = 5_000  # newest ids sampled to estimate a term's match count
SCAN_CHUNK = 50_000
TITLE_SCAN = 2_000  # sessions up to which a search reads their titles (``_load_ranked``)
_HIT_COLUMNS = "m.id, m.session_id, m.seq, m.role, m.text, m.created_at, s.title"
# the index of (id, title, parent, link kind) a natural search reads its hits' sessions from
# (migration 19): the planner took the id's own index, then each session's row, two pages a
# hit on a cold cache; the title scan reads it through, and the hits' lookups find it read
CARD = "sessions_card"
NEAR = 2  # ids around each hit asked for with it on a cold cache: a window of one message
# on a cold cache, asked for with the hits' rows: the small trees read next one lookup at a
# time (the card the title scan reads through up to TITLE_SCAN sessions; the first session
# with a parent; the newest session)
SESSION_TREES = (
    readahead.Want(CARD, most=64), readahead.Want("sessions_parent", most=16),
    readahead.Want("sessions", spans=[(1 << 62, (1 << 63) - 1)]))


@dataclass(frozen=True)
class _Row:
    id: int
    session_id: str
    seq: int
    role: str
    text: str
    created_at: float
    title: str | None
    score: float
    snippet: str | None


def _needs_session(query: SearchQuery) -> bool:
    return query.source is not None or query.owner is not None


def _contains(needle: str, negate: bool = False) -> str:
    """An instr() test; lower() only when case matters (it costs on long CJK text)."""
    column = "lower(m.text)" if needle.lower() != needle.upper() else "m.text"
    value = "lower(?)" if column != "m.text" else "?"
    return f"instr({column}, {value}) {'=' if negate else '>'} 0"


def _substring_predicate(parsed: ParsedQuery) -> tuple[str, list[object]]:
    groups: list[str] = []
    args: list[object] = []
    for must, must_not in parsed.substring_groups():
        parts = [_contains(n) for n in must] + [_contains(n, True) for n in must_not]
        args.extend(must + must_not)
        groups.append("(" + " AND ".join(parts) + ")")
    return "(" + " OR ".join(groups) + ")", args


class _Near:
    """A search's ``neighbours`` rows (each ends with its id), by id: each hit's window is
    built from the few rows around its own id, not from every hit's."""

    def __init__(self, rows: list[tuple[Any, ...]], span: int) -> None:
        self.rows = sorted(rows, key=lambda r: r[-1])
        self.ids = [r[-1] for r in self.rows]
        self.span = span

    def of(self, message_id: int | None) -> list[tuple[Any, ...]] | None:
        if message_id is None:
            return None
        return self.rows[bisect_left(self.ids, message_id - self.span):
                         bisect_right(self.ids, message_id + self.span)]


class SearchOps(StateOps):
    """Mixin: ``search``. Needs ``self.scan_budget_seconds``."""

    scan_budget_seconds: float

    def search(self, query: SearchQuery) -> list[SearchHit]:
        parsed = parse_query(query.text)
        if parsed.is_empty:
            return []
        limit = max(1, min(int(query.limit), MAX_LIMIT))
        readahead.begin(None if self.db.memory else self.db.path)
        try:
            return self._search(parsed, query, limit)
        finally:
            readahead.end()

    def _search(self, parsed: ParsedQuery, query: SearchQuery, limit: int) -> list[SearchHit]:
        self.catch_up_index()
        with self.db.read() as conn:
            if parsed.glued is not None and glued_exists(conn, parsed.glued):
                # one word some CJK message holds glued to its text: searched both ways
                parsed = records.replace(parsed, natural=parsed.glued)
            # Extra rows, so copies collapsing into one hit still leave ``limit`` hits; more
            # (4x each time) while copies leave fewer and the index may hold more.
            fetch = limit * 2 + 10
            while True:
                rows = self._run(conn, parsed, query, fetch, lazy_snippets=True, enough=limit)
                if not rows:  # "no matches" must not hide a damaged index
                    require_intact_index(conn)
                hits = [self._hit(row) for row in rows]
                hits = collapse_copies(hits, self._lineage_roots(
                    conn, {h.session_id for h in hits}))
                if len(hits) >= limit or len(rows) < fetch or fetch >= MAX_FETCH:
                    break
                fetch = min(fetch * 4, MAX_FETCH)
            if query.sort != "recency":  # a pasted line finds the message it came from first
                hits = verbatim_first(hits, query.text)
            hits = titles_first(hits, _title_needles(parsed))[:limit]
            if parsed.mode == "fts":  # FTS5 snippets for the hits returned, not every candidate
                hits = self._fts_snippets(conn, parsed, rows, hits)
            hits = _plain_snippets(hits, rows, parsed)  # the same: only for the hits returned
            if query.window <= 0:
                return hits
            row_ids = {(r.session_id, r.seq): r.id for r in rows}
            ids = [row_ids.get((h.session_id, h.seq)) for h in hits]
            near = _Near(self.neighbours(conn, [i for i in ids if i is not None],
                                         query.window + 1), query.window + 1)
            return [records.replace(h, window=self._around_id(
                conn, i, h.session_id, h.seq, query.window, query.window,
                query.include_inactive, near.of(i))) for h, i in zip(hits, ids, strict=True)]

    def catch_up_index(self) -> None:
        """Index the rows stored since the last batch (``indexer.py``), so a search sees every
        message: one cheap read when nothing is pending, else a short write."""
        with self.db.read() as conn:
            if indexer.pending(conn) <= 0 and not wordseal.needs_work(
                    conn, indexer.watermark(conn)):
                return
        with self.db.write() as conn:
            indexer.index_pending(conn)  # and folds word-index changes in
            through = indexer.watermark(conn)
            seal = wordseal.needs_work(conn, through)
        if seal:  # one chunk: tokenized without the writer lock, then written
            self._seal_one()

    def _seal_one(self, recent: bool = False) -> bool:
        """Seal the next word-index chunk, or with ``recent`` (no chunk being complete) the
        tail as a recent block; False when there is nothing to seal (or another process
        changed it meanwhile: the next search tries again)."""
        with self.db.read() as conn:
            plan = wordseal.prepare_seal(conn)
            block = wordseal.prepare_recent(conn) if plan is None and recent else None
        if plan is not None:
            with self.db.write() as conn:
                sealed = wordseal.commit_seal(conn, plan)
            if sealed:
                try:
                    self._tidy_index(steps=1)
                except StorageError as exc:  # (busy: the next chunk's seal goes on)
                    log.debug("index segment merge skipped: %s", exc)
            return sealed
        if block is None:
            return False
        with self.db.write() as conn:
            return wordseal.commit_recent(conn, block)

    def seal_word_index(self, progress: Callable[[int, int], None] | None = None) -> int:
        """Seal every complete chunk of the word impact index (``wordindex.py``), one
        transaction a chunk; returns how many were sealed. ``progress(done, total)``."""
        with self.db.write() as conn:
            indexer.index_pending(conn)  # the FTS5 indexes first: chunks seal under them
            todo = wordseal.unsealed(conn, indexer.watermark(conn))
            if glued.is_stale(conn):  # (a CJK row rewritten in place: glued.py)
                glued.rebuild(conn)
        done = failed = 0
        while True:
            if not self._seal_one():
                with self.db.read() as conn:
                    if not wordseal.unsealed(conn, indexer.watermark(conn)) or failed > 3:
                        self._seal_one(recent=True)  # and the rows above as a recent block
                        self._tidy_index(steps=None)
                        return done
                failed += 1  # a writer changed the chunk meanwhile: prepare it again
                continue
            done += 1
            if progress is not None:
                progress(done, max(todo, done))

    def _tidy_index(self, steps: int | None) -> None:
        """What a seal leaves to do: pack the CJK length blocks still dirty, then merge the
        FTS5 indexes' segments (``steps`` steps an index; None: all of it)."""
        with self.db.write() as conn:
            cjklen.seal_blocks(conn)
        self.merge_index_segments(steps)

    def merge_index_segments(self, steps: int | None = None) -> int:
        """Merge the FTS5 indexes' segments (``indexer.merge_segments``) until no level
        holds two, or ``steps`` steps an index; each step its own short write transaction.
        Returns the steps that did work."""
        worked = 0
        for table in indexer.FTS_TABLES:
            step = 0
            while steps is None or step < steps:
                step += 1
                with self.db.write() as conn:
                    if not indexer.merge_segments(conn, table):
                        break
                worked += 1
        return worked

    def lineage_roots(self, session_ids: Iterable[str]) -> dict[str, str]:
        with self.db.read() as conn:
            return self._lineage_roots(conn, set(session_ids))

    def _lineage_roots(self, conn: sqlite3.Connection, session_ids: set[str]) -> dict[str, str]:
        """Each session's root ancestor (itself when it has no parent)."""
        if not session_ids:
            return {}
        marks = ",".join("?" * len(session_ids))
        rows = conn.execute(
            "WITH RECURSIVE up(start, id, parent, depth, kind) AS ("
            f"SELECT id, id, parent_session_id, 0, link_kind FROM sessions INDEXED BY {CARD} "
            f"WHERE id IN ({marks}) "
            "UNION ALL SELECT up.start, s.id, s.parent_session_id, up.depth + 1, up.kind "
            f"FROM sessions s INDEXED BY {CARD} JOIN up ON s.id = up.parent "
            "WHERE up.depth < 1000) "
            "SELECT start, id, kind FROM up WHERE parent IS NULL", list(session_ids)).fetchall()
        return Roots(((str(start), str(root)) for start, root, _ in rows),
                     side=(str(start) for start, _, kind in rows if kind == "side"))

    def _run(self, conn: sqlite3.Connection, parsed: ParsedQuery, query: SearchQuery,
             limit: int, *, lazy_snippets: bool = False, enough: int | None = None
             ) -> list[_Row]:
        """The best ``limit`` rows (``enough``: the hits the caller keeps; see ``_load_ranked``)."""
        mode = parsed.mode
        try:
            if mode == "natural":
                return self._natural(conn, parsed, query, limit, enough)
            if mode == "fts":
                return self._fts(conn, parsed, query, limit, snippets=not lazy_snippets,
                                 enough=enough)
            if mode == "trigram":
                return self._trigram(conn, parsed, query, limit)
            if mode == "grams":
                return self._grams(conn, parsed, query, limit)
            parts = [ParsedQuery(parsed.raw, (group,)) for group in parsed.groups]
            if len(parts) > 1 and all(part.mode != "scan" for part in parts):
                return self._union(conn, parts, query, limit)
            return self._scan(conn, parsed, query, limit)
        except sqlite3.OperationalError as exc:
            # The sanitizer only emits quoted FTS5 strings; should the engine still refuse one,
            # the user gets no hits rather than an error (search never raises on user input).
            if "fts5" not in str(exc).lower():
                raise
            log.warning("search query rejected by FTS5 (%s); returning no hits", exc)
            return []

    def _natural(self, conn: sqlite3.Connection, parsed: ParsedQuery, query: SearchQuery,
                 limit: int, enough: int | None = None) -> list[_Row]:
        """A sentence: every matching message scored (natural.py), best first, then loaded."""
        assert parsed.natural is not None  # mode == "natural" guarantees it
        if query.sort == "recency":  # newest first: no scores needed (as for explicit queries)
            ids = newest_ids(conn, parsed.natural, query, limit)
            scores = dict.fromkeys(ids, 0.0)
        else:
            scores = natural_scores(conn, parsed.natural, query, limit)
            ids = best_first(scores, limit)
        if not ids:
            return []
        # a day term's score follows the row's time, not its text: copies may score apart
        return self._load_ranked(conn, parsed, [(i, scores[i]) for i in ids], None,
                                 None if parsed.natural.days else enough)

    def _load_ranked(self, conn: sqlite3.Connection, parsed: ParsedQuery,
                     ranked: list[tuple[int, float]], snippet: str | None,
                     enough: int | None) -> list[_Row]:
        """The rows of ``ranked`` ((id, score), best first), with their session's title.

        With ``enough`` (the hits the caller keeps, when a row's score follows its text), the
        best ``enough`` rows and those tied with the last are read first, and the rest only if
        the hits could differ without them. They cannot when those rows hold ``enough`` hits
        once copies collapse (``rank.collapse_copies``: copies are rows of sessions of one
        lineage with the same text, so the same score; the rows after are scored lower, so none
        of them is a copy of these; with no lineage in the archive, nothing collapses but the
        system messages of ``SHARED_ROLES``, whose ties are read too) and no
        session's title holds every needle (``rank.titles_first`` would bring a later hit
        forward). On a cold cache each row read costs a page or two, and its session as many.
        """
        cut = len(ranked) if enough is None else max(1, enough)
        if readahead.cold():  # the pages read next, asked for at once (readahead.py)
            first = sorted(i for i, _ in ranked[:cut])
            readahead.ask(conn, [readahead.Want("messages", sorted(
                (i - NEAR, i + NEAR) for i in first), rows=first), *SESSION_TREES])
        if cut < len(ranked) and conn.execute(
                "SELECT EXISTS (SELECT 1 FROM sessions WHERE parent_session_id IS NOT NULL)"
                ).fetchone()[0]:  # (no session has a parent: no two rows are copies)
            while cut < len(ranked) and ranked[cut][1] == ranked[cut - 1][1]:
                cut += 1
        if cut < len(ranked) and not self._title_may_match(conn, parsed):
            rows = self._read_ranked(conn, ranked[:cut], snippet)
            if any(r.role in SHARED_ROLES for r in rows):  # (these fold across any sessions)
                tied = cut
                while tied < len(ranked) and ranked[tied][1] == ranked[cut - 1][1]:
                    tied += 1
                rows += self._read_ranked(conn, ranked[cut:tied], snippet)
                cut = tied
            hits = collapse_copies([self._hit(r) for r in rows], self._lineage_roots(
                conn, {r.session_id for r in rows}))
            if len(hits) >= cast(int, enough):
                return rows
            return rows + self._read_ranked(conn, ranked[cut:], snippet)
        return self._read_ranked(conn, ranked, snippet)

    @staticmethod
    def _read_ranked(conn: sqlite3.Connection, ranked: list[tuple[int, float]],
                     snippet: str | None) -> list[_Row]:
        if not ranked:
            return []
        marks = ",".join("?" * len(ranked))
        loaded = {r[0]: r for r in conn.execute(
            f"SELECT {_HIT_COLUMNS} FROM messages m JOIN sessions s INDEXED BY {CARD} "
            f"ON s.id = m.session_id WHERE m.id IN ({marks})", [i for i, _ in ranked])}
        return [_Row(r[0], r[1], r[2], r[3], r[4], r[5], r[6], score, snippet)
                for r, score in ((loaded[i], score) for i, score in ranked if i in loaded)]

    @staticmethod
    def _title_may_match(conn: sqlite3.Connection, parsed: ParsedQuery) -> bool:
        """Might a session's title hold every needle of the query (``rank.titles_first``)?
        True, without looking, when the archive has more than ``TITLE_SCAN`` sessions."""
        needles = [n.lower() for n in _title_needles(parsed) if n]
        if not needles:
            return False
        top = conn.execute("SELECT max(rowid) FROM sessions").fetchone()[0] or 0
        if top > TITLE_SCAN:
            return True
        # LIKE folds ASCII letters only: a title with any other character (more bytes than
        # characters) is tested here, as titles_first tests it
        found = " AND ".join(["title LIKE ? ESCAPE '\\'"] * len(needles))
        titles = conn.execute(
            f"SELECT title FROM sessions INDEXED BY {CARD} WHERE title IS NOT NULL AND (({found}) "
            "OR length(title) <> length(CAST(title AS BLOB)))",
            ["%" + n.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
             for n in needles])
        return any(all(n in str(t[0]).lower() for n in needles) for t in titles)

    def _union(self, conn: sqlite3.Connection, parts: list[ParsedQuery], query: SearchQuery,
               limit: int) -> list[_Row]:
        """OR-groups answered group by group through their indexes, merged newest first."""
        found: dict[int, _Row] = {}
        for part in parts:
            for row in self._run(conn, part, query, limit):
                found.setdefault(row.id, row)
        return sorted(found.values(), key=lambda r: r.id, reverse=True)[:limit]

    def _fts(self, conn: sqlite3.Connection, parsed: ParsedQuery, query: SearchQuery,
             limit: int, *, snippets: bool = True, enough: int | None = None) -> list[_Row]:
        """Rank ids first (cheap columns only), then load text and snippets for the winners
        (without ``snippets``, the caller asks FTS5 for those of the hits it keeps:
        ``_fts_snippets``; the rows carry ``""`` until then)."""
        expr = parsed.fts5_expression()
        rows = []
        terms = [t.fts5() for t in parsed.terms if not t.negated]
        ranked = self._indexed(conn, parsed, query, limit)
        if ranked is None:
            ranked = self._ranked(conn, "messages_fts", expr, terms, ("", []), query, limit)
        if not snippets and ranked:
            return self._load_ranked(conn, parsed, [(i, -float(rank)) for i, rank in ranked],
                                     "", enough)
        for rowid, rank in ranked:
            r = conn.execute(
                f"SELECT {_HIT_COLUMNS}, snippet(messages_fts, 0, '[', ']', '…', 24) "
                "FROM messages_fts f JOIN messages m ON m.id = f.rowid "
                "JOIN sessions s ON s.id = m.session_id "
                "WHERE messages_fts MATCH ? AND f.rowid = ?", (expr, rowid)).fetchone()
            if r is not None:
                rows.append(_Row(r[0], r[1], r[2], r[3], r[4], r[5], r[6], -float(rank), r[7]))
        return rows

    def _indexed(self, conn: sqlite3.Connection, parsed: ParsedQuery, query: SearchQuery,
                 limit: int) -> list[tuple[int, float]] | None:
        """A one-term query ranked from the word impact index (``wordindex.py``): the same
        hits and ranks as ``_ranked`` gives, or None when the index cannot answer, the term
        is too broad to rank (then by recency, as ``_ranked`` does) or the sort is recency."""
        if query.sort != "relevance" or len(parsed.terms) != 1:
            return None
        term = parsed.terms[0]
        if term.negated or term.prefix or term.cjk:
            return None
        through = indexer.watermark(conn)
        if through < wordindex.MIN_ROWS or self._too_broad_to_rank(
                conn, "messages_fts", [term.fts5()]):
            return None
        want = max(60, limit * 3)
        while True:
            best = wordindex.best_of_term(conn, " ".join(term.words), term.fts5(), through, want)
            if best is None:
                return None
            allowed = allowed_ids(conn, [i for i, _ in best], query)
            kept = [(i, rank) for i, rank in best if i in allowed][:limit]
            if len(kept) >= limit or len(best) < want:
                return kept
            if want >= MAX_FETCH:
                return None
            want = min(want * 4, MAX_FETCH)

    def _trigram(self, conn: sqlite3.Connection, parsed: ParsedQuery, query: SearchQuery,
                 limit: int) -> list[_Row]:
        plan = parsed.trigram_plan()
        assert plan is not None  # mode == "trigram" guarantees it
        checks = "".join(" AND " + _contains(n) for n in plan.also_contains)
        checks += "".join(" AND " + _contains(n, True) for n in plan.excludes)
        ranked = self._ranked(conn, "messages_trigram", plan.match, list(plan.terms),
                              (checks, [*plan.also_contains, *plan.excludes]), query, limit)
        rows = []
        for rowid, rank in ranked:
            r = conn.execute(f"SELECT {_HIT_COLUMNS} FROM messages m JOIN sessions s "
                             "ON s.id = m.session_id WHERE m.id = ?", (rowid,)).fetchone()
            rows.append(_Row(r[0], r[1], r[2], r[3], r[4], r[5], r[6], -float(rank), None))
        return rows

    def _ranked(self, conn: sqlite3.Connection, table: str, match: str, terms: list[str],
                checks: tuple[str, list[object]], query: SearchQuery,
                limit: int) -> list[tuple[int, float]]:
        """(message id, bm25 rank) of the hits of ``match`` on ``table``, best or newest first.

        ``terms`` are the single-term parts of ``match``; ``checks`` is extra SQL on ``m``
        (substring tests) with its arguments.
        """
        if query.sort == "relevance" and self._too_broad_to_rank(conn, table, terms):
            query = records.replace(query, sort="recency")
        if query.sort == "relevance":
            top = self._top_candidates(conn, table, match, checks, query, limit)
            if top is not None:
                return top
        where, args = filters(query)
        # Selecting rank (bm25) costs O(every match of each term): only when ranking.
        rank, order = (("f.rank", "f.rank, f.rowid DESC") if query.sort == "relevance"
                       else ("0.0", "f.rowid DESC"))
        return conn.execute(
            f"SELECT m.id, {rank} FROM {table} f JOIN messages m ON m.id = f.rowid "
            f"JOIN sessions s ON s.id = m.session_id WHERE {table} MATCH ?{checks[0]}{where} "
            f"ORDER BY {order} LIMIT ?", [match, *checks[1], *args, limit]).fetchall()

    def _too_broad_to_rank(self, conn: sqlite3.Connection, table: str,
                           terms: list[str]) -> bool:
        """True when a term occurs in so many messages that bm25 would cost too much.

        FTS5's bm25 counts each term's matching rows over its WHOLE doclist (for the IDF), so
        a term in 600k messages costs ~30 ms whatever else the query says, while its IDF is
        nearly zero. The count is estimated from the newest ``BROAD_PROBE_ROWS`` ids.
        """
        top = conn.execute("SELECT max(id) FROM messages").fetchone()[0] or 0
        span = min(BROAD_PROBE_ROWS, top)
        for term in terms:
            sample = conn.execute(f"SELECT count(*) FROM {table} WHERE {table} MATCH ? "
                                  "AND rowid > ?", (term, top - span)).fetchone()[0]
            if span and sample * top / span > BROAD_MATCHES:
                return True
        return False

    def _top_candidates(self, conn: sqlite3.Connection, table: str, match: str,
                        checks: tuple[str, list[object]], query: SearchQuery,
                        limit: int) -> list[tuple[int, float]] | None:
        """The best ``limit`` hits among the best-ranked candidates of the whole index, or None
        when the filters rejected so many candidates that a full ranked join is needed.

        bm25 over the FTS table alone is cheap; joining every match of a common word to its
        message and session before sorting is what made relevance slow on large archives.
        """
        budget = max(60, limit * 3)
        # Ranked over every match (bm25 ~1.5 µs a match); ties go to the newer row.
        candidates = conn.execute(f"SELECT rowid, rank FROM {table} WHERE {table} MATCH ? "
                                  "ORDER BY rank, rowid DESC LIMIT ?", (match, budget)).fetchall()
        if not candidates:
            return []
        where, args = filters(query)
        marks = ",".join("?" * len(candidates))
        join = " JOIN sessions s ON s.id = m.session_id" if _needs_session(query) else ""
        allowed = {r[0] for r in conn.execute(
            f"SELECT m.id FROM messages m{join} WHERE m.id IN ({marks}){checks[0]}{where}",
            [*(c[0] for c in candidates), *checks[1], *args])}
        kept = [(rowid, rank) for rowid, rank in candidates if rowid in allowed][:limit]
        if len(kept) < limit and len(candidates) == budget:
            return None
        return kept

    def _grams(self, conn: sqlite3.Connection, parsed: ParsedQuery, query: SearchQuery,
               limit: int) -> list[_Row]:
        plan = parsed.gram_plan()
        assert plan is not None  # mode == "grams" guarantees it
        where, args = filters(query)
        checks = [_contains(n) for n in plan.also_contains]
        checks += [_contains(n, True) for n in plan.excludes]
        rows = conn.execute(
            f"SELECT {_HIT_COLUMNS} FROM messages_cjk_grams g "
            "JOIN messages m ON m.id = g.rowid JOIN sessions s ON s.id = m.session_id "
            f"WHERE messages_cjk_grams MATCH ? AND {' AND '.join(checks)}{where} "
            "ORDER BY g.rowid DESC LIMIT ?",
            [plan.match, *plan.also_contains, *plan.excludes, *args, limit]).fetchall()
        return [_Row(r[0], r[1], r[2], r[3], r[4], r[5], r[6], 0.0, None) for r in rows]

    def _scan(self, conn: sqlite3.Connection, parsed: ParsedQuery, query: SearchQuery,
              limit: int) -> list[_Row]:
        where, args = filters(query)
        predicate, pred_args = _substring_predicate(parsed)
        # CJK needles are only in CJK rows; symbols (a literal query) may be in any row
        rows_of = "" if parsed.literal else "m.has_cjk = 1 AND "
        base = (f"SELECT {_HIT_COLUMNS} FROM messages m JOIN sessions s ON s.id = m.session_id "
                f"WHERE {rows_of}{predicate}{where}")
        if query.session_id is not None:
            rows = conn.execute(base + " ORDER BY m.id DESC LIMIT ?",
                                [*pred_args, *args, limit]).fetchall()
        else:
            rows = self._scan_chunks(conn, base, [*pred_args, *args], limit)
        return [_Row(r[0], r[1], r[2], r[3], r[4], r[5], r[6], 0.0, None) for r in rows]

    def _scan_chunks(self, conn: sqlite3.Connection, base: str, args: list[object],
                     limit: int) -> list[tuple[object, ...]]:
        top = conn.execute("SELECT max(id) FROM messages").fetchone()[0]
        if top is None:
            return []
        deadline = time.monotonic() + self.scan_budget_seconds
        found: list[tuple[object, ...]] = []
        high = int(top)
        while high > 0 and len(found) < limit:
            low = high - SCAN_CHUNK
            found += conn.execute(base + " AND m.id > ? AND m.id <= ? ORDER BY m.id DESC LIMIT ?",
                                  [*args, low, high, limit - len(found)]).fetchall()
            high = low
            if time.monotonic() > deadline:
                log.info("CJK substring scan stopped at its time budget (id %d)", high)
                break
        return found

    @staticmethod
    def _fts_snippets(conn: sqlite3.Connection, parsed: ParsedQuery, rows: list[_Row],
                      hits: list[SearchHit]) -> list[SearchHit]:
        """The hits with FTS5's snippets (one statement), for rows loaded without them."""
        ids = {(r.session_id, r.seq): r.id for r in rows if r.snippet == ""}
        wanted = [ids[(h.session_id, h.seq)] for h in hits if (h.session_id, h.seq) in ids]
        if not wanted:
            return hits
        marks = ",".join("?" * len(wanted))
        found = {int(r[0]): str(r[1]) for r in conn.execute(
            "SELECT rowid, snippet(messages_fts, 0, '[', ']', '…', 24) FROM messages_fts "
            f"WHERE messages_fts MATCH ? AND rowid IN ({marks})",
            [parsed.fts5_expression(), *wanted])}
        out = []
        for hit in hits:
            rowid = ids.get((hit.session_id, hit.seq))
            snippet = found.get(rowid) if rowid is not None else None
            # not matched again, or a text holding a NUL (FTS5's snippet drops the words
            # around it): the plain snippet
            if rowid is not None and (snippet is None or "\x00" in hit.content):
                snippet = make_snippet(hit.content, parsed.highlight_needles())
            out.append(hit if snippet is None else records.replace(hit, snippet=snippet))
        return out

    @staticmethod
    def _hit(row: _Row) -> SearchHit:
        # a row without a snippet (None) gets its plain one if it is among the hits returned
        return SearchHit(session_id=row.session_id, session_title=row.title, seq=row.seq,
                         role=row.role, snippet=row.snippet or "", content=row.text,
                         created_at=row.created_at, score=row.score, message_id=row.id)


def _plain_snippets(hits: list[SearchHit], rows: list[_Row],
                    parsed: ParsedQuery) -> list[SearchHit]:
    """The hits whose rows carry no snippet (None: sentences, trigram, grams and scans) with
    the plain highlighted one, computed for these hits only (a hybrid search asks for 100 and
    keeps a few)."""
    plain = {(r.session_id, r.seq) for r in rows if r.snippet is None}
    if not plain:
        return hits
    needles = parsed.highlight_needles()
    return [records.replace(h, snippet=make_snippet(h.content, needles))
            if (h.session_id, h.seq) in plain else h for h in hits]


def _title_needles(parsed: ParsedQuery) -> list[str]:
    """What a session title must hold to rank first: every content term of the query."""
    if parsed.natural is not None:
        return parsed.natural.needles()
    return [n for t in parsed.terms if not t.negated for n in t.needles()]
