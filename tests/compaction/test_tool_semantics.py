"""What the summary says a tool did comes from the tool's semantics, never from its name.

Each test is a finding of issue 13 on real agent transcripts (OpenHands/SWE-agent
``str_replace_editor``, Claude Code, Codex, MCP): "modified" for files that were only viewed,
"Fix the still-failing `view`" / "`C-c`" as next steps.
"""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from refold.compaction.activity import scan_activity
from refold.compaction.builtin import BuiltinSummarizer
from refold.compaction.summarizer import SummaryRequest
from refold.compaction.summary import parse_body
from refold.compaction.tools import Effect, register, shell_writes, tool_effect
from refold.tokens import get_counter

COUNTER = get_counter("gpt-4o")


def call(cid: str, name: str, **args: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": None, "tool_calls": [
        {"id": cid, "type": "function", "function": {"name": name,
                                                     "arguments": json.dumps(args)}}]}


def result(cid: str, text: str) -> dict[str, Any]:
    return {"role": "tool", "tool_call_id": cid, "content": text}


def files_of(turns: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None
             ) -> dict[str, set[str]]:
    return {p: acts for p, (_, acts) in scan_activity(turns, tools).files.items()}


def summary(turns: list[dict[str, Any]]) -> defaultdict[str, tuple[str, ...]]:
    request = SummaryRequest(turns=turns, pruned_turns=turns, prefix=turns, previous_summary=None,
                             language="en", budget_tokens=3000, counter=COUNTER)
    parsed = parse_body(BuiltinSummarizer().summarize(request).body).items
    return defaultdict(tuple, parsed)


VIEW = "Here's the result of running `cat -n` on /w/src/app.py:\n     1\traise ConnectTimeoutError("


def test_str_replace_editor_view_reads_and_is_no_command() -> None:
    turns = [call("a", "str_replace_editor", command="view", path="/w/src/app.py"),
             result("a", VIEW)]
    assert files_of(turns) == {"/w/src/app.py": {"read"}}
    parts = summary(turns)
    text = "\n".join(line for lines in parts.values() for line in lines)
    assert "`view`" not in text and "ConnectTimeoutError" not in "\n".join(parts["blocked"])
    assert not any("modified" in f for f in parts["files"])


def test_str_replace_editor_writes_only_when_the_edit_happened() -> None:
    turns = [call("a", "str_replace_editor", command="str_replace", path="/w/a.py",
                  old_str="x", new_str="y"),
             result("a", "ERROR:\nNo replacement was performed, old_str `x` did not appear "
                         "verbatim in /w/a.py."),
             call("b", "str_replace_editor", command="create", path="/w/new.py", file_text="1"),
             result("b", "File created successfully at: /w/new.py"),
             call("c", "str_replace_editor", command="insert", path="/w/b.py", insert_line=1,
                  new_str="z"),
             result("c", "The file /w/b.py has been edited. Review the changes."),
             call("d", "str_replace_editor", command="undo_edit", path="/w/c.py"),
             result("d", "Last edit to /w/c.py undone successfully.")]
    files = files_of(turns)
    assert "modified" not in files["/w/a.py"]
    assert all("modified" in files[p] for p in ("/w/new.py", "/w/b.py", "/w/c.py"))
    blocked = summary(turns)["blocked"]
    assert any("/w/a.py" in b and "No replacement" in b for b in blocked), blocked


def test_a_retried_edit_is_no_fix_note() -> None:
    turns = [call("a", "str_replace_editor", command="str_replace", path="/w/a.py",
                  old_str="x", new_str="y"),
             result("a", "ERROR:\nNo replacement was performed"),
             call("b", "str_replace_editor", command="str_replace", path="/w/a.py",
                  old_str="x ", new_str="y"),
             result("b", "The file /w/a.py has been edited.")]
    parts = summary(turns)
    assert not parts["blocked"]
    assert not any("fixed: ERROR" in d for d in parts["done"]), parts["done"]


