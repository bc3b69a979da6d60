"""``refold serve --workers N``: N worker processes accepting on one listening socket.

The parent binds the socket (``refold.cli.serve.bind_socket``), prepares the store once (so
workers never race a migration), then forks N workers; each builds its own app (store
connection, session runtimes, upstream client) and serves the inherited socket under uvicorn,
so the kernel hands each new connection to whichever worker accepts it first. The workers share
nothing but the database: the store is the one truth (appends check the tip they extend,
checkpoints are a compare-and-set, the compaction lease is per session in the store), so any
worker may serve any turn of any conversation — which is what makes several workers, or several
hosts, safe.

The parent only supervises:

- a worker that exits while the server is not stopping is restarted (a worker that dies
  within ``FAST_EXIT_SECONDS`` of starting is restarted after a growing delay, so a crash loop
  does not spin the CPU);
- SIGTERM, SIGINT or SIGHUP: every worker gets one SIGTERM and drains (uvicorn's graceful
  shutdown: turns in flight finish and are recorded); the parent waits for them (at most the
  drain time plus a margin, then SIGKILL) and exits 0;
- no orphans: workers run in their own process group (a terminal's Ctrl-C reaches only the
  parent, which forwards it once, so a worker never sees a second signal that would cut its
  drain short), and on Linux each asks the kernel for SIGTERM when the parent dies, so killing
  the parent with SIGKILL still stops them.

POSIX only (``os.fork``); on other systems ``--workers`` above 1 is refused.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable

from refold._records import dataclass, field
from refold.errors import InvalidInput

log = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
FAST_EXIT_SECONDS = 5.0  # a worker dying sooner than this after its start is crash-looping
MAX_RESTART_DELAY = 10.0
KILL_MARGIN_SECONDS = 10.0  # after the drain time, a worker still running is killed
PR_SET_PDEATHSIG = 1

Announce = Callable[[str], None]


def check_workers(count: int) -> None:
    if count < 1:
        raise InvalidInput(f"--workers must be at least 1, got {count}")
    if count > 1 and not hasattr(os, "fork"):
        raise InvalidInput("--workers above 1 needs os.fork (Linux, macOS, BSD)",
                           hint="run one refold serve per port behind a load balancer instead")


@dataclass
class Supervisor:
    """Forks and watches ``count`` workers, each running ``serve(sock)`` until told to stop."""

    count: int
    sock: socket.socket
    serve: Callable[[socket.socket], None]
    drain_seconds: float
    announce: Announce = field(default=lambda line: print(line, file=sys.stderr, flush=True))
    workers: dict[int, float] = field(default_factory=dict)  # pid -> start time
    restarts: int = 0
    _delay: float = 0.0
    _restart_at: list[float] = field(default_factory=list)

    def run(self) -> int:
        """Serve until a stop signal; the exit status (0: every worker drained)."""
        mask: set[int | signal.Signals] = {signal.SIGCHLD, *STOP_SIGNALS}
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, mask)
        try:
            for _ in range(self.count):
                self._spawn(previous)
            while True:
                received = signal.sigtimedwait(mask, 0.5)
                self._reap(stopping=False)
                if received is not None and received.si_signo in STOP_SIGNALS:
                    return self._stop(mask, signal.Signals(received.si_signo).name)
                now = time.monotonic()
                due = [t for t in self._restart_at if t <= now]
                for t in due:
                    self._restart_at.remove(t)
                    self._spawn(previous)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)

    # -- workers -------------------------------------------------------------------------------
    def _spawn(self, mask: set[int | signal.Signals]) -> None:
        parent = os.getpid()
        pid = os.fork()
        if pid == 0:  # the worker: never returns into the parent's stack
            code = 1
            try:
                _become_worker(parent, mask)
                self.serve(self.sock)
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            except BaseException as exc:  # reported, then the process ends
                with contextlib.suppress(Exception):
                    print(f"refold serve: worker {os.getpid()} failed: "
                          f"{type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
            finally:
                with contextlib.suppress(Exception):
                    sys.stderr.flush()
                os._exit(code)
        self.workers[pid] = time.monotonic()
        self.announce(f"refold serve: worker {pid} started")

    def _reap(self, *, stopping: bool) -> None:
        while self.workers:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                self.workers.clear()
                return
            if pid == 0:
                return
            started = self.workers.pop(pid, None)
            if started is None:
                continue
            if stopping:
                continue
            lived = time.monotonic() - started
            self._delay = min(max(self._delay * 2, 0.5), MAX_RESTART_DELAY) \
                if lived < FAST_EXIT_SECONDS else 0.0
            self.restarts += 1
            self.announce(f"refold serve: worker {pid} exited ({_describe(status)}); "
                          f"restarting{f' in {self._delay:.1f}s' if self._delay else ''}")
            self._restart_at.append(time.monotonic() + self._delay)

    def _stop(self, mask: set[int | signal.Signals], why: str) -> int:
        self.announce(f"refold serve: {why}, stopping {len(self.workers)} worker(s)")
        self._restart_at.clear()
        for pid in list(self.workers):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + self.drain_seconds + KILL_MARGIN_SECONDS
        killed = False
        while self.workers:
            self._reap(stopping=True)
            if not self.workers:
                break
            if time.monotonic() > deadline and not killed:
                self.announce(f"refold serve: {len(self.workers)} worker(s) did not stop; "
                              "killing them")
                for pid in list(self.workers):
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGKILL)
                killed = True
            signal.sigtimedwait(mask, 0.2)  # a SIGCHLD, or another stop signal (ignored)
        return 1 if killed else 0


def _become_worker(parent: int, mask: set[int | signal.Signals]) -> None:
    """In a freshly forked worker: default signal handling, its own process group, and (Linux)
    a SIGTERM from the kernel when the parent dies."""
    for sig in STOP_SIGNALS:
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, mask)
    with contextlib.suppress(OSError):
        os.setpgid(0, 0)
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    if os.getppid() != parent:  # the parent died before the request above took effect
        os._exit(0)


def _describe(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"killed by {signal.Signals(os.WTERMSIG(status)).name}"
    return f"exit status {os.waitstatus_to_exitcode(status)}"


__all__ = ["Supervisor", "check_workers"]
