"""Property test (every backend): any mix of sync / append / rewind keeps the ledger invariants.

Model: the active rows always equal a plain list ``expected``. ``sync(h)`` leaves it alone when
``h`` is a prefix of it, else makes it ``h``; ``append(ms)`` extends it; ``rewind`` at a user
message cuts it there. After every step the stored active rows must equal the model, their
identities must be the chain of the model, and seq must strictly increase over all rows.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refold.messages.model import chain_identities
from refold.store import Store

MESSAGES = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"},
            {"role": "user", "content": "部署"}, {"role": "assistant", "content": "ok"}]
message = st.sampled_from(MESSAGES)
op = st.one_of(
    st.tuples(st.just("sync"), st.lists(message, max_size=6)),
    st.tuples(st.just("append"), st.lists(message, min_size=1, max_size=3)),
    st.tuples(st.just("rewind"), st.integers(min_value=0, max_value=8)),
)


def apply(store: Store, session_id: str, expected: list[dict[str, Any]],
          step: tuple[str, Any]) -> list[dict[str, Any]]:
    kind, arg = step
    if kind == "sync":
        result = store.sync_messages(session_id, arg)
        if arg == expected[:len(arg)]:
            assert (result.appended, result.skipped, result.rewound) == ([], len(arg), 0)
            return expected
        assert [m.message for m in result.appended] == arg[result.skipped:]
        return list(arg)
    if kind == "append":
        store.append_messages(session_id, arg)
        return expected + list(arg)
    users = [i for i, m in enumerate(expected) if m["role"] == "user"]
    if not users:
        return expected
    cut = users[arg % len(users)]
    seq = store.get_messages(session_id)[cut].seq
    record = store.rewind(session_id, seq)
    assert record.count == len(expected) - cut
    return expected[:cut]


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(op, max_size=8))
def test_ledger_invariants_hold(store: Store, steps: list[tuple[str, Any]]) -> None:
    session = store.create_session()
    expected: list[dict[str, Any]] = []
    for step in steps:
        expected = apply(store, session.id, expected, step)
        active = store.get_messages(session.id)
        assert [m.message for m in active] == expected
        assert [m.identity for m in active] == chain_identities(expected)
        every = [m.seq for m in store.get_messages(session.id, include_inactive=True)]
        assert every == sorted(set(every))
        assert store.get_session(session.id).message_count == len(every)
    assert [m.message for m in store.projection(session.id).messages] == expected
