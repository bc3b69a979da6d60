"""``@file:PATH:N-M`` finds its lines however far into the file they are (the first 8 MiB
are no limit), says truthfully when a range is past the end, and refuses a range that is not
one (``0-0``, ``2-1``); ``@diff``, ``@staged`` and ``@git`` say why git failed in one meaningful
line (not a repository, no commits yet, an unknown revision), never a line of git's usage."""

from __future__ import annotations

import io
import random
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from refold.cli.main import cli
from refold.references import ReferenceExpander, sources
from refold.references.sources import MAX_READ_BYTES, LocalFiles, read_lines

WINDOW = 8000
LINE = "line {:>7} of a log file that is long enough to pass the first 8 MiB\n"


@pytest.fixture(autouse=True)
def _no_refold_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("REFOLD_HOME", "REFOLD_DB", "REFOLD_CONTEXT_LENGTH"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def big(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 200,000-line text file of 15 MiB: line 150,000 lies well past the first 8 MiB."""
    root = tmp_path_factory.mktemp("big")
    with (root / "big.log").open("w", encoding="utf-8") as fh:
        fh.writelines(LINE.format(i) for i in range(1, 200_001))
    assert (root / "big.log").stat().st_size > MAX_READ_BYTES * 1.5
    return root


def expand(root: Path, tmp_path: Path, text: str) -> Result:
    """``refold expand TEXT --cwd ROOT``, as a user runs it."""
    return CliRunner().invoke(cli, ["--home", str(tmp_path / "home"), "expand", text,
                                    "--cwd", str(root), "--context-length", str(WINDOW)])


# -- line ranges ---------------------------------------------------------------------------
def test_a_range_past_the_first_8_mib_is_found(big: Path, tmp_path: Path) -> None:
    result = expand(big, tmp_path, "@file:big.log:150000-150002")
    assert result.exit_code == 0, result.output
    body = result.stdout.split("```\n", 1)[1].split("\n```", 1)[0]
    assert body.splitlines() == [LINE.format(i).rstrip("\n") for i in (150000, 150001, 150002)]
    assert result.stderr == ""


def test_a_range_at_the_end_is_found_and_past_it_the_count_is_true(big: Path,
                                                                   tmp_path: Path) -> None:
    last = expand(big, tmp_path, "@file:big.log:199999-200005")
    assert last.exit_code == 0 and last.stderr == ""
    assert LINE.format(200000).rstrip("\n") in last.stdout
    past = expand(big, tmp_path, "@file:big.log:200001")
    assert past.stderr == ("warning: @file:big.log:200001: line 200001 is past the end "
                           "(200000 lines)\n")
    assert "Attached context" not in past.stdout


def test_a_long_range_is_cut_to_the_budget_not_read_whole(big: Path) -> None:
    out = ReferenceExpander(local_root=big, home=big / "home").expand(
        "@file:big.log:120000-200000", context_length=WINDOW)
    assert out.references[0].status == "cut" and out.tokens <= WINDOW // 2
    assert LINE.format(120000).rstrip("\n") in out.message


@pytest.mark.parametrize(("ref", "reason"), [
    ("@file:a.txt:0-0", "bad line range 0-0: lines are numbered from 1"),
    ("@file:a.txt:0", "bad line range 0-0: lines are numbered from 1"),
    ("@file:a.txt:0-2", "bad line range 0-2: lines are numbered from 1"),
    ("@file:a.txt:2-1", "bad line range 2-1: it ends before it starts"),
    ("@file:a.txt:3", "line 3 is past the end (2 lines)"),
])
def test_a_range_that_is_not_one_is_a_warning(tmp_path: Path, ref: str, reason: str) -> None:
    root = tmp_path / "proj"
    root.mkdir()
    (root / "a.txt").write_text("one\ntwo\n")
    result = expand(root, tmp_path, ref)
    assert result.exit_code == 0
    assert result.stderr == f"warning: {ref}: {reason}\n"
    assert result.stdout == ref + "\n"  # nothing attached


def test_line_ends_and_a_last_line_without_one(tmp_path: Path) -> None:
    (tmp_path / "crlf.txt").write_bytes(b"one\r\ntwo\r\nthree")
    out = ReferenceExpander(local_root=tmp_path, home=tmp_path / "home").expand(
        "@file:crlf.txt:2-3 @file:crlf.txt:4", context_length=WINDOW)
    assert "```\ntwo\nthree\n```" in out.message
    assert out.warnings == ["@file:crlf.txt:4: line 4 is past the end (3 lines)"]


def test_a_file_reader_without_read_lines_still_gets_ranges(tmp_path: Path) -> None:
    class Plain:  # an embedder's FileReader from before read_lines
        def read(self, path: Path, limit: int) -> bytes:
            return path.read_bytes()[:limit]

        def listing(self, path: Path) -> list[Path]:
            return []

    (tmp_path / "a.txt").write_text("one\ntwo\nthree\n")
    out = ReferenceExpander(local_root=tmp_path, home=tmp_path / "home", files=Plain()).expand(
        "@file:a.txt:2 @file:a.txt:9", context_length=WINDOW)
    assert "```\ntwo\n```" in out.message
    assert out.warnings == ["@file:a.txt:9: line 9 is past the end (3 lines)"]


def _expected(data: bytes, first: int, last: int, limit: int) -> tuple[bytes, int]:
    pieces = data.split(b"\n")
    lines = [p + b"\n" for p in pieces[:-1]] + ([pieces[-1]] if pieces[-1] else [])
    if first > len(lines):
        return b"", len(lines)
    return b"".join(lines[first - 1:last])[:limit], min(len(lines), last)


def test_read_lines_agrees_with_splitting_the_whole_text(monkeypatch: pytest.MonkeyPatch
                                                         ) -> None:
    """Across block boundaries (blocks of 7 bytes here), empty lines and missing final
    line breaks: the same lines as splitting the whole text, within ``limit`` bytes."""
    monkeypatch.setattr(sources, "_BLOCK", 7)
    rng = random.Random(7)
    for _ in range(3000):
        data = bytes(rng.choice(b"ab\n") for _ in range(rng.randrange(0, 40)))
        first = rng.randrange(1, 15)
        last = first + rng.randrange(0, 6)
        limit = rng.choice([1, 3, 1000])
        got, reached = read_lines(io.BytesIO(data), first, last, limit)
        want, count = _expected(data, first, last, limit)
        assert got == want, (data, first, last, limit)
        if count < first:
            assert reached == count, (data, first, last)
        else:
            assert first <= reached <= last, (data, first, last, limit, reached)


def test_read_lines_memory_is_bounded_by_one_block_and_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "one-line.txt"
    path.write_bytes(b"x" * (3 * MAX_READ_BYTES))  # a single 24 MiB line
    data, reached = LocalFiles().read_lines(path, 1, 1, 1000)
    assert data == b"x" * 1000 and reached == 1


# -- git errors ----------------------------------------------------------------------------
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def _outside_any_repository(path: Path) -> bool:
    probe = subprocess.run(["git", "rev-parse", "--git-dir"], cwd=path, capture_output=True,
                           check=False)
    return probe.returncode != 0


@needs_git
def test_outside_a_repository_diff_and_staged_say_so(tmp_path: Path) -> None:
    root = tmp_path / "nogit"
    root.mkdir()
    if not _outside_any_repository(root):
        pytest.skip("the temporary directory is inside a git repository")
    result = expand(root, tmp_path, "@diff @staged @git:HEAD @git:2")
    assert result.exit_code == 0
    assert result.stderr.splitlines() == [
        f"warning: {ref}: not a git repository"
        for ref in ("@diff", "@staged", "@git:HEAD", "@git:2")]


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root,
                   check=True, capture_output=True)


@needs_git
def test_a_repository_without_commits_says_so(tmp_path: Path) -> None:
    root = tmp_path / "empty"
    root.mkdir()
    _git(root, "init", "-q")
    result = expand(root, tmp_path, "@git:HEAD @git:3 @diff")
    assert result.exit_code == 0
    assert result.stderr.splitlines() == [
        "warning: @git:HEAD: the repository has no commits yet",
        "warning: @git:3: the repository has no commits yet"]
    assert "@diff (git diff)" in result.stdout  # an empty diff is not an error


@needs_git
def test_an_unknown_revision_is_named(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    _git(root, "init", "-q")
    (root / "a.txt").write_text("a\n")
    _git(root, "add", ".")
    _git(root, "commit", "-qm", "first")
    result = expand(root, tmp_path, "@git:nope @git:HEAD~5 @git:HEAD")
    assert result.stderr.splitlines() == ["warning: @git:nope: unknown revision 'nope'",
                                          "warning: @git:HEAD~5: unknown revision 'HEAD~5'"]
    assert "first" in result.stdout


def test_git_error_keeps_the_reason_not_the_usage() -> None:
    usage = ("error: unknown option `staged'\nusage: git diff --no-index [<options>] <path> "
             "<path>\n\nDiff output format options\n    --output <file>       output to a "
             "specific file\n")
    assert sources.git_error(usage) == "unknown option `staged'"
    assert sources.git_error("hint: x\nfatal: bad object abc\n") == "bad object abc"
    assert sources.git_error("    --output <file>  output to a specific file\n") is None
