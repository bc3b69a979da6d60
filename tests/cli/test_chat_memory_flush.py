"""``refold chat`` exit ends its session: a 3-turn chat that says "Remember that …" is flushed
to memory, and the next chat's frozen system prompt carries it (issue 13 item 7)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from refold.cli.main import cli
from refold.testing import serve


def _chat(home: Path, upstream: str, lines: list[str]) -> str:
    result = CliRunner().invoke(cli, ["--home", str(home), "chat", "--upstream", upstream,
                                      "--context-length", "100000", "--no-tools"],
                                input="\n".join(lines) + "\n", env={"REFOLD_UPSTREAM": None},
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def test_a_short_chat_is_remembered_after_it_exits(tmp_path: Path) -> None:
    with serve(default=lambda _body: "ok") as up:
        _chat(tmp_path, up.base_url, ["Remember that the demo server is demo.internal:8443.",
                                      "Run the smoke tests.", "Thanks, bye."])
        saved = (tmp_path / "memories" / "MEMORY.md").read_text(encoding="utf-8")
        _chat(tmp_path, up.base_url, ["hello"])
        system = str(up.llm.requests[-1]["messages"][0]["content"])
    assert "demo.internal:8443" in saved
    assert "demo.internal:8443" in system
