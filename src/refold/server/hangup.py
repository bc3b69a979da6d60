"""A client that hangs up before its reply: watched from the moment its request was read
(``ClientWatch``), so that the upstream call nobody will read is cut and the turn is left
unanswered rather than answered with a reply the client never saw (``completions``)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from starlette.types import Receive

_T = TypeVar("_T")


class ClientWatch:
    """Whether the client hung up, watched from once its body was read: a client that leaves
    while the upstream works (its own timeout, then the retry its SDK sends) must find its
    turn unanswered, not answered with a reply it never saw (``chat_completions``). Reading
    ``receive`` also lets the server notice the closed socket while the upstream works."""

    def __init__(self, receive: Receive) -> None:
        self.gone = False
        self.cut: asyncio.Task[Any] | None = None  # the upstream call cancelled for it
        self._armed: asyncio.Task[Any] | None = None  # the call a hang-up cancels (``call``)
        self._on_gone: Callable[[], None] | None = None
        self._task = asyncio.ensure_future(self._watch(receive))

    async def _watch(self, receive: Receive) -> None:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                self.gone = True
                armed = self._armed
                if armed is not None and self.cut is None:
                    self.cut = armed
                    armed.cancel()
                elif self._on_gone is not None:
                    self._on_gone()
                return

    def on_gone(self, callback: Callable[[], None]) -> None:
        """``callback()`` when the client leaves from now on (at once if it has)."""
        self._on_gone = callback
        if self.gone:
            callback()

    def close(self) -> None:
        self._task.cancel()

    async def call(self, awaitable: Awaitable[_T]) -> _T:
        """``await awaitable``, which the client's hang-up cancels (an upstream call nobody
        will read: it stops costing, and the session's lock goes to the client's retry);
        ClientGone at once when it has left already, and in place of that cancellation."""
        if self.gone:
            raise ClientGone
        task = asyncio.current_task()
        self._armed = task
        try:
            return await awaitable
        except asyncio.CancelledError:
            if task is None or self.cut is not task:
                raise
            task.uncancel()
            raise ClientGone from None
        finally:
            self._armed = None


class ClientGone(Exception):
    """The client hung up before its reply (``ClientWatch.call``)."""
