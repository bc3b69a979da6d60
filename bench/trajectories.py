r"""Public agent trajectories in refold's OpenAI message form, with labels made independently.

The data is not in the repository; fetch it with the ``fetch`` tool and copy it to one folder
(default ``/work/data/trajectories``), laid out as:

    swe-agent/*.traj          SWE-agent/SWE-agent (MIT): tests/test_data/trajectories and
                              trajectories/demonstrations at 3ea751c0
    mini-swe-agent/*.json     SWE-agent/mini-swe-agent (MIT): tests/test_data/*.traj.json at a83fcae8
    openhands/*.jsonl|json    All-Hands-AI/OpenHands (MIT outside enterprise/) at 156d0686:
                              evaluation/benchmarks/multi_swe_bench/examples/output.jsonl and
                              tests/runtime/trajs/*.json (never the SWE-bench Verified outputs)

Re-creating it from bare git copies (``fetch`` gives one per repository; each SWE-agent file is
named ``<its folder>__<its name>``, the folders' names being what tells runs apart)::

    G=SWE-agent+SWE-agent/repo; D=/work/data/trajectories
    git --git-dir=$G ls-tree -r --name-only 3ea751c0 -- tests/test_data/trajectories \
        trajectories/demonstrations | grep '\.traj$' | while read p; do
      git --git-dir=$G show "3ea751c0:$p" > "$D/swe-agent/$(basename "$(dirname "$p")")__$(basename "$p")"
    done
    git --git-dir=SWE-agent+mini-swe-agent/repo show a83fcae8:tests/test_data/local.traj.json \
        > $D/mini-swe-agent/local.traj.json            # and github_issue.traj.json
    git --git-dir=All-Hands-AI+OpenHands/repo show \
        156d0686:evaluation/benchmarks/multi_swe_bench/examples/output.jsonl \
        > $D/openhands/multi_swe_bench_output.jsonl    # and tests/runtime/trajs/*.json

That gives 31 trajectories (22 SWE-agent, 2 mini-swe-agent, 7 OpenHands) and 56 cuts of at
least 4,000 tokens.

Conversion is faithful: what the model saw, in the roles it saw it. Native tool calls become
OpenAI ``tool_calls`` with their results as ``tool`` messages (a call whose result was never
recorded is dropped with it); SWE-agent's text-action trajectories stay text (the action in the
assistant message, the observation as the next user message).

Labels come from evidence the compactor does not use: the environment's own result messages
(``File created successfully at: X``, ``The file X has been edited``, OpenHands' recorded
``exit_code``), the final patch (``git_patch`` / ``info.submission``), and a small shell-write
reader written here (redirections, ``tee``, ``sed -i``, ``touch``, ``rm``, ``mv``/``cp``).
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

Message = dict[str, Any]
DEFAULT_ROOT = Path("/work/data/trajectories")


@dataclass
class Trajectory:
    name: str
    source: str
    messages: list[Message]
    patch_files: set[str] = field(default_factory=set)


class MissingData(SystemExit):
    pass


def _call(cid: str, name: str, args: Any) -> dict[str, Any]:
    text = args if isinstance(args, str) else json.dumps(args)
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": text}}


def _patch_files(patch: str | None) -> set[str]:
    return set(re.findall(r"^\+\+\+ b/(\S+)", patch or "", re.MULTILINE))


def _paired(messages: list[Message]) -> list[Message]:
    """Drop calls whose result was never recorded, and results of unknown calls."""
    answered = {m.get("tool_call_id") for m in messages if m.get("role") == "tool"}
    out: list[Message] = []
    called: set[str] = set()
    for m in messages:
        if m.get("tool_calls"):
            calls = [c for c in m["tool_calls"] if c["id"] in answered]
            called |= {c["id"] for c in calls}
            m = {**m, "tool_calls": calls} if calls else {
                k: v for k, v in m.items() if k != "tool_calls"}
            if not calls and not m.get("content"):
                continue
        elif m.get("role") == "tool" and m.get("tool_call_id") not in called:
            continue
        out.append(m)
    return out


def _merge_same_role(messages: list[Message]) -> list[Message]:
    out: list[Message] = []
    for m in messages:
        prev = out[-1] if out else None
        if (prev is not None and m["role"] == prev["role"] in ("user", "system")
                and isinstance(prev.get("content"), str)):
            prev["content"] += "\n\n" + (m.get("content") or "")
            continue
        out.append(dict(m))
    return out


def load_swe_agent(path: Path) -> Trajectory:
    data = json.loads(path.read_text())
    msgs: list[Message] = []
    for item in data.get("history", []):
        role, content = item.get("role"), item.get("content")
        if isinstance(content, list):
            content = "\n".join(p.get("text", "") for p in content if isinstance(p, dict))
        raw_calls = item.get("tool_calls")
        if role == "assistant" and raw_calls:
            calls = ast.literal_eval(raw_calls) if isinstance(raw_calls, str) else raw_calls
            msgs.append({"role": "assistant", "content": content or None, "tool_calls": [
                _call(c["id"], c["function"]["name"], c["function"]["arguments"])
                for c in calls]})
        elif role == "tool":
            ids = item.get("tool_call_ids")
            ids = ast.literal_eval(ids) if isinstance(ids, str) else ids
            msgs.append({"role": "tool", "tool_call_id": ids[0], "content": content or ""})
        elif role in ("system", "user", "assistant"):
            msgs.append({"role": role, "content": content or ""})
    patch = (data.get("info") or {}).get("submission")
    return Trajectory(path.stem, "swe-agent", _merge_same_role(_paired(msgs)), _patch_files(patch))


def load_mini(path: Path) -> Trajectory:
    data = json.loads(path.read_text())
    items = data if isinstance(data, list) else data.get("messages", [])
    msgs = [{"role": m["role"], "content": m.get("content") or ""} for m in items
            if m.get("role") in ("system", "user", "assistant")]
    return Trajectory(path.stem, "mini-swe-agent", _merge_same_role(msgs))


def _openhands_history(name: str, history: list[dict[str, Any]], patch: str | None
                       ) -> Trajectory:
    msgs: list[Message] = []
    seen_responses: set[str] = set()
    for event in history:
        meta = event.get("tool_call_metadata")
        if event.get("action") == "system":
            msgs.append({"role": "system", "content": event.get("args", {}).get("content")
                         or event.get("message", "")})
        elif event.get("action") == "message" and event.get("source") == "user":
            msgs.append({"role": "user", "content": event["args"]["content"]})
        elif event.get("action") == "message" and event.get("source") == "agent":
            msgs.append({"role": "assistant", "content": event["args"]["content"]})
        elif meta and "observation" in event:
            content = event.get("content", "")
            code = ((event.get("extras") or {}).get("metadata") or {}).get("exit_code")
            if event["observation"] == "run" and code is not None:
                content += f"\n[The command completed with exit code {code}.]"
            msgs.append({"role": "tool", "tool_call_id": meta["tool_call_id"],
                         "content": content})
        elif meta and "action" in event:
            response = meta.get("model_response") or {}
            rid = response.get("id") or meta["tool_call_id"]
            if rid in seen_responses:
                continue
            seen_responses.add(rid)
            choice = (response.get("choices") or [{}])[0].get("message") or {}
            calls = [_call(c["id"], c["function"]["name"], c["function"]["arguments"])
                     for c in choice.get("tool_calls") or []]
            msgs.append({"role": "assistant", "content": choice.get("content") or None,
                         "tool_calls": calls})
    return Trajectory(name, "openhands", _merge_same_role(_paired(msgs)), _patch_files(patch))


def load_openhands(path: Path) -> Iterator[Trajectory]:
    if path.suffix == ".jsonl":
        for i, line in enumerate(path.read_text().splitlines()):
            row = json.loads(line)
            history = row.get("history") or []
            if history and isinstance(history[0], dict) and "source" in history[0]:
                patch = (row.get("test_result") or {}).get("git_patch") or row.get("git_patch")
                yield _openhands_history(row.get("instance_id") or f"{path.stem}-{i}", history,
                                         patch)
    else:
        history = json.loads(path.read_text())
        if isinstance(history, list) and history and "source" in history[0]:
            yield _openhands_history(path.stem, history, None)


def load_all(root: Path = DEFAULT_ROOT) -> list[Trajectory]:
    if not root.is_dir():
        raise MissingData(f"error: no trajectories at {root} (see bench/trajectories.py for "
                          "where to fetch them from)")
    out: list[Trajectory] = []
    for path in sorted((root / "swe-agent").glob("*.traj")):
        out.append(load_swe_agent(path))
    for path in sorted((root / "mini-swe-agent").glob("*.json")):
        out.append(load_mini(path))
    for path in sorted((root / "openhands").glob("*.json*")):
        out.extend(load_openhands(path))
    return out


# ---- labels (independent of refold's code) ----

_CREATED = re.compile(r"File created successfully at:?\s+(\S+)")
_EDITED = re.compile(r"The file (\S+) has been edited")
_SWE_FILE = re.compile(r"^\[File: (\S+) \(\d+ lines total\)\]", re.MULTILINE)
_SHELL_WRITE = re.compile(r"(?:^|[\s;&|])(?:>>?|tee(?:\s+-a)?)\s*['\"]?([\w./~-]+\.\w+)")
_SHELL_VERB = re.compile(r"(?:^|[;&|]\s*)(?:sed\s+-i\S*\s+(?:'[^']*'|\"[^\"]*\"|\S+)\s+|"
                         r"touch\s+|rm\s+(?:-\w+\s+)*|mv\s+\S+\s+|cp\s+\S+\s+)([\w./~-]+\.\w+)")
_WRITE_RESULT_TOOLS = {"edit", "create", "insert"}  # SWE-agent ACI: result names the file
_CHECK = re.compile(r"^\s*(?:cd \S+ (?:&&|;) )*(?:python3?|pytest|py\.test|make|npm|yarn|go|cargo|"
                    r"mvn|gradle|\./|bash \S+\.sh|node|ponyc|tox|ctest|javac|java)\b")
_FAIL_TEXT = re.compile(r"Traceback \(most recent call last\)|^\w*(?:Error|Exception): |"
                        r"\bFAILED\b|^E\s{2,}|\b\d+ failed\b", re.MULTILINE)


_FENCE = re.compile(r"```[\w-]*\n(.*?)```", re.DOTALL)


@dataclass
class Event:
    position: int  # index of the tool result (or observation) message
    kind: str  # write | check
    path: str = ""
    command: str = ""
    ok: bool = True


def _args(call: dict[str, Any]) -> dict[str, Any]:
    try:
        parsed = json.loads(call["function"]["arguments"] or "{}")
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _norm(path: str) -> str:
    return path.strip().strip("'\"`")


def events(traj: Trajectory) -> list[Event]:
    """What truly happened, from results: writes confirmed by the environment, shell writes,
    and each check command with its outcome (exit code when recorded, else failure text)."""
    calls: dict[str, dict[str, Any]] = {}
    out: list[Event] = []
    action = ""  # a text-action agent's last command (its last fenced block's first word)
    shell = ""  # ... and the whole block, when it is a shell command rather than an ACI tool
    for pos, m in enumerate(traj.messages):
        for c in m.get("tool_calls") or []:
            calls[c["id"]] = c
        if m.get("role") == "assistant" and not m.get("tool_calls"):
            blocks = _FENCE.findall(str(m.get("content") or ""))
            action = blocks[-1].split(None, 1)[0] if blocks and blocks[-1].strip() else ""
            shell = blocks[-1] if action and action not in _WRITE_RESULT_TOOLS else ""
        elif m.get("role") == "user" and action in _WRITE_RESULT_TOOLS:
            # its observation: SWE-agent's ACI names the file it wrote ("[File: X (N lines
            # total)]"), as the function-calling runs' results do
            out += [Event(pos, "write", path=_norm(p))
                    for p in _SWE_FILE.findall(str(m.get("content") or "")[:300])]
            action = ""
        elif m.get("role") == "user" and shell:
            # its observation of a shell command: the command's redirections and file verbs
            # wrote (``tool > pub1.pub``), as for a function-calling run's bash call, unless
            # the observation reads as a failure
            if not _FAIL_TEXT.search(str(m.get("content") or "")):
                for rx in (_SHELL_WRITE, _SHELL_VERB):
                    out += [Event(pos, "write", path=_norm(p)) for p in rx.findall(shell)
                            if not p.startswith("/dev/")]
            action = shell = ""
        if m.get("role") != "tool":
            continue
        call = calls.get(m["tool_call_id"])
        if call is None:
            continue
        name, args, text = call["function"]["name"], _args(call), str(m.get("content") or "")
        for rx in (_CREATED, _EDITED):
            out += [Event(pos, "write", path=_norm(p)) for p in rx.findall(text[:600])]
        if name in _WRITE_RESULT_TOOLS:
            out += [Event(pos, "write", path=_norm(p)) for p in _SWE_FILE.findall(text[:300])]
        command = args.get("command")
        if name in ("execute_bash", "bash") and isinstance(command, str) and command.strip():
            code = re.findall(r"\[The command completed with exit code (-?\d+)\.\]", text)
            ok = code[-1] == "0" if code else not _FAIL_TEXT.search(text)
            for rx in (_SHELL_WRITE, _SHELL_VERB):
                out += [Event(pos, "write", path=_norm(p)) for p in rx.findall(command)
                        if ok and not p.startswith("/dev/")]
            first = command.strip().splitlines()[0]
            if _CHECK.match(first):
                out.append(Event(pos, "check", command=first, ok=ok))
    return out


def same_file(a: str, b: str) -> bool:
    """Paths name the same file when one is the other's suffix at a folder boundary."""
    a, b = a.lstrip("./"), b.lstrip("./")
    return a == b or a.endswith("/" + b) or b.endswith("/" + a)