def test_keystrokes_and_input_to_a_process_are_not_commands() -> None:
    turns = [call("a", "execute_bash", command="C-c", is_input="true"),
             result("a", "^C\n[The command completed with exit code 130.]"),
             call("b", "execute_bash", command="y", is_input="true"),
             result("b", "error: aborted\n[The command completed with exit code 1.]")]
    parts = summary(turns)
    assert not parts["blocked"], parts["blocked"]
    assert not any("C-c" in n for n in parts["next_steps"])


def test_claude_code_tools() -> None:
    turns = [call("a", "Read", file_path="/r/a.ts"), result("a", "1\tconst a = 1"),
             call("b", "Edit", file_path="/r/b.ts", old_string="a", new_string="b"),
             result("b", "The file /r/b.ts has been updated."),
             call("c", "MultiEdit", file_path="/r/c.ts", edits=[]), result("c", "Applied 2 edits"),
             call("d", "Write", file_path="/r/d.ts", content="x"), result("d", "File created"),
             call("e", "Grep", pattern="TODO", path="/r/src"), result("e", "/r/src/x.ts:1"),
             call("f", "Edit", file_path="/r/e.ts", old_string="q", new_string="r"),
             result("f", "<tool_use_error>String to replace not found in file.</tool_use_error>")]
    files = files_of(turns)
    assert files["/r/a.ts"] == {"read"}
    assert all("modified" in files[p] for p in ("/r/b.ts", "/r/c.ts", "/r/d.ts"))
    assert "modified" not in files["/r/src"] and "modified" not in files["/r/e.ts"]


def test_codex_apply_patch_and_argv_shell() -> None:
    patch = ("*** Begin Patch\n*** Update File: src/lib.rs\n@@\n-a\n+b\n"
             "*** Add File: src/new.rs\n+fn x() {}\n*** End Patch")
    turns = [call("a", "apply_patch", input=patch), result("a", "Done!"),
             call("b", "shell", command=["bash", "-lc", "cargo test -q"]),
             result("b", "test result: FAILED. 1 passed; 2 failed\nexit code 101")]
    files = files_of(turns)
    assert "modified" in files["src/lib.rs"] and "modified" in files["src/new.rs"]
    blocked = summary(turns)["blocked"]
    assert any("cargo test -q" in b for b in blocked), blocked


def test_mcp_tools_by_annotation_and_unknown_tools_neutral() -> None:
    tools = [{"type": "function", "function": {"name": "fs_peek", "parameters": {}},
              "annotations": {"readOnlyHint": True}},
             {"type": "function", "function": {"name": "fs_put", "parameters": {},
                                               "annotations": {"readOnlyHint": False}}}]
    turns = [call("a", "fs_peek", path="docs/a.md"), result("a", "text"),
             call("b", "fs_put", path="docs/b.md"), result("b", "ok"),
             call("c", "update_record_replace", path="docs/c.md"), result("c", "ok")]
    files = files_of(turns, tools)
    assert files["docs/a.md"] == {"read"}
    assert files["docs/b.md"] == {"modified"}
    assert files["docs/c.md"] == {"mentioned"}  # a name with "update"/"replace" proves nothing


def test_shell_writes_are_read_from_the_command_line() -> None:
    assert shell_writes("cat > /w/reproduce.py << 'EOF'") == ("/w/reproduce.py",)
    assert shell_writes("python x.py 2>&1 > out.log") == ("out.log",)
    assert shell_writes("python x.py > /dev/null 2>&1") == ()
    assert shell_writes("sed -i 's/a/b/' src/a.py && git diff") == ("src/a.py",)
    assert shell_writes("rm reproduce.py; mv a.txt b.txt") == ("reproduce.py", "b.txt")
    # a ">" or "|" inside quotes is the program's text, not a redirection or a pipe
    assert shell_writes("sed -i 's/def f(a) -> float/def f(a) -> float:/' t/calc.py") == \
        ("t/calc.py",)
    assert shell_writes("sed -i 's/a|b/c/;s/x/y/' f.py") == ("f.py",)
    assert shell_writes('echo "a > b" >> log.txt && tee "my file.txt" < x') == \
        ("log.txt", "my file.txt")
    assert shell_writes('cat > "new file.py" <<EOF') == ("new file.py",)
    turns = [call("a", "execute_bash", command="sed -i 's/a/b/' src/a.py"),
             result("a", "sed: can't read src/a.py: No such file\n[The command completed with "
                         "exit code 2.]")]
    assert "modified" not in files_of(turns).get("src/a.py", set())


