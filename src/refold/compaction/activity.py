"""What the tools did in a span: command outcomes, file touches, the todo list.

The builtin summarizer reports *outcomes*, not calls. Every tool call is reduced to at most one
``Outcome`` keyed by what a later call would be matched on (the command line, or the path a write
tool changed); a later outcome for the same key replaces the earlier one, so a failure fixed later
in the span ends up as a success (noting the earlier error), never as "blocked". Reads and
inspections (``cat``, ``git status``, ``grep``…) are not outcomes: they only mark files as read.

Outcome items render as ``[tool ]`key` → result`` so a later compaction can parse the key back
out of the previous summary (``item_key``) and reconcile its Done / Blocked lists with new runs.
Pure and deterministic: no clock, no randomness.
"""

from __future__ import annotations

import functools
import json
import re
import shlex
from collections.abc import Sequence
from itertools import pairwise
from typing import Any

from refold._records import dataclass, field
from refold.compaction.prune import exit_status, failure_line, first_error_line
from refold.compaction.tools import Effect, annotations_of, tool_effect
from refold.messages.anthropic import KEPT
from refold.messages.model import Message, content_text

ARROW = "→"
_ITEM_KEY = re.compile(r"^(?:[\w.:-]+ )?`([^`]+)` (?:→|->) ")
_SKIP_TOOLS = re.compile(r"^(?:memory|todo\w*|session_search|clarify|skill\w*)$", re.IGNORECASE)
INSPECT = re.compile(
    r"^\s*(?:git\s+(?:status|diff|log|show|branch|blame|ls-files|remote|rev-parse)|ls|cat|"
    r"grep|rg|ag|find|fd|head|tail|wc|less|more|echo|pwd|which|tree|sed\s+-n|awk|du|df|env|"
    r"printenv|file|stat|type|whoami|date|history)\b")
_RUNNERS = {"python", "python3", "-m", "uv", "run", "poetry", "pipenv", "npx", "pnpm", "yarn",
            "npm", "sudo", "env", "exec", "bundle", "cargo", "go", "dotnet"}
_PATHLIKE = re.compile(r"^(?:~|\.{1,2})?/?(?:[\w.@+-]+/)*[\w.@+-]+\.[A-Za-z]\w{0,9}$|"
                       r"^(?:~|\.{1,2})?/?(?:[\w.@+-]+/)+[\w.@+-]+/?$")
# also the trailer Gemini CLI's run_shell_command puts after a command's output
_EXIT_ONLY = re.compile(r"^(?:exit(?:ed)?|return ?code|process exited)\W.{0,20}$|"
                        r"^\[The command completed with exit code -?\d+\.\]$|"
                        r"^(?:Error: \(none\)|Signal: \S+|Background PIDs: .*|"
                        r"Process Group PGID: .*)$", re.IGNORECASE)
_PRUNED = re.compile(r"^\[[\w.:-]+\] (?:ran `.*?` )?-> (.*?)(?:; error: (.*))? "
                     r"\(full output in the session ledger\)$", re.DOTALL)
_PYTEST_E = re.compile(r"^E\s+")  # pytest's marker for assertion lines
_FIXED_NOISE = re.compile(r"^(?:error|exit \d+)?:?\s*(?:E\s+)?")
_PASSING = re.compile(r"\b\d+ passed\b|\bpassed\b|^OK\b|\bOK \(|\bsuccess(?:ful(?:ly)?)?\b|"
                      r"\bPASS(?:ED)?\b|\b0 (?:failed|failures|errors)\b|test result: ok",
                      re.IGNORECASE)
_INTERPRETERS = frozenset({"python", "python3", "node", "ruby", "perl", "php", "bash", "sh",
                          "deno", "bun", "java"})
_FILTERS = ("-k", "-m", "--filter", "--grep", "-t", "--testNamePattern")


def is_path_like(text: str) -> bool:
    """A file or directory path (``src/a.py``, ``a.py``, ``docs/``), not a word or a URL."""
    text = text.strip()
    return (0 < len(text) <= 200 and "://" not in text and not text.startswith("-")
            and _PATHLIKE.match(text) is not None)


