"""Read-ahead for a search on a cold page cache: the pages a statement is about to read, asked
of the OS all at once.

SQLite reads a B-tree one page at a time: to find a row it reads the root, then the interior
page that points to its leaf, then the leaf, each read waiting for the one before; a search that
reads twenty rows of a large archive waits for some fifty reads in a row (~60-300 us each
on a virtual disk). The OS serves many reads at once about as fast as one. So before a
statement reads a set of rows, ``ask`` walks the table's B-tree itself, level by level, from
the database file: each level's pages are asked for together (``posix_fadvise(WILLNEED)``, which starts the
reads and returns), then read and parsed for the next level's page numbers; the leaves' first
overflow pages are asked for last. The statement then finds its pages in the OS cache.

Only a hint: the walk reads the main file as it is (a page newer in the WAL may point elsewhere,
a page may be reused), stops at anything it does not expect, and never changes what a search
returns; it costs a few syscalls and some parsing, so it runs only when the search is reading
from storage (``begin``/``cold``: the blocks the process read moved), on Linux, unless
``REFOLD_READAHEAD=0``. The pages are parsed by the C page reader (``refold._btree``) where
the install built it, else by the same code in Python here (``_py_*``). The file format:
https://www.sqlite.org/fileformat2.html (b-tree pages).
"""

from __future__ import annotations

import os
import sqlite3
import threading
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable, Sequence
from typing import Any

try:
    import resource
except ImportError:  # pragma: no cover - not POSIX
    resource = None  # type: ignore[assignment]

try:
    from refold import _btree
except ImportError:  # built where a C compiler was found (setup.py); else the Python below
    _btree = None  # type: ignore[assignment]

MAX_PAGES = 512  # pages one call asks for at most (a hint, not a scan)

_TABLE_INTERIOR, _TABLE_LEAF, _INDEX_INTERIOR, _INDEX_LEAF = 0x05, 0x0D, 0x02, 0x0A
_state = threading.local()  # ``begin``'s reading of the process's storage reads


def native() -> bool:
    """Is the C page reader built, and not turned off (``REFOLD_NATIVE=0``, as the scorer)?"""
    return _btree is not None and os.environ.get("REFOLD_NATIVE", "1") != "0"


def enabled() -> bool:
    return hasattr(os, "posix_fadvise") and os.environ.get("REFOLD_READAHEAD", "1") != "0"


def _storage_reads() -> int | None:
    """The blocks this process (every thread) has had read from storage (``getrusage``'s
    ``ru_inblock``: Linux counts them as its ``/proc/self/io`` ``read_bytes`` does), or None
    where there is no such count."""
    if resource is None:  # pragma: no cover - not POSIX
        return None
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_inblock)


def begin(path: str | None) -> None:
    """At a search's start: note the storage reads so far (``cold`` compares)."""
    _state.reads = _storage_reads() if path and enabled() else None


def cold() -> bool:
    """Has the search read from storage since ``begin``?"""
    before = getattr(_state, "reads", None)
    if before is None:
        return False
    now = _storage_reads()
    return now is not None and now > before


def end() -> None:
    _state.reads = None


def _page_size(header: bytes) -> int:
    if len(header) < 100 or not header.startswith(b"SQLite format 3\x00"):
        return 0
    size = int.from_bytes(header[16:18], "big")
    return 65536 if size == 1 else size


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """SQLite's big-endian varint at ``at``: (value, the offset after it)."""
    value = 0
    for i in range(8):
        byte = data[at + i]
        value = (value << 7) | (byte & 0x7F)
        if byte < 0x80:
            return value, at + i + 1
    return (value << 8) | data[at + 8], at + 9


