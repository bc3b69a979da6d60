"""PostgreSQL-specific behaviour: migrations, URLs, lossless text, pg_trgm CJK, leases, memory."""

from __future__ import annotations

import time
import uuid
from typing import Any

import psycopg
import pytest

import refold
from refold.errors import Conflict, InvalidInput, MigrationError, StorageError
from refold.store.base import MemoryRow, SearchQuery

pytestmark = pytest.mark.postgres


def _store(like: Any) -> Any:
    """A second store (its own pool: another host) on the schema of ``like``."""
    from refold.store.postgres import PostgresStore

    return PostgresStore(like.url, schema=like.schema)


def test_reopening_applies_no_migration_twice(postgres_store: Any) -> None:
    again = _store(postgres_store)
    try:
        assert again.applied_migrations == []
        assert postgres_store.applied_migrations != []
    finally:
        again.close()


def test_a_schema_from_a_newer_refold_is_refused(postgres_store: Any, postgres_url: str) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f'INSERT INTO "{postgres_store.schema}".schema_migrations '
                     "VALUES (999, 'future', 0)")
    with pytest.raises(MigrationError, match="newer"):
        _store(postgres_store)


def test_schema_from_url_query_and_bad_names(postgres_url: str) -> None:
    from refold.store.postgres import PostgresStore

    schema = f"t_{uuid.uuid4().hex[:12]}"
    store = PostgresStore(f"{postgres_url}?schema={schema}")
    try:
        assert store.schema == schema
        assert store.info()["schema"] == schema
    finally:
        store.drop_schema()
        store.close()
    with pytest.raises(InvalidInput):
        PostgresStore(postgres_url, schema='x"; DROP TABLE y; --')


def test_unreachable_server_is_a_storage_error() -> None:
    from refold.store.postgres import PostgresStore

    with pytest.raises(StorageError):
        PostgresStore("postgresql://127.0.0.1:1/test", timeout=2)


def test_nul_and_lone_surrogates_round_trip(postgres_store: Any) -> None:
    session = postgres_store.create_session()
    odd = [{"role": "user", "content": "a\x00b deploy"},
           {"role": "assistant", "content": "half \ud83d pair", "name": "x\x00"},
           {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "\x00"}]}]
    postgres_store.append_messages(session.id, odd)
    assert [m.message for m in postgres_store.get_messages(session.id)] == odd
    assert postgres_store.sync_messages(session.id, odd).appended == []
    hits = postgres_store.search(SearchQuery("deploy"))
    assert [h.seq for h in hits] == [1]
    draft_summary = "summary with \x00 and \udc00"
    from refold.store.base import CheckpointDraft

    cp = postgres_store.add_checkpoint(session.id, CheckpointDraft(
        summary=draft_summary, first_seq=1, last_seq=1, tail_start_seq=2,
        details={"k": "\x00"}))
    assert postgres_store.latest_checkpoint(session.id).summary == draft_summary
    assert cp.details == {"k": "\x00"}


def test_nul_in_a_session_field_is_invalid_input(postgres_store: Any) -> None:
    with pytest.raises(InvalidInput):
        postgres_store.create_session(source="bad\x00source")


def test_cjk_one_and_two_characters_find_every_message(postgres_store: Any) -> None:
    session = postgres_store.create_session()
    texts = ["我们部署了服务", "部署失败", "English only", "测试部", "署名", "部"]
    postgres_store.append_messages(session.id, [{"role": "user", "content": t} for t in texts])
    seqs = {q: sorted(h.seq for h in postgres_store.search(SearchQuery(q, limit=50)))
            for q in ("部", "部署", "署", "部署失败")}
    assert seqs == {"部": [1, 2, 4, 6], "部署": [1, 2], "署": [1, 2, 5], "部署失败": [2]}
    hit = postgres_store.search(SearchQuery("部署失败"))[0]
    assert "[部署失败]" in hit.snippet


def test_trigram_index_serves_cjk_substrings(postgres_store: Any, postgres_url: str) -> None:
    with psycopg.connect(postgres_url) as conn:
        conn.execute(f'SET search_path TO "{postgres_store.schema}", public')
        conn.execute("SET enable_seqscan = off")
        plan = "\n".join(r[0] for r in conn.execute(
            "EXPLAIN SELECT id FROM messages WHERE search_text ILIKE '%部署失败%'"))
    assert "messages_trgm" in plan