def item_key(item: str) -> str | None:
    """The command or path an outcome item was rendered for (``None`` for free text)."""
    match = _ITEM_KEY.match(item)
    return match.group(1) if match else None


@functools.lru_cache(maxsize=4096)
def command_shape(command: str) -> tuple[str, frozenset[str], bool]:
    """``(program, targets, filtered)``: ``pytest -q tests/a.py::t`` → pytest, {tests/a.py}."""
    words = command.split()
    program = next((w for w in words if w not in _RUNNERS and not w.startswith("-")), "")
    targets = frozenset(w.split("::")[0] for w in words[1:]
                        if not w.startswith("-") and is_path_like(w.split("::")[0]))
    filtered = any(w in _FILTERS or "::" in w for w in words)
    return program.rsplit("/", 1)[-1], targets, filtered


def resolves(success_key: str, failure_key: str) -> bool:
    """Does a successful run of ``success_key`` settle the failure of ``failure_key``?

    Same command; or an unfiltered run of the same program on an overlapping target
    (``pytest tests/a.py`` after ``pytest -q tests/a.py::test_x``) or on everything
    (``pytest -q``). A filtered success (``-k case4``, ``a.py::test_y``) settles only itself.
    """
    if success_key == failure_key:
        return True
    program, targets, filtered = command_shape(success_key)
    f_program, f_targets, _ = command_shape(failure_key)
    if filtered or not program or program != f_program:
        return False
    return not targets or bool(targets & f_targets)


@dataclass
class Outcome:
    key: str
    tool: str
    ok: bool
    detail: str  # the result line (ok) or the error (failed)
    position: int
    earlier_error: str = ""  # a failure of the same key this success settled

    def render(self) -> str:
        lead = f"`{self.key}`" if self.tool == "command" else f"{self.tool} `{self.key}`"
        text = f"{lead} {ARROW} {self.detail}"
        if self.ok and self.earlier_error:
            # "fixed" only when the result says checks passed; a script that stopped crashing
            # may still print the wrong answer
            words = self.key.split()
            script = (self.tool == "command" and len(words) > 1 and words[0] in _INTERPRETERS
                      and not words[1].startswith("-"))  # python x.py, not python -m pytest
            word = "earlier failure" if script and not _PASSING.search(self.detail) else "fixed"
            text += f" ({word}: {_FIXED_NOISE.sub('', self.earlier_error)})"
        return text


@dataclass
class Activity:
    outcomes: dict[str, Outcome] = field(default_factory=dict)  # latest per key
    files: dict[str, tuple[int, set[str]]] = field(default_factory=dict)  # path → (pos, acts)
    tools: dict[str, int] = field(default_factory=dict)
    todos: list[tuple[str, str]] | None = None  # (status, content) of the last todo list
    # open command failures by program, so a success checks only its own program's failures
    # (a scan of every open failure made long transcripts quadratic)
    _failing: dict[str, set[str]] = field(default_factory=dict)

    def touch(self, path: str, action: str, position: int) -> None:
        path = _clean_path(path)
        if is_path_like(path):
            _, actions = self.files.get(path, (position, set()))
            self.files[path] = (position, actions | {action})

    def remove(self, path: str, position: int) -> None:
        """``path`` was deleted: it is named, no longer "modified" (a file created and then
        removed left nothing behind). A relative path is also the one known path that ends
        with it (as the summary's file list joins them)."""
        path = _clean_path(path)
        if not is_path_like(path):
            return
        self.touch(path, "mentioned", position)
        same = [p for p in self.files if p.endswith("/" + path) and p != path]
        for known in [path, *(same if len(same) == 1 else [])]:
            at, actions = self.files[known]
            self.files[known] = (max(at, position), (actions - {"modified"}) | {"mentioned"})

    def record(self, outcome: Outcome) -> None:
        old = self.outcomes.pop(outcome.key, None)
        if old is not None and not old.ok:
            self._forget_failure(old.key)
        if outcome.ok:
            if old is not None and outcome.tool == "command":  # a retried edit is no fix
                outcome.earlier_error = old.earlier_error if old.ok else old.detail
            if outcome.tool == "command":
                self._settle(outcome.key)
        elif outcome.tool == "command":
            self._failing.setdefault(command_shape(outcome.key)[0], set()).add(outcome.key)
        self.outcomes[outcome.key] = outcome

    def _settle(self, success_key: str) -> None:
        """Drop the open command failures that a success of ``success_key`` resolves."""
        program, _, filtered = command_shape(success_key)
        failing = self._failing.get(program, set())
        if filtered:  # a filtered success settles only itself: no scan of every failure
            settled = [success_key] if success_key in failing else []
        else:
            settled = sorted(k for k in failing if resolves(success_key, k))
        for key in settled:
            del self.outcomes[key]
            self._forget_failure(key)

    def _forget_failure(self, key: str) -> None:
        keys = self._failing.get(command_shape(key)[0])
        if keys is not None:
            keys.discard(key)