class _Node:
    """A b-tree page, its cells read as they are asked for (an interior page holds hundreds:
    a lookup reads the few a binary search touches)."""

    def __init__(self, data: bytes, at: int, kind: int) -> None:
        self.data, self.at, self.kind = data, at, kind
        self.cells = int.from_bytes(data[at + 3:at + 5], "big")
        self.leaf = kind in (_TABLE_LEAF, _INDEX_LEAF)

    def _cell(self, n: int) -> int:
        pointer = self.at + 12 + 2 * n
        return int.from_bytes(self.data[pointer:pointer + 2], "big")

    def child(self, n: int) -> int:
        """Child ``n`` of an interior page (``n == cells``: the right-most)."""
        if n == self.cells:
            return int.from_bytes(self.data[self.at + 8:self.at + 12], "big")
        cell = self._cell(n)
        return int.from_bytes(self.data[cell:cell + 4], "big")

    def key(self, n: int) -> int:
        """The rowid key of cell ``n`` of a table interior page: child ``n`` holds the rows
        up to it."""
        return _varint(self.data, self._cell(n) + 4)[0]

    def first_at_least(self, rowid: int) -> int:
        """The child that holds ``rowid`` (of a table interior page)."""
        return _first(self.cells, self.key, rowid)

    def index_key(self, n: int) -> bytes:
        """The first column's bytes of cell ``n`` of an index interior page (a text or a
        blob; its local part when the record overflows)."""
        data = self.data
        at = self._cell(n) + 4
        _, record = _varint(data, at)
        header, at = _varint(data, record)
        kind, _ = _varint(data, at)
        if kind < 12:
            return b""
        start = record + header
        return data[start:start + (kind - 12) // 2]

    def first_key_at_least(self, key: bytes) -> int:
        """The child that holds ``key`` (of an index interior page, by its first column)."""
        return _first(self.cells, self.index_key, key)


def _first(count: int, key: Callable[[int], Any], wanted: Any) -> int:
    """The first of ``count`` sorted keys (``key(n)``) at least ``wanted``; ``count`` if
    none is."""
    low, high = 0, count
    while low < high:
        mid = (low + high) // 2
        if key(mid) < wanted:
            low = mid + 1
        else:
            high = mid
    return low


class _File:
    """The database file, read as B-tree pages."""

    def __init__(self, fd: int, size: int, usable: int, pages: int) -> None:
        self.fd, self.size, self.usable, self.pages = fd, size, usable, pages

    def advise(self, pages: Iterable[int]) -> None:
        for start, count in _runs(sorted({p for p in pages if 1 <= p <= self.pages})):
            os.posix_fadvise(self.fd, (start - 1) * self.size, count * self.size,
                             os.POSIX_FADV_WILLNEED)

    def page(self, number: int) -> tuple[bytes, int]:
        """The page and where its b-tree header starts (after the file header on page 1)."""
        data = os.pread(self.fd, self.size, (number - 1) * self.size)
        return data, 100 if number == 1 else 0


def _py_overflow(data: bytes, at: int, usable: int, rowids: list[int]) -> list[int]:
    """The first overflow page of each row of the table leaf ``data`` whose rowid is one of
    ``rowids`` (sorted) and that is longer than the page holds (``_btree.overflow``)."""
    if data[at] != _TABLE_LEAF:
        return []
    cells = int.from_bytes(data[at + 3:at + 5], "big")

    def cell(n: int) -> tuple[int, int, int]:  # (rowid, payload size, payload start)
        pointer = at + 8 + 2 * n
        size, after = _varint(data, int.from_bytes(data[pointer:pointer + 2], "big"))
        rowid, body = _varint(data, after)
        return rowid, size, body

    if not cells:
        return []
    most = usable - 35
    least = (usable - 12) * 32 // 255 - 23
    out = []
    low = 0
    first, last = cell(0)[0], cell(cells - 1)[0]
    for wanted in rowids[bisect_left(rowids, first):bisect_right(rowids, last)]:
        high = cells
        while low < high:  # the first cell at or after ``wanted``
            mid = (low + high) // 2
            if cell(mid)[0] < wanted:
                low = mid + 1
            else:
                high = mid
        if low >= cells:
            break
        rowid, size, body = cell(low)
        if rowid != wanted or size <= most:
            continue
        local = least + (size - least) % (usable - 4)
        if local > most:
            local = least
        out.append(int.from_bytes(data[body + local:body + local + 4], "big"))
    return out


def _runs(pages: Sequence[int]) -> Iterable[tuple[int, int]]:
    """Sorted page numbers as (first, count) runs of consecutive pages."""
    runs: list[tuple[int, int]] = []
    for p in pages:
        if runs and p == runs[-1][0] + runs[-1][1]:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((p, 1))
    return runs


def _open(conn: sqlite3.Connection) -> _File | None:
    row = conn.execute("PRAGMA database_list").fetchone()
    path = str(row[2]) if row and row[2] else ""
    if not path:
        return None
    fd = os.open(path, os.O_RDONLY)
    try:
        header = os.pread(fd, 100, 0)
        size = _page_size(header)
        if size:
            return _File(fd, size, size - header[20], os.fstat(fd).st_size // size)
    except BaseException:
        os.close(fd)
        raise
    os.close(fd)
    return None


class Want:
    """A tree to ask for: ``name`` (a table or an index), and in it the rowid ``spans``
    ([low, high] each, sorted; a table), the first-column ``keys`` (UTF-8, sorted; an index
    on a text column) or, with neither, every page; ``rows``: the rows (sorted) whose first
    overflow page to ask for too; ``most``: the pages to ask for at most (a tree larger than
    a small one is read in part, as its lookups need, not through)."""

    def __init__(self, name: str, spans: Sequence[tuple[int, int]] | None = None,
                 keys: Sequence[bytes] | None = None, rows: Sequence[int] = (),
                 most: int = MAX_PAGES) -> None:
        self.name, self.spans, self.keys, self.rows = name, spans, keys, rows
        self.most = most


_Targets = list[Any] | None  # rowid spans or keys under a page (None: all of it)


def _walk(file: _File, roots: Sequence[tuple[int, Want]]) -> set[str]:
    """Ask for the pages of each tree its ``Want`` names, level by level, every tree's
    level at once; then the first overflow pages of the rows wanted. Returns the names of
    the trees asked for to their leaves, none left out for ``most`` or ``MAX_PAGES``."""
    level: dict[int, tuple[Want, _Targets]] = {
        root: (want, None if want.spans is None and want.keys is None
               else list(want.spans if want.spans is not None else want.keys or ()))
        for root, want in roots}
    asked = 0
    overflow: list[int] = []
    each: dict[int, int] = {}  # pages asked for per tree
    c = _btree if native() else None
    cut: set[str] = set()
    while level:
        counts: dict[int, int] = {}  # this level's pages per tree
        for want, _ in level.values():
            counts[id(want)] = counts.get(id(want), 0) + 1
        before = dict(each)  # pages asked for per tree above this level
        kept: dict[int, tuple[Want, _Targets]] = {}
        for page, entry in level.items():  # each tree up to its ``most`` pages; a whole
            want = entry[0]  # tree's level all or none (a part of it: pages no lookup needs)
            done = each.get(id(want), 0)
            fits = done < want.most if entry[1] is not None else \
                before.get(id(want), 0) + counts[id(want)] <= want.most
            if fits and asked + len(kept) < MAX_PAGES:
                each[id(want)] = done + 1
                kept[page] = entry
            else:
                cut.add(want.name)
        level = kept
        file.advise(level)
        asked += len(level)
        below: dict[int, tuple[Want, _Targets]] = {}
        leafy: set[int] = set()  # the trees whose leaves this level holds
        for number, (want, targets) in level.items():
            if id(want) in leafy and not want.rows:
                continue  # a leaf like the others: asked for, no need to read it
            data, at = file.page(number)
            kind = data[at]
            if kind in (_TABLE_LEAF, _INDEX_LEAF):
                leafy.add(id(want))
                if want.rows:
                    rows = list(want.rows)
                    overflow += (c.overflow(data, at, file.usable, rows) if c is not None
                                 else _py_overflow(data, at, file.usable, rows))
            elif kind not in (_TABLE_INTERIOR, _INDEX_INTERIOR):
                continue
            elif targets is None:
                kids = c.children(data, at) if c is not None else _py_children(data, at)
                below.update((kid, (want, None)) for kid in kids)
            elif (kind == _TABLE_INTERIOR) != (want.spans is not None):
                continue  # rowid spans in an index, keys in a table: not the tree named
            else:
                routed = (c.route(data, at, targets) if c is not None
                          else _py_route(_Node(data, at, kind), targets))
                for kid, target in routed:
                    below.setdefault(kid, (want, []))
                    under = below[kid][1]
                    if under is not None:
                        under.append(target)
        level = below
    file.advise(overflow)
    return {want.name for _, want in roots} - cut


def _py_children(data: bytes, at: int) -> list[int]:
    """Every child of an interior page, the right-most last (``_btree.children``)."""
    node = _Node(data, at, data[at])
    return [node.child(n) for n in range(node.cells + 1)]


def _py_route(node: _Node, targets: list[Any]) -> list[tuple[int, Any]]:
    """(child, target) for each child of an interior page that holds a target: a rowid span
    of a table, a key of an index (``_btree.route``)."""
    out = []
    for target in targets:
        if node.kind != _TABLE_INTERIOR:
            out.append((node.child(node.first_key_at_least(target)), target))
            continue
        low, high = target
        n = node.first_at_least(low)  # child n holds keys up to key(n); the last, the rest
        out.append((node.child(n), target))
        while n < node.cells and node.key(n) < high:
            n += 1
            out.append((node.child(n), target))
    return out


def table_rows(conn: sqlite3.Connection, table: str, ranges: Iterable[tuple[int, int]],
               overflow: Iterable[int] = ()) -> None:
    """Ask for the pages of ``table`` holding the rowids in ``ranges`` ([low, high] each),
    and the first overflow pages of the rows ``overflow`` names."""
    spans = sorted(set(ranges))
    if spans:
        ask(conn, [Want(table, spans, rows=sorted(set(overflow)))])


def ask(conn: sqlite3.Connection, wants: Sequence[Want]) -> set[str]:
    """Ask for what each of ``wants`` names, the trees walked side by side; returns the
    names of those asked for in full (``_walk``)."""
    if not enabled() or not wants:
        return set()
    try:
        roots = {str(name): int(page) for name, page in conn.execute(
            "SELECT name, rootpage FROM sqlite_schema WHERE name IN "
            f"({','.join('?' * len(wants))})", [w.name for w in wants]) if page}
        file = _open(conn) if roots else None
    except (OSError, sqlite3.Error):
        return set()
    if file is None:
        return set()
    try:
        return _walk(file, [(roots[w.name], w) for w in wants if w.name in roots])
    except (OSError, IndexError, ValueError, TypeError, OverflowError):
        return set()  # a page the walk did not expect (a newer one in the WAL): only a hint
    finally:
        os.close(file.fd)
