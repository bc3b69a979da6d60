"""``refold chat``: an interactive terminal chat on the session runtime (compaction, memory, tools).

Reads one line per turn — from a terminal through readline (line editing, history, no
4,095-character cut, a bracketed multi-line paste as one message), or from piped stdin (scripts
and tests), where the prompt is not echoed; ``/paste`` reads several lines as one message. After
every turn a context gauge shows the tokens sent against the compaction threshold and the
window. A failing or interrupted turn prints one ``error:`` line and one line on what it left in
the conversation (``ChatSession.notes``: an unanswered message is taken back), and the chat
goes on (an interactive session should not end on a rate limit); setup errors (no upstream,
unknown session) end the command through the CLI's one error renderer.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click

from refold.cli.app import AppContext, pass_app
from refold.cli.chat_session import DEFAULT_SYSTEM, ChatSession, Output
from refold.errors import InvalidInput, RefoldError

GAUGE_WIDTH = 24


def _k(n: int) -> str:
    return f"{n / 1000:.1f}k" if n >= 1000 else str(n)


def gauge_line(tokens: int, threshold: int, window: int, columns: int | None = None) -> str:
    """``[██████░░░░] 12.3k / 64.0k until compaction · window 128.0k (19%)``; shorter forms
    where that does not fit in ``columns`` (a narrow terminal broke it mid-word)."""
    fraction = tokens / threshold if threshold else 0.0
    used = tokens / window * 100 if window else 0.0

    def bar(width: int) -> str:
        filled = min(width, round(fraction * width))
        return "[" + "█" * filled + "░" * (width - filled) + "]"

    full = (f"{bar(GAUGE_WIDTH)} {_k(tokens)} / {_k(threshold)} until compaction · window "
            f"{_k(window)} ({used:.0f}%)")
    if columns is None or len(full) <= columns:
        return full
    short = f" {_k(tokens)} / {_k(threshold)} · {_k(window)} ({used:.0f}%)"
    width = min(GAUGE_WIDTH, columns - len(short) - 2)
    return (bar(width) + short) if width >= 5 else short.strip()


def breakdown_line(parts: dict[str, Any]) -> str:
    """One line of where the context's tokens go (``/context``)."""
    named = dict(parts.get("parts") or {})
    tail = dict(parts.get("tail_by_role") or {})
    bits = [f"{name} {_k(int(n))}" for name, n in named.items()]
    if tail:
        roles = ", ".join(f"{role} {_k(int(n))}" for role, n in tail.items())
        bits.append(f"tail {_k(sum(int(n) for n in tail.values()))} ({roles})")
    if parts.get("tool_outputs"):
        bits.append(f"of which tool outputs {_k(int(parts['tool_outputs']))}")
    total = int(parts.get("total") or 0)
    return (" · ".join(bits) + f" = {_k(total)} tokens; threshold "
            f"{_k(int(parts.get('threshold') or 0))}, window "
            f"{_k(int(parts.get('context_length') or 0))}")