def _clean_path(path: str) -> str:
    # a leading "." is the path's own (``./x``, ``../x``, ``.env``): only a trailing one goes
    return path.strip().strip("`'\"").rstrip(".,;:").lstrip(",;:").removeprefix("./")


def _args(raw: str) -> dict[str, Any]:
    try:
        parsed = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


# the plan tools that are todo lists by another name: Codex's ``update_plan`` (``plan``: steps
# with a ``step``), Gemini CLI's ``write_todos`` (``todos`` with a ``description``)
PLAN_TOOLS = frozenset({"update_plan", "write_todos"})


def _todos(args: dict[str, Any], output: str) -> list[tuple[str, str]] | None:
    """Open items of a ``todo`` call: from its result (the full list), else its arguments."""
    for source in (_args(output), args):
        todos = source.get("todos", source.get("plan"))
        if isinstance(todos, list) and not (source is args and args.get("merge")):
            return [(str(t.get("status") or "pending"), " ".join(str(text).split()))
                    for t in todos if isinstance(t, dict)
                    and (text := t.get("content") or t.get("step") or t.get("description"))]
    return None


RESULT_TAIL_CHARS = 2_000  # what of an output is split first when looking for its last line


def _last_of(lines: list[str]) -> str | None:
    return next((ln.strip() for ln in reversed(lines)
                 if ln.strip() and not _EXIT_ONLY.match(ln.strip())), None)


def _last_line(output: str) -> str:
    """The last line that is not blank and not only an exit status. A long output's tail is
    split first: past the tail's first line break its lines are the output's own
    (``splitlines`` of a suffix differs only in the line it starts inside)."""
    tail = output[-RESULT_TAIL_CHARS:]
    if len(tail) < len(output):
        found = _last_of(tail.splitlines()[1:])
        if found is not None:
            return found
    return _last_of(output.splitlines()) or ""


# a test run's own summary line: pytest's ``=== 1 failed, 3 passed in 0.12s ===`` (or ``-q``'s
# ``3 passed in 0.12s``), cargo test's ``test result: ok. 5 passed; …``, jest's ``Tests: …``
_SUMMARY_LINE = re.compile(
    r"^[ \t]*(?:=+ )?(?:\d+ [a-z]+(?:, |(?= in )))+ in [\d.]+s(?: \([\d:]+\))?(?: =+)?[ \t]*$|"
    r"^[ \t]*test result: (?:ok|FAILED)\. .*$|^[ \t]*Tests:[ \t]+\d.*\btotal[ \t]*$",
    re.MULTILINE)
_NONE_RAN = re.compile(r"\b0 passed\b")


def _summary_line(output: str) -> str | None:
    """The last test-summary line of the output's tail (one that counts tests run first: a
    cargo run ends with its doc tests' ``0 passed``), or None."""
    found = [m.group(0).strip() for m in _SUMMARY_LINE.finditer(output[-2 * RESULT_TAIL_CHARS:])]
    return next((ln for ln in reversed(found) if not _NONE_RAN.search(ln)),
                found[-1] if found else None)


