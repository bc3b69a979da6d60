"""``refold chat`` streams its replies (markdown on a terminal) and takes an upstream key flag."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from rich.cells import cell_len
from rich.console import Console

from refold.cli.chat import Renderer
from refold.cli.chat_session import Output
from refold.cli.main import cli, main
from refold.testing import ScriptedReply, serve


def chat(home: Path, upstream: str, lines: list[str], *extra: str,
         env: dict[str, str | None] | None = None) -> Result:
    return CliRunner().invoke(cli, ["--home", str(home), "chat", "--upstream", upstream,
                                    "--context-length", "100000", "--no-tools", *extra],
                              input="\n".join(lines) + "\n",
                              env={"REFOLD_UPSTREAM": None, "REFOLD_UPSTREAM_API_KEY": None,
                                   **(env or {})}, catch_exceptions=False)


def test_replies_stream_and_the_key_flag_reaches_the_upstream(tmp_path: Path) -> None:
    reply = "Streaming works: " + "word " * 20
    with serve([reply]) as up:
        result = chat(tmp_path, up.base_url, ["hi", "/quit"], "--upstream-api-key-env",
                      "MY_KEY", env={"MY_KEY": "sk-upstream-1"})
    assert result.exit_code == 0, result.output
    assert reply.strip() in result.output
    assert result.output.count("Streaming works") == 1  # streamed once, not printed again
    assert up.llm.requests[0]["stream"] is True
    assert up.llm.headers[0]["authorization"] == "Bearer sk-upstream-1"


def test_no_stream_waits_for_the_whole_reply(tmp_path: Path) -> None:
    with serve(["Whole."]) as up:
        result = chat(tmp_path, up.base_url, ["hi", "/quit"], "--no-stream")
    assert result.exit_code == 0 and "Whole." in result.output
    assert "stream" not in up.llm.requests[0]


def test_a_missing_key_variable_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.delenv("NOPE_KEY", raising=False)
    with serve([]) as up, pytest.raises(SystemExit) as exited:
        main(["--home", str(tmp_path), "chat", "--upstream", up.base_url,
              "--upstream-api-key-env", "NOPE_KEY"])
    assert exited.value.code == 2
    assert "error: $NOPE_KEY is not set" in capsys.readouterr().err
    assert up.llm.requests == []


def test_a_stream_that_breaks_off_records_nothing(tmp_path: Path) -> None:
    with serve([ScriptedReply(status=500), "Second try works."]) as up:
        result = chat(tmp_path, up.base_url, ["hi", "again", "/quit"])
    assert result.exit_code == 0
    assert "error:" in result.output and "Second try works." in result.output


def test_markdown_is_rendered_live_on_a_terminal() -> None:
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=60, color_system=None)
    renderer = Renderer(console, markdown=True)
    for delta in ["# Title\n\n", "Some **bold", "** text and `code`."]:
        renderer.on_text(delta)
    renderer.show(Output("reply", "# Title\n\nSome **bold** text and `code`.",
                         {"streamed": True}))
    screen = buffer.getvalue()
    assert "Title" in screen and "bold" in screen
    assert "**bold**" not in screen and "# Title" not in screen  # rendered, not raw


def test_a_long_streamed_reply_wraps_on_the_chat_console() -> None:
    """`refold chat`'s console soft-wraps (the terminal wraps plain prints); the live markdown
    of a streamed reply was then cut at the terminal's width: of a 600-character paragraph,
    the first 80 characters showed, the rest never did."""
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=80, color_system=None,
                      soft_wrap=True, highlight=False)  # as `refold chat` makes it
    renderer = Renderer(console, markdown=True)
    for _ in range(50):
        renderer.on_text("slow answer ")
    renderer.on_text("THE-END")
    renderer.show(Output("reply", "slow answer " * 50 + "THE-END", {"streamed": True}))
    assert "THE-END" in buffer.getvalue()
    assert console.soft_wrap  # plain prints after the reply wrap in the terminal again


def test_a_streamed_reply_taller_than_the_screen_is_left_in_the_scrollback_once() -> None:
    """A live region taller than the terminal is redrawn from its top on every refresh, and the
    lines of each redraw that scrolled off stay in the scrollback: in tmux a reply of two
    screens left its first paragraph there 20 times. The live reply keeps to the screen, and
    the whole reply is printed once when it ends."""
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=60, height=10, color_system=None,
                      soft_wrap=True, highlight=False)
    renderer = Renderer(console, markdown=True)
    paragraphs = [f"Paragraph {i}: " + "lorem ipsum dolor " * 6 for i in range(8)]
    heights = []
    for paragraph in paragraphs:
        renderer.on_text(paragraph + "\n\n")
        renderer._live.refresh()
        heights.append(renderer._live._live_render._shape[1])
    end = len(buffer.getvalue())
    renderer.show(Output("reply", "\n\n".join(paragraphs), {"streamed": True}))
    assert max(heights) < console.height, heights
    final = buffer.getvalue()[end:].rsplit("\x1b[2K", 1)[-1]  # after the live region's erasure
    assert [final.count(f"Paragraph {i}:") for i in range(8)] == [1] * 8, final


def test_search_hits_keep_to_one_terminal_line_with_wide_characters() -> None:
    """`/search 中文` on a 100-column terminal: each hit was cut at 110 characters, so a Chinese
    snippet (two columns a character) took three lines and an English one fit on one."""
    from types import SimpleNamespace

    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=80, color_system=None,
                      soft_wrap=True, highlight=False)
    snippets = ["你好！这是一个[中文]回复。日本語の返事もあります：こんにちは、世界。" * 3,
                "plain " * 40, "短い"]
    hits = [SimpleNamespace(session_title="side quest", session_id="s1", seq=i, role="user",
                            snippet=text) for i, text in enumerate(snippets)]
    Renderer(console).show(Output("hits", "中文", {"hits": hits}))
    lines = buffer.getvalue().splitlines()
    assert len(lines) == 3 and all(cell_len(line) <= 80 for line in lines), lines
    assert lines[0].endswith("…") and lines[2].endswith("短い")


@pytest.mark.parametrize("columns", [100, 50, 40])
def test_the_gauge_fits_a_narrow_terminal(columns: int) -> None:
    """At 50 columns the gauge broke mid-word over two lines ("…until comp" / "action · …")."""
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=columns, color_system=None,
                      soft_wrap=True, highlight=False)
    Renderer(console).show(Output("gauge", data={"tokens": 1234, "threshold": 96_000,
                                                 "window": 128_000, "compacted": True}))
    lines = buffer.getvalue().splitlines()
    assert len(lines) == 1 and cell_len(lines[0]) < columns, lines
    assert "1.2k / 96.0k" in lines[0] and "(1%)" in lines[0] and "compacted" in lines[0]
    assert ("until compaction" in lines[0]) == (columns == 100)


@pytest.mark.parametrize("extra", [(), ("--no-stream",)])
def test_a_rate_limit_says_the_wait_the_upstream_named(tmp_path: Path,
                                                       extra: tuple[str, ...]) -> None:
    """A 429 with ``Retry-After: 7`` printed "(retry later)": the wait was dropped."""
    limited = ScriptedReply(status=429, headers={"Retry-After": "7"},
                            error={"error": {"message": "rate limited"}})
    with serve([limited, "after the wait"]) as up:
        result = chat(tmp_path, up.base_url, ["hi", "hi", "/quit"], *extra)
    assert result.exit_code == 0, result.output
    assert "HTTP 429: rate limited (the upstream asks to retry in 7 s)" in result.output
    assert "after the wait" in result.output


def test_a_whole_reply_is_rendered_as_markdown_on_a_terminal_too() -> None:
    """`refold chat --no-stream` ("markdown on a terminal", says its help) printed the reply's
    markdown raw: `# Heading`, `**bold**` and the code fence as typed."""
    buffer = io.StringIO()
    console = Console(file=buffer, force_terminal=True, width=60, color_system=None)
    text = "# Title\n\nSome **bold** text.\n\n```python\nx = 1\n```"
    Renderer(console, markdown=True).show(Output("reply", text, {"streamed": False}))
    screen = buffer.getvalue()
    assert "Title" in screen and "bold" in screen and "x = 1" in screen
    assert "**bold**" not in screen and "# Title" not in screen and "```" not in screen
    plain = io.StringIO()
    Renderer(Console(file=plain, color_system=None)).show(Output("reply", text, {}))
    assert plain.getvalue() == text + "\n"  # piped: the text as it came