class Renderer:
    """Turns ``Output`` values into terminal text (rich styles on a TTY, plain text otherwise)."""

    def __init__(self, console: Any, *, markdown: bool = False) -> None:
        self.console = console
        self.markdown = markdown  # replies rendered as markdown (a terminal); streamed ones live
        self.status: Any = None  # the "thinking…" spinner of the turn, stopped at first text
        self._live: Any = None
        self._soft_wrap = False  # the console's own, while a live reply lays lines out
        self._streamed: list[str] = []

    # -- streamed replies ----------------------------------------------------------------------
    def on_text(self, delta: str) -> None:
        """A content delta of the reply being streamed."""
        if self.status is not None:
            self.status.stop()  # one live display at a time: the reply takes over
            self.status = None
        self._streamed.append(delta)
        if not self.markdown:
            self.console.file.write(delta)
            self.console.file.flush()
            return
        from rich.live import Live
        from rich.markdown import Markdown

        if self._live is None:
            # rich lays the live reply out itself: with the console's soft wrap (the terminal
            # wraps plain prints) it cut every line of the reply at the terminal's width
            self._soft_wrap = self.console.soft_wrap
            self.console.soft_wrap = False
            # the live region shows the reply's last screenful and is cleared at the end, where
            # the whole reply is printed once: a live region taller than the screen is redrawn
            # from its top on every refresh, and each redraw's lines that had scrolled off stayed
            # in the scrollback (a reply of two screens left its first paragraph there 20 times)
            self._live = Live(console=self.console, refresh_per_second=12, transient=True)
            self._live.start()
        self._live.update(_Tail(Markdown("".join(self._streamed))))

    def end_stream(self) -> None:
        """The streamed reply is complete (or broke off): leave it on the screen."""
        if self._live is not None:
            from rich.markdown import Markdown

            try:
                self._live.stop()
                self.console.print(Markdown("".join(self._streamed)))
            finally:
                self._live = None
                self.console.soft_wrap = self._soft_wrap
        elif self._streamed:
            self.console.file.write("\n")
        self._streamed = []

    def show(self, out: Output) -> None:
        getattr(self, f"_{out.kind}", self._info)(out)

    def _print(self, text: str, style: str | None = None) -> None:
        self.console.print(text, style=style, markup=False, highlight=False)

    def _reply(self, out: Output) -> None:
        if out.data.get("streamed"):
            self.end_stream()  # already on the screen
            return
        if self.markdown:  # a whole reply (--no-stream) on a terminal: rendered as well
            from rich.markdown import Markdown

            if self.status is not None:  # the spinner's line stayed under the heading
                self.status.stop()
                self.status = None
            self.console.print(Markdown(out.text))
            return
        self._print(out.text)

    def _tool(self, out: Output) -> None:
        args = str(out.data.get("arguments", ""))
        result = str(out.data.get("result", ""))
        self._print(f"  ⚙ {out.text}({_clip(args, 40)}) → {_clip(result, 40)}", "dim")

    def _gauge(self, out: Output) -> None:
        d = out.data
        mark = "  · compacted" if d.get("compacted") else ""
        line = gauge_line(d["tokens"], d["threshold"], d["window"],
                          self.console.width - len(mark) - 1)
        self._print(line + mark, "cyan")

    def _hits(self, out: Output) -> None:
        hits = out.data.get("hits") or []
        if not hits:
            self._print(f"no match for {out.text!r}", "yellow")
        for hit in hits:
            title = hit.session_title or hit.session_id[:12]
            head = f"  {title} #{hit.seq} {hit.role}: "
            # one line each, as wide as the terminal leaves (a CJK character takes two columns)
            room = max(20, min(110, self.console.width - _cells(head)))
            self._print(head + _clip(hit.snippet, room))

    def _memory(self, out: Output) -> None:
        targets = out.data.get("targets") or {}
        if not targets:
            self._print("memory is off", "yellow")
        for target, entries in targets.items():
            self._print(f"{target.upper()} ({len(entries)} entries)", "bold")
            for entry in entries:
                self._print(f"  • {_clip(entry, max(20, min(120, self.console.width - 4)))}")

    def _warning(self, out: Output) -> None:
        self._print(f"warning: {out.text}", "yellow")

    def _help(self, out: Output) -> None:
        for name, text in out.data["commands"]:
            self._print(f"  {name:<18} {text}")

    def _info(self, out: Output) -> None:
        if out.text:
            self._print(out.text, "green")
        if "breakdown" in out.data:
            self._print(breakdown_line(out.data["breakdown"]))

    def error(self, err: RefoldError) -> None:
        self.end_stream()
        self._print(f"error: {err}", "red")


class _Tail:
    """The last lines of a renderable that fit the screen (a live region must not outgrow it)."""

    def __init__(self, renderable: Any) -> None:
        self.renderable = renderable

    def __rich_console__(self, console: Any, options: Any) -> Iterator[Any]:
        from rich.segment import Segment

        lines = console.render_lines(self.renderable, options.update(height=None), pad=False)
        keep = max(1, console.size.height - 1)  # a row for the cursor below the region
        for line in lines[-keep:]:
            yield from line
            yield Segment.line()


def _cells(text: str) -> int:
    from rich.cells import cell_len

    return cell_len(text)