def _result_line(output: str) -> str:
    """What a command that went well printed: its test summary line when it has one, else its
    last line."""
    line = " ".join((_summary_line(output) or _last_line(output)).split())
    return line if len(line) <= 120 else line[:119] + "…"


def _facts(output: str) -> tuple[str | None, str | None, bool]:
    """(exit status, error line, pruned): an earlier compaction's one-line stand-in is read for
    its facts, not its wording."""
    pruned = _PRUNED.match(output.strip()) if "(full output in the session ledger)" in output \
        else None
    if pruned:
        found = re.search(r"\bexit (-?\d+)", pruned.group(1))
        return (found.group(1) if found else None), pruned.group(2), True
    return exit_status(output), first_error_line(output), False


def json_output(output: str) -> tuple[str, str | None]:
    """A command's output and exit status from the JSON Codex records for its ``shell`` calls
    (``{"output": "…", "metadata": {"exit_code": 1, …}}``); any other output as it is."""
    if not output.startswith('{"output"'):
        return output, None
    try:
        found = json.loads(output)
    except ValueError:
        return output, None
    meta = found.get("metadata") if isinstance(found, dict) else None
    if not isinstance(meta, dict) or not isinstance(found.get("output"), str):
        return output, None
    code = meta.get("exit_code")
    return found["output"], str(code) if isinstance(code, int) else None


def flagged_error(result: Message) -> bool | None:
    """What a tool message's own result block says of it: ``is_error`` of the Anthropic
    ``tool_result`` kept beside it (``KEPT``; Claude Code marks every result, a failed command
    ``true``); None when it says nothing."""
    kept = result.get(KEPT)
    if isinstance(kept, list) and kept and isinstance(kept[0], dict) \
            and isinstance(kept[0].get("is_error"), bool):
        return bool(kept[0]["is_error"])
    return None


def _first_line(output: str) -> str | None:
    """The first line that is not blank and not only an exit status (``Exit code 1``)."""
    line = next((ln.strip() for ln in output.splitlines()
                 if ln.strip() and not _EXIT_ONLY.match(ln.strip())), None)
    return line[:160] if line else None


def _command_outcome(command: str, output: str, position: int,
                     flagged: bool | None = None) -> Outcome | None:
    """A command's outcome. It failed when its result is marked an error (``flagged``), its
    exit status is not 0, or its test summary counts failures; with neither a mark nor a
    status, when a short output has an error line."""
    if INSPECT.match(command) or "Sibling tool call errored" in output[:200] \
            or output.startswith("[Operation Cancelled]"):
        # Claude Code cancelled it when a parallel call failed, the user declined it in Gemini
        # CLI: it never ran
        return None
    output, code = json_output(output)
    status, error, pruned = _facts(output)
    status = code if code is not None else status
    # a pruned output's stand-in keeps its failure count as its error
    counted = failure_line(error or "") if pruned else failure_line(output)
    error = _PYTEST_E.sub("", error) if error else counted
    failed = flagged is True or status not in (None, "0") or counted is not None or (
        flagged is None and status is None and error is not None and len(output) < 4000)
    if failed:
        if error is None and flagged and not pruned:
            error = _first_line(output)
        detail = (f"exit {status}" if status else "error") + (f": {error}" if error else "")
    else:
        line = "" if pruned else _result_line(output)
        detail = line or (f"exit {status}" if status else "ok")
    return Outcome(command, "command", not failed, detail, position)


def _outcomes(name: str, effect: Effect, output: str, position: int,
              flagged: bool | None = None) -> list[Outcome]:
    """At most one outcome per command or written path: what a later call is matched on."""
    if effect.command is not None:
        found = _command_outcome(effect.command, output, position, flagged)
        return [found] if found is not None else []
    if effect.failed_write is not None:
        return [Outcome(p, name, False, f"error: {effect.failed_write}", position)
                for p in effect.mentions]
    return [Outcome(p, name, True, effect.action or "written", position) for p in effect.writes] \
        + [Outcome(p, name, True, "deleted", position) for p in effect.deletes]


