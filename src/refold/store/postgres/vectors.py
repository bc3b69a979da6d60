"""Message vectors on PostgreSQL: float16 bytes beside the ledger, written off the append path.

The twin of ``refold.store.sqlite.vectors`` (the same float16 blobs, scanned with NumPy by the
search layer; pgvector is not required). ``message_vectors`` comes with migration 4.
"""

from __future__ import annotations

from typing import Any

from refold.store.base import SearchHit, SearchQuery
from refold.store.postgres.ledger import LedgerMixin

_HIT = "m.id, m.session_id, m.seq, m.role, m.search_text, m.created_at, s.title"


class VectorsMixin(LedgerMixin):
    """Store, list and resolve message vectors (the search layer scores them)."""

    def unembedded_messages(self, model: str, *, after_id: int = 0,
                            limit: int = 256) -> list[tuple[int, str]]:
        with self._tx("vectors") as cur:
            cur.execute("""SELECT m.id, m.search_text FROM messages m
                           LEFT JOIN message_vectors v ON v.id = m.id AND v.model = %s
                           WHERE m.id > %s AND v.id IS NULL ORDER BY m.id LIMIT %s""",
                        (model, int(after_id), int(limit)))
            return [(int(i), str(t)) for i, t in cur.fetchall()]

    def put_vectors(self, model: str, rows: list[tuple[int, bytes]]) -> None:
        with self._tx("vectors") as cur:
            cur.executemany("""INSERT INTO message_vectors (id, model, vec)
                               SELECT %s, %s, %s WHERE EXISTS (SELECT 1 FROM messages
                                                                WHERE id = %s)
                               ON CONFLICT (id) DO UPDATE SET model = EXCLUDED.model,
                                                              vec = EXCLUDED.vec""",
                            [(i, model, blob, i) for i, blob in rows])

    def vectors_after(self, model: str, after_id: int = 0,
                      limit: int = 50_000) -> list[tuple[int, bytes]]:
        with self._tx("vectors") as cur:
            cur.execute("SELECT id, vec FROM message_vectors WHERE model = %s AND id > %s "
                        "ORDER BY id LIMIT %s", (model, int(after_id), int(limit)))
            return [(int(i), bytes(v)) for i, v in cur.fetchall()]

    def hits_for_ids(self, scored: list[tuple[int, float]],
                     query: SearchQuery) -> list[SearchHit]:
        if not scored:
            return []
        ids = [i for i, _ in scored]
        from refold.store.postgres.search import _filters  # the search filters, shared

        where, args = _filters(query)
        clause = "".join(" AND " + w for w in where)
        with self._tx("vectors") as cur:
            cur.execute(f"""SELECT {_HIT} FROM messages m JOIN sessions s ON s.id = m.session_id
                            WHERE m.id = ANY(%s){clause}""", (ids, *args))
            rows: dict[int, Any] = {int(r[0]): r for r in cur.fetchall()}
        return [SearchHit(session_id=r[1], session_title=r[6], seq=r[2], role=r[3],
                          snippet=r[4][:160].replace("\n", " "), content=r[4],
                          created_at=r[5], score=score, message_id=int(r[0]))
                for r, score in ((rows[i], sc) for i, sc in scored if i in rows)]
