"""Property tests for the pure batch function: limits, uniqueness, no mutation on failure."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from refold.errors import RefoldError
from refold.memory.entries import char_count
from refold.memory.ops import MemoryOp, apply_ops
from refold.store.base import MemoryRow

words = st.sampled_from(["alpha", "beta", "gamma", "delta", "pnpm", "用户", "🚀", "x" * 30])
texts = st.lists(words, min_size=1, max_size=3).map(" ".join)
ops = st.one_of(
    texts.map(lambda t: MemoryOp("add", content=t)),
    st.tuples(words, texts).map(lambda p: MemoryOp("replace", old_text=p[0], content=p[1])),
    words.map(lambda w: MemoryOp("remove", old_text=w)),
)


@given(st.lists(texts, max_size=6, unique=True), st.lists(ops, min_size=1, max_size=5),
       st.integers(min_value=20, max_value=200))
def test_batches_respect_limit_uniqueness_and_purity(start: list[str], batch: list[MemoryOp],
                                                     limit: int) -> None:
    rows = [MemoryRow(text=t, created_at=1.0, updated_at=1.0) for t in start]
    before = list(rows)
    try:
        applied = apply_ops(rows, batch, limit, now=2.0)
    except RefoldError:
        assert rows == before  # a failed batch changes nothing
        return
    result = [r.text for r in applied.rows]
    assert len(result) == len(set(result))
    assert char_count(result) <= max(limit, char_count(start))
    assert rows == before
    untouched = {t for t in start if not any(op.old_text and op.old_text in t for op in batch)}
    for row in applied.rows:
        assert row.created_at in (1.0, 2.0)
        if row.text in untouched:
            assert row.created_at == row.updated_at == 1.0
