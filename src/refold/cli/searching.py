"""``refold search`` without click: its options, their parsing, the search and its output.

A search is what people run most, often from scripts, and it should answer before they notice a
start-up: click and what it imports cost a third of a small search. So the options are declared
once here (``OPTIONS``); ``refold.cli.ledger`` builds the click command from them (help, errors,
``--help``), and :func:`fast_search` parses a command line itself when it is plain: global
``--home`` / ``--db`` / ``--set``, ``search``, the query and known options with valid values. Any
other command line (``--help``, a typo, a bad value, ``-v``) returns None and goes to click, so
every error message is still click's. ``tests/cli/test_cli_search_fast.py`` checks that both
paths print the same for the same command line.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from refold._records import dataclass
from refold.cli.context import AppContext, to_json
from refold.cli.terminal import safe_text
from refold.search.dates import parse_when

if TYPE_CHECKING:
    from refold.store import SearchHit, Store, StoredMessage



@dataclass(frozen=True)
class Option:
    """One option of ``refold search``: its flag, the parameter it fills, and its values."""

    flag: str
    dest: str
    kind: str = "text"  # text | choice | int | flag | time
    choices: tuple[str, ...] = ()
    low: int = 0
    high: int = 0
    default: Any = None
    show_default: bool = False
    metavar: str | None = None
    help: str | None = None


OPTIONS: tuple[Option, ...] = (
    Option("--session", "session_ref", metavar="ID", help="Only this session (id/prefix/title)."),
    Option("--role", "role", "choice", ("system", "developer", "user", "assistant", "tool"),
           help="Only messages of this role."),
    Option("--source", "source", help="Only sessions with this source label."),
    Option("--since", "since", "time", help="Only messages after this time (2026-01-31, 7d, 12h)."),
    Option("--until", "until", "time", help="Only messages before this time."),
    Option("--sort", "sort", "choice", ("relevance", "recency"), default="relevance",
           show_default=True, help="Best match first, or newest first."),
    Option("--limit", "limit", "int", low=1, high=1000, default=20, show_default=True,
           help="At most this many hits."),
    Option("--window", "window", "int", low=0, high=20, default=1, show_default=True,
           help="Surrounding messages returned on each side of a hit."),
    Option("--all", "include_inactive", "flag", default=False, help="Include rewound messages."),
    Option("--mode", "mode", "choice", ("fts", "vector", "hybrid"),
           help="Words, meaning (needs refold[embed] and `refold index`) or both fused "
                "[default: hybrid when refold[embed] is installed and messages are indexed, "
                "else fts]."),
    Option("--json", "as_json", "flag", default=False, help="Print hits as JSON."),
)
_BY_FLAG = {option.flag: option for option in OPTIONS}
_GLOBAL = {"--home": "home", "--db": "db", "--set": "sets"}


# -- the search and its output -------------------------------------------------------------------

def hit_json(hit: SearchHit) -> dict[str, Any]:
    return {"session_id": hit.session_id, "title": hit.session_title, "seq": hit.seq,
            "role": hit.role, "snippet": hit.snippet, "content": hit.content,
            "created_at": hit.created_at, "score": hit.score, "lineage": list(hit.lineage),
            "by_meaning": hit.by_meaning, "window": [_window_json(m) for m in hit.window]}


def _window_json(stored: StoredMessage) -> dict[str, Any]:
    return {"seq": stored.seq, "role": stored.role, "active": stored.active,
            "message": stored.message}


def highlight(snippet: str, query: str, bold: Callable[[str], str]) -> str:
    """The snippet with the store's ``[match]`` markers passed through ``bold``.

    Content can hold brackets of its own (``order["id"]``), so a bracketed piece counts as a
    marker only when it shares a word with the query; other brackets are printed as they are.
    """
    words = {_fold(w) for w in re.findall(r"[^\W_]+", query)}
    out = []
    for i, piece in enumerate(re.split(r"\[([^\[\]]*)\]", snippet)):
        folded = _fold(piece)
        if i % 2 and folded and any(w in folded or folded in w or _same_stem(w, folded)
                                    for w in words):
            out.append(bold(piece))
        else:
            out.append(f"[{piece}]" if i % 2 else piece)
    return "".join(out)


def _fold(text: str) -> str:
    """Case and accents folded, as the index folds them (``Café`` → ``cafe``)."""
    import unicodedata

    if text.isascii():
        return text.casefold()
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(c for c in decomposed if not unicodedata.combining(c)).casefold()


def _same_stem(word: str, piece: str) -> bool:
    """Forms of one word, as the stemmer matched them (``deployed`` / ``deploying``): the
    same first letters, all but the last three of the shorter, four at least."""
    keep = max(4, min(len(word), len(piece)) - 3)
    return len(word) >= keep and len(piece) >= keep and word[:keep] == piece[:keep]


def render_hits(hits: list[dict[str, Any]], query: str, echo: Callable[[str], None],
                bold: Callable[[str], str]) -> None:
    """One line per hit: session, seq, role, time, the matching text. Plain lines (no table
    library: a search is on the start-up path, and its lines grep well)."""
    if not hits:
        echo("no matches")
        return
    meaning = [bool(hit.get("by_meaning")) for hit in hits]
    if all(meaning):
        # a made-up word or another topic: the vector side still finds the nearest messages
        echo("no message holds these words; the nearest by meaning "
             "(--mode fts: word matches only):")
    mark = any(meaning) and not all(meaning)  # "≈": near in meaning, holding none of the words
    rows = []
    for hit in hits:
        label = safe_text(hit["title"] or hit["session_id"][:12])
        label = label if len(label) <= 24 else label[:23] + "…"
        # the year whole, as `sessions list` and `memory show` print it ("26-12-06" read as a day)
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(hit["created_at"]))
        near = "≈ " if mark and hit.get("by_meaning") else ""
        rows.append((label, str(hit["seq"]), hit["role"], when,
                     near + highlight(safe_text(hit["snippet"].replace("\n", " ")), query, bold)))
    header = ("session", "seq", "role", "when", "match")
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
    for label, seq, role, when, match in [header, *rows]:
        echo(f"{label:<{widths[0]}}  {seq:>{widths[1]}}  {role:<{widths[2]}}  "
             f"{when:<{widths[3]}}  {match}")
    if mark:
        echo("(≈ near in meaning, holding none of the words)")


def _by_words_only(store: Store, mode: str | None) -> bool:
    """``--mode fts``, or no mode and nothing indexed for the default embedder (what
    ``resolve_mode`` would then choose) — known without importing the vector module."""
    if mode is not None:
        return mode == "fts"
    from refold.search.modes import EMBED_MODEL, embed_installed

    return not (embed_installed() and store.vectors_after(EMBED_MODEL, 0, limit=1))


def run_search(app: AppContext, query: str, values: dict[str, Any],
               echo: Callable[[str], None], bold: Callable[[str], str]) -> None:
    """Search the store for ``query`` with the options' ``values`` and print the hits."""
    from refold.store import SearchQuery

    store = app.store
    ref = values["session_ref"]
    request = SearchQuery(
        text=query, session_id=store.resolve_session(ref).id if ref else None,
        role=values["role"], source=values["source"], since=values["since"],
        until=values["until"], include_inactive=values["include_inactive"],
        sort="recency" if values["sort"] == "recency" else "relevance", limit=values["limit"],
        window=values["window"])
    if _by_words_only(store, values["mode"]):  # no NumPy, no vectors: the start-up path stays short
        hits = store.search(request)
    else:
        from refold.search.vectors import E5Embedder, embed_available, hybrid_search, resolve_mode

        mode = resolve_mode(store, values["mode"])
        if mode != "fts" and embed_available() \
                and not store.vectors_after(E5Embedder.model, 0, limit=1):
            # asked for by name on an archive never indexed: say why it finds nothing by meaning
            sys.stderr.write(f"warning: no message has a vector yet, so --mode {mode} finds "
                             "nothing by meaning (run `refold index` once; new messages are "
                             "embedded in the background after that)\n")
        hits = hybrid_search(store, request, mode=mode)
    rows = [hit_json(h) for h in hits]
    if values["as_json"]:
        echo(to_json(rows))
    else:
        render_hits(rows, query, echo, bold)


