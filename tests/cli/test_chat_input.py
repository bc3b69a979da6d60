"""How ``refold chat`` reads its input: a terminal line is never silently cut at the terminal's
4,095-character line limit, and several lines can go as one message (a bracketed paste on a
terminal, ``/paste`` anywhere)."""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from refold.cli.main import cli
from refold.testing import serve


def reader(lines: list[str]) -> Any:
    feed: Iterator[str] = iter(lines)

    def read(prompt: str) -> str:
        try:
            return next(feed)
        except StopIteration:
            raise EOFError from None
    return read


BRACKETED_PASTE_ON = b"\x1b[?2004h"  # what a program writes to have pastes bracketed


def users(body: dict[str, Any]) -> list[str]:
    return [m["content"] for m in body["messages"] if m["role"] == "user"]


def test_a_line_the_terminal_cut_is_not_sent_and_the_user_is_told_why() -> None:
    from refold.cli.chat import CUT_WARNING, _lines

    warnings: list[str] = []
    cut = "x" * 4095  # what a 6,000-character line is on a terminal without readline
    read = list(_lines(True, warnings.append, read=reader([cut, "short"])))
    assert read == [("short", False)]
    assert warnings == [CUT_WARNING] and "4,095 characters" in CUT_WARNING
    assert "@file" in CUT_WARNING and "pipe" in CUT_WARNING
    wide = "é" * 2047  # 4,094 bytes: a cut falls short of the limit by a partial character
    assert list(_lines(True, warnings.append, read=reader([wide]))) == []
    # piped input and a terminal read through readline are not cut: the line is sent
    assert list(_lines(False, warnings.append, read=reader([cut]))) == [(cut, False)]
    assert list(_lines(True, warnings.append, editing=True, read=reader([cut]))) == [
        (cut, False)]


def test_paste_sends_the_lines_up_to_a_dot_as_one_message(tmp_path: Path) -> None:
    with serve(default=lambda body: "ok") as up:
        result = CliRunner().invoke(
            cli, ["--home", str(tmp_path), "chat", "--upstream", up.base_url, "--no-tools"],
            input="/paste\nline one\n  indented two\n/not a command\n.\nafter\n/paste\n",
            env={"REFOLD_UPSTREAM": None}, catch_exceptions=False)
        sent = [users(r) for r in up.llm.requests]
    assert result.exit_code == 0, result.output
    assert sent == [["line one\n  indented two\n/not a command"],
                    ["line one\n  indented two\n/not a command", "after"]]
    assert "error" not in result.output


@pytest.mark.skipif(not hasattr(os, "openpty") or sys.platform == "win32",
                    reason="needs a pseudo-terminal")
def test_on_a_terminal_a_long_line_and_a_paste_arrive_whole(tmp_path: Path) -> None:
    """The tester's 6,000-character line reached the model as its first 4,095 characters."""
    with serve(default=lambda body: f"got {len(users(body)[-1])} chars") as up:
        fd, terminal = os.openpty()
        env = {**os.environ, "TERM": "xterm", "INPUTRC": "/dev/null", "COLUMNS": "100"}
        env.pop("REFOLD_UPSTREAM", None)
        child = subprocess.Popen(
            [sys.executable, "-c", "from refold.cli.main import main; main()",
             "--home", str(tmp_path), "chat", "--upstream", up.base_url, "--no-tools"],
            stdin=terminal, stdout=terminal, stderr=terminal, env=env, start_new_session=True)
        os.close(terminal)
        screen, seen = b"", 0

        def wait_for(text: bytes, seconds: float = 15.0) -> None:
            """Until ``text`` appears after what was waited for before."""
            nonlocal screen, seen
            deadline = time.monotonic() + seconds
            while (found := screen.find(text, seen)) < 0:
                assert time.monotonic() < deadline, screen[seen:][-2000:]
                if select.select([fd], [], [], 0.1)[0]:
                    with contextlib.suppress(OSError):  # EIO: the child is gone
                        screen += os.read(fd, 65536)
            seen = found + len(text)

        def send(data: str) -> None:
            for at in range(0, len(data), 512):
                os.write(fd, data[at:at + 512].encode())
                time.sleep(0.01)

        try:
            wait_for("you› ".encode())
            # the terminal is asked to bracket pastes (CPython turns readline's request off):
            # without it a real terminal sends a multi-line paste as typed lines
            assert BRACKETED_PASTE_ON in screen, screen[-300:]
            time.sleep(0.2)
            send("a" * 6000 + "\r")
            wait_for(b"got 6000 chars")
            wait_for("you› ".encode())  # the next prompt
            time.sleep(0.2)
            send("\x1b[200~line one\nline two\x1b[201~\r")  # a bracketed paste, then Enter
            wait_for(b"got 17 chars")
            wait_for("you› ".encode())
            send("/quit\r")
            wait_for(b"bye")
        finally:
            os.close(fd)
            child.wait(timeout=20)
        sent = [users(r)[-1] for r in up.llm.requests]
    assert sent == ["a" * 6000, "line one\nline two"]


def test_a_pasted_block_is_a_message_even_when_it_starts_with_a_slash(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bracketed paste of several lines arrives as one line holding newlines; one starting
    with "/" (a path, a shell prompt's output) was run as a command: "/etc/hosts says:" was an
    unknown command, and a paste starting with "/quit" left the chat."""
    from refold.cli import chat as chat_module

    block = "/etc/hosts says:\n127.0.0.1 localhost"
    read = reader([block, "/quit\nmore"])
    assert list(chat_module._lines(True, print, editing=True, read=read)) == [
        (block, True), ("/quit\nmore", True)]
    assert list(chat_module._lines(True, print, editing=True, read=reader(["/help"]))) == [
        ("/help", False)]
    monkeypatch.setattr(chat_module, "_piped", reader([block, "/quit"]))  # as readline gives it
    with serve(default=lambda body: "ok") as up:
        result = CliRunner().invoke(
            cli, ["--home", str(tmp_path), "chat", "--upstream", up.base_url, "--no-tools"],
            env={"REFOLD_UPSTREAM": None}, catch_exceptions=False)
        sent = [users(r)[-1] for r in up.llm.requests]
    assert result.exit_code == 0, result.output
    assert sent == [block] and "unknown command" not in result.output


def test_ctrl_c_at_the_prompt_clears_the_line_and_twice_leaves() -> None:
    """Ctrl-C at the prompt left the chat, half a line typed or not; shells and Python's
    prompt clear the line instead."""
    from refold.cli.chat import _lines

    def reader(events: list[str | type[BaseException]]) -> Callable[[str], str]:
        feed = iter(events)

        def read(prompt: str) -> str:
            event = next(feed, EOFError)
            if isinstance(event, type):
                raise event
            return event
        return read

    warnings: list[str] = []
    got = list(_lines(True, warnings.append, editing=True,
                      read=reader([KeyboardInterrupt, "hello", KeyboardInterrupt, "again",
                                   KeyboardInterrupt, KeyboardInterrupt, "never read"])))
    assert got == [("hello", False), ("again", False)]
    assert warnings == ["(Ctrl-C again, or Ctrl-D, to leave)"] * 3
    assert list(_lines(False, warnings.append, read=reader([KeyboardInterrupt, "x"]))) == []
