"""Client keys: who is let in and which tenant (owner namespace) each key maps to."""

from __future__ import annotations

from typing import Any

import pytest

from refold.server.auth import AuthError, KeyRing, owner_for_key


def test_open_mode_is_the_local_owner_and_keeps_the_bearer() -> None:
    ring = KeyRing([])
    assert ring.open
    tenant = ring.authenticate({"authorization": "Bearer sk-client"})
    assert tenant.owner == "" and tenant.bearer == "sk-client"
    assert ring.authenticate({}).bearer is None


def test_each_key_is_its_own_tenant_and_never_appears_in_it() -> None:
    ring = KeyRing(["alpha-key", "beta-key"])
    a = ring.authenticate({"authorization": "Bearer alpha-key"})
    b = ring.authenticate({"authorization": "bearer  beta-key "})
    assert a.owner != b.owner
    assert a.owner == owner_for_key("alpha-key")
    assert "alpha" not in a.owner and a.owner.startswith("key-")


@pytest.mark.parametrize("header", ["", "Bearer", "Bearer wrong", "Basic alpha-key", "alpha-key"])
def test_missing_or_wrong_keys_are_refused(header: str) -> None:
    ring = KeyRing(["alpha-key"])
    with pytest.raises(AuthError):
        ring.authenticate({"authorization": header} if header else {})


def test_refold_errors_map_to_openai_shaped_statuses() -> None:
    from refold.errors import (
        CompactionError,
        Conflict,
        ContextOverflowError,
        InvalidInput,
        NotFound,
        StorageError,
        SummarizerError,
        UpstreamError,
    )
    from refold.server.wire import status_for

    cases = [
        (InvalidInput("bad"), 400, "invalid_input"),
        (NotFound("gone"), 404, "not_found"),
        (Conflict("busy"), 409, "conflict"),
        (StorageError("disk"), 500, "storage_error"),
        (CompactionError("irreducible"), 400, "context_length_exceeded"),
        (SummarizerError("auth", retryable=False), 502, "summarizer_failed"),
        (ContextOverflowError("too long", status=400), 400, "context_length_exceeded"),
        (UpstreamError("nope", kind="auth", status=401), 502, "upstream_auth"),
        (UpstreamError("slow", kind="timeout"), 504, "upstream_timeout"),
        (UpstreamError("quota", kind="quota", status=429), 429, "upstream_quota"),
    ]
    for err, status, code in cases:
        got_status, body = status_for(err)
        assert (got_status, body["error"]["code"]) == (status, code), err
        assert body["error"]["message"] and body["error"]["type"]


def test_create_app_takes_settings_or_fields_and_needs_an_upstream(tmp_path: Any) -> None:
    from refold.config import Settings
    from refold.errors import InvalidInput
    from refold.server import create_app

    with pytest.raises(InvalidInput, match="no upstream"):
        create_app(home=tmp_path)
    app = create_app(upstream="http://127.0.0.1:9/v1", home=tmp_path, api_keys=["k"])
    assert app.state.proxy_app.settings.api_keys == ["k"]
    base = Settings(home=tmp_path, upstream="http://a/v1", model="m1")
    app = create_app(base, model="m2")
    assert app.state.proxy_app.settings.model == "m2" and base.model == "m1"
