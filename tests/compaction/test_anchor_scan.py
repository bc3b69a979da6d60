"""The anchor scan's speed shortcuts (issue 13, deliverable 8) keep what matters: past the scan
budget an old output still gives its errors and URLs, the user's words are read in full, and
the shortcuts in ``prune`` find the same facts as the slow patterns did."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from refold.compaction.anchors import extract_anchors
from refold.compaction.prune import exit_status, first_error_line


def _round(i: int, output: str) -> list[dict[str, Any]]:
    call = {"id": f"c{i}", "type": "function",
            "function": {"name": "execute_bash",
                         "arguments": json.dumps({"command": f"make step{i}"})}}
    return [{"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"c{i}", "content": output}]


def test_old_outputs_past_the_scan_budget_keep_their_ends_errors_urls_and_commands() -> None:
    old = ("compiling core\n" + "cc -O2 -c unit.c\n" * 40
           + "built with clang 17.0.6 in build/out/obj/core.o\n" + "cc -O2 -c unit.c\n" * 40
           + "KeyError: 'tenant_id' in https://ci.example.com/job/41\n" + "ld -o a\n" * 40
           + "done in 4447 ms, wrote dist/app-2.1.0.tar.gz\n")
    msgs = [{"role": "user", "content": "Pin the client to v3.4.11 and fix the build."},
            *_round(0, old), *_round(1, "filler line\n" * 400),
            *_round(2, "built with clang 18.1.2 in build/out/obj/main.o\n")]
    everything = {a.text for a in extract_anchors(msgs)}
    budgeted = {a.text for a in extract_anchors(msgs, scan_budget_chars=200)}
    assert {"17.0.6", "build/out/obj/core.o", "18.1.2"} <= everything
    assert "17.0.6" not in budgeted and "build/out/obj/core.o" not in budgeted  # mid-output
    assert {"4447 ms", "dist/app-2.1.0.tar.gz"} <= budgeted  # the old output's last line
    assert "18.1.2" in budgeted and "build/out/obj/main.o" in budgeted  # the newest: in full
    assert "KeyError: 'tenant_id' in https://ci.example.com/job/41" in budgeted
    assert "https://ci.example.com/job/41" in budgeted
    assert {"make step0", "v3.4.11"} <= budgeted  # calls and the user's words: always read


def test_extraction_is_deterministic_with_repeated_texts() -> None:
    msgs = [m for i in range(30) for m in _round(i % 3, f"ok {i % 3} in src/m{i % 3}.py")]
    first = extract_anchors(msgs)
    assert first == extract_anchors(msgs)
    assert {a.text for a in first} >= {"src/m0.py", "src/m1.py", "src/m2.py"}


def test_exit_status_and_error_line_shortcuts() -> None:
    assert exit_status("done\nEXIT CODE: 3\n") == "3"
    assert exit_status('{"exit_code": 0}') == "0"
    assert exit_status("Process exited with status 2; later Exited 5") == "5"
    out = "line one\n  File x.py\nValueError: bad value\nmore\n"
    assert first_error_line(out) == "ValueError: bad value"
    assert first_error_line("all fine\nok") is None
    assert first_error_line("tail with FAILED") == "tail with FAILED"


WORDS = ("alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
         "juliet", "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo",
         "sierra", "tango", "uniform", "victor", "whiskey", "xray", "yankee", "zulu")


def test_the_budget_the_body_leaves_unused_goes_to_the_anchors() -> None:
    from refold.compaction import CompactionPolicy, compact

    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a build agent."},
                                  {"role": "user", "content": "Build every target."}]
    targets = [f"{word}-{kind}" for kind in ("lib", "bin") for word in WORDS]
    for i, target in enumerate(targets):
        call = {"id": f"m{i}", "type": "function", "function": {
            "name": "execute_bash", "arguments": json.dumps({"command": f"make {target}"})}}
        msgs += [{"role": "assistant", "content": None, "tool_calls": [call]},
                 {"role": "tool", "tool_call_id": f"m{i}", "content": "compiling\n" * 120}]
    msgs += [{"role": "user", "content": "Now package it."},
             {"role": "assistant", "content": "Packaging."}]
    policy = CompactionPolicy(anchor_share=0.01)  # a 20-token share: one or two anchors
    result = compact(msgs, context_length=200_000, target_tokens=4_000, policy=policy,
                     model="gpt-4o")
    report = result.report
    assert report.status == "ok" and report.fits
    replaced = [m for m in msgs[report.head_end:report.tail_start] if m.get("tool_calls")]
    made = [json.loads(m["tool_calls"][0]["function"]["arguments"])["command"]
            for m in replaced]
    assert len(made) > 30  # more than Done lists (20): the rest must be anchors
    missing = [c for c in made if c not in report.summary]
    assert not missing, missing


_STATUS_PIECES = ("exit", "Exit", "EXIT", "Exit code 2\n", "exited with code", " code", " status",
                  "return code", "returncode", '"exit_code"', ": ", "=", "-", "1", "23", " ", "\n", "x", "_",
                  "é", "İ", "Error", "KeyError", "error", "ERROR", "FAILED", "Fatal", "fatal",
                  "panic", "Exception", "ValueException", "a", "Z", "9", ".", "中", ":", "E ",
                  "** (", "ERR!", "--- FAIL", "panicked at", "***", " TS1", "\t", "1:2",
                  "command not found", "No such file or directory", "Permission denied")


@settings(max_examples=500, deadline=None)
@given(st.lists(st.sampled_from(_STATUS_PIECES), max_size=16).map("".join))
def test_exit_status_and_error_line_scan_from_the_first_hint_as_every_line(out: str) -> None:
    from refold.compaction import prune

    found = prune._EXIT.findall(out[-4000:].lower())  # the whole-tail scan they replaced
    header = prune._EXIT_HEADER.match(out)  # unless the tool's own header comes first
    assert exit_status(out) == (header.group(1) if header else found[-1] if found else None)
    line = next((ln.strip()[:160] for ln in out.split("\n") if prune.is_error_line(ln)), None)
    assert first_error_line(out) == line  # the lines with a hint are all it has to look at


def test_a_compaction_tokenizes_each_message_once_even_past_the_counter_cache() -> None:
    from refold.compaction import compact
    from refold.tokens import ExactCounter
    from refold.tokens.counter import MessageCounter, set_cache_entries

    class Recording(ExactCounter):
        def __init__(self) -> None:
            super().__init__("o200k_base")
            self.seen: list[int] = []

        def _uncached_message(self, message: dict[str, Any]) -> int:
            self.seen.append(id(message))
            return super()._uncached_message(message)

    msgs: list[dict[str, Any]] = [{"role": "system", "content": "You are a build agent."}]
    for i in range(60):
        msgs += [{"role": "user", "content": f"step {i}: build target {i} " + "x " * 40},
                 {"role": "assistant", "content": f"target {i} built in out/t{i}.o"}]
    saved = MessageCounter.cache_entries
    set_cache_entries(0)  # no cache of its own: every count would tokenize again
    try:
        counter = Recording()
        result = compact(msgs, context_length=8_000, counter=counter, model="gpt-4o")
    finally:
        set_cache_entries(saved)
    assert result.report.status == "ok"
    originals = {id(m) for m in msgs}
    counted = [i for i in counter.seen if i in originals]
    assert counted and len(counted) == len(set(counted))  # each input message once