# -- the click-free path ---------------------------------------------------------------------------

def _value(option: Option, text: str) -> Any:
    """The option's value from ``text``, or raise ValueError (then click says what is wrong)."""
    if option.kind == "choice" and text not in option.choices:
        raise ValueError(text)
    if option.kind == "int":
        number = int(text)  # click accepts what int() accepts
        if not option.low <= number <= option.high:
            raise ValueError(text)
        return number
    if option.kind == "time":
        return parse_when(text)
    return text


def _split(args: Sequence[str], i: int, known: dict[str, Any]) -> tuple[Any, str, int] | None:
    """The option at ``args[i]``, its text value and the next index; None when not plain."""
    flag, eq, inline = args[i].partition("=")
    target = known.get(flag)
    if target is None:
        return None
    if isinstance(target, Option) and target.kind == "flag":
        return (target, "", i + 1) if not eq else None
    if eq:
        return target, inline, i + 1
    if i + 1 >= len(args):
        return None
    return target, args[i + 1], i + 2


def queries_last(args: list[str]) -> list[str]:
    """``args`` of a search command with a query that starts with "-" but holds white space
    (no option does: "-W error") moved after "--", where a parser takes it as the query."""
    out: list[str] = []
    moved: list[str] = []
    takes_value = False
    for n, arg in enumerate(args):
        if arg == "--":
            out.extend(args[n:])
            break
        if not takes_value and arg.startswith("-") and any(c.isspace() for c in arg):
            moved.append(arg)
            continue
        option = _BY_FLAG.get(arg)
        takes_value = option is not None and option.kind != "flag"
        out.append(arg)
    if not moved:
        return args
    return [*out, *moved] if "--" in out else [*out, "--", *moved]


