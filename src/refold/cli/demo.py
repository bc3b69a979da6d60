"""``refold demo``: watch refold keep a coding agent's context fit, offline, in under a minute.

It replays a scripted agent session (two goals, ~300 messages, big tool outputs, a stretch in
Chinese) through the real runtime on the embedded default (SQLite + builtin summarizer) against
a scripted model on a local socket, with a small window so compaction runs several times. Then
it searches the archive (English, Chinese, a 2-character CJK query), resumes the session in a
fresh engine, shows the context breakdown, a summary table and the commands to try next. The
demo home (database + memories) is left behind and named at the end.
"""

from __future__ import annotations

import re
import tempfile
import time
from pathlib import Path
from typing import Any

import click
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

from refold.cli.app import AppContext, console, pass_app
from refold.errors import InvalidInput

_EXCEPTION = re.compile(r"^[A-Za-z_.]*(Error|Exception|Warning)\b")
GAUGE_WIDTH = 20
LABEL_CELLS = 24
SEARCHES = [("distutils", "English"), ("CSV 导出", "Chinese"), ("金额", "2-char CJK")]


@click.command("demo")
@click.option("--home", "demo_home", type=click.Path(file_okay=False),
              help="Directory for the demo's data (default: refold's own --home when "
                   "given, else a fresh temporary directory).")
@click.option("--fast", is_flag=True, help="No pacing between steps (for CI).")
@click.option("--context-length", type=click.IntRange(4_000, 1_000_000), default=16_000,
              show_default=True, help="The model window the demo pretends to have.")
@pass_app
def demo_cmd(app: AppContext, demo_home: str | None, fast: bool, context_length: int) -> None:
    """Replay a scripted agent session and show compaction, memory, search and resume."""
    from refold.cli.demo_runner import DemoRunner, scripted_replies
    from refold.cli.demo_script import build_script
    from refold.store import open_store
    from refold.testing import serve

    out = console(piped_width=None)  # full-width rules, as rich lays them out
    home = _demo_home(demo_home) if demo_home else _demo_home(*_global_home(app))
    _write_settings(home, context_length)
    turns = build_script()
    replies, outputs = scripted_replies(turns)
    store = open_store(str(home / "refold.db"))
    try:
        with serve(replies, default=lambda body: "Welcome back — the CSV export is done and "
                   "all tests pass. What next?", max_context_tokens=context_length) as llm:
            runner = DemoRunner(store, home, llm.base_url, context_length=context_length,
                                outputs=outputs, pace=_pacer(fast, len(replies)))
            runner.seed()
            _header(out, home, runner.engine.ops.threshold, context_length, len(turns))
            try:
                _replay(out, runner, turns)
            finally:
                runner.close()  # joins the background memory review
            _review(out, runner)
            session_id = runner.runtime.session_id if runner.runtime else ""
            _searches(out, store)
            _resume(out, store, home, llm.base_url, context_length, session_id)
            _summary(out, runner.stats, store, session_id, home)
    finally:
        store.close()


def _global_home(app: AppContext) -> tuple[str | None, str]:
    """The home given to refold itself on its command line (``refold --home DIR demo``), if
    any, and the hint for when it is not empty."""
    from refold.config import DEFAULT_SOURCE

    settings = app.settings
    where = settings.source_of("home")
    if where == DEFAULT_SOURCE or where.startswith("env "):
        # REFOLD_HOME names the user's own archive: the demo never writes there (a fresh
        # temporary directory, as without it); an explicit --home is the demo's to use
        return None, ""
    return str(settings.home), (f"it comes from {where}; give the demo a new directory: "
                                "refold demo --home DIR")


def _demo_home(given: str | None, hint: str = "choose another --home, or omit it") -> Path:
    """The demo writes a database, ``refold.toml`` and memory files: only into a directory that
    is new or empty, so it can never replace a user's settings or add to their memory."""
    if given:
        path = Path(given).expanduser()
        if path.is_dir() and any(path.iterdir()):
            raise InvalidInput(f"{path} is not empty; the demo only writes into a new or empty "
                               "directory", hint=hint)
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InvalidInput(f"cannot create {path}: {exc.strerror or exc}") from exc
        return path
    return Path(tempfile.mkdtemp(prefix="refold-demo-"))


