"""A session id too long for PostgreSQL's indexes is refused up front with a clear error (the
CLI's ``error: …``, exit 2), not a btree error from the server; ids up to the documented
length work whatever their characters."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from refold.errors import InvalidInput
from refold.store.base import SessionDraft

pytestmark = pytest.mark.postgres

MAX_SESSION_ID_LENGTH = 500  # documented in refold.store.postgres.sessions


def _random_text(n: int, low: int, high: int, seed: int) -> str:
    """``n`` characters that do not compress (PostgreSQL would fit a repetitive id)."""
    rng = random.Random(seed)
    return "".join(chr(rng.randint(low, high)) for _ in range(n))


def test_an_id_too_long_for_the_indexes_is_invalid_input(postgres_store: Any) -> None:
    store = postgres_store
    long_id = _random_text(1500, 0x4E00, 0x9FFF, 1)
    with pytest.raises(InvalidInput, match=f"at most {MAX_SESSION_ID_LENGTH} characters"):
        store.create_session(session_id=long_id)
    with pytest.raises(InvalidInput, match=f"at most {MAX_SESSION_ID_LENGTH} characters"):
        store.sync_messages(long_id, [{"role": "user", "content": "hi"}],
                            create=SessionDraft())
    assert store.list_sessions() == []


def test_the_longest_id_of_four_byte_characters_is_stored(postgres_store: Any) -> None:
    from refold.store.postgres import sessions

    assert sessions.MAX_SESSION_ID_LENGTH == MAX_SESSION_ID_LENGTH
    store = postgres_store
    sid = _random_text(MAX_SESSION_ID_LENGTH, 0x20000, 0x2A6DF, 2)  # 4 bytes each in UTF-8
    store.sync_messages(sid, [{"role": "user", "content": "hi"},
                              {"role": "assistant", "content": "hello"}],
                        create=SessionDraft(title="long"))
    store.append_event(sid, "note", {"x": 1})
    other = store.create_session(session_id=sid[:-1] + "x")
    assert other.id == sid[:-1] + "x"
    assert [m.seq for m in store.get_messages(sid)] == [1, 2]


def test_the_cli_refuses_a_long_session_id_with_a_clear_error(postgres_url: str,
                                                              tmp_path: Path) -> None:
    from refold.store.postgres import PostgresStore

    schema = f"t_{uuid.uuid4().hex[:12]}"
    sep = "&" if "?" in postgres_url else "?"
    url = f"{postgres_url}{sep}schema={schema}"
    transcript = tmp_path / "chat.json"
    transcript.write_text('[{"role": "user", "content": "hello"}]')
    env = {**os.environ, "REFOLD_HOME": str(tmp_path / "home")}
    env.pop("REFOLD_DB", None)
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "refold", "--db", url, "import", str(transcript),
             "--session", _random_text(1500, 0x4E00, 0x9FFF, 3)],
            capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith("error: "), proc.stderr
        assert f"at most {MAX_SESSION_ID_LENGTH} characters" in proc.stderr
        assert "index row size" not in proc.stderr and "Traceback" not in proc.stderr
    finally:
        store = PostgresStore(url)
        store.drop_schema()
        store.close()