def test_shell_reads_are_read_from_the_command_line() -> None:
    """A shell-only agent (Codex, mini-swe-agent) views files with cat, sed -n, nl, head:
    those files are "read" (they were only "mentioned", or missing from Relevant Files)."""
    from refold.compaction.tools import shell_reads

    assert shell_reads("cat tests/calc.py") == ("tests/calc.py",)
    assert shell_reads("head -n 20 src/a.py && tail -5 src/b.py") == ("src/a.py", "src/b.py")
    assert shell_reads("nl -ba src/x.py | sed -n '10,40p'") == ("src/x.py",)
    assert shell_reads("sed -n '1,10p' f.py") == ("f.py",)
    assert shell_reads("sed -i 's/a/b/' f.py") == ()  # a write
    assert shell_reads("cat <<'EOF' > new.py") == ()  # a here-document: writes new.py
    assert shell_reads("cat a.txt b.txt > c.txt") == ("a.txt", "b.txt")
    assert shell_reads("grep -n foo bar.py") == shell_reads("cat $F") == ()
    turns = [call("a", "exec_command", cmd="cat src/app.py"), result("a", "import os\n"),
             call("b", "exec_command", cmd="cat src/gone.py"),
             result("b", "cat: src/gone.py: No such file or directory\nExit code: 1")]
    files = files_of(turns)
    assert files["src/app.py"] == {"read"}
    assert "read" not in files.get("src/gone.py", set())  # a read that failed read nothing


def test_swe_agent_edit_names_its_file_in_the_result() -> None:
    turns = [call("a", "open", path="src/m/fields.py", line_number=10),
             result("a", "[File: /t/src/m/fields.py (100 lines total)]\n10: x"),
             call("b", "edit", replacement_text="y", start_line=10, end_line=10),
             result("b", "[File: /t/src/m/fields.py (100 lines total)]\n10: y\nFile updated.")]
    files = files_of(turns)
    assert files["src/m/fields.py"] == {"read"}
    assert files["/t/src/m/fields.py"] == {"modified"}


def test_the_table_is_extensible() -> None:
    register(lambda args, out: Effect(writes=(args["dest"],), action="saved"), "save_doc")
    turns = [call("a", "save_doc", dest="notes/x.md"), result("a", "saved")]
    assert files_of(turns)["notes/x.md"] == {"modified"}
    assert tool_effect("SAVE_DOC", {"dest": "y"}, "").writes == ("y",)


def test_a_script_that_stopped_crashing_is_not_called_fixed() -> None:
    """Finding: a fix that still gave wrong results was summarized "(fixed: IndexError…)"."""
    turns = [call("a", "execute_bash", command="python reproduce.py"),
             result("a", "Traceback (most recent call last):\nIndexError: list index out of "
                         "range\n[The command completed with exit code 1.]"),
             call("b", "execute_bash", command="python reproduce.py"),
             result("b", "[3, 2, 1]\n[The command completed with exit code 0.]"),
             call("c", "execute_bash", command="pytest -q tests/test_sort.py"),
             result("c", "F.\nFAILED tests/test_sort.py::test_order\n1 failed, 1 passed\n"
                         "[The command completed with exit code 1.]"),
             call("d", "execute_bash", command="pytest -q tests/test_sort.py"),
             result("d", "..\n2 passed in 0.1s\n[The command completed with exit code 0.]")]
    done = summary(turns)["done"]
    script = next(d for d in done if d.startswith("`python reproduce.py`"))
    assert "fixed" not in script and "earlier failure: IndexError" in script
    tests = next(d for d in done if d.startswith("`pytest -q tests/test_sort.py`"))
    assert "(fixed:" in tests
