"""Anchors that matter (issue 13): commands written in prose are recognised; names that only
one tool output printed (an ``ls`` listing) lose to identifiers someone used."""

from __future__ import annotations

import json
from typing import Any

from refold.compaction.anchors import extract_anchors, select_anchors
from refold.tokens import get_counter

COUNTER = get_counter("gpt-4o")


def test_commands_in_prose_are_anchors() -> None:
    msgs: list[dict[str, Any]] = [
        {"role": "assistant", "content": "Let's run the edge case:\n```\npytest tests/test_x.py "
                                         "-k edge\n```"},
        {"role": "user", "content": "Also try `cargo test --release -p core` please."},
    ]
    texts = {a.text for a in extract_anchors(msgs)}
    assert "pytest tests/test_x.py -k edge" in texts
    assert "cargo test --release -p core" in texts


def test_an_unreferenced_listing_loses_to_used_paths() -> None:
    listing = "\n".join(f"file_{i:03d}_{chr(97 + i % 26)}.h" for i in range(60))
    call = {"id": "a", "type": "function",
            "function": {"name": "execute_bash", "arguments": json.dumps({"command": "ls src"})}}
    msgs: list[dict[str, Any]] = [
        {"role": "assistant", "content": "The bug is in src/core/parser.c; see also "
                                         "src/core/lexer.c."},
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "a", "content": listing},
    ]  # the listing is the most recent: recency alone would rank it first
    chosen = select_anchors(extract_anchors(msgs), budget_tokens=40,
                            count_text=COUNTER.count_text)
    assert "src/core/parser.c" in chosen and "src/core/lexer.c" in chosen, chosen


def _text_action(command: str, observation: str) -> list[dict[str, Any]]:
    """One SWE-agent-style turn: the command in a fenced block, its output as a user message."""
    return [{"role": "assistant", "content": f"I will look.\n```\n{command}\n```"},
            {"role": "user", "content": observation}]


def test_a_text_action_agents_observation_is_output_not_the_users_words() -> None:
    cache = "/tmp/pip-ephem-wheel-cache-h335xx/wheels/4d/da/d4/e230bf0a3f16cad5a83d235ac24a34"
    msgs = [{"role": "user", "content": "Fix the overflow in src/marshmallow/fields.py"},
            *_text_action("pip install -e .[dev]", f"Stored in directory: {cache}\nok"),
            *_text_action("open src/marshmallow/fields.py 1474", "[File: fields.py]\n1474: x"),
            *_text_action("python reproduce.py", f"see https://pip.pypa.io/warnings/venv {cache}")]
    score = {a.text: a.score for a in extract_anchors(msgs)}
    printed = max(score[cache], score["https://pip.pypa.io/warnings/venv"])
    for command in ("pip install -e .[dev]", "open src/marshmallow/fields.py 1474",
                    "python reproduce.py"):
        assert score[command] > printed, (command, score)
    # the person's own first message still counts as theirs: it outranks everything
    assert score["src/marshmallow/fields.py"] == max(score.values())


def test_a_name_printed_by_many_outputs_but_used_by_nobody_ranks_below_commands() -> None:
    site = "/root/miniconda3/envs/py39/lib/python3.9/site-packages"
    msgs: list[dict[str, Any]] = []
    for i, command in enumerate(("pip install attrs", "pip install six", "pip install tox")):
        call = {"id": f"p{i}", "type": "function", "function": {
            "name": "execute_bash", "arguments": json.dumps({"command": command})}}
        msgs += [{"role": "assistant", "content": None, "tool_calls": [call]},
                 {"role": "tool", "tool_call_id": f"p{i}",
                  "content": f"Requirement already satisfied in {site} ({i})"}]
    chosen = select_anchors(extract_anchors(msgs), budget_tokens=25,
                            count_text=COUNTER.count_text)
    assert {"pip install attrs", "pip install six", "pip install tox"} <= set(chosen), chosen


def test_a_command_anchor_keeps_the_whitespace_it_was_typed_with() -> None:
    typed = "sed -i '317s/^/\\t      /' src/libponyc/expr/match.c"
    call = {"id": "s", "type": "function", "function": {
        "name": "execute_bash", "arguments": json.dumps({"command": typed + "\nmake"})}}
    msgs: list[dict[str, Any]] = [{"role": "assistant", "content": None, "tool_calls": [call]},
                                  {"role": "tool", "tool_call_id": "s", "content": ""}]
    assert typed in {a.text for a in extract_anchors(msgs)}


def _bash(cid: str, command: str, output: str) -> list[dict[str, Any]]:
    call = {"id": cid, "type": "function", "function": {
        "name": "execute_bash", "arguments": json.dumps({"command": command})}}
    return [{"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": cid, "content": output}]


def test_a_command_stands_in_for_the_path_it_holds() -> None:
    msgs: list[dict[str, Any]] = [
        {"role": "user", "content": "The overflow is in fields.py, please fix it."},
        *_text_action("open src/marshmallow/fields.py 1474", "[File: fields.py]\n1474: x"),
    ]
    chosen = select_anchors(extract_anchors(msgs), budget_tokens=14,
                            count_text=COUNTER.count_text)
    # one entry keeps both: the bare name the user ranked high is inside the command
    assert chosen == ["open src/marshmallow/fields.py 1474"], chosen


def test_words_joined_by_a_slash_are_no_paths_and_quoted_source_is_no_error() -> None:
    msgs: list[dict[str, Any]] = [
        {"role": "user", "content": "Rounding is n/a for inputting/reading, w/o the "
                                    "multipart/form-data or text/html parts."},
        *_bash("v", "sed -n 1485,1488p src/marshmallow/fields.py",
               "1487:        except OverflowError as error:\n"
               "    raise ConnectTimeoutError(\nValueError: chr() arg not in range(0x110000)"),
        *_bash("r", "python reproduce.py", "ok"),
    ]
    found = {a.text: a.score for a in extract_anchors(msgs)}
    for fake in ("n/a", "w/o", "multipart/form-data", "text/html"):
        assert fake not in found, fake
    assert not any(t.startswith(("1487:", "raise ")) for t in found), found
    assert "ValueError: chr() arg not in range(0x110000)" in found
    # prose-only slash words may name a folder, but rank below what the agent ran
    assert found["inputting/reading"] < found["python reproduce.py"]


def test_a_template_placeholder_is_no_command() -> None:
    msgs: list[dict[str, Any]] = [
        {"role": "user", "content": "Write a script and run it with `python <script_name>.py`."},
        *_text_action("python repro.py", "ok"),
    ]
    texts = {a.text for a in extract_anchors(msgs)}
    assert "python repro.py" in texts and "python <script_name>.py" not in texts


def test_a_long_blob_costs_its_length() -> None:
    blob = "echo '" + "01100110" * 24 + "' | xxd -r -p"
    msgs: list[dict[str, Any]] = [*_bash("b", blob, "flag"),
                                  *_bash("c", "file release", "ELF"),
                                  *_bash("d", "python solve.py", "ok"),
                                  *_bash("e", "pwd", "/root")]
    chosen = select_anchors(extract_anchors(msgs), budget_tokens=24,
                            count_text=COUNTER.count_text)
    assert "python solve.py" in chosen and "file release" in chosen and blob not in chosen
