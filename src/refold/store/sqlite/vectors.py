"""Message vectors on SQLite: float16 blobs beside the ledger, written off the append path.

``message_vectors`` (migration 4) holds one vector per message and model; rows go with their
message (ON DELETE CASCADE). Appends never touch it: ``refold index`` (or a background indexer)
fills it from ``unembedded_messages``, so a vector may lag its message, never block it.
"""

from __future__ import annotations

from refold.store.base import SearchHit, SearchQuery
from refold.store.sqlite.natural import filters
from refold.store.sqlite.state import StateOps

_HIT = "m.id, m.session_id, m.seq, m.role, m.text, m.created_at, s.title"


class VectorOps(StateOps):
    """Mixin: store, list and resolve message vectors (the search layer scores them)."""

    def unembedded_messages(self, model: str, *, after_id: int = 0,
                            limit: int = 256) -> list[tuple[int, str]]:
        """(id, text) of messages after ``after_id`` without a ``model`` vector, oldest first."""
        with self.db.read() as conn:
            rows = conn.execute(
                "SELECT m.id, m.text FROM messages m LEFT JOIN message_vectors v "
                "ON v.id = m.id AND v.model = ? WHERE m.id > ? AND v.id IS NULL "
                "ORDER BY m.id LIMIT ?", (model, int(after_id), int(limit))).fetchall()
        return [(int(i), str(t)) for i, t in rows]

    def put_vectors(self, model: str, rows: list[tuple[int, bytes]]) -> None:
        """Store vectors (replacing a message's earlier one); ids of deleted messages are
        skipped."""
        with self.db.write() as conn:
            conn.executemany(
                "INSERT OR REPLACE INTO message_vectors (id, model, vec) "
                "SELECT ?, ?, ? WHERE EXISTS (SELECT 1 FROM messages WHERE id = ?)",
                [(i, model, blob, i) for i, blob in rows])

    def vectors_after(self, model: str, after_id: int = 0,
                      limit: int = 50_000) -> list[tuple[int, bytes]]:
        with self.db.read() as conn:
            rows = conn.execute("SELECT id, vec FROM message_vectors WHERE model = ? AND id > ? "
                                "ORDER BY id LIMIT ?", (model, int(after_id), int(limit)))
            return [(int(i), bytes(v)) for i, v in rows.fetchall()]

    def hits_for_ids(self, scored: list[tuple[int, float]],
                     query: SearchQuery) -> list[SearchHit]:
        """The scored messages that pass ``query``'s filters, in the given order (no window)."""
        if not scored:
            return []
        ids = [i for i, _ in scored]
        where, args = filters(query)
        marks = ",".join("?" * len(ids))
        with self.db.read() as conn:
            rows = {int(r[0]): r for r in conn.execute(
                f"SELECT {_HIT} FROM messages m JOIN sessions s ON s.id = m.session_id "
                f"WHERE m.id IN ({marks}){where}", [*ids, *args])}
        return [SearchHit(session_id=r[1], session_title=r[6], seq=r[2], role=r[3],
                          snippet=r[4][:160].replace("\n", " "), content=r[4],
                          created_at=r[5], score=score, message_id=int(r[0]))
                for r, score in ((rows[i], sc) for i, sc in scored if i in rows)]
