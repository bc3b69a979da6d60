"""Is the process that took a lease still running? (SQLite leases die with their holder.)

A SQLite database is shared by processes of one host, so a lease row can name the process that
took it: host name, pid and the process's start time. The start time tells a pid the kernel
reused from the original holder. Where it cannot be read (no ``/proc``), a live pid counts as
the holder; on another host nothing can be told, and only the lease's ttl ends it.
"""

from __future__ import annotations

import functools
import os


@functools.cache
def host_name() -> str:
    import socket  # on first use: `refold search` never needs it (start-up time)

    return socket.gethostname()


def start_time(pid: int) -> str:
    """The process's start time in clock ticks since boot (Linux ``/proc``), "" when unknown,
    "dead" for a zombie (killed, not yet reaped by its parent)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            stat = fh.read()
    except OSError:
        return ""
    # the command name (field 2) is in parentheses and may hold spaces: split after it
    fields = stat[stat.rfind(")") + 2:].split()
    if fields and fields[0] in ("Z", "X"):
        return "dead"
    return fields[19] if len(fields) > 19 else ""


def me() -> tuple[str, int, str]:
    """(host, pid, start time) of this process, as a lease row records them."""
    pid = os.getpid()
    return host_name(), pid, _own_start(pid)


@functools.cache
def _own_start(pid: int) -> str:
    return start_time(pid)


def alive(host: str | None, pid: int | None, started: str | None) -> bool:
    """False only when the recorded holder is known to be gone (same host, no such process,
    or a different process under a reused pid)."""
    if not host or pid is None or host != host_name():
        return True  # an old row or another host: the ttl decides
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: it exists
        pass
    now = start_time(pid)
    if now == "dead":
        return False
    return not started or not now or now == started
