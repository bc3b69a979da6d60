"""What a tool call did, from the tool's known semantics, its arguments and its result.

A summary that calls a file "modified" must be right: a model continuing the work trusts it.
So nothing is guessed from a tool's name (``str_replace_editor`` contains "replace" also when
it only views). ``TOOLS`` maps the names of common agent tools to a reader of their calls:

- OpenHands / SWE-agent / Anthropic text editor (``str_replace_editor``,
  ``str_replace_based_edit_tool``): ``view`` reads; ``create``, ``str_replace``, ``insert``,
  ``undo_edit`` write — unless the result says the edit failed;
- shells (``execute_bash``, ``bash``, Claude Code ``Bash``, Codex ``shell`` with an argv list
  and its ``shell_command``/``exec_command`` with a string,
  Hermes ``terminal``…): the command line; files the command writes (redirections, ``tee``,
  ``sed -i``, ``touch``, ``mv``/``cp`` targets) when it did not fail, and files it removed
  (``rm``, ``unlink``, ``git rm``: deleted, not modified); keystrokes sent to
  a running process (``C-c``, ``is_input``) are not commands;
- Claude Code ``Read``/``Edit``/``Write``/``MultiEdit``/``NotebookEdit``/``Grep``/``Glob``/``LS``;
  Codex ``apply_patch`` (paths from its ``*** Add/Update/Delete File:`` lines); Gemini CLI's
  ``replace``/``write_file``/``read_file`` (``file_path``, or ``absolute_path``); generic
  ``read_file``/``write_file``/``edit_file``/``delete_file``…; SWE-agent's
  ``open``/``goto``/``scroll_up``/``scroll_down``/``create``/``edit``/``insert``/``find_file``/
  ``search_file``/``search_dir`` (the edited file is named by the result's
  ``[File: X (N lines total)]``), as tools or as the commands of its text actions
  (``refold.compaction.activity.as_tool_turns``);
- MCP tools by annotation (``readOnlyHint``) in the request's tool definitions;
- anything else is neutral: its path arguments are only "mentioned".

``register`` adds a tool. Pure: same call, same result.
"""

from __future__ import annotations

import functools
import json
import re
import shlex
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

from refold._records import dataclass
from refold.compaction.prune import exit_status

PATH_KEYS = ("path", "file_path", "absolute_path", "filename", "file", "notebook_path",
             "target_file")
_EDITOR_WRITES = frozenset({"create", "str_replace", "insert", "undo_edit", "write", "edit",
                            "append"})
_EDITOR_READS = frozenset({"view", "read"})
_KEYSTROKE = re.compile(r"^(?:C-[a-z]|\^[A-Z]|q|y|n|exit)$")
_FAILED_PHRASES = ("<tool_use_error>", "No replacement was performed",
                   "String to replace not found", "did not appear verbatim",
                   "No such file or directory", "Permission denied", "File has not been read yet",
                   "Invalid `path`",
                   # Gemini CLI answers a failed call with its error alone (the session's
                   # ``"status": "error"`` is not in the chat form): an edit that matched
                   # nothing, a tool it does not have, a call the user declined
                   "No edits made", "Failed to edit,", "not found. Did you mean one of",
                   "not found in registry", "[Operation Cancelled]", "File path must be absolute")
_FAILED = re.compile(r"^\s*(?:ERROR\b|Error\b|error:)|" + "|".join(map(re.escape, _FAILED_PHRASES)),
                     re.IGNORECASE)
_MIDLINE = ("not found. Did you mean one of", "not found in registry")
_FAILED_LOWER = tuple(phrase.lower() for phrase in _FAILED_PHRASES)
_PATCH_FILE = re.compile(r"^\*\*\* (?:Add|Update|Delete) File: (.+)$|^\*\*\* Move to: (.+)$",
                         re.MULTILINE)