_FENCED = re.compile(r"```[\w-]*[ \t]*\n(.*?)\n?[ \t]*```", re.DOTALL)
_RETURNCODE = re.compile(r"\A\s*<returncode>\s*(-?\d+)\s*</returncode>\s*")
_OUTPUT_TAG = re.compile(r"\A\s*<output>\n?|\n?</output>\s*\Z")
TEXT_ACTION_TOOL = "bash"  # the shell a text-action agent's fenced commands run in
# the state SWE-agent writes after every observation: ``(Open file: …)``, ``(Current
# directory: …)`` and the ``bash-$`` prompt
_TRAILER_LINE = re.compile(r"^\s*(?:\((?:Open file|Current directory|Interactive session): "
                           r"[^\n]*\)|bash-\$)\s*$")
_OPEN_FILE = re.compile(r"^\(Open file: ([^\n)]+)\)\s*$", re.MULTILINE)
_SWE_HEADER = re.compile(r"^\[File: (\S+) \(\d+ lines total\)\]", re.MULTILINE)
# SWE-agent's own commands, as the tools of its function-calling mode (refold.compaction.tools)
_SWE_VIEWS = frozenset({"goto", "scroll_up", "scroll_down"})
_SWE_COMMANDS = frozenset({"open", "create", "edit", "insert", "str_replace_editor",
                           "find_file", "search_file", "search_dir", "submit"}) | _SWE_VIEWS


def strip_prompt_trailer(text: str) -> tuple[str, str | None]:
    """An observation without SWE-agent's trailer, and the file it says is open (None when
    none is, ``n/a``)."""
    lines = text.rstrip().split("\n")
    cut = len(lines)
    while cut and (not lines[cut - 1].strip() or _TRAILER_LINE.match(lines[cut - 1])):
        cut -= 1
    if cut == len(lines):
        return text, None
    opened = _OPEN_FILE.search("\n".join(lines[cut:]))
    name = opened.group(1).strip() if opened else None
    return "\n".join(lines[:cut]), None if name in (None, "n/a") else name


def _words(line: str) -> list[str]:
    try:
        return shlex.split(line)
    except ValueError:
        return line.split()


def swe_call(block: str, output: str, open_file: str | None) -> tuple[str, dict[str, Any]]:
    """The tool and arguments a text action is: SWE-agent's own commands (``open f 10``,
    ``create f``, ``edit 1:1 … end_of_edit``, ``str_replace_editor view f``…) as its
    function-calling tools, anything else a ``bash`` command."""
    first, _, rest = block.partition("\n")
    name = first.split(maxsplit=1)[0] if first.strip() else ""
    if name not in _SWE_COMMANDS:
        return TEXT_ACTION_TOOL, {"command": block}
    operands = _words(first)[1:]
    shown = _SWE_HEADER.search(output[:400])
    current = shown.group(1) if shown else open_file
    args: dict[str, Any] = {}
    if name == "open" and operands:
        args = {"path": operands[0]}
    elif name in _SWE_VIEWS and current:
        args = {"path": current}
    elif name == "create" and operands:
        args = {"filename": operands[0]}
    elif name in ("edit", "insert"):  # the open file, named by the result's ``[File: X]``
        args = {"text": rest.removesuffix(f"end_of_{name}").rstrip()}
    elif name == "str_replace_editor" and len(operands) >= 2:
        args = {"command": operands[0], "path": operands[1]}
    elif name == "find_file":
        args = {"file_name": operands[0] if operands else "",
                "dir": operands[1] if len(operands) > 1 else ""}
    elif name in ("search_file", "search_dir") and operands:
        args = {"search_term": operands[0]}
        if len(operands) > 1:
            args["file" if name == "search_file" else "dir"] = operands[1]
    return name, args