def _write_settings(home: Path, context_length: int) -> None:
    """So ``refold --home <demo home> context …`` measures against the demo's window."""
    from refold.cli.demo_runner import MODEL

    (home / "refold.toml").write_text(
        f'[refold]\nmodel = "{MODEL}"\ncontext_length = {context_length}\n', encoding="utf-8")


def _pacer(fast: bool, calls: int) -> Any:
    delay = 0.0 if fast else min(0.05, 8.0 / max(calls, 1))
    return (lambda: None) if not delay else (lambda: time.sleep(delay))


def _k(n: int) -> str:
    return f"{n / 1000:.1f}K" if n >= 1000 else str(n)


def gauge(tokens: int, threshold: int, window: int) -> Text:
    """A bar of the window: filled up to ``tokens``, the trigger marked with │."""
    filled = min(GAUGE_WIDTH, round(GAUGE_WIDTH * tokens / window)) if window else 0
    mark = min(GAUGE_WIDTH - 1, round(GAUGE_WIDTH * threshold / window)) if window else 0
    colour = "green" if tokens < threshold * 0.85 else "yellow" if tokens < threshold else "red"
    bar = Text("▕")
    for i in range(GAUGE_WIDTH):
        if i == mark:
            bar.append("│", style="bold magenta")
        elif i < filled:
            bar.append("█", style=colour)
        else:
            bar.append("░", style="dim")
    bar.append("▏ ")
    bar.append(f"{_k(tokens):>6} / {_k(threshold)}", style=colour)
    return bar


def _header(out: Console, home: Path, threshold: int, window: int, turns: int) -> None:
    out.print()
    out.print(Text.assemble(("refold demo", "bold cyan"),
                            " — a coding agent fixes a test suite, then adds a feature"))
    out.print(Text("offline · SQLite + builtin summarizer · a scripted model on a local socket",
                   style="dim"))
    out.print(Text(f"{turns} turns · window {window:,} tokens · compaction at {threshold:,}",
                   style="dim"))
    out.print(Text(f"demo home: {home}", style="dim"))


def _replay(out: Console, runner: Any, turns: list[Any]) -> None:
    """Print the replay; on a terminal a transient line shows each model call as it happens."""
    from rich.live import Live

    state: dict[str, Any] = {}
    if not out.is_terminal:
        for event in runner.replay(turns):
            _print_event(out, event.kind, event.data, state)
        return
    with Live(Text(""), console=out, transient=True, refresh_per_second=20) as live:
        for event in runner.replay(turns):
            if event.kind == "call":
                live.update(_live_line(event.data))
            else:
                _print_event(live.console, event.kind, event.data, state)


def _live_line(data: dict[str, Any]) -> Text:
    line = Text(f" {data['turn']:>2} ", style="dim")
    line.append(_fit_cells(data["label"], LABEL_CELLS) + " ")
    line.append_text(gauge(data["tokens"], data["threshold"], data["window"]))
    line.append(f"  call {data['step']}/{data['steps']}", style="dim")
    return line


