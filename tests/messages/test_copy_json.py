"""``copy_json``: what ``copy.deepcopy`` gives for the JSON values messages are made of (the
runtime hands cached messages out through it every turn), with no container shared; both the
C copy (``refold._jsonscan``, used where it is built) and the Python one."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from refold import jsonscan
from refold.messages import model

SCALARS = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4)
                    | st.dictionaries(st.text(max_size=5), inner, max_size=4), max_leaves=30)


def containers(value: Any) -> list[Any]:
    """Every dict and list inside ``value`` (itself included), depth first."""
    found = []
    if isinstance(value, dict | list):
        found.append(value)
        for inner in value.values() if isinstance(value, dict) else value:
            found += containers(inner)
    return found


@pytest.fixture(params=["C", "python"])
def copy_json(request: pytest.FixtureRequest) -> Any:
    if request.param == "python":
        return model._copy_json
    request.getfixturevalue("native_jsonscan")
    assert model.copy_json is not model._copy_json  # the C copy is the one in use
    return jsonscan.copier()


@settings(max_examples=300, deadline=None,  # (the fixture is a function: nothing to reset)
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(value=JSON)
def test_a_copy_equals_deepcopys_and_shares_no_container(copy_json: Any, value: Any) -> None:
    copied = copy_json(value)
    assert copied == copy.deepcopy(value) == value
    assert repr(copied) == repr(value)  # same types all the way down (True is not 1)
    originals = {id(c) for c in containers(value)}
    assert not originals & {id(c) for c in containers(copied)}


def test_editing_the_copy_leaves_the_original_as_it_was(copy_json: Any) -> None:
    message = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "Bash", "arguments": "{}"}}]}
    copied = copy_json(message)
    copied["tool_calls"][0]["function"]["name"] = "Edit"
    copied["tool_calls"].append({"id": "c2"})
    assert message["tool_calls"] == [
        {"id": "c1", "type": "function", "function": {"name": "Bash", "arguments": "{}"}}]


def test_values_json_does_not_make_are_deep_copied_as_deepcopy_would(copy_json: Any) -> None:
    inner = [1, 2]
    value = {"tuple": (inner, "x"), "set": {3}, "bytes": b"ab"}
    copied = copy_json(value)
    assert copied == value
    assert copied["tuple"][0] is not inner and copied["set"] is not value["set"]


def test_a_value_too_deep_to_copy_raises_recursion_error(copy_json: Any) -> None:
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(RecursionError):
        copy_json(deep)