def _clip(text: str, width: int) -> str:
    """``text`` on one line of at most ``width`` terminal columns (wide characters count 2)."""
    from rich.cells import set_cell_size

    flat = " ".join(text.split())
    if _cells(flat) <= width:
        return flat
    return set_cell_size(flat, width - 1).rstrip() + "…"


PROMPT = "you› "
PASTE_PROMPT = "  … "
PASTE_END = "."  # a line of just this ends a /paste block (so does Ctrl-D)
# a terminal in canonical mode holds at most this many bytes of one line (Linux's N_TTY buffer,
# less its newline) and silently drops the rest; readline reads the terminal itself, uncut
TERMINAL_LINE_LIMIT = 4095
CUT_WARNING = ("the terminal cut this line at 4,095 characters, so it was not sent: pipe long "
               "text into refold chat, or reference a file with @file:PATH")


def line_editing() -> bool:
    """Read the terminal through readline (GNU readline or libedit), as the Python prompt does:
    line editing and history, no 4,095-character cut, and a multi-line paste arrives as one
    message where the terminal and readline do bracketed paste (readline 8.1 and later). False
    where there is no readline (Windows)."""
    try:
        import readline  # importing it is what makes input() use it
    except ImportError:
        return False
    if "libedit" not in (readline.__doc__ or ""):
        # CPython turns GNU readline's bracketed paste off (for its REPL, which runs each
        # pasted line): the terminal was then never asked to bracket a paste, so each line of a
        # multi-line paste went as a message of its own
        readline.parse_and_bind("set enable-bracketed-paste on")
    return True


def _cut(line: str) -> bool:
    """The line fills the terminal's line buffer: the terminal most likely cut it (a cut can
    fall short of the limit by the rest of a multi-byte character)."""
    size = len(line.encode("utf-8", "surrogateescape"))
    return TERMINAL_LINE_LIMIT - 3 <= size <= TERMINAL_LINE_LIMIT


def _piped(prompt: str) -> str:
    line = sys.stdin.readline()
    if line == "":
        raise EOFError
    return line.removesuffix("\n")


def _lines(interactive: bool, warn: Callable[[str], None], *, editing: bool = False,
           read: Callable[[str], str] | None = None) -> Iterator[tuple[str, bool]]:
    """(text, pasted) for each message or command read: one line, or a ``/paste`` block
    (the lines up to one holding only ``.``, or Ctrl-D) as one message. On a terminal without
    line ``editing`` a line the terminal cut is not sent (``warn`` says why)."""
    read = read or (input if interactive else _piped)
    interrupted = False
    while True:
        try:
            line = read(PROMPT)
        except EOFError:  # Ctrl-D: leave
            return
        except KeyboardInterrupt:
            # Ctrl-C clears the line, as a shell does (it left the chat, half a line typed or
            # not); a second one in a row leaves
            if interrupted or not interactive:
                return
            interrupted = True
            warn("(Ctrl-C again, or Ctrl-D, to leave)")
            continue
        interrupted = False
        if interactive and not editing and _cut(line):
            warn(CUT_WARNING)
            continue
        if "\n" in line.strip():
            # a bracketed paste of several lines: a message, even one that starts with "/" (a
            # pasted path or shell session was taken for an unknown command, or for /quit)
            yield line, True
            continue
        if line.strip().lower() != "/paste":
            yield line, False
            continue
        block: list[str] = []
        while True:
            try:
                more = read(PASTE_PROMPT)
            except EOFError:  # Ctrl-D ends the block
                break
            except KeyboardInterrupt:  # Ctrl-C drops it
                warn("paste dropped: nothing was sent")
                block = []
                break
            if more.strip() == PASTE_END:
                break
            if interactive and not editing and _cut(more):
                warn(CUT_WARNING.replace("so it was not sent", "so the paste was dropped"))
                block = []
                break
            block.append(more)
        if block:
            yield "\n".join(block), True