def _print_event(out: Console, kind: str, data: dict[str, Any], state: dict[str, Any]) -> None:
    if kind == "start" and data["phase"] != state.get("phase"):
        state["phase"] = data["phase"]
        title = ("goal 1 · fix the failing test suite" if data["phase"] == "goal 1"
                 else "goal 2 · 给发票加 CSV 导出 (in Chinese)")
        out.print()
        out.rule(Text(title, style="bold"), align="left", style="dim")
    elif kind == "turn":
        line = Text(f" {data['index']:>2} ", style="dim")
        line.append(_fit_cells(data["label"], LABEL_CELLS) + " ")
        line.append_text(gauge(data["tokens"], data["threshold"], data["window"]))
        line.append(f"  {data['messages']:>3} msgs", style="dim")
        out.print(line)
    elif kind == "compaction":
        _compaction_line(out, data, state)
    elif kind == "memory":
        mark, style = ("✎", "green") if data["ok"] else ("✗", "red")
        out.print(Text.assemble(
            (f"    {mark} memory ", style), (f"[{data['target']}] ", "bold"),
            (str(data["content"]), "italic")), no_wrap=True, overflow="ellipsis", crop=True)
    elif kind == "search":
        where = ", ".join(f"“{t}”" for t in data["sessions"] if t) or "no past session"
        hits = f"{data['hits']} hit" + ("" if data["hits"] == 1 else "s")
        out.print(Text.assemble(("    ↳ search ", "cyan"), (f"{data['query']!r}", "bold"),
                                f": {hits} in {where}"),
                  no_wrap=True, overflow="ellipsis", crop=True)
    elif kind == "warning":
        out.print(Text(f"    ! {data['text']}", style="yellow"))


def _review(out: Console, runner: Any) -> None:
    """What the background memory review (every 10 user turns) saved on its own, and what it
    left out as a near-duplicate of an entry already saved."""
    reviewer = getattr(getattr(runner.engine.memory, "manager", None), "reviewer", None)
    seen: set[str] = set()  # a later review reads some of the same turns again
    for report in getattr(reviewer, "reports", []):
        runner.stats.review_writes += len(report.saved)
        duplicates = [text for text in report.duplicates if text not in seen]
        seen.update(duplicates)
        runner.stats.review_duplicates += len(duplicates)
        for text in report.saved:
            out.print(Text.assemble(("    ✎ memory ", "green"), ("(background review) ", "bold"),
                                    (str(text), "italic")),
                      no_wrap=True, overflow="ellipsis", crop=True)
        for text in duplicates:
            out.print(Text.assemble(("    ≈ memory ", "dim"),
                                    ("(background review, already saved) ", "bold"),
                                    (str(text), "dim italic")),
                      no_wrap=True, overflow="ellipsis", crop=True)


def _fit_cells(text: str, width: int) -> str:
    """``text`` cut and padded to ``width`` terminal cells (CJK characters take two); a cut
    ends in "…" ("fix test_notifications.p" read as a file of that name)."""
    out = text
    if cell_len(text) > width:
        out = ""
        for ch in text:
            if cell_len(out + ch) > width - 1:
                break
            out += ch
        out += "…"
    return out + " " * (width - cell_len(out))


def _clean_anchor(anchor: str) -> str:
    text = " ".join(anchor.split())
    while text[:2] in ("- ", "` ", "E "):
        text = text[2:].lstrip()
    return text.strip("`").strip()


def _display_anchors(anchors: list[str], seen: set[str] | None = None) -> list[str]:
    """One error string and one file path from the anchor index for the demo line, preferring
    ones not shown before."""
    cleaned = [_clean_anchor(str(a)) for a in anchors]
    fresh = [a for a in cleaned if a not in (seen or set())]
    cleaned = fresh + [a for a in cleaned if a not in fresh]
    readable = [a for a in cleaned if len(a) >= 4 and sum(c.isalnum() for c in a) > len(a) / 2]
    error = next((a for a in readable if _EXCEPTION.match(a)), None)
    path = next((a for a in readable if "/" in a and " " not in a), None)
    return [a for a in (error, path) if a]