def test_latin_search_stems_ranks_and_survives_stop_words(postgres_store: Any) -> None:
    session = postgres_store.create_session(title="ops")
    postgres_store.append_messages(session.id, [
        {"role": "user", "content": "we deployed the service to config.yaml hosts"},
        {"role": "assistant", "content": "deploy deploy deploy again"},
        {"role": "user", "content": "the end"}])
    assert {h.seq for h in postgres_store.search(SearchQuery("deploying"))} == {1, 2}
    assert postgres_store.search(SearchQuery("deploy"))[0].seq == 2  # most occurrences first
    assert [h.seq for h in postgres_store.search(SearchQuery("config.yaml"))] == [1]
    assert {h.seq for h in postgres_store.search(SearchQuery("the"))} == {1, 3}
    for nasty in ("C++", '"unterminated', "(problem", "hello AND", "***", "{test}",
                  "OR hello", "a AND OR b", "deploy*", "it's", "\\", "'; DROP TABLE x; --"):
        postgres_store.search(SearchQuery(nasty))  # never raises


def test_lease_excludes_other_holders_until_released_or_expired(postgres_store: Any) -> None:
    other = _store(postgres_store)  # a second host: its own pool
    try:
        assert postgres_store.acquire_lease("compact:s1", "host-a", 60)
        assert not other.acquire_lease("compact:s1", "host-b", 60)
        assert postgres_store.acquire_lease("compact:s1", "host-a", 60)  # renewal
        other.release_lease("compact:s1", "host-b")  # not the holder: no effect
        assert not other.acquire_lease("compact:s1", "host-b", 60)
        postgres_store.release_lease("compact:s1", "host-a")
        assert other.acquire_lease("compact:s1", "host-b", 0.2)
        deadline = time.monotonic() + 10
        while not postgres_store.acquire_lease("compact:s1", "host-a", 60):
            assert time.monotonic() < deadline, "an expired lease was never released"
            time.sleep(0.05)
    finally:
        other.close()


def test_memory_save_is_compare_and_swap_across_hosts(postgres_store: Any) -> None:
    other = _store(postgres_store)
    try:
        assert postgres_store.memory_load("default", "memory") == ([], 0)
        row = MemoryRow(text="likes tea \x00", created_at=1.0, updated_at=2.0)
        assert postgres_store.memory_save("default", "memory", [row], 0) == 1
        with pytest.raises(Conflict):
            other.memory_save("default", "memory", [], 0)
        rows, version = other.memory_load("default", "memory")
        assert (rows, version) == ([row], 1)
        assert other.memory_save("default", "memory", [], 1) == 2
        with pytest.raises(Conflict):
            postgres_store.memory_save("default", "memory", [row], 1)
        assert postgres_store.memory_load("default", "user") == ([], 0)
    finally:
        other.close()


