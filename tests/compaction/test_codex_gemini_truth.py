"""The builtin summary tells the truth on Codex CLI rollouts and Gemini CLI sessions.

Each test is a finding on transcripts of those agents read the way ``refold import`` reads them
(``~/.codex/sessions/**/rollout-*.jsonl``, ``~/.gemini/tmp/*/chats/session-*.json``): Codex's
own context messages taken for the user's request, failed ``apply_patch`` calls and Gemini tool
calls that ended in an error listed as modifications, Gemini's ``replace`` edits only
"mentioned". The transcripts are small and synthetic, in the shapes those agents write.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from refold.compaction.activity import scan_activity
from refold.compaction.builtin import BuiltinSummarizer
from refold.compaction.summarizer import SummaryRequest
from refold.compaction.summary import parse_body
from refold.messages.agent_logs import agent_messages
from refold.tokens import get_counter

COUNTER = get_counter("gpt-4o")


def _item(payload: dict[str, Any]) -> dict[str, Any]:
    return {"timestamp": "2026-03-01T10:00:00.000Z", "type": "response_item", "payload": payload}


def _said(role: str, text: str) -> dict[str, Any]:
    kind = "input_text" if role == "user" else "output_text"
    return _item({"type": "message", "role": role, "content": [{"type": kind, "text": text}]})


def codex(*items: dict[str, Any]) -> list[dict[str, Any]]:
    """The chat messages refold reads from a Codex rollout of these response items."""
    records = [{"timestamp": "2026-03-01T10:00:00.000Z", "type": "session_meta", "payload": {
        "id": "019c0000-0000-7000-8000-000000000001", "cwd": "/w", "originator": "codex_cli_rs",
        "cli_version": "0.111.0", "source": "cli"}}, *items]
    messages, _, _, _ = agent_messages("codex", records)
    return messages


def patch_call(n: int, patch: str, output: str) -> list[dict[str, Any]]:
    """A freeform ``apply_patch`` call and its output, as Codex records them."""
    return [_item({"type": "custom_tool_call", "status": "completed", "call_id": f"call_{n}",
                   "name": "apply_patch", "input": patch}),
            _item({"type": "custom_tool_call_output", "call_id": f"call_{n}", "output": output})]


def shell_call(n: int, argv: list[str], output: str, exit_code: int) -> list[dict[str, Any]]:
    """A ``shell`` function call (an argv list) and its JSON output, as Codex records them."""
    return [_item({"type": "function_call", "name": "shell", "call_id": f"call_{n}",
                   "arguments": json.dumps({"command": argv, "workdir": "/w"})}),
            _item({"type": "function_call_output", "call_id": f"call_{n}", "output": json.dumps(
                {"output": output, "metadata": {"exit_code": exit_code,
                                                "duration_seconds": 0.1}})})]


def summary(turns: list[dict[str, Any]], budget: int = 3000
            ) -> defaultdict[str, tuple[str, ...]]:
    request = SummaryRequest(turns=turns, pruned_turns=turns, prefix=turns, previous_summary=None,
                             language="en", budget_tokens=budget, counter=COUNTER)
    return defaultdict(tuple, parse_body(BuiltinSummarizer().summarize(request).body).items)


def test_codex_context_messages_are_not_the_users_request() -> None:
    turns = codex(
        _said("user", "# AGENTS.md instructions for /w\n\n<INSTRUCTIONS>\nAlways run ruff."
                      "\n</INSTRUCTIONS>"),
        _said("user", "<environment_context>\n  <cwd>/w</cwd>\n  <shell>bash</shell>\n"
                      "</environment_context>"),
        _said("user", "Make div raise ValueError on zero."),
        *shell_call(1, ["bash", "-lc", "pytest -q"], "1 failed, 1 passed in 0.03s\n", 1),
        _said("assistant", "Looking at it."),
        _said("user", "<turn_aborted>\n  The user interrupted.\n</turn_aborted>"),
        _said("assistant", "Stopped."))
    goal = summary(turns)["goal"]
    assert goal, goal
    assert not any("environment_context" in g or "<cwd>" in g or "AGENTS.md" in g
                   or "turn_aborted" in g for g in goal), goal
    assert any("Make div raise ValueError on zero." in g for g in goal), goal


UPDATE = "*** Begin Patch\n*** Update File: src/calc.py\n@@\n-        return a / b\n+        return a // b\n*** End Patch\n"


def test_a_codex_patch_that_failed_modified_nothing() -> None:
    turns = codex(
        _said("user", "Fix div."),
        *patch_call(1, UPDATE, "apply_patch verification failed: Failed to find expected lines "
                               "in /w/src/calc.py:\n        return a / b"),
        *patch_call(2, UPDATE.replace("src/calc.py", "src/helpers.py"),
                    "Exit code: 1\nWall time: 0.1 seconds\nOutput:\nFailed to write file "
                    "src/helpers.py\n"),
        *patch_call(3, UPDATE.replace("src/calc.py", "docs/a.md"),
                    '{"output":"patch rejected: hunk 1 does not apply\\n",'
                    '"metadata":{"exit_code":1,"duration_seconds":0.0}}'),
        _said("assistant", "None of the patches applied."))
    activity = scan_activity(turns)
    for path in ("src/calc.py", "src/helpers.py", "docs/a.md"):
        assert "modified" not in activity.files[path][1], (path, activity.files[path])
        assert not activity.outcomes[path].ok, activity.outcomes[path]
    assert "Failed to find expected lines" in activity.outcomes["src/calc.py"].detail
    assert activity.outcomes["src/helpers.py"].detail == "error: Failed to write file src/helpers.py"
    assert activity.outcomes["docs/a.md"].detail == "error: patch rejected: hunk 1 does not apply"
    parts = summary(turns)
    assert not any("src/calc.py" in item for item in parts["done"]), parts["done"]
    assert any(item.startswith("apply_patch `src/calc.py` → error") for item in parts["blocked"])
    # and what did apply, in either form Codex writes its output, is a modification
    ok = codex(_said("user", "Fix div."),
               *patch_call(1, UPDATE, "Exit code: 0\nWall time: 0 seconds\nOutput:\nSuccess. "
                                      "Updated the following files:\nM src/calc.py\n"),
               *patch_call(2, UPDATE.replace("src/calc.py", "b.py"),
                           '{"output":"Success. Updated the following files:\\nM b.py\\n",'
                           '"metadata":{"exit_code":0,"duration_seconds":0.0}}'))
    done = scan_activity(ok)
    assert done.files["src/calc.py"][1] == {"modified"} and done.outcomes["src/calc.py"].ok
    assert done.files["b.py"][1] == {"modified"} and done.outcomes["b.py"].ok


def test_a_patch_codex_ran_through_its_shell_is_a_patch_not_a_command() -> None:
    heredoc = f"apply_patch <<'EOF'\n{UPDATE}EOF\n"
    turns = codex(
        _said("user", "Fix div."),
        *shell_call(1, ["apply_patch", UPDATE], "Success. Updated the following files:\n"
                                                "M src/calc.py\n", 0),
        *shell_call(2, ["bash", "-lc", heredoc.replace("src/calc.py", "src/b.py")],
                    "Success. Updated the following files:\nM src/b.py\n", 0),
        *shell_call(3, ["apply_patch", UPDATE.replace("src/calc.py", "src/c.py")],
                    "Failed to find expected lines in src/c.py", 1),
        _said("assistant", "Patched."))
    activity = scan_activity(turns)
    assert activity.files["src/calc.py"][1] == {"modified"}, activity.files
    assert activity.files["src/b.py"][1] == {"modified"}, activity.files
    assert "modified" not in activity.files["src/c.py"][1]
    assert not activity.outcomes["src/c.py"].ok
    assert not any(key.startswith("apply_patch") for key in activity.outcomes), activity.outcomes
    parts = summary(turns)
    assert not any("*** Begin Patch" in item for item in parts["done"] + parts["blocked"]), parts


def _call(call_id: str, name: str, args: dict[str, Any], response: dict[str, Any],
          status: str = "success") -> dict[str, Any]:
    return {"id": call_id, "name": name, "args": args, "status": status,
            "timestamp": "2026-04-01T11:12:19.213Z", "displayName": name,
            "result": [{"functionResponse": {"id": call_id, "name": name,
                                             "response": response}}]}


def gemini(ask: str, *calls: dict[str, Any]) -> list[dict[str, Any]]:
    """The chat messages refold reads from a Gemini CLI session: the user's ``ask``, then one
    reply per tool call, as Gemini CLI writes them."""
    records: list[dict[str, Any]] = [
        {"sessionId": "5cdd2021-574a-483d-8a4b-1b97e8bbce88", "projectHash": "91f1",
         "startTime": "2026-04-01T11:11:56.830Z"},
        {"id": "u1", "timestamp": "2026-04-01T11:11:56.830Z", "type": "user",
         "content": [{"text": ask}]}]
    for n, call in enumerate(calls):
        records.append({"id": f"g{n}", "timestamp": "2026-04-01T11:12:19.195Z", "type": "gemini",
                        "content": "", "model": "gemini-3-flash-preview", "toolCalls": [call]})
    messages, _, _, _ = agent_messages("gemini", records)
    return messages


def test_gemini_replace_modifies_the_file_it_names() -> None:
    turns = gemini(
        "Make greet take a name.",
        _call("r1", "read_file", {"absolute_path": "/w/src/app.py"},
              {"output": "def greet():\n    return 'Hello'\n"}),
        _call("e1", "replace", {"file_path": "/w/src/app.py", "old_string": "def greet():",
                                "new_string": "def greet(name):"},
              {"output": "Successfully modified file: /w/src/app.py (1 replacements)."}),
        _call("s1", "search_file_content", {"pattern": "greet", "path": "/w/tests"},
              {"output": "Found 1 match"}))
    activity = scan_activity(turns)
    assert activity.files["/w/src/app.py"][1] == {"read", "modified"}, activity.files
    assert activity.outcomes["/w/src/app.py"].ok
    assert activity.files["/w/tests"][1] == {"mentioned"}
    parts = summary(turns)
    assert "`/w/src/app.py` — modified, read" in parts["files"], parts["files"]


NOT_FOUND = {"error": 'Tool "write_file" not found. Did you mean one of: "read_file", '
                      '"cli_help", "generalist"?'}


def test_a_gemini_call_that_ended_in_an_error_modified_nothing() -> None:
    # the first two calls as a public Gemini CLI session recorded them (gemini-3-flash-preview
    # asked for a tool its agent did not have)
    turns = gemini(
        "create 2 hello world files",
        _call("9y4yn8tb", "write_file", {"file_path": "hello.txt", "content": "Hello, World!\n"},
              NOT_FOUND, "error"),
        _call("xldstmif", "write_file", {"content": "print('Hello')\n", "file_path": "hello.py"},
              NOT_FOUND, "error"),
        _call("e1", "replace", {"file_path": "/w/app.py", "old_string": "a", "new_string": "b"},
              {"error": "Failed to edit, 0 occurrences found for old_string in /w/app.py. No "
                        "edits made. The exact text in old_string was not found."}, "error"),
        _call("w1", "write_file", {"file_path": "/w/b.py", "content": "x = 1\n"},
              {"error": "[Operation Cancelled] Reason: User did not allow tool call"},
              "cancelled"),
        _call("s1", "run_shell_command", {"command": "rm -rf build"},
              {"error": "[Operation Cancelled] Reason: User did not allow tool call"},
              "cancelled"))
    activity = scan_activity(turns)
    for path in ("hello.txt", "hello.py", "/w/app.py", "/w/b.py"):
        assert "modified" not in activity.files[path][1], (path, activity.files)
        assert not activity.outcomes[path].ok, activity.outcomes[path]
    assert activity.outcomes["hello.txt"].detail.startswith('error: Tool "write_file" not found')
    assert "rm -rf build" not in activity.outcomes  # declined: it never ran
    parts = summary(turns)
    assert not any("hello" in item for item in parts["done"]), parts["done"]
    assert not any("modified" in item for item in parts["files"]), parts["files"]
    # what did succeed still counts
    ok = gemini("Write it.", _call("w2", "write_file", {"file_path": "/w/c.py", "content": "x\n"},
                                   {"output": "Successfully created and wrote to new file: "
                                              "/w/c.py."}))
    assert scan_activity(ok).files["/w/c.py"][1] == {"modified"}


def test_a_codex_command_is_reported_by_its_output_not_its_json_wrapper() -> None:
    turns = codex(
        _said("user", "Run the tests and publish."),
        *shell_call(1, ["bash", "-lc", "pytest -q"], "..\n2 passed in 0.02s\n", 0),
        *shell_call(2, ["bash", "-lc", "twine upload dist/*"], "bash: twine: command not found\n",
                    127),
        *shell_call(3, ["bash", "-lc", "make lint"], "lint ok\n", 2),
        _said("assistant", "Tests pass; twine is missing."))
    outcomes = scan_activity(turns).outcomes
    assert outcomes["pytest -q"].ok and outcomes["pytest -q"].detail == "2 passed in 0.02s"
    assert not outcomes["twine upload dist/*"].ok
    assert outcomes["twine upload dist/*"].detail == "exit 127: bash: twine: command not found"
    assert not outcomes["make lint"].ok and outcomes["make lint"].detail.startswith("exit 2")
    parts = summary(turns)
    assert not any('{"output"' in item or "metadata" in item
                   for item in parts["done"] + parts["blocked"]), parts


def _shell_output(output: str, code: int) -> dict[str, str]:
    return {"output": f"Command: python -m pytest -q\nDirectory: (root)\nOutput: {output}\n"
                      f"Error: (none)\nExit Code: {code}\nSignal: (none)\nBackground PIDs: "
                      f"(none)\nProcess Group PGID: 4243"}


def test_a_gemini_command_is_reported_by_its_output_not_its_trailer() -> None:
    turns = gemini("Run the tests.",
                   _call("s1", "run_shell_command", {"command": "python -m pytest -q"},
                         _shell_output(".\n1 passed in 0.01s", 0)),
                   _call("s2", "run_shell_command", {"command": "make docs"},
                         _shell_output("wrote 3 pages", 0)))
    outcomes = scan_activity(turns).outcomes
    assert outcomes["python -m pytest -q"].ok
    assert outcomes["python -m pytest -q"].detail == "1 passed in 0.01s"
    assert outcomes["make docs"].ok and "PGID" not in outcomes["make docs"].detail
    failed = gemini("Run the tests.", _call("s1", "run_shell_command",
                                            {"command": "python -m pytest -q"},
                                            _shell_output("F\n1 failed in 0.02s", 1)))
    assert not scan_activity(failed).outcomes["python -m pytest -q"].ok


def test_the_anchor_index_reads_a_codex_output_as_its_text_not_its_json() -> None:
    from refold.compaction.anchors import extract_anchors
    turns = codex(
        _said("user", "Fix the division test."),
        *shell_call(1, ["bash", "-lc", "pytest -q tests/test_calc.py"],
                    "F.\nE   ZeroDivisionError: division by zero\n1 failed, 1 passed in 0.03s\n", 1),
        _said("assistant", "It divides by zero."))
    errors = [a.text for a in extract_anchors(turns) if a.kind == "error"]
    assert "ZeroDivisionError: division by zero" in errors, errors
    assert not any("\\n" in e or "metadata" in e or '"' in e for e in errors), errors


def test_an_assistant_sentence_saying_what_it_could_not_do_is_not_done() -> None:
    turns = codex(
        _said("user", "Fix div and publish."),
        *patch_call(1, UPDATE, "Exit code: 0\nWall time: 0 seconds\nOutput:\nSuccess. Updated "
                               "the following files:\nM src/calc.py\n"),
        _said("assistant", "Fixed: `Calc.div` now raises ValueError. src/helpers.py could not "
                           "be written (permission denied), and publishing still needs twine "
                           "installed."),
        _said("user", "Ok."))
    done = summary(turns)["done"]
    assert any("Fixed: `Calc.div` now raises ValueError." in item for item in done), done
    assert not any("could not" in item or "still needs" in item for item in done), done


def test_a_call_that_was_never_answered_modified_nothing() -> None:
    # Codex asked to run it outside the sandbox; the user declined, then aborted the turn
    def unanswered(n: int, command: str) -> dict[str, Any]:
        return _item({"type": "function_call", "name": "shell", "call_id": f"call_{n}",
                      "arguments": json.dumps({"command": command,
                                               "sandbox_permissions": "require_escalated"})})
    turns = codex(
        _said("user", "Create a test file"),
        *shell_call(1, ["bash", "-lc", "echo 'Hello World' > test.txt"], "", 0),
        _said("user", "Yes, overwrite other.txt with something else"),
        unanswered(2, "printf 'Goodbye World\\n' > other.txt"),
        _said("user", "Actually nevermind, I want to keep the original content"),
        _said("user", "Delete notes.txt"),
        unanswered(3, "rm notes.txt"),
        _item({"type": "message", "role": "user", "content": [
            {"type": "input_text", "text": "What is left?"}]}))
    files = scan_activity(turns).files
    assert files["test.txt"][1] == {"modified"}, files
    assert files["other.txt"][1] == {"mentioned"}, files
    assert files["notes.txt"][1] == {"mentioned"}, files


def test_codex_shell_command_calls_are_commands() -> None:
    # Codex's shell tool since 0.5x takes the command line as a string
    def run(n: int, command: str, output: str) -> list[dict[str, Any]]:
        return [_item({"type": "function_call", "name": "shell_command", "call_id": f"call_{n}",
                       "arguments": json.dumps({"command": command, "workdir": "/w"})}),
                _item({"type": "function_call_output", "call_id": f"call_{n}", "output": output})]
    turns = codex(
        _said("user", "Run the tests and write the report."),
        *run(1, "pytest -q", "Exit code: 1\nWall time: 1.2 seconds\nOutput:\nE   AssertionError: "
                             "2 != 3\n1 failed, 4 passed in 0.20s\n"),
        *run(2, "python report.py > out/report.txt", "Exit code: 0\nWall time: 0.3 seconds\n"
                                                      "Output:\n"),
        _said("assistant", "One test fails."))
    activity = scan_activity(turns)
    assert not activity.outcomes["pytest -q"].ok, activity.outcomes
    assert activity.files["out/report.txt"][1] == {"modified"}, activity.files
    parts = summary(turns)
    assert any(item.startswith("`pytest -q` → exit 1") for item in parts["blocked"]), parts


def test_codex_and_gemini_plans_are_the_todo_list() -> None:
    plan = {"explanation": "Three steps.", "plan": [
        {"step": "Reproduce the failure", "status": "completed"},
        {"step": "Patch div", "status": "in_progress"},
        {"step": "Update the changelog", "status": "pending"}]}
    turns = codex(_said("user", "Fix div and note it in the changelog."),
                  _item({"type": "function_call", "name": "update_plan", "call_id": "call_1",
                         "arguments": json.dumps(plan)}),
                  _item({"type": "function_call_output", "call_id": "call_1",
                         "output": "Plan updated"}),
                  _said("assistant", "Working on it."))
    assert scan_activity(turns).todos == [("completed", "Reproduce the failure"),
                                          ("in_progress", "Patch div"),
                                          ("pending", "Update the changelog")]
    steps = summary(turns)["next_steps"]
    assert any("Patch div" in s for s in steps) and any("changelog" in s for s in steps), steps
    assert not any("Reproduce the failure" in s for s in steps), steps
    todos = {"todos": [{"description": "Write the README", "status": "pending"},
                       {"description": "Add a license", "status": "cancelled"}]}
    gem = gemini("Document it.", _call("t1", "write_todos", todos,
                                       {"output": "Successfully updated the todo list."}))
    assert scan_activity(gem).todos == [("pending", "Write the README"),
                                        ("cancelled", "Add a license")]


def test_a_gemini_call_marked_error_stays_an_error_however_its_output_reads() -> None:
    # Gemini CLI marks a failed call with ``status: "error"``; its output need not say so
    from refold.messages.anthropic import KEPT, for_chat_upstream, to_anthropic

    turns = gemini(
        "Build it.",
        _call("s1", "run_shell_command", {"command": "make build"},
              {"output": "building...\ndone"}, "error"),
        _call("s2", "run_shell_command", {"command": "cargo check"},
              {"output": "building...\ndone"}))
    results = {m["tool_call_id"]: m for m in turns if m["role"] == "tool"}
    assert results["s1"][KEPT] == [{"type": "tool_result", "tool_use_id": "s1",
                                    "is_error": True}]
    assert KEPT not in results["s2"]  # a success stores nothing more
    outcomes = scan_activity(turns).outcomes
    assert not outcomes["make build"].ok, outcomes["make build"]
    assert outcomes["cargo check"].ok, outcomes["cargo check"]
    # an Anthropic upstream is told; a chat upstream gets the plain tool message
    blocks = [b for t in to_anthropic(turns)["messages"] for b in t["content"]
              if isinstance(b, dict) and b.get("type") == "tool_result"]
    assert [(b["tool_use_id"], b.get("is_error"), b["content"]) for b in blocks] == [
        ("s1", True, "building...\ndone"), ("s2", None, "building...\ndone")]
    assert all(KEPT not in m for m in for_chat_upstream(turns))
