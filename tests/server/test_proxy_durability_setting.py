"""``serve_sqlite_synchronous``: what SQLite durability ``refold serve`` opens its store with."""

from __future__ import annotations

from pathlib import Path

import pytest

from refold.errors import InvalidInput
from refold.server import create_app
from refold.store import open_store


def _synchronous(store: object) -> int:
    return int(store.db.conn.execute("PRAGMA synchronous").fetchone()[0])  # type: ignore[attr-defined]


@pytest.mark.parametrize(("setting", "pragma"), [(None, 1), ("FULL", 2), ("normal", 1)])
def test_serve_opens_its_sqlite_store_with_the_setting(tmp_path: Path, setting: str | None,
                                                       pragma: int) -> None:
    fields = {} if setting is None else {"serve_sqlite_synchronous": setting}
    app = create_app(upstream="http://127.0.0.1:9/v1", home=tmp_path, **fields)
    store = app.state.proxy_app._open_store()  # what the lifespan opens at startup
    try:
        assert _synchronous(store) == pragma  # NORMAL by default
    finally:
        store.close()


def test_a_bad_setting_is_refused_before_serving(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="FULL or NORMAL"):
        create_app(upstream="http://127.0.0.1:9/v1", home=tmp_path,
                   serve_sqlite_synchronous="OFF")


def test_the_library_default_stays_full(tmp_path: Path) -> None:
    store = open_store(tmp_path / "lib.db")
    try:
        assert _synchronous(store) == 2
    finally:
        store.close()
    with pytest.raises(InvalidInput):
        open_store(tmp_path / "x.db", sqlite_synchronous="EXTRA")
