"""SWE-agent's text actions read as its tools (``create``/``edit`` modify, ``open`` reads),
observations without its prompt trailer (no outcome reads ``bash-$``), a test run's summary
line as its outcome, and a removed file is not "modified"."""

from __future__ import annotations

import json
from typing import Any

import pytest

from refold.compaction import tools
from refold.compaction.activity import _result_line, as_tool_turns, scan_activity

CWD = "/marshmallow-code__marshmallow"


def _trailer(open_file: str = "n/a") -> str:
    return f"\n\n(Open file: {open_file})\n(Current directory: {CWD})\nbash-$"


def _step(thought: str, command: str, observation: str) -> list[dict[str, Any]]:
    return [{"role": "assistant", "content": f"{thought}\n```\n{command}\n```"},
            {"role": "user", "content": observation}]


def _swe_run() -> list[dict[str, Any]]:
    repro = f"{CWD}/reproduce.py"
    fields = f"{CWD}/src/marshmallow/fields.py"
    return [
        *_step("Let's look at setup.py.", "open setup.py",
               f"[File: {CWD}/setup.py (94 lines total)]\n1:import re" + _trailer(
                   f"{CWD}/setup.py")),
        *_step("Create a reproduction.", "create reproduce.py",
               f"[File: {repro} (1 lines total)]\n1:" + _trailer(repro)),
        *_step("Paste the example.",
               "edit 1:1\nfrom marshmallow.fields import TimeDelta\nprint(1)\nend_of_edit",
               f"[File: {repro} (2 lines total)]\n1:from marshmallow.fields import TimeDelta\n"
               "2:print(1)\nFile updated. Please review the changes." + _trailer(repro)),
        *_step("Run it.", "python reproduce.py", "344" + _trailer(repro)),
        *_step("Find fields.py.", 'find_file "fields.py" src',
               f'Found 1 matches for "fields.py" in {CWD}/src:\n{fields}' + _trailer(repro)),
        *_step("Open it at the line.", "open src/marshmallow/fields.py 1474",
               f"[File: {fields} (1997 lines total)]\n(1374 more lines above)\n1474:    return"
               + _trailer(fields)),
        *_step("Scroll down.", "scroll_down",
               f"[File: {fields} (1997 lines total)]\n(1474 more lines above)\n1475:    x"
               + _trailer(fields)),
        *_step("View it with the editor.", f"str_replace_editor view {CWD}/setup.cfg",
               f"Here's the result of running `cat -n` on {CWD}/setup.cfg:\n1\t[metadata]"
               + _trailer(fields)),
        *_step("Run the tests.", "pytest tests/test_fields.py -q",
               "..........                                                [100%]\n"
               "10 passed in 0.42s" + _trailer(fields)),
    ]


def _activity(turns: list[dict[str, Any]]) -> Any:
    observed = {id(m) for m in turns if m["role"] == "user"}
    return scan_activity(as_tool_turns(turns, observed))


def test_swe_agent_commands_read_as_its_tools() -> None:
    activity = _activity(_swe_run())
    files = {path: acts for path, (_, acts) in activity.files.items()}
    assert "modified" in files["reproduce.py"] and "modified" in files[f"{CWD}/reproduce.py"]
    assert "read" in files["src/marshmallow/fields.py"]
    assert "read" in files[f"{CWD}/src/marshmallow/fields.py"]  # scroll_down: the open file
    assert "read" in files["setup.py"] and "read" in files[f"{CWD}/setup.cfg"]
    assert not any("modified" in acts for path, acts in files.items() if "fields.py" in path)
    assert set(activity.tools) >= {"open", "create", "edit", "find_file", "scroll_down",
                                   "str_replace_editor", "bash"}


def test_no_outcome_is_the_prompt_trailer() -> None:
    outcomes = _activity(_swe_run()).outcomes
    assert all("bash-$" not in o.detail and "Current directory" not in o.detail
               for o in outcomes.values())
    assert outcomes["python reproduce.py"].detail == "344"
    assert outcomes["pytest tests/test_fields.py -q"].detail == "10 passed in 0.42s"
    assert "open setup.py" not in outcomes and 'find_file "fields.py" src' not in outcomes


def test_an_ordinary_command_in_a_text_action_is_still_a_shell_command() -> None:
    turns = _step("List.", "ls -F && touch notes.txt", "AUTHORS.rst\nsetup.py" + _trailer())
    out = as_tool_turns(turns, {id(turns[1])})
    call = out[0]["tool_calls"][0]["function"]
    assert call["name"] == "bash" and json.loads(call["arguments"]) == {
        "command": "ls -F && touch notes.txt"}
    assert out[1]["content"] == "AUTHORS.rst\nsetup.py"


@pytest.mark.parametrize(("output", "line"), [
    ("collected 12 items\n\ntests/a.py ....F\n\n=== FAILURES ===\n...\n"
     "=========== 1 failed, 11 passed in 0.51s ===========\nDONE", "1 failed, 11 passed"),
    ("running 5 tests\n.....\ntest result: ok. 5 passed; 0 failed; 0 ignored; finished in 0.01s"
     "\n\n   Doc-tests mycrate\n\nrunning 0 tests\n\ntest result: ok. 0 passed; 0 failed; "
     "0 ignored\n\n", "test result: ok. 5 passed"),
    ("........\n8 passed, 1 warning in 1.20s\nwrote coverage.xml", "8 passed, 1 warning in 1.20s"),
])
def test_a_test_runs_summary_line_is_its_outcome(output: str, line: str) -> None:
    assert line in _result_line(output)


def _bash(i: int, command: str, output: str = "") -> list[dict[str, Any]]:
    return [{"role": "assistant", "content": "", "tool_calls": [{
        "id": f"b{i}", "type": "function",
        "function": {"name": "bash", "arguments": json.dumps({"command": command})}}]},
        {"role": "tool", "tool_call_id": f"b{i}", "content": output}]


def test_a_removed_file_is_not_modified() -> None:
    files = {p: acts for p, (_, acts) in scan_activity(
        _bash(1, "rm old_notes.txt") + _bash(2, "rm -f build/a.log && echo x > out.txt")
    ).files.items()}
    assert "modified" not in files["old_notes.txt"]
    assert "modified" not in files["build/a.log"] and "modified" in files["out.txt"]
    effect = tools.tool_effect("delete_file", {"path": "src/dead.py"}, "Deleted src/dead.py")
    assert effect.writes == () and effect.deletes == ("src/dead.py",)
    assert tools.shell_deletes("rm a.py; mv b.txt c.txt") == ("a.py",)
    assert tools.shell_writes("rm a.py; mv b.txt c.txt") == ("a.py", "c.txt")  # as before


def test_a_file_written_and_then_removed_is_no_longer_modified() -> None:
    turns = (_bash(1, "cat > /w/repro.py << 'EOF'") + _bash(2, "python /w/repro.py", "344")
             + _bash(3, "rm repro.py"))
    files = {p: acts for p, (_, acts) in scan_activity(turns).files.items()}
    assert not any("modified" in acts for acts in files.values()), files
