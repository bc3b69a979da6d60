"""The lazy command table: help always renders; an unimportable command explains itself."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from refold.cli.app import LazyGroup
from refold.cli.main import cli
from refold.errors import InvalidInput


def test_help_lists_every_command() -> None:
    for args in (["--help"], ["sessions", "--help"]):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 0, result.output
    listed = CliRunner().invoke(cli, ["--help"]).output
    for name in ("import", "search", "sessions", "doctor"):
        assert name in listed


def test_unimportable_command_is_a_stand_in() -> None:
    group = LazyGroup("g", lazy={"ghost": "refold.cli.no_such_module:cmd"})

    @group.command("real")
    def real() -> None:
        click.echo("real ran")

    runner = CliRunner()
    help_text = runner.invoke(group, ["--help"]).output
    assert "ghost" in help_text and "unavailable" in help_text
    assert runner.invoke(group, ["real"]).output == "real ran\n"
    result = runner.invoke(group, ["ghost", "--anything", "x"])
    assert isinstance(result.exception, InvalidInput)
    assert "refold.cli.no_such_module" in str(result.exception)


def test_help_imports_no_command_and_summaries_match_the_commands() -> None:
    """Issue 14 item 8: `refold --help` lists every command from its summary, without
    importing the command modules; the summaries are the commands' own short help."""
    import subprocess
    import sys

    from refold.cli.main import COMMANDS, SUMMARIES

    code = ("import sys; from refold.cli.main import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in sys.modules if m.startswith('refold.cli.') "
            "and m not in ('refold.cli.main', 'refold.cli.commands', 'refold.cli.app', "
            "'refold.cli.context')), file=sys.stderr)\n"
            "print('pydantic' in sys.modules, 'rich' in sys.modules, file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.stderr.splitlines()[-2:] == ["[]", "False False"], proc.stderr
    ctx = click.Context(cli)
    assert sorted(SUMMARIES) == sorted(COMMANDS)  # every command is listed without an import
    for name, summary in SUMMARIES.items():
        command = cli.get_command(ctx, name)
        assert command is not None and name in COMMANDS
        assert command.get_short_help_str(200) == summary, name


def test_search_by_words_loads_no_numpy_pydantic_rich_or_summarizers(tmp_path: Path) -> None:
    """Issue 14 item 8: `refold search` on an archive with no vectors stays on the light path:
    store + search, no NumPy (vectors), no pydantic (settings), no rich (the table), no
    compaction package (the summarizers and their HTTP client)."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "REFOLD_HOME": str(tmp_path)}
    env.pop("REFOLD_DB", None)
    sample = os.path.join(os.path.dirname(__file__), "..", "..", "src", "refold", "data",
                          "sample_session.jsonl")
    subprocess.run([sys.executable, "-m", "refold.cli.main", "import", sample], env=env,
                   check=True, capture_output=True, timeout=60)
    code = ("import sys; from refold.cli.main import main\n"
            "try:\n    main(['search', 'currency'])\nexcept SystemExit:\n    pass\n"
            "heavy = ('numpy', 'pydantic', 'rich', 'httpx', 'refold.compaction.core')\n"
            "print(sorted(m for m in heavy if m in sys.modules), file=sys.stderr)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=60)
    assert "sample_session" in proc.stdout, proc.stdout + proc.stderr
    assert proc.stderr.splitlines()[-1] == "[]", proc.stderr


def _commands(group: click.Group, ctx: click.Context,
              path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], click.Command]]:
    found: list[tuple[tuple[str, ...], click.Command]] = []
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None, name
        found.append(((*path, name), command))
        if isinstance(command, click.Group):
            found += _commands(command, click.Context(command, parent=ctx), (*path, name))
    return found


def test_every_option_has_help_and_no_summary_is_cut() -> None:
    """Each `--help` explains every option (`sessions fork --json`, `skills approve --all`
    had no text), and a group's command list shows each summary whole: seven ended in "..."
    (`memory replace`: "Replace the one entry containing OLD_TEXT (or #id) with...")."""
    ctx = click.Context(cli)
    bare = [f"{' '.join(path)} {option.opts[-1]}"
            for path, command in _commands(cli, ctx)
            for option in command.params
            if isinstance(option, click.Option) and not option.help]
    assert bare == []
    cut = []
    for path, command in [((), cli), *_commands(cli, ctx)]:
        if isinstance(command, click.Group):
            listing = CliRunner().invoke(cli, [*path, "--help"]).output
            cut += [f"{' '.join(path)}: {line.strip()}" for line in listing.splitlines()
                    if line.rstrip().endswith("...") and "[ARGS]..." not in line]
    assert cut == []


def test_a_mistyped_command_names_the_close_ones() -> None:
    """Every top-level command is lazy, and click suggested only among the loaded ones:
    `refold serach` said "No such command" with no "Did you mean"."""
    for args, typo, suggestion in ((["serach", "x"], "serach", "search"),
                                   (["sesions", "list"], "sesions", "sessions"),
                                   (["sessions", "lst"], "lst", "list")):
        result = CliRunner().invoke(cli, args)
        assert result.exit_code == 2, result.output
        assert f"No such command {typo!r}. Did you mean {suggestion!r}?" in result.output, \
            result.output
    result = CliRunner().invoke(cli, ["zzzz"])
    assert result.exit_code == 2 and "No such command 'zzzz'." in result.output
    assert "Did you mean" not in result.output


def test_serve_and_mcp_without_their_extra_name_it(monkeypatch: pytest.MonkeyPatch,
                                                    tmp_path: Path) -> None:
    """After a plain `pip install .` (the README's first command) `refold serve` and
    `refold mcp` ended in a ModuleNotFoundError traceback; they say which extra to install."""
    import sys

    for module in ("uvicorn", "mcp", "refold.mcpserver"):
        monkeypatch.setitem(sys.modules, module, None)  # `import module` raises ImportError
    monkeypatch.delenv("REFOLD_HOME", raising=False)
    for args, extra in ((["serve", "--upstream", "http://127.0.0.1:9/v1", "--port", "0"],
                         "server"), (["mcp"], "mcp")):
        result = CliRunner().invoke(cli, ["--home", str(tmp_path), *args])
        assert isinstance(result.exception, InvalidInput), result.exception
        assert f"pip install 'refold[{extra}]'" in str(result.exception.hint)