_SWE_FILE = re.compile(r"^\[File: (\S+) \(\d+ lines total\)\]", re.MULTILINE)
_SHELL_SPLIT = re.compile(r"\s*(?:&&|\|\||;|\|)\s*")
_REDIRECT = re.compile(r"(?<![\d&<>])>>?\s*(?![&\d])([^\s;&|<>()]+)")
_QUOTED = re.compile(r"'[^']*'|\"(?:[^\"\\]|\\.)*\"")  # (a command line's quoted strings)


@dataclass(frozen=True)
class Effect:
    """What one call did. ``command`` is a shell command line that ran (first line)."""

    reads: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()
    mentions: tuple[str, ...] = ()
    command: str | None = None
    failed_write: str | None = None  # the error line of an edit the tool refused
    action: str = ""  # edited, created, deleted, … (what a write did, for the summary)
    deletes: tuple[str, ...] = ()  # files it removed (``rm``, ``delete_file``): not "modified"


Reader = Callable[[dict[str, Any], str], Effect]


def _paths(args: Mapping[str, Any]) -> tuple[str, ...]:
    return tuple(v.strip() for k in PATH_KEYS if isinstance(v := args.get(k), str) and v.strip())


def _failure_at(head: str) -> int | None:
    """Where ``_FAILED.search(head)`` matches. In an ASCII text (which lowercases in place)
    without a match at its start, that is where its lowercased copy first holds a phrase:
    substring tests instead of an IGNORECASE scan, which the regex engine runs slowly."""
    if not head.isascii():
        found = _FAILED.search(head)
        return None if found is None else found.start()
    if _FAILED.match(head) is not None:
        return 0
    lowered = head.lower()
    at = [i for phrase in _FAILED_LOWER if (i := lowered.find(phrase)) >= 0]
    return min(at) if at else None


def _failure(output: str) -> str | None:
    head = output.strip()[:600]
    start = _failure_at(head)
    if start is None:
        return None
    if head[start:].startswith(_MIDLINE):  # the subject is before it: ``Tool "x" not found…``
        start = head.rfind("\n", 0, start) + 1
    lines = [ln.strip() for ln in head[start:].splitlines() if ln.strip()]
    text = " ".join(lines[:2]) if lines and len(lines[0]) <= 8 else (lines[0] if lines else "")
    return text[:160] or "error"


def _write(paths: tuple[str, ...], output: str, action: str) -> Effect:
    error = _failure(output)
    if error is not None:
        return Effect(mentions=paths, failed_write=error, action=action)
    return Effect(writes=paths, action=action)


def editor(args: dict[str, Any], output: str) -> Effect:
    """``str_replace_editor``: the ``command`` argument says whether it read or wrote."""
    sub = str(args.get("command") or "").strip()
    paths = _paths(args)
    if sub in _EDITOR_READS:
        return Effect(reads=paths)
    if sub in _EDITOR_WRITES:
        return _write(paths, output, "created" if sub == "create" else "edited")
    return Effect(mentions=paths)


def reader(args: dict[str, Any], output: str) -> Effect:
    return Effect(reads=_paths(args))


def writer(args: dict[str, Any], output: str) -> Effect:
    return _write(_paths(args), output, "edited")


def creator(args: dict[str, Any], output: str) -> Effect:
    return _write(_paths(args), output, "written")


def deleter(args: dict[str, Any], output: str) -> Effect:
    """``delete_file`` and the like: the file is gone, not modified."""
    effect = _write(_paths(args), output, "deleted")
    return Effect(mentions=effect.mentions, failed_write=effect.failed_write,
                  action="deleted", deletes=effect.writes)


def searcher(args: dict[str, Any], output: str) -> Effect:
    return Effect(mentions=_paths(args))


def neutral(args: dict[str, Any], output: str) -> Effect:
    return Effect(mentions=_paths(args))


_CODEX_HEADER = re.compile(r"^(?:Exit code:? -?\d+|Wall time:.*|Output:|Chunk ID:.*|"
                           r"Process exited with code -?\d+|Original token count:.*)$")


