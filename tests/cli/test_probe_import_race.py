"""Two ``refold import --session NAME`` of different transcripts at the same moment: the
second found the session missing, then met the one the first had just created and synced its
file as that session's whole history, rewinding the first import's messages (which had
reported success). Now it is added after them, as when the two run one after the other. The
race is made certain here: the session is created between the lookup and the store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from refold.cli import ledger
from refold.cli.main import cli
from refold.store import Store
from refold.store.base import SessionDraft


def _db_url(store: Store) -> str:
    schema = getattr(store, "schema", None)
    if schema is None or "schema=" in store.url:
        return store.url
    return f"{store.url}{'&' if '?' in store.url else '?'}schema={schema}"


def _conversation(tag: str, turns: int) -> list[dict[str, Any]]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": f"{tag} {i}"}
            for i in range(turns)]


def test_a_session_created_meanwhile_keeps_its_messages(
        store: Store, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first, second = _conversation("first", 6), _conversation("second", 4)
    (tmp_path / "b.json").write_text(json.dumps(second))
    looked_up = ledger._target_session

    def racing(st: Store, ref: str | None, messages: list[Any], **kw: Any) -> ledger.Target:
        target = looked_up(st, ref, messages, **kw)
        assert target.create is not None  # it saw the session missing …
        # … and the other import creates it now, with its own transcript
        st.sync_messages("shared", first, create=SessionDraft(title="shared", source="import"))
        return target

    monkeypatch.setattr(ledger, "_target_session", racing)
    result = CliRunner().invoke(cli, ["--home", str(tmp_path / "home"), "--db", _db_url(store),
                                      "import", str(tmp_path / "b.json"), "--session", "shared",
                                      "--json"])
    assert result.exit_code == 0, (result.output, result.exception)
    report = json.loads(result.stdout)
    assert (report["session_id"], report["appended"], report["rewound"]) == ("shared", 4, 0)
    assert report["added_after"] == 6
    rows = store.get_messages("shared", include_inactive=True)
    assert [r.message["content"] for r in rows] == [m["content"] for m in first + second]
    assert all(r.active for r in rows) and store.list_rewinds("shared") == []