def as_tool_turns(turns: Sequence[Message], observed: set[int]) -> list[Message]:
    """``turns`` with a text-action agent's steps as the tool calls they are (SWE-agent,
    mini-swe-agent: the command in a fenced block of a plain assistant message, its output the
    next *user* message, one of ``observed``, the ``id()`` of such observations): that
    assistant message gets its last fenced block as a call (``swe_call``: SWE-agent's own
    commands as its tools, anything else ``bash``), the observation becomes the call's result
    without SWE-agent's prompt trailer, its ``<returncode>`` the ``Exit code`` header a shell
    tool writes. The same length and order, so positions are those of ``turns``."""
    out = list(turns)
    if not observed:
        return out
    for i, (before, after) in enumerate(pairwise(turns)):
        if id(after) not in observed or before.get("role") != "assistant" \
                or before.get("tool_calls"):
            continue
        blocks = _FENCED.findall(content_text(before))
        if not blocks or not blocks[-1].strip():
            continue
        call_id = f"text-action-{i}"
        text = content_text(after)
        code = _RETURNCODE.match(text)
        body, open_file = strip_prompt_trailer(
            _OUTPUT_TAG.sub("", text[code.end():] if code else text))
        name, args = swe_call(blocks[-1].strip(), body, open_file)
        out[i] = {**before, "tool_calls": [{"id": call_id, "type": "function", "function": {
            "name": name, "arguments": json.dumps(args)}}]}
        out[i + 1] = {"role": "tool", "tool_call_id": call_id,
                      "content": (f"Exit code {code.group(1)}\n" if code else "") + body}
    return out


def _changed_nothing(effect: Effect, failed_write: str | None) -> Effect:
    """``effect`` as a call that changed no file: what it would have written or removed is
    only named."""
    return Effect(reads=effect.reads,
                  mentions=(*effect.mentions, *effect.writes, *effect.deletes),
                  command=effect.command, action=effect.action, failed_write=failed_write)


def scan_activity(turns: Sequence[Message], tools: Sequence[dict[str, Any]] | None = None
                  ) -> Activity:
    """Outcomes, file touches, tool counts and the last todo list of ``turns``, in order.

    What each call did comes from ``refold.compaction.tools`` (its semantics table, the MCP
    annotations of ``tools``); an unknown tool only mentions the paths it was given."""
    activity = Activity()
    notes = annotations_of(tools)
    results = {str(m.get("tool_call_id")): m for m in turns if m.get("role") == "tool"}
    for pos, msg in enumerate(turns):
        for call in msg.get("tool_calls") or []:
            fn = call.get("function") if isinstance(call.get("function"), dict) else {}
            name = str(fn.get("name") or "tool")
            activity.tools[name] = activity.tools.get(name, 0) + 1
            args = _args(str(fn.get("arguments") or ""))
            result = results.get(str(call.get("id")))
            output = content_text(result) if result is not None else ""
            if name.lower().startswith("todo") or name.lower() in PLAN_TOOLS:
                activity.todos = _todos(args, output) or activity.todos
            if _SKIP_TOOLS.match(name) or name.lower() in PLAN_TOOLS:
                continue
            effect = tool_effect(name, args, output, notes)
            flagged = flagged_error(result) if result is not None else None
            if result is None and (effect.writes or effect.deletes):  # declined, interrupted
                effect = _changed_nothing(effect, None)
            if flagged and (effect.writes or effect.deletes):  # an error: it changed nothing
                effect = _changed_nothing(effect, None if effect.command is not None else
                                          (effect.failed_write or _first_line(output)
                                           or "error"))
            for action, paths in (("read", effect.reads), ("modified", effect.writes),
                                  ("mentioned", effect.mentions)):
                for path in paths:
                    activity.touch(path, action, pos)
            for path in effect.deletes:  # gone, not modified (the command or the ``deleted``
                activity.remove(path, pos)  # outcome says what happened to it)
            if result is not None:
                for outcome in _outcomes(name, effect, output, pos, flagged):
                    activity.record(outcome)
    return activity