def _engine(app: AppContext) -> tuple[Any, Any]:
    """The chat's engine (summarizer, rotation and memory from settings, as ``serve`` does)
    and the summarizer setup whose clients the caller closes after the engine."""
    from refold.assembly import build_engine, start_indexer, summarizer_setup

    setup = summarizer_setup(app.settings)
    indexer = start_indexer(app.settings, app.store)
    if indexer is not None:
        setup.owned.append(indexer)  # closed with the setup, after the engine
    # the person at the terminal: @file/@folder/@diff/@git read the working directory
    return build_engine(app.settings, app.store, setup, owner="", refs_root=Path.cwd(),
                        indexer=indexer), setup


@click.command("chat")
@click.option("--upstream", help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1 "
              "(/chat/completions is added to it; or $REFOLD_UPSTREAM).")
@click.option("--model", help="Model name to ask for.")
@click.option("--context-length", type=int, help="The model's context window in tokens.")
@click.option("-s", "--session", "ref", help="Resume a session (id, prefix or title).")
@click.option("--title", help="Title for the new session.")
@click.option("--system", "system_prompt", default=DEFAULT_SYSTEM,
              help="System prompt (default: a short assistant prompt naming the tools).")
@click.option("--no-tools", is_flag=True, help="Do not offer the session_search, memory, todo and skill_manage tools.")
@click.option("--upstream-api-key-env", metavar="VAR",
              help="Read the upstream's API key from env variable VAR "
                   "(default $REFOLD_UPSTREAM_API_KEY).")
@click.option("--no-stream", is_flag=True,
              help="Wait for each whole reply instead of streaming it (markdown on a terminal).")
@pass_app
def chat_cmd(app: AppContext, upstream: str | None, model: str | None,
             context_length: int | None, ref: str | None, title: str | None,
             system_prompt: str, no_tools: bool, upstream_api_key_env: str | None,
             no_stream: bool) -> None:
    """Chat with a model; history, compaction and memory handled by refold. /help for commands."""
    from rich.console import Console

    from refold.llm import HttpChatClient

    app.flags.update(upstream=upstream, model=model, context_length=context_length)
    settings = app.settings
    if not settings.upstream:
        raise InvalidInput("no model endpoint to chat with",
                           hint="pass --upstream URL or set REFOLD_UPSTREAM")
    if upstream_api_key_env:
        key = os.environ.get(upstream_api_key_env)
        if not key:
            raise InvalidInput(f"${upstream_api_key_env} is not set",
                               hint="export it, or drop --upstream-api-key-env")
        settings = settings.updated(upstream_api_key=key)
    interactive = sys.stdin.isatty()
    console = Console(soft_wrap=True, highlight=False)  # replies wrap in the terminal
    renderer = Renderer(console, markdown=interactive and console.is_terminal)
    engine, setup = _engine(app)
    try:
        with HttpChatClient(str(settings.upstream), settings.upstream_api_key) as client:
            chat = ChatSession(engine, client, model=settings.model, system_prompt=system_prompt,
                               use_tools=not no_tools, ref=ref, title=title,
                               on_text=None if no_stream else renderer.on_text)
            renderer.show(Output("info", f"{chat.describe()} · {settings.model} at "
                                         f"{settings.upstream} · /help for commands"))
            _loop(chat, renderer, interactive)
    finally:
        engine.close()
        setup.close()


def _loop(chat: ChatSession, renderer: Renderer, interactive: bool) -> None:
    def warn(text: str) -> None:
        renderer.show(Output("warning", text))

    editing = interactive and line_editing()
    for line, pasted in _lines(interactive, warn, editing=editing):
        turn = pasted or not line.lstrip().startswith("/")
        waiting = renderer.console.status("thinking…") if interactive and turn \
            else contextlib.nullcontext()
        renderer.status = waiting if interactive and turn else None
        try:
            with waiting:
                for out in (chat.turn(line.strip()) if pasted else chat.handle(line)):
                    renderer.show(out)
        except RefoldError as err:
            renderer.error(err)
        except KeyboardInterrupt:  # Ctrl-C during a turn: drop the reply, keep chatting
            renderer.error(RefoldError("interrupted"))
        for note in chat.notes:  # what the failed turn left in the conversation
            renderer.show(note)
        chat.notes.clear()
        if chat.finished:
            return
    if interactive:
        renderer.console.print()
    for out in chat.cmd_quit([]):  # end of input: the same goodbye as /quit
        renderer.show(out)