def _codex_output(output: str) -> str:
    """The text of a Codex tool output: the ``output`` of its JSON form (``{"output": …,
    "metadata": {"exit_code": …}}``), without the ``Exit code``/``Wall time``/``Output:``
    header of its plain form."""
    if output.lstrip().startswith("{"):
        try:
            found = json.loads(output)
        except ValueError:
            found = None
        if isinstance(found, dict) and isinstance(found.get("output"), str):
            output = found["output"]
    lines = output.strip().splitlines()
    while lines and _CODEX_HEADER.match(lines[0].strip()):
        lines.pop(0)
    return "\n".join(lines)


def apply_patch(args: dict[str, Any], output: str) -> Effect:
    """Codex ``apply_patch``: its patch names the files (``*** Update File: x``). It wrote
    nothing when its output says an error, a status other than 0 (``Exit code: 1``,
    ``"exit_code": 1``) or that the patch did not verify (``apply_patch verification failed:
    Failed to find expected lines in …``)."""
    text = next((v for k in ("input", "patch", "diff") if isinstance(v := args.get(k), str)), "")
    found = [a or b for a, b in _PATCH_FILE.findall(text)]
    paths = tuple(dict.fromkeys([*_paths(args), *(p.strip() for p in found)]))
    status = exit_status(output)
    body = _codex_output(output)
    if status in (None, "0") and "verification failed" not in output[:300]:
        return _write(paths, body, "patched")
    error = _failure(body) or next((ln.strip() for ln in body.splitlines() if ln.strip()),
                                   f"exit {status}" if status else "error")
    return Effect(mentions=paths, failed_write=error[:160], action="patched")


def swe_agent_edit(args: dict[str, Any], output: str) -> Effect:
    """SWE-agent ``edit``/``insert``: the open file, named by the result's ``[File: X …]``."""
    paths = _paths(args) or tuple(_SWE_FILE.findall(output[:400]))[:1]
    if "Your proposed edit has introduced new syntax error" in output:
        return Effect(mentions=paths, failed_write="proposed edit had a syntax error",
                      action="edited")
    return _write(paths, output, "edited")


def shell_command(args: Mapping[str, Any]) -> str | None:
    """The command line of a shell call (Codex passes an argv list, ``["bash", "-lc", s]``)."""
    raw = next((args[k] for k in ("command", "cmd", "script") if k in args), None)
    if isinstance(raw, list) and all(isinstance(w, str) for w in raw):
        raw = raw[-1] if len(raw) >= 3 and raw[1] in ("-c", "-lc") else " ".join(raw)
    if not isinstance(raw, str) or not raw.strip() or args.get("is_input") in (True, "true"):
        return None
    first = " ".join(raw.strip().splitlines()[0].split())
    return None if _KEYSTROKE.match(first) else first[:160]


_WRITER = re.compile(r"(?:^|[\s/(])(?:tee|touch|rm|unlink|sed|mv|cp)(?:\s|$)")


def _programs(command: str, wanted: re.Pattern[str]) -> Iterator[tuple[str, list[str]]]:
    """(program, operands) of each simple command of ``command`` (split at ``&&``, ``||``,
    ``;``, ``|`` outside quotes) whose text ``wanted`` finds; best effort, never raises."""
    masked = _masked(command)
    cuts = [0, *(at for m in _SHELL_SPLIT.finditer(masked) for at in m.span()), len(command)]
    for part in (command[a:b] for a, b in zip(cuts[::2], cuts[1::2], strict=True)):
        if not wanted.search(part):
            continue  # no program asked about: nothing for shlex to find (the common case)
        try:
            words = shlex.split(part)
        except ValueError:
            words = part.split()
        if words:
            yield words[0].rsplit("/", 1)[-1], _operands(words[1:])


def _masked(command: str) -> str:
    """``command`` with its quoted strings blanked (same length): a ``>`` or ``|`` inside
    quotes (``sed -i 's/-> float/-> int/' f``) is the program's text, not the shell's."""
    if "'" not in command and '"' not in command:
        return command
    return _QUOTED.sub(lambda m: m.group(0)[0] + " " * (len(m.group(0)) - 2) + m.group(0)[-1],
                       command)