def _snippet(snippet: str, width: int = 60) -> Text:
    """A search snippet with its [match] parts highlighted (never parsed as markup)."""
    flat = " ".join(snippet.split())
    start = max(0, flat.find("[") - width // 3)
    flat = ("…" if start else "") + flat[start:start + width]
    out = Text()
    for i, part in enumerate(flat.replace("]", "[").split("[")):
        out.append(part, style="bold yellow" if i % 2 else "")
    return out


def _compaction_line(out: Console, data: dict[str, Any], state: dict[str, Any]) -> None:
    before, after = data["before"], data["after"]
    saved = f" (−{100 * (before - after) // before}%)" if before else ""
    line = Text(f"    ⟳ compaction #{data['number']}: ", style="bold magenta")
    line.append(f"{before:,} → {after:,}{saved}")
    line.append(f" · {data['summarized']} msgs summarized", style="dim")
    if data.get("background"):
        line.append(" · pre-built", style="dim")
    out.print(line, no_wrap=True, overflow="ellipsis", crop=True)
    seen: set[str] = state.setdefault("anchors_shown", set())
    shown = _display_anchors(list(data["anchors"]), seen)
    seen.update(shown)
    detail = f"      {len(data['anchors'])} anchors kept verbatim"
    if shown:
        detail += ", e.g. " + " · ".join(shown)
    out.print(Text(detail, style="dim"), no_wrap=True, overflow="ellipsis", crop=True)


def _searches(out: Console, store: Any) -> None:
    from refold.store.base import SearchQuery

    out.print()
    out.rule(Text("search the archive (compacted rows stay searchable)", style="bold"),
             align="left", style="dim")
    table = Table(box=None, pad_edge=False, show_header=True, header_style="bold")
    table.add_column("query", no_wrap=True, min_width=9)
    table.add_column("kind", style="dim", no_wrap=True, min_width=10)
    table.add_column("hits", justify="right", no_wrap=True, min_width=4)
    table.add_column("best match", no_wrap=True, overflow="ellipsis", max_width=56)
    for query, kind in SEARCHES:
        hits = store.search(SearchQuery(text=query, limit=20, window=0))
        best = _snippet(hits[0].snippet) if hits else Text("—")
        table.add_row(Text(query), kind, str(len(hits)), best)
    out.print(table)


def _resume(out: Console, store: Any, home: Path, base_url: str, context_length: int,
            session_id: str) -> None:
    from refold.cli.demo_runner import MODEL, SYSTEM_PROMPT
    from refold.cli.demo_script import FAKE_TOOLS
    from refold.llm import HttpChatClient
    from refold.runtime import Engine
    from refold.tools import agent_tools, load_todos

    out.print()
    out.rule(Text("resume in a fresh engine (as a new process would)", style="bold"),
             align="left", style="dim")
    with Engine(store, model=MODEL, context_length=context_length,
                memory_dir=home / "memories") as engine:
        rt = engine.open_session(session_id[:8])
        projection = store.projection(rt.session_id)
        todos = load_todos(store, rt.session_id)
        done = sum(1 for t in todos if t.get("status") == "completed")
        count = store.get_session(rt.session_id).message_count
        out.print(Text.assemble("  resumed ", (rt.session_id[:8], "bold"),
                                f" by id prefix · {count} messages in the ledger"))
        out.print(Text(f"  model view: summary + {len(projection.messages)} recent messages · "
                       f"todo rebuilt from events: {done}/{len(todos)} done", style="dim"))
        for line in _snapshot_lines(rt.memory_snapshot, _memory_entries(engine)):
            out.print(Text(line, style="dim"))
        schemas = agent_tools(store, session_id=rt.session_id,
                              memory=engine.memory).schemas() + FAKE_TOOLS
        prepared = rt.prepare([{"role": "user", "content": "Where were we?"}],
                              system_prompt=SYSTEM_PROMPT, tools=schemas)
        with HttpChatClient(base_url) as client:
            reply = client.complete(prepared.messages, model=MODEL)
        rt.record(reply.message, usage=reply.usage, model=MODEL)
        out.print(Text.assemble("  user: Where were we?  →  ", ("assistant: ", "bold"),
                                str(reply.message.get("content"))),
                  no_wrap=True, overflow="ellipsis", crop=True)
        _breakdown(out, rt.context_breakdown())


def _snapshot_lines(snapshot: str, entries_now: int) -> list[str]:
    """The session's frozen snapshot in its own figures (it was frozen when the session was
    first opened: memory saved since reaches new sessions only), and memory now under it
    when that differs."""
    frozen = snapshot_entries(snapshot)
    lines = [f"  memory snapshot, frozen at the session's start: {frozen} "
             f"entr{'y' if frozen == 1 else 'ies'} ({len(snapshot):,} chars)"]
    if entries_now != frozen:
        lines.append(f"  memory holds {entries_now} entr{'y' if entries_now == 1 else 'ies'} "
                     "now: new sessions get them (this one keeps its snapshot)")
    return lines


_SECTION = re.compile(r"<(env_memory|user_profile)>\n[^\n]*\n(.*?)\n</\1>", re.DOTALL)


def snapshot_entries(snapshot: str) -> int:
    """How many entries a rendered memory snapshot holds (``refold.memory.snapshot``): one
    per section, plus one per delimiter between them."""
    from refold.memory.entries import ENTRY_DELIMITER

    return sum(body.count(ENTRY_DELIMITER) + 1 for _, body in _SECTION.findall(snapshot))


def _memory_entries(engine: Any) -> int:
    if engine.memory is None:
        return 0
    return sum(len(engine.memory.store.read(t).entries) for t in ("memory", "user"))


def _breakdown(out: Console, parts: dict[str, Any]) -> None:
    out.print()
    out.rule(Text("context breakdown (what fills the window now)", style="bold"),
             align="left", style="dim")
    table = Table(box=None, pad_edge=False, header_style="bold")
    table.add_column("part")
    table.add_column("tokens", justify="right")
    rows = [(name, n) for name, n in parts["parts"].items()]
    rows += [(f"tail: {role}", n) for role, n in sorted(parts["tail_by_role"].items())]
    for name, n in rows:
        table.add_row(name, f"{n:,}")
    table.add_row(Text("total sent", style="bold"), Text(f"{parts['total']:,}", style="bold"))
    table.add_row("compaction threshold", f"{parts['threshold']:,}")
    table.add_row("window", f"{parts['context_length']:,}")
    out.print(table)


def _summary(out: Console, stats: Any, store: Any, session_id: str, home: Path) -> None:
    out.print()
    out.rule(Text("summary", style="bold"), align="left", style="dim")
    table = Table(box=None, pad_edge=False, show_header=False)
    table.add_column("what", style="dim")
    table.add_column("value", justify="right")
    saved = stats.tokens_without_refold - stats.tokens_sent
    pct = 100 * saved // stats.tokens_without_refold if stats.tokens_without_refold else 0
    rows = [
        # counted now: the resume turn added its two after the replay's count
        ("messages in the ledger (none deleted)",
         f"{store.get_session(session_id).message_count:,}"),
        ("model calls", f"{stats.model_calls:,}"),
        ("compactions (pre-computed in background)",
         f"{stats.compactions} ({stats.precomputed})"),
        ("checkpoints stored", f"{len(store.list_checkpoints(session_id))}"),
        ("peak context sent", f"{stats.peak_tokens:,} tokens"),
        ("prompt tokens sent", f"{stats.tokens_sent:,}"),
        ("…without compaction", f"{stats.tokens_without_refold:,} ({pct}% saved)"),
        ("memory writes (agent + background review)",
         f"{stats.memory_writes} + {stats.review_writes}"
         + (f" ({stats.review_duplicates} near-duplicates left out)"
            if stats.review_duplicates else "")),
        ("overflow retries", f"{stats.retries}"),
        ("elapsed", f"{stats.elapsed:.1f} s"),
    ]
    for what, value in rows:
        table.add_row(what, value)
    out.print(table)
    out.print()
    out.print(Text.assemble(("demo home: ", "bold"), str(home)))
    out.print(Text("try next:", style="bold"))
    h = f"--home {home}"
    short = session_id[:8]
    for cmd in (f"refold {h} sessions list", f"refold {h} search 金额",
                f"refold {h} search 'No module named'", f"refold {h} context {short}",
                f"refold {h} sessions show {short}", f"refold {h} memory show",
                f"refold {h} sessions export {short}"):
        out.print(Text(f"  {cmd}", style="cyan"))
    out.print()