def test_hosts_forking_one_lineage_at_once_each_get_a_numbered_title(
        postgres_store: Any) -> None:
    """Serve processes on two hosts branching one conversation at the same moment both
    numbered their branch "chat #2": the second insert broke the unique title (a 409 to its
    client). Each fork now waits for the one before it to commit and takes the next number."""
    import threading

    hosts = [postgres_store, *(_store(postgres_store) for _ in range(3))]
    try:
        parent = postgres_store.create_session(title="chat")
        postgres_store.append_messages(parent.id, [{"role": "user", "content": "hello"}])
        start = threading.Barrier(len(hosts) * 2)
        titles: list[str] = []
        errors: list[BaseException] = []

        def fork(host: Any) -> None:
            try:
                start.wait(10)
                titles.append(host.fork_session(parent.id, kind="branch").title)
            except BaseException as exc:  # surfaced below
                errors.append(exc)

        threads = [threading.Thread(target=fork, args=(h,)) for h in hosts for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert not errors, errors
        assert sorted(titles, key=lambda t: int(t.split("#")[1])) == [
            f"chat #{n}" for n in range(2, len(threads) + 2)]
    finally:
        for host in hosts[1:]:
            host.close()


def test_upgrade_from_version_1_backfills_cjk_grams(postgres_url: str) -> None:
    from refold.store.postgres import PostgresStore
    from refold.store.postgres.schema import MIGRATIONS, ensure_trigram_extension, migrate

    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        path = [schema, ensure_trigram_extension(conn)]
        assert migrate(conn, schema, path, MIGRATIONS[:1]) == [1]
        conn.execute("INSERT INTO sessions (id, started_at) VALUES ('old', 0)")
        conn.execute("INSERT INTO messages (session_id, seq, role, body, identity, created_at, "
                     "search_text) VALUES ('old', 1, 'user', '{}', 'x', 0, '旧的部署记录')")
    store = PostgresStore(postgres_url, schema=schema)
    try:
        assert store.applied_migrations == [m.version for m in MIGRATIONS[1:]]
        assert [(h.session_id, h.seq) for h in store.search(SearchQuery("署"))] == [("old", 1)]
    finally:
        store.drop_schema()
        store.close()


def test_upgrade_from_version_2_folds_accents_of_old_rows(postgres_url: str) -> None:
    """Rows written before accent folding get their search vectors recomputed by the
    migration: "Zurich" then finds the old "Zürich" row."""
    from refold.store.postgres import PostgresStore
    from refold.store.postgres.schema import MIGRATIONS, extension_schemas, migrate

    schema = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        path = [schema, *extension_schemas(conn)]
        assert migrate(conn, schema, path, MIGRATIONS[:2]) == [1, 2]
        conn.execute("INSERT INTO sessions (id, started_at) VALUES ('old', 0)")
        for seq, text in ((1, "meet me in Zürich at the café"), (2, "plain ascii words")):
            conn.execute("INSERT INTO messages (session_id, seq, role, body, identity, "
                         "created_at, search_text) VALUES ('old', %s, 'user', '{}', %s, 0, %s)",
                         (seq, f"id{seq}", text))
        before = conn.execute("SELECT count(*) FROM messages "
                              "WHERE tsv @@ to_tsquery('refold_search', 'zurich')").fetchone()
        assert before == (0,)  # not folded yet
    store = PostgresStore(postgres_url, schema=schema)
    try:
        assert store.applied_migrations == [m.version for m in MIGRATIONS[2:]]
        assert [(h.session_id, h.seq) for h in store.search(SearchQuery("Zurich cafe"))] == [
            ("old", 1)]
        assert [(h.session_id, h.seq) for h in store.search(SearchQuery("ascii"))] == [
            ("old", 2)]
    finally:
        store.drop_schema()
        store.close()


def test_upgrade_to_version_7_finds_words_glued_in_old_cjk_rows(postgres_url: str) -> None:
    """CJK rows written before migration 7 get their glued ASCII words (``~pytest``) added to
    their grams, so the bare word finds them."""
    from refold.store.postgres import PostgresStore
    from refold.store.postgres.codec import cjk_gram_list
    from refold.store.postgres.schema import MIGRATIONS, extension_schemas, migrate

    schema = f"t_{uuid.uuid4().hex[:12]}"
    old_grams = [g for g in cjk_gram_list("用pytest跑一下") or [] if not g.startswith("~")]
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        path = [schema, *extension_schemas(conn)]
        assert migrate(conn, schema, path, MIGRATIONS[:6]) == [1, 2, 3, 4, 5, 6]
        conn.execute("INSERT INTO sessions (id, started_at) VALUES ('old', 0)")
        conn.execute("INSERT INTO messages (session_id, seq, role, body, identity, created_at, "
                     "search_text, cjk_grams) VALUES ('old', 1, 'user', '{}', 'x', 0, "
                     "'用pytest跑一下', %s)", (old_grams,))
    store = PostgresStore(postgres_url, schema=schema)
    try:
        assert store.applied_migrations == [m.version for m in MIGRATIONS[6:]]
        assert [(h.session_id, h.seq) for h in store.search(SearchQuery("pytest"))] == [
            ("old", 1)]
    finally:
        store.drop_schema()
        store.close()


def test_gram_index_serves_short_cjk_queries(postgres_store: Any, postgres_url: str) -> None:
    with psycopg.connect(postgres_url) as conn:
        conn.execute(f'SET search_path TO "{postgres_store.schema}", public')
        conn.execute("SET enable_seqscan = off")
        plan = "\n".join(r[0] for r in conn.execute(
            "EXPLAIN SELECT id FROM messages WHERE cjk_grams @> ARRAY['部署']"))
    assert "messages_grams" in plan


def test_connections_dropped_by_the_server_are_replaced(postgres_store: Any,
                                                        postgres_url: str) -> None:
    session = postgres_store.create_session()
    pool = postgres_store._pool  # only this store's own connections are cut
    with pool.connection() as conn:
        pid = conn.info.backend_pid
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        row = admin.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone()
    assert row == (True,)
    for _ in range(3):  # the dead connection is noticed at checkout and replaced
        postgres_store.append_messages(session.id, [{"role": "user", "content": "still here"}])
    assert len(postgres_store.get_messages(session.id)) == 3


def test_store_url_names_its_schema(postgres_store: Any) -> None:
    assert postgres_store.url.endswith(f"schema={postgres_store.schema}")
    again = refold.open(postgres_store.url)  # the same data, not the public schema
    try:
        session = postgres_store.create_session(title="here")
        assert again.get_session(session.id).title == "here"
    finally:
        again.close()
