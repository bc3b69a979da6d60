"""The builtin summary tells the truth about the work on real agent transcripts.

Each test is a finding on real Claude Code sessions (and an Aider chat): failed test runs listed
as "Done", successful commands as "Blocked", modified files as "mentioned", errors invented in
the stand-ins of pruned outputs and file names in the anchor index, Claude Code's own wrapper
messages taken for the user's request. The transcripts here are small and synthetic, shaped like
the real ones.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from refold.compaction.activity import scan_activity
from refold.compaction.builtin import BuiltinSummarizer
from refold.compaction.prune import exit_status, one_line_summary
from refold.compaction.summarizer import SummaryRequest
from refold.compaction.summary import parse_body
from refold.messages.agent_logs import agent_messages
from refold.tokens import get_counter

COUNTER = get_counter("gpt-4o")


def _cc(kind: str, uuid: str, parent: str | None, message: dict[str, Any]) -> dict[str, Any]:
    return {"parentUuid": parent, "isSidechain": False, "userType": "external", "cwd": "/p",
            "sessionId": "s-1", "version": "2.1.38", "type": kind, "message": message,
            "uuid": uuid, "timestamp": "2026-02-11T20:36:45.693Z"}


def claude_code(ask: str, *steps: tuple[str, dict[str, Any], str, bool]
                ) -> list[dict[str, Any]]:
    """The chat messages refold reads from a Claude Code transcript: the user's ``ask``, then
    per step (tool, input, output, is_error) a tool call and its result as Claude Code writes
    them (every result carries ``is_error``)."""
    records = [_cc("user", "u0", None, {"role": "user", "content": ask})]
    for n, (tool, args, output, is_error) in enumerate(steps):
        use = {"type": "tool_use", "id": f"toolu_{n}", "name": tool, "input": args}
        records.append(_cc("assistant", f"a{n}", records[-1]["uuid"], {
            "id": f"msg_{n}", "type": "message", "role": "assistant", "model": "claude-opus-4",
            "content": [use]}))
        records.append(_cc("user", f"r{n}", f"a{n}", {"role": "user", "content": [
            {"tool_use_id": f"toolu_{n}", "type": "tool_result", "content": output,
             "is_error": is_error}]}))
    messages, _, _, _ = agent_messages("claude-code", records)
    return messages


def summary(turns: list[dict[str, Any]], budget: int = 3000
            ) -> defaultdict[str, tuple[str, ...]]:
    request = SummaryRequest(turns=turns, pruned_turns=turns, prefix=turns, previous_summary=None,
                             language="en", budget_tokens=budget, counter=COUNTER)
    return defaultdict(tuple, parse_body(BuiltinSummarizer().summarize(request).body).items)


FAILURE = "  1) test renders (SpotterTest)\n     ** (MatchError) no match of right hand side\n"
MIX_FAILED = ("Exit code 2\nCompiling 2 files (.ex)\nRunning ExUnit with seed: 1\n"
              + FAILURE * 60 + "\nFinished in 3.0 seconds (1.7s async, 1.3s sync)\n"
              "14 doctests, 127 tests, 12 failures")


def test_a_failed_test_run_with_its_exit_code_on_top_is_blocked_not_done() -> None:
    assert len(MIX_FAILED) > 4000  # the exit code is out of reach of a scan of the tail
    turns = claude_code("Make the suite pass.",
                        ("Bash", {"command": "mix test 2>&1"}, MIX_FAILED, True))
    assert turns[-1]["anthropic_blocks"][0]["is_error"] is True  # survives the import
    parts = summary(turns)
    assert not any("mix test" in item for item in parts["done"]), parts["done"]
    assert any(item.startswith("`mix test 2>&1` → exit 2: ** (MatchError)")
               for item in parts["blocked"]), parts["blocked"]
    assert exit_status(MIX_FAILED + "\nexit code 0") == "2"  # the tool's header wins
    # without the block beside it (an export that kept only the text) the header still says it
    bare = [{k: v for k, v in m.items() if k != "anthropic_blocks"} for m in turns]
    assert not scan_activity(bare).outcomes["mix test 2>&1"].ok


def test_a_result_marked_is_error_failed_whatever_it_prints() -> None:
    turns = claude_code("Run the JS tests.",
                        ("Bash", {"command": "npx vitest run"},
                         "<tool_use_error>Sibling tool call errored</tool_use_error>", True),
                        ("Edit", {"file_path": "/p/a.ex", "old_string": "x", "new_string": "y"},
                         "Found 2 matches of the string to replace", True))
    activity = scan_activity(turns)
    # Claude Code cancelled it when a parallel call failed: it never ran, so it neither
    # failed nor can a later run of it "fix" anything
    assert "npx vitest run" not in activity.outcomes
    assert "modified" not in activity.files["/p/a.ex"][1]  # a refused edit wrote nothing
    assert not activity.outcomes["/p/a.ex"].ok
    ignored = claude_code("Commit.", ("Bash", {"command": "git add priv/app.css"},
                                      "Exit code 1\nThe following paths are ignored by one of "
                                      "your .gitignore files:\npriv", True))
    assert scan_activity(ignored).outcomes["git add priv/app.css"].detail == \
        "exit 1: The following paths are ignored by one of your .gitignore files:"


def test_a_test_summary_that_counts_failures_is_a_failure_even_with_exit_0() -> None:
    turns = claude_code(
        "Fix the tests.",
        ("Bash", {"command": "mix test 2>&1 | tail -3"},  # the pipe's status is tail's
         "Finished in 2.4 seconds\n12 tests, 2 failures", False),
        ("Bash", {"command": "pytest -q | tail -1"}, "1 failed, 3 passed in 0.12s", False),
        ("Bash", {"command": "mix test test/a_test.exs"},
         "Finished in 1.0 seconds\n12 tests, 0 failures", False),
        ("Bash", {"command": "bd close T-1 --reason 'Fixed 3 failed tests'"},
         "✓ Closed T-1: Fixed 3 failed tests", False))
    outcomes = scan_activity(turns).outcomes
    assert not outcomes["mix test 2>&1 | tail -3"].ok
    assert outcomes["mix test 2>&1 | tail -3"].detail == "error: 12 tests, 2 failures"
    assert not outcomes["pytest -q | tail -1"].ok
    assert outcomes["mix test test/a_test.exs"].ok
    assert outcomes["bd close T-1 --reason 'Fixed 3 failed tests'"].ok  # no test run


def test_a_pruned_failed_run_keeps_its_exit_code_or_failure_count_and_stays_blocked() -> None:
    line = one_line_summary("Bash", json.dumps({"command": "mix test"}), MIX_FAILED)
    assert "exit 2" in line and "MatchError" in line, line
    piped = "Finished in 2.4 seconds\n" * 300 + "12 tests, 2 failures"
    piped_line = one_line_summary("Bash", json.dumps({"command": "mix test | tail"}), piped)
    assert "error: 12 tests, 2 failures" in piped_line, piped_line
    turns = claude_code("Make the suite pass.", ("Bash", {"command": "mix test"}, line, True),
                        ("Bash", {"command": "mix test | tail"}, piped_line, False))
    outcomes = scan_activity(turns).outcomes
    assert not outcomes["mix test"].ok and "exit 2" in outcomes["mix test"].detail
    assert not outcomes["mix test | tail"].ok


ERROR_LINES = [
    ("Traceback (most recent call last):\n  File \"a.py\", line 1\nValueError: bad value",
     "ValueError: bad value"),
    ("collected 3\nE   AssertionError: assert 1 == 2\nFAILED t.py::x", "E   AssertionError: "
                                                                     "assert 1 == 2"),
    ("  1) test x (FooTest)\n     ** (MatchError) no match", "** (MatchError) no match"),
    ("   Compiling app\nerror[E0308]: mismatched types", "error[E0308]: mismatched types"),
    ("src/a.c:3:5: error: expected ';'", "src/a.c:3:5: error: expected ';'"),
    ("Error: Cannot find module 'x'", "Error: Cannot find module 'x'"),
    ("fatal: not a git repository", "fatal: not a git repository"),
    ("✘ [ERROR] Could not resolve \"js/app.js\"", "✘ [ERROR] Could not resolve \"js/app.js\""),
    ("npm ERR! code E404", "npm ERR! code E404"),
    ("--- FAIL: TestParse (0.00s)", "--- FAIL: TestParse (0.00s)"),
    ("thread 'main' panicked at src/main.rs:2:5", "thread 'main' panicked at src/main.rs:2:5"),
    ("bash: foo: command not found", "bash: foo: command not found"),
    ("src/a.ts(3,5): error TS2322: Type 'x'", "src/a.ts(3,5): error TS2322: Type 'x'"),
    ("  3:5  error  'x' is not defined  no-undef", "3:5  error  'x' is not defined  no-undef"),
    ("Uncaught TypeError: x is not a function", "Uncaught TypeError: x is not a function"),
]
NO_ERROR = ["✓ Closed T-3: added error handling",
            "67dc57b Fix endpoint error rendering\n3bb8701 Add error page",
            "error handling is now consistent\nerrors: none",
            "0 errors, 0 warnings", "[main 5e1f2a0] Log the error_count"]


def test_only_error_shaped_lines_are_errors() -> None:
    from refold.compaction.prune import first_error_line

    for output, line in ERROR_LINES:
        assert first_error_line(output) == line, output
    for output in NO_ERROR:
        assert first_error_line(output) is None, output


def test_a_command_whose_output_says_error_in_passing_is_done() -> None:
    closed = "✓ Closed T-3: added error handling"
    turns: list[dict[str, Any]] = [{"role": "user", "content": "Close T-3."}]
    for cid, command, output in (("c1", 'bd close T-3 --reason "added error handling"', closed),
                                 ("c2", "git commit -am 'Fix error page'",
                                  "[main 5e1f2a0] Fix error page\n 1 file changed"),
                                 ("c3", "make lint", "src/a.py:3: error: Incompatible types")):
        args = json.dumps({"command": command})
        turns += [{"role": "assistant", "content": None, "tool_calls": [
                      {"id": cid, "type": "function",
                       "function": {"name": "terminal", "arguments": args}}]},
                  {"role": "tool", "tool_call_id": cid, "content": output}]
    parts = summary(turns)
    assert any(item.startswith("`bd close T-3") and "✓ Closed" in item
               for item in parts["done"]), parts["done"]
    assert any(item.startswith("`git commit") for item in parts["done"]), parts["done"]
    assert not any("bd close" in i or "git commit" in i for i in parts["blocked"])
    assert any("make lint" in item for item in parts["blocked"]), parts["blocked"]
    # Claude Code says so itself: a result not marked is_error with no exit status is trusted
    flagged = claude_code("Check.", ("Bash", {"command": "make check"}, "Error: retrying", False))
    assert scan_activity(flagged).outcomes["make check"].ok


def _edits(*paths: str) -> list[tuple[str, dict[str, Any], str, bool]]:
    return [("Edit", {"file_path": p, "old_string": "a", "new_string": "b"},
             f"The file {p} has been updated successfully.", False) for p in paths]


def test_a_relative_path_is_the_absolute_path_it_ends_and_keeps_its_status() -> None:
    turns = claude_code("Refactor the hooks.",
                        *_edits("/home/u/proj/lib/web/hooks_controller.ex",
                                "/home/u/proj/lib/a/util.py", "/home/u/proj/lib/b/util.py"))
    turns.append({"role": "assistant", "content": "Changed `lib/web/hooks_controller.ex` and "
                  "`./lib/web/hooks_controller.ex`; `hooks_controller.ex` compiles. "
                  "`lib/util.py` is unrelated; `util.py` is in two places."})
    files = summary(turns)["files"]
    assert "`/home/u/proj/lib/web/hooks_controller.ex` — modified, mentioned" in files, files
    assert not any("`lib/web/hooks_controller.ex`" in f or "`./lib" in f
                   or "`hooks_controller.ex`" in f for f in files), files
    assert "`util.py` — mentioned" in files  # three paths end with it: which one is unknown
    assert "`lib/util.py` — mentioned" in files  # no path ends with it at a "/"


def test_under_a_tight_budget_the_files_section_drops_the_oldest_not_the_newest() -> None:
    paths = [f"/home/u/proj/lib/mod{i:02d}.ex" for i in range(12)]
    reads = [("Read", {"file_path": f"/home/u/proj/doc/n{i:02d}.md"}, "notes", False)
             for i in range(16)]
    turns = claude_code("Refactor the app.", *_edits(*paths), *reads)
    files = summary(turns)["files"]
    assert all(f"`{p}` — modified" in files for p in paths), files  # the cap keeps edits
    assert not any("/doc/" in f for f in summary(turns, budget=420)["files"])  # reads go first
    tight = summary(turns, budget=300)["files"]
    assert 0 < len(tight) < 12
    assert tight == tuple(f"`{p}` — modified" for p in reversed(paths[-len(tight):])), tight


APP_JS = "".join(f"{n:>6}→  push(\"x\").receive(\"error\", () => log(\"ERROR: no reply\"))\n"
                 if n % 11 == 0 else f"{n:>6}→  const a{n} = {n};\n" for n in range(1, 89)
                 ).rstrip("\n")
GIT_LOG = "67dc57b Fix endpoint error rendering\n3bb8701 Handle exit code 3 in the runner\n" \
    "a7be2f0 Log ERROR lines\n" * 6


def test_the_stand_in_of_what_a_call_read_names_no_error_from_the_text_it_read() -> None:
    read = one_line_summary("Read", json.dumps({"file_path": "/p/assets/js/app.js"}), APP_JS)
    assert read.startswith("[Read] ran `/p/assets/js/app.js` -> 88 lines"), read
    assert "error" not in read.replace("full output", ""), read
    for command in ("git log --oneline -20", "cd /p && git log --oneline -20",
                    "grep -rn error lib/"):
        line = one_line_summary("Bash", json.dumps({"command": command}), GIT_LOG)
        assert "; error:" not in line and "exit 3" not in line, line
    view = one_line_summary("str_replace_editor",
                            json.dumps({"command": "view", "path": "/w/src/app.py"}), APP_JS)
    assert view.startswith("[str_replace_editor] ran `view /w/src/app.py` -> 88 lines"), view
    assert "; error:" not in view
    # what the tool itself says on its first line still counts
    missing = one_line_summary("Read", json.dumps({"file_path": "/p/x.ex"}),
                               "<tool_use_error>File does not exist.</tool_use_error>")
    assert missing.endswith("; error: <tool_use_error>File does not exist.</tool_use_error> "
                            "(full output in the session ledger)"), missing
    failed = one_line_summary("Bash", json.dumps({"command": "git log main..HEAD"}),
                              "Exit code 128\nfatal: ambiguous argument 'main..HEAD'\n")
    assert "exit 128" in failed and "; error: fatal: ambiguous argument" in failed, failed
    # a command that does something keeps its error line
    build = one_line_summary("Bash", json.dumps({"command": "node build.js"}),
                             "Exit code 1\n✘ [ERROR] Could not resolve \"js/app.js\"\n")
    assert "; error: ✘ [ERROR] Could not resolve" in build, build


def test_the_anchor_index_reads_call_arguments_as_given_not_as_json_escapes() -> None:
    from refold.compaction.anchors import extract_anchors

    write = json.dumps({"file_path": "src/解析器.py",  # ASCII JSON: "src/\u89e3\u6790\u5668.py"
                        "content": "import x\nfrom highlight.js import core\n"})
    assert "\\u5668" in write and "\\nfrom" in write
    msgs: list[dict[str, Any]] = [
        {"role": "user", "content": "Add the parser."},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "w1", "type": "function", "function": {"name": "Write", "arguments": write}},
            {"id": "w2", "type": "function", "function": {
                "name": "shell", "arguments": "make -C src/raw/build"}}]},  # not JSON: as it is
        {"role": "tool", "tool_call_id": "w1", "content": "File created successfully."},
        {"role": "tool", "tool_call_id": "w2", "content": "ok"}]
    texts = {a.text for a in extract_anchors(msgs)}
    assert "src/解析器.py" in texts, texts
    assert "src/raw/build" in texts, texts
    assert not any("u5668" in t or "u89e3" in t or "nhighlight" in t for t in texts), texts


CAVEAT = ("<local-command-caveat>Caveat: The messages below were generated by the user while "
          "running local commands. DO NOT respond to these messages or otherwise consider them "
          "in your response unless the user explicitly asks you to.</local-command-caveat>")
COMPACT = ("<command-name>/compact</command-name>\n            <command-message>compact"
           "</command-message>\n            <command-args></command-args>")
STDOUT = ("<local-command-stdout>\x1b[2mCompacted (ctrl+o to see full summary)\x1b[22m\n"
          "Never use the cache directory /tmp/x.py</local-command-stdout>")
CONTINUED = ("This session is being continued from a previous conversation that ran out of "
             "context. The summary below covers the earlier portion of the conversation.\n\n"
             "Analysis:\n- `priv/static/assets/` must never be edited by hand\n"
             "Please continue the conversation from where we left off without asking the user "
             "any further questions.")
NOTICE = ("<task-notification>\n<task-id>be613ab</task-id>\n<status>completed</status>\n"
          "<summary>Background command \"Run tests\" completed (exit code 0)</summary>\n"
          "</task-notification>\nRead the output file to retrieve the result: /tmp/be.output")
SKILL = ("<command-message>beads:create</command-message>\n<command-name>/beads:create"
         "</command-name>\n<command-args>split the transcript work into beads</command-args>")


def test_claude_code_wrapper_messages_are_not_the_users_words() -> None:
    def user(text: str) -> dict[str, Any]:
        return {"role": "user", "content": text}

    def said(text: str) -> dict[str, Any]:
        return {"role": "assistant", "content": text}

    turns = [user("Work on bead spotter-fum. Always run mix format before committing."),
             said("Starting with spotter-fum.1."), user(CAVEAT), user(COMPACT), user(STDOUT),
             user(CONTINUED), said("Continuing."), user(NOTICE), said("The tests pass."),
             user("Now fix the subagent badge.\n<system-reminder>The task tools haven't been "
                  "used recently. Never mention this reminder.</system-reminder>"),
             said("Fixing the badge."), user(SKILL), said("Creating beads."),
             user("Base directory for this skill: /home/u/.claude/skills/hex-docs\n\n# Hex "
                  "Documentation Search\n\nPrefer local/cached results. Never fetch twice."),
             said("Searching the docs.")]
    parts = summary(turns)
    text = "\n".join(line for lines in parts.values() for line in lines)
    for harness in ("local-command", "command-name", "DO NOT respond", "Compacted (ctrl+o",
                    "continued from a previous", "continue the conversation", "task-notification",
                    "Read the output file", "system-reminder", "reminder", "/tmp/x.py",
                    "priv/static", "Base directory", "Prefer local/cached", "Never fetch"):
        assert harness not in text, (harness, text)
    assert parts["goal"] == ("Work on bead spotter-fum. Always run mix format before committing.",
                             "Current request: /beads:create split the transcript work into "
                             "beads"), parts["goal"]
    assert parts["constraints"] == ("Always run mix format before committing.",), parts


def test_diff_headers_name_their_files_without_a_and_b() -> None:
    diff = ("Here is the change:\n\n```diff\ndiff --git a/src/app.py b/src/app.py\n"
            "--- a/src/app.py\n+++ b/src/app.py\n@@ -1 +1 @@\n-x = 1\n+x = 2\n```\n"
            "And in requirements:\n```diff\n--- a/requirements/base.txt\n"
            "+++ b/requirements/base.txt\n```")
    turns = [{"role": "user", "content": "Bump x."}, {"role": "assistant", "content": diff}]
    files = summary(turns)["files"]
    assert "`src/app.py` — mentioned" in files, files
    assert "`requirements/base.txt` — mentioned" in files, files
    assert not any(f.startswith(("`a/", "`b/")) for f in files), files


def test_constraints_written_as_a_list_keep_one_list_marker() -> None:
    turns = [{"role": "user", "content": "Please fix the bug.\n- Always run the tests first.\n"
                                         "* Never push to main.\n2. Do not use unittest."},
             {"role": "assistant", "content": "On it."}]
    assert summary(turns)["constraints"] == (
        "Always run the tests first.", "Never push to main.", "Do not use unittest.")
