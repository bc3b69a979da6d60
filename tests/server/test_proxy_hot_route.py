"""``POST /v1/chat/completions`` skips Starlette's router (``app.HotRoute``) and answers as it
did through it: the same scope for the endpoint, an HTTPException rendered by the app's
handler, an unexpected error a 500 with the request id; other methods, paths and a
``root_path`` still go through the router."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.testclient import TestClient

from refold.server import app as app_module
from refold.server import create_app

BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def _client(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, completions: Any,
            **kw: Any) -> TestClient:
    monkeypatch.setattr(app_module.ProxyApp, "completions", completions)
    return TestClient(create_app(upstream="http://127.0.0.1:9/v1", home=tmp_path),
                      raise_server_exceptions=False, **kw)


def test_the_endpoint_sees_the_scope_the_router_gave_it(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[dict[str, Any]] = []

    async def completions(self: Any, request: Request, tenant: Any) -> JSONResponse:
        seen.append(dict(request.scope))
        return JSONResponse({"ok": (await request.json())["model"]})

    with _client(tmp_path, monkeypatch, completions) as client:
        response = client.post("/v1/chat/completions", json=BODY)
        router = client.app.router  # type: ignore[attr-defined]
    assert response.json() == {"ok": "m"} and response.headers["x-request-id"]
    scope = seen[0]
    assert scope["router"] is router and scope["route"] is router.routes[0]
    assert scope["endpoint"] is router.routes[0].endpoint and scope["path_params"] == {}


def test_errors_are_answered_as_the_router_answered_them(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def completions(self: Any, request: Request, tenant: Any) -> JSONResponse:
        kind = (await request.json())["model"]
        if kind == "http":
            raise HTTPException(status_code=418, detail="teapot")
        raise RuntimeError("a bug")

    with _client(tmp_path, monkeypatch, completions) as client:
        http = client.post("/v1/chat/completions", json=dict(BODY, model="http"))
        bug = client.post("/v1/chat/completions", json=dict(BODY, model="bug"),
                          headers={"x-request-id": "req-7"})
        wrong = client.get("/v1/chat/completions")
    assert http.status_code == 418
    assert http.json()["error"] == {"message": "POST /v1/chat/completions: teapot",
                                    "type": "server_error", "code": "418"}
    assert bug.status_code == 500 and bug.json()["error"]["code"] == "internal_error"
    assert bug.headers["x-request-id"] == "req-7"
    assert wrong.status_code == 405 and wrong.json()["error"]["type"] == "invalid_request_error"


def test_a_root_path_goes_through_the_router(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []

    async def completions(self: Any, request: Request, tenant: Any) -> JSONResponse:
        calls.append(request.scope["root_path"])
        return JSONResponse({})

    with _client(tmp_path, monkeypatch, completions, root_path="/proxy") as client:
        ok = client.post("/proxy/v1/chat/completions", json=BODY)
    assert ok.status_code == 200 and calls == ["/proxy"]