def fast_search(args: Sequence[str]) -> Callable[[], None] | None:
    """A runner for a plain ``refold [--home/--db/--set …] search QUERY [options]`` command
    line, or None when click should handle it."""
    flags: dict[str, Any] = {"home": None, "db": None}
    sets: list[str] = []
    i = 0
    while i < len(args) and args[i] != "search":
        step = _split(args, i, _GLOBAL)
        if step is None:
            return None
        dest, text, i = step
        if dest == "sets":
            sets.append(text)
        else:
            flags[dest] = text
    values: dict[str, Any] = {option.dest: option.default for option in OPTIONS}
    query: str | None = None
    i += 1
    while i < len(args):
        arg = args[i]
        if query is None and arg.startswith("-") and any(c.isspace() for c in arg):
            query, i = arg, i + 1  # no option holds white space: "-W error" is a query
        elif arg.startswith("-") and arg != "-":
            step = _split(args, i, _BY_FLAG)
            if step is None:
                return None
            option, text, i = step
            try:
                values[option.dest] = True if option.kind == "flag" else _value(option, text)
            except ValueError:
                return None
        elif query is None and arg != "-":
            query, i = arg, i + 1
        else:
            return None
    if query is None:
        return None
    found: str = query

    def run() -> None:
        app = AppContext(flags=flags, sets=tuple(sets), command="search")
        try:
            run_search(app, found, values, _echo, _bold if sys.stdout.isatty() else str)
        finally:
            app.close()

    return run


def _echo(text: str) -> None:
    sys.stdout.write(text + "\n")


def _bold(text: str) -> str:
    return f"\x1b[33m\x1b[1m{text}\x1b[0m"  # what click.style(fg="yellow", bold=True) writes