def _shell_paths(found: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(p for p in found if p and "$" not in p and "*" not in p
                               and not p.startswith("/dev/")))


@functools.lru_cache(maxsize=4096)
def _shell_changes(command: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(every file the command line changes, in order; those it only removes)."""
    found: list[str] = []
    removed: list[str] = []
    for m in _REDIRECT.finditer(_masked(command)):
        quoted = _QUOTED.match(command, m.start(1))  # ``> "my file.txt"``
        found.append(quoted.group(0)[1:-1] if quoted else command[m.start(1):m.end(1)])
    for program, rest in _programs(command, _WRITER):
        if program == "git" and rest[:1] == ["rm"]:
            program, rest = "rm", rest[1:]
        files = [w for w in rest if not w.startswith("-")]
        if program in ("rm", "unlink"):
            removed += files
            found += files
        elif program in ("tee", "touch") or (
                program == "sed" and any(w.startswith("-i") for w in rest)):
            found += files[1:] if program == "sed" else files
        elif program in ("mv", "cp") and len(files) >= 2:
            found.append(files[-1])
    changed = _shell_paths(found)
    written = set(_shell_paths([p for p in found if p not in removed]))
    return changed, tuple(p for p in _shell_paths(removed) if p not in written)


def shell_writes(command: str) -> tuple[str, ...]:
    """Files a shell command line writes: ``> f``, ``>> f``, ``tee f``, ``sed -i … f``,
    ``touch f``, ``rm f``, the target of ``mv``/``cp``. Best effort, never raises."""
    return _shell_changes(command)[0]


def shell_deletes(command: str) -> tuple[str, ...]:
    """Of ``shell_writes``, the files the command line only removes (``rm f``, ``unlink f``,
    ``git rm f``): gone, not modified."""
    return _shell_changes(command)[1]


_READER = re.compile(r"(?:^|[\s/(])(?:cat|head|tail|nl|less|more|bat|sed)(?:\s|$)")


@functools.lru_cache(maxsize=4096)
def shell_reads(command: str) -> tuple[str, ...]:
    """Files a shell command line reads (``cat f``, ``head -n 20 f``, ``tail``, ``nl -ba f``,
    ``sed -n '10,40p' f``): what a shell-only agent (Codex, mini-swe-agent) views a file with.
    Best effort, never raises."""
    found: list[str] = []
    for program, rest in _programs(command, _READER):
        files = [w for w in rest if not w.startswith("-") and not w.lstrip("+").isdigit()]
        if program != "sed":
            found += files
        elif "-n" in rest and not any(w.startswith("-i") for w in rest):
            found += files[1:]  # (the first operand is the script)
    return _shell_paths(found)


_REDIRECTION = re.compile(r"\d*(?:<<?<?|>>?)&?(.*)")  # ``<``, ``2>``, ``>out``, ``<<EOF``…


def _operands(words: list[str]) -> list[str]:
    """A command's words after its program, without ``--`` and redirections (``< in``,
    ``2>&1``, ``>out``: the shell's, not the program's operands)."""
    out: list[str] = []
    words = list(words)
    while words:
        word = words.pop(0)
        found = _REDIRECTION.fullmatch(word)
        if found is not None:
            if not found.group(1) and words:  # ``< file``: the operand is the next word
                words.pop(0)
            continue
        if word != "--":
            out.append(word)
    return out


_PATCH_COMMAND = re.compile(r"(?:^|&&|;)\s*apply_patch\b")


def _shell_patch(args: Mapping[str, Any]) -> str | None:
    """The patch of an ``apply_patch`` that Codex ran through its shell tool (``["apply_patch",
    "*** Begin Patch…"]``, or ``apply_patch <<'EOF'`` in ``bash -lc``), else None."""
    raw = next((args[k] for k in ("command", "cmd") if k in args), None)
    if isinstance(raw, list) and all(isinstance(w, str) for w in raw):
        raw = "\n".join(raw)
    if not isinstance(raw, str) or "*** Begin Patch" not in raw:
        return None
    head = raw[:raw.index("*** Begin Patch")].replace("\n", " ")
    return raw if _PATCH_COMMAND.search(head.rsplit("-lc", 1)[-1]) else None


def shell(args: dict[str, Any], output: str) -> Effect:
    command = shell_command(args)
    if command is None:
        return Effect()
    patch = _shell_patch(args)
    if patch is not None:  # a patch, not a command: what it did is what its files show
        return apply_patch({"input": patch}, output)
    status = exit_status(output)
    failed = status not in (None, "0")
    full = str(args.get("command") if isinstance(args.get("command"), str) else command)
    changed = () if failed else shell_writes(full)
    deletes = () if failed else shell_deletes(full)
    writes = tuple(p for p in changed if p not in deletes)
    reads = () if failed else tuple(p for p in shell_reads(full) if p not in changed)
    return Effect(reads=reads, writes=writes, command=command, action="written by a command",
                  deletes=deletes)


TOOLS: dict[str, Reader] = {}


def register(reader_: Reader, *names: str) -> None:
    """Teach the table a tool (names compare case-insensitively)."""
    for name in names:
        TOOLS[name.lower()] = reader_


register(editor, "str_replace_editor", "str_replace_based_edit_tool", "text_editor")
register(shell, "execute_bash", "bash", "shell", "shell_command", "terminal", "local_shell",
         "exec_command", "run_shell_command", "run_terminal_cmd", "container.exec")
register(reader, "read", "read_file", "view_file", "open_file", "notebookread", "open", "goto",
         "view", "scroll_up", "scroll_down")
register(writer, "edit", "multiedit", "notebookedit", "edit_file", "replace_in_file",
         "str_replace", "patch", "search_replace", "apply_diff", "replace")
register(creator, "write", "write_file", "create_file", "create", "write_to_file",
         "append_file")
register(deleter, "delete_file", "remove_file")
register(apply_patch, "apply_patch")
register(swe_agent_edit, "insert")
register(searcher, "grep", "glob", "ls", "list_dir", "list_directory", "search_files",
         "find_file", "search_file", "search_dir", "codebase_search", "file_search",
         "search_file_content")


def annotations_of(tools: Sequence[Mapping[str, Any]] | None) -> dict[str, dict[str, Any]]:
    """MCP tool annotations by tool name, from request tool definitions (either level)."""
    out: dict[str, dict[str, Any]] = {}
    for tool in tools or ():
        fn = tool.get("function") if isinstance(tool.get("function"), Mapping) else tool
        name = fn.get("name") if isinstance(fn, Mapping) else None
        notes = (fn.get("annotations") if isinstance(fn, Mapping) else None) \
            or tool.get("annotations")
        if isinstance(name, str) and isinstance(notes, Mapping):
            out[name] = dict(notes)
    return out


def tool_effect(name: str, args: dict[str, Any], output: str,
                annotations: Mapping[str, Mapping[str, Any]] | None = None) -> Effect:
    """The effect of one call: the table, else MCP annotations, else neutral."""
    known = TOOLS.get(name.lower())
    if name.lower() == "edit" and not _paths(args):  # SWE-agent's edit names no file
        known = swe_agent_edit
    if known is not None:
        return known(args, output)
    notes = (annotations or {}).get(name)
    if notes is not None and isinstance(notes.get("readOnlyHint"), bool):
        return reader(args, output) if notes["readOnlyHint"] else writer(args, output)
    return neutral(args, output)


def call_command(name: str, args: dict[str, Any]) -> str | None:
    """``tool_effect(name, args, "").command``, without reading what a shell call writes."""
    if TOOLS.get(name.lower()) is shell:
        return None if _shell_patch(args) is not None else shell_command(args)
    return tool_effect(name, args, "").command


__all__ = ["TOOLS", "Effect", "annotations_of", "call_command", "register", "shell_command",
           "shell_deletes", "shell_writes", "tool_effect"]
