"""orjson decodes request bodies and streamed chunks and encodes upstream bodies only where it
agrees with the json module (``refold.fastjson``): what json reads differently or refuses —
integers past 64 bits, lone surrogates, numbers that overflow to infinity — and what orjson
would write differently (a non-finite float) take json's path, so the proxy behaves as it did
without orjson; and without orjson installed it runs on json alone."""

from __future__ import annotations

import contextlib
import json
import math
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from refold import fastjson, jsonscan
from refold.llm.sse import parse_chunk
from refold.testing import ScriptedReply, serve

ProxyFactory = Callable[..., Any]
BIG = 123456789012345678901234567890  # past 64 bits: orjson would read a float
LIMITS = [2**63 - 1, 2**63, 2**64 - 1, 2**64, -(2**63), -(2**63) - 1, 10**18, -(10**19)]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.sampled_from(LIMITS)
    | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)


def exact(value: Any) -> str:
    """A spelling that tells 1 from 1.0 and keeps every float's bits (json's repr)."""
    return json.dumps(value, sort_keys=True)


@settings(max_examples=300, deadline=None)
@given(st.lists(json_values) | st.dictionaries(st.text(max_size=8), json_values),
       st.booleans(), st.booleans())
def test_loads_reads_what_json_reads_or_leaves_it_to_json(value: Any, ascii: bool,
                                                          native: bool) -> None:
    raw = json.dumps(value, ensure_ascii=ascii).encode("utf-8", "surrogatepass")
    with _c_module(native):
        fast = fastjson.loads(raw)
    if fast is not None:
        assert exact(fast) == exact(json.loads(raw))


@settings(max_examples=300, deadline=None)
@given(json_values | st.floats(), st.booleans())
def test_dumps_writes_the_values_json_writes_or_leaves_it_to_json(value: Any,
                                                                  native: bool) -> None:
    with _c_module(native):
        data = fastjson.dumps(value)
    if data is not None:
        assert exact(json.loads(data)) == exact(json.loads(json.dumps(value)))


@contextlib.contextmanager
def _c_module(native: bool) -> Iterator[None]:
    """The checks in C (``refold._jsonscan``, where built) or in Python."""
    with pytest.MonkeyPatch.context() as patch:
        if not native:
            patch.setattr(jsonscan, "_native", None)
        yield


def test_a_body_with_null_values_is_written_by_orjson_where_the_c_walk_is_built(
        native_jsonscan: None) -> None:
    """A None value (an assistant turn with only tool calls) sent the whole upstream body to
    json's slower encoder: the C walk tells a None from a non-finite float."""
    body = {"messages": [{"role": "assistant", "content": None, "tool_calls": []}], "n": 1.5}
    assert fastjson.dumps(body) == json.dumps(body, separators=(",", ":")).encode()
    assert fastjson.dumps({"x": [float("inf")]}) is None
    assert fastjson.dumps({"x": {"y": float("nan")}}) is None
    assert fastjson.dumps({1: "non-str key"}) is None


@pytest.mark.parametrize("raw", [
    b'{"n": 12345678901234567890123}', b'[-9223372036854775809]', b'[18446744073709551616]',
    b'{"s": "\\ud800"}', b'[1e400]', b'[NaN]', b'\xef\xbb\xbf{}', '{"a": 1}'.encode("utf-16"),
    b"[" * 2000 + b"]" * 2000, b"null", b"1"])
def test_what_orjson_reads_otherwise_or_refuses_goes_to_json(raw: bytes) -> None:
    assert fastjson.loads(raw) is None


@pytest.mark.parametrize("native", [True, False], ids=["C", "python"])
@pytest.mark.parametrize("value", [[math.inf], [-math.inf], [math.nan], [2**64], ["\udc80"],
                                   {1: "x"}, [{"a": [None, math.inf]}]])
def test_what_orjson_writes_otherwise_or_refuses_goes_to_json(value: Any, native: bool) -> None:
    with _c_module(native):
        assert fastjson.dumps(value) is None


def test_without_the_c_walk_any_null_goes_to_json() -> None:
    with _c_module(False):
        assert fastjson.dumps([None]) is None


def test_a_chunk_with_a_long_integer_keeps_it_exact() -> None:
    chunk = parse_chunk(json.dumps({"choices": [], "usage": {"total_tokens": BIG}}))
    assert chunk is not None and chunk["usage"]["total_tokens"] == BIG
    assert parse_chunk('{"a": "\\ud800"}') == {"a": "\ud800"}
    assert parse_chunk("[1]") is None and parse_chunk("1e400") is None


HAZARDS = {  # each alone: one would hide another (any of them sends the whole body to json)
    "long": f'"seed": {BIG}, "metadata": {{"low": {-(2**63) - 1}}}',
    "infinite": '"temperature": 1e400',
    "surrogate": '"user": "a lone \\ud800 surrogate"',
}


def _turns(proxy: Any, up: Any) -> tuple[list[httpx.Response], dict[str, dict[str, Any]]]:
    """A JSON turn and a streamed one for each body orjson would misread or refuse."""
    out, sent = [], {}
    for name, fields in HAZARDS.items():
        for stream in ("", ', "stream": true'):
            raw = (f'{{"model": "m", {fields}, "messages": [{{"role": "user", '
                   f'"content": "{name}"}}]{stream}}}')
            out.append(httpx.post(proxy.base_url + "/chat/completions", timeout=30,
                                  content=raw.encode(),
                                  headers={"content-type": "application/json"}))
            sent[name + stream] = up.llm.requests[-1]
    return out, sent


def test_the_proxy_sends_upstream_what_json_read(start_proxy: ProxyFactory) -> None:
    with serve(default=lambda body: ScriptedReply(content="ok")) as up:
        responses, sent = _turns(start_proxy(up), up)
    assert [r.status_code for r in responses] == [200] * 6
    assert len(sent) == 6
    for name, body in sent.items():
        if name.startswith("long"):
            assert body["seed"] == BIG and type(body["seed"]) is int
            assert body["metadata"] == {"low": -(2**63) - 1}
        elif name.startswith("infinite"):
            assert body["temperature"] == math.inf  # json's reading, sent as json writes it
        else:  # read by json (orjson refuses it), then made U+FFFD like any lone surrogate
            assert body["user"] == "a lone \ufffd surrogate"


def test_without_orjson_the_proxy_runs_on_json(start_one_proxy: ProxyFactory,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fastjson, "orjson", None)
    assert fastjson.loads(b"{}") is None and fastjson.dumps({}) is None
    assert fastjson.loads_text("{}") is None
    with serve(default=lambda body: ScriptedReply(content="ok")) as up:
        proxy = start_one_proxy(up)
        plain = httpx.post(proxy.base_url + "/chat/completions", timeout=30, json={
            "model": "m", "messages": [{"role": "user", "content": "hi"}]})
        streamed = httpx.post(proxy.base_url + "/chat/completions", timeout=30, json={
            "model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]})
        responses, sent = _turns(proxy, up)
    assert plain.json()["choices"][0]["message"]["content"] == "ok"
    assert "ok" in streamed.text and streamed.text.endswith("data: [DONE]\n\n")
    assert [r.status_code for r in responses] == [200] * 6
    assert sent["long"]["seed"] == BIG and sent["infinite"]["temperature"] == math.inf
