"""Property test (every backend): a CJK query of any length finds exactly the messages holding it.

The texts mix a few Han, Kana and Hangul letters with spaces and punctuation, so every path is
used: the gram index (1–2 letters), the trigram index (3+), and OR-groups.
"""

from __future__ import annotations

from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import strategies as st

from refold.store import SearchQuery, Store

ALPHABET = "部署服务中文カタ한국 ，。"
texts = st.lists(st.text(alphabet=ALPHABET, min_size=1, max_size=12), min_size=1, max_size=8)


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=texts, data=st.data())
def test_cjk_substrings_are_found_exactly(store: Store, texts: list[str],
                                          data: st.DataObject) -> None:
    session = store.create_session()
    store.append_messages(session.id, [{"role": "user", "content": t} for t in texts])
    source = data.draw(st.sampled_from(texts))
    start = data.draw(st.integers(0, len(source) - 1))
    needle = source[start:start + data.draw(st.integers(1, 4))].strip(" ，。")
    assume(needle and not any(c in needle for c in " ，。"))
    hits = store.search(SearchQuery(needle, session_id=session.id, limit=50, window=0))
    expected = [i + 1 for i, t in enumerate(texts) if needle in t]
    assert sorted(h.seq for h in hits) == expected, needle
    other = data.draw(st.sampled_from(list("部署服务中文カタ한국")))
    either = store.search(SearchQuery(f"{needle} OR {other}", session_id=session.id,
                                      limit=50, window=0))
    assert sorted(h.seq for h in either) == [i + 1 for i, t in enumerate(texts)
                                             if needle in t or other in t]


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(max_size=40))
@example(text="0\x000")  # a chunk of words with a NUL inside reached FTS5 and PostgreSQL
@example(text="docker\x00compose.yml")
@example(text="\x00¢")  # symbols only, with a NUL: "unterminated string" from FTS5
def test_no_query_text_raises(store: Store, text: str) -> None:
    from refold.errors import SearchQueryError

    try:
        hits = store.search(SearchQuery(text, window=0))
    except SearchQueryError:
        assert not text.strip()
    else:
        assert isinstance(hits, list)
