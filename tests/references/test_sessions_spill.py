"""``@session``: summary + recent messages within 20% of the window, shared by several
references, the full text spilled (0600, path-safe, per tenant), other tenants unknown."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from refold.errors import InvalidInput, NotFound
from refold.references import ReferenceExpander, SessionReferences, SpillStore
from refold.store import Store
from refold.store.base import CheckpointDraft
from refold.tools import session_search_tool


def seed(store: Store, title: str, *, owner: str = "", turns: int = 3, size: int = 5) -> str:
    session = store.create_session(title=title, owner=owner)
    messages = []
    for i in range(turns):
        messages.append({"role": "user", "content": f"{title} question {i} " + "x " * size})
        messages.append({"role": "assistant", "content": f"{title} answer {i}"})
    store.append_messages(session.id, messages)
    return session.id


def expander(store: Store, tmp_path: Path, owner: str = "") -> ReferenceExpander:
    spill = SpillStore(tmp_path / "spill", owner=owner)
    return ReferenceExpander(sessions=SessionReferences(store, owner=owner, spill=spill))


def test_a_session_reference_attaches_summary_and_recent_messages(
        store: Store, tmp_path: Path) -> None:
    sid = seed(store, "billing", turns=4)
    store.add_checkpoint(sid, CheckpointDraft(summary="Goal: fix the refund rounding.",
                                              first_seq=1, last_seq=2, tail_start_seq=3))
    out = expander(store, tmp_path).expand("continue @session:billing", context_length=100_000)
    block = out.message.split("--- Referenced sessions ---", 1)[1]
    assert "Latest summary:\nGoal: fix the refund rounding." in block
    assert "[assistant] billing answer 3" in block and f"(session {sid})" in block
    assert out.warnings == [] and out.references[0].status == "attached"


def test_the_full_projection_is_spilled_and_paged_by_the_tool(
        store: Store, tmp_path: Path) -> None:
    seed(store, "long", turns=40, size=200)
    exp = expander(store, tmp_path)
    out = exp.expand("@session:long", context_length=4000)  # 800-token budget: cut
    assert out.tokens <= 800 + 20
    assert out.references[0].status == "cut" and "cut to its share" in out.warnings[0]
    spill_id = out.message.split("spill_id ", 1)[1].split()[0]
    path = tmp_path / "spill" / "local" / f"{spill_id}.txt"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    tool = session_search_tool(store, spill=exp.spill)
    pages, offset = [], 0
    while offset is not None:
        page = json.loads(tool.handler({"mode": "spill", "spill_id": spill_id,
                                        "offset": offset}))
        pages.append(page["text"])
        offset = page.get("next_offset")
    text = "".join(pages)
    assert len(pages) > 1 and "long question 0" in text and "long answer 39" in text
    assert "long question 0" not in out.message  # the oldest only in the spill


@pytest.mark.parametrize("bad", ["../../etc/passwd", "/etc/passwd", "a" * 24 + "/..", "",
                                 "0123456789abcdef0123456Z"])
def test_spill_reads_refuse_anything_but_an_id(tmp_path: Path, bad: str) -> None:
    with pytest.raises(InvalidInput):
        SpillStore(tmp_path).read(bad)


def test_a_spill_id_of_another_tenant_is_not_found(tmp_path: Path) -> None:
    spill_id = SpillStore(tmp_path, owner="key-aaaa").write("alpha's text")
    with pytest.raises(NotFound):
        SpillStore(tmp_path, owner="key-bbbb").read(spill_id)
    assert SpillStore(tmp_path, owner="key-aaaa").read(spill_id).text == "alpha's text"
    with pytest.raises(InvalidInput):
        SpillStore(tmp_path, owner="../x")


def test_a_session_of_another_tenant_is_unknown(store: Store, tmp_path: Path) -> None:
    seed(store, "secret-plans", owner="key-alpha")
    out = expander(store, tmp_path, owner="key-beta").expand(
        "@session:secret-plans", context_length=100_000)
    assert "secret" not in out.message.replace("@session:secret-plans", "")
    assert out.references[0].status == "refused" and "unknown session" in out.warnings[0]
    mine = expander(store, tmp_path, owner="key-alpha").expand(
        "@session:secret-plans", context_length=100_000)
    assert "secret-plans question 0" in mine.message


def test_several_session_references_share_one_budget(store: Store, tmp_path: Path) -> None:
    for name in ("one", "two", "three"):
        seed(store, name, turns=30, size=30)
    out = expander(store, tmp_path).expand("@session:one @session:two @session:three",
                                           context_length=10_000)
    assert out.tokens <= 2000 + 30  # 20% of the window, for all three
    block = out.message.split("--- Referenced sessions ---", 1)[1]
    assert all(f"@session:{n}:" in block for n in ("one", "two", "three"))


def test_the_current_session_and_unknown_ones_are_warnings(
        store: Store, tmp_path: Path) -> None:
    sid = seed(store, "here")
    out = expander(store, tmp_path).expand("@session:here @session:nowhere",
                                           context_length=8000, current_session_id=sid)
    assert out.message == "@session:here @session:nowhere"
    assert "current session" in out.warnings[0] and "unknown session" in out.warnings[1]