def truly_written(traj: Trajectory, upto: int) -> set[str]:
    paths = {e.path for e in events(traj) if e.kind == "write" and e.position < upto}
    return paths | traj.patch_files


DEMONSTRATION = "Here is a demonstration of how to correctly accomplish this task."


def identifiers(traj: Trajectory, start: int, end: int) -> set[str]:
    """Paths opened/edited (call arguments), commands run, exception lines printed (not those
    of SWE-agent's demonstration, a worked example of another task)."""
    found: set[str] = set()
    for m in traj.messages[start:end]:
        if m.get("role") == "user" and str(m.get("content") or "").startswith(DEMONSTRATION):
            continue  # SWE-agent's in-context example: another task's identifiers
        for c in m.get("tool_calls") or []:
            args = _args(c)
            for key in ("path", "file_path", "filename"):
                if isinstance(args.get(key), str) and 3 <= len(args[key]) <= 200:
                    found.add(args[key].strip())
            cmd = args.get("command")
            if c["function"]["name"] in ("execute_bash", "bash") and isinstance(cmd, str):
                first = cmd.strip().splitlines()[0].strip() if cmd.strip() else ""
                if 3 <= len(first) <= 160 and first not in ("C-c", "C-d", "C-z"):
                    found.add(first)
        text = str(m.get("content") or "")
        if m.get("role") == "assistant" and not m.get("tool_calls"):
            blocks = _FENCE.findall(text)  # a text-action agent's command: its last block
            first = blocks[-1].strip().splitlines()[0].strip() if blocks and blocks[-1].strip() \
                else ""
            if 3 <= len(first) <= 160:
                found.add(first)
        if m.get("role") == "tool" or (m.get("role") == "user" and traj.source != "openhands"):
            for line in text.splitlines():
                line = line.strip()
                if re.match(r"^[A-Z]\w*(?:Error|Exception): \S", line) and len(line) <= 160:
                    found.add(line)
    return found


def prefixes(traj: Trajectory, shares: tuple[float, ...] = (0.6, 0.8, 1.0)
             ) -> Iterator[tuple[str, list[Message]]]:
    """Cuts of a trajectory after a complete turn (a tool result or observation is last)."""
    n = len(traj.messages)
    for share in shares:
        end = max(2, int(n * share))
        while end < n and traj.messages[end].get("role") == "tool":
            end += 1
        while end > 2 and traj.messages[end - 1].get("tool_calls"):
            end -= 1
        yield f"{traj.name}@{int(share * 100)}", traj.messages[:end]
