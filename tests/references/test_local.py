"""Local references: each kind, the path guard (outside, symlinks, every deny-list entry),
binary files, the hardened git argv, @url off by default, and the attachment budget."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from refold.references import PathGuard, PathRefused, ReferenceExpander
from refold.references.paths import SENSITIVE_HOME_DIRS, SENSITIVE_HOME_FILES
from refold.references.sources import hardened_argv
from refold.tokens.estimate import estimate_tokens

WINDOW = 8000


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text("line1\nline2\nline3\nline4\n")
    (root / "README.md").write_text("# hello\n")
    return root


def expander(root: Path, **kw: object) -> ReferenceExpander:
    return ReferenceExpander(local_root=root, home=root.parent / "home", **kw)  # type: ignore[arg-type]


def test_file_with_a_line_range_is_attached(project: Path) -> None:
    out = expander(project).expand("fix @file:src/app.py:2-3 please", context_length=WINDOW)
    assert out.message.startswith("fix @file:src/app.py:2-3 please\n\n--- Attached context ---")
    assert "```python\nline2\nline3\n```" in out.message
    assert "line1" not in out.message and "line4" not in out.message
    assert out.warnings == [] and out.references[0].status == "attached"


def test_folder_lists_entries_and_withholds_secrets(project: Path) -> None:
    (project / ".env").write_text("TOKEN=x")
    out = expander(project).expand("@folder:.", context_length=WINDOW)
    assert "src/" in out.message and "README.md (8 bytes)" in out.message
    assert ".env" not in out.message.split("---", 2)[-1].replace("(1 entries", "")
    assert "1 entries withheld" in out.message


@pytest.mark.parametrize("target", ["../outside.txt", "/etc/passwd", "src/../../outside.txt"])
def test_paths_outside_the_working_directory_are_refused(project: Path, target: str) -> None:
    (project.parent / "outside.txt").write_text("secret")
    out = expander(project).expand(f"read @file:{target}", context_length=WINDOW)
    assert "secret" not in out.message and "Attached context" not in out.message
    assert out.references[0].status == "refused"
    assert "outside the working directory" in out.warnings[0]


def test_a_symlink_pointing_out_is_refused(project: Path) -> None:
    (project.parent / "outside.txt").write_text("secret")
    os.symlink(project.parent / "outside.txt", project / "link.txt")
    os.symlink(project.parent, project / "up")
    for ref in ("@file:link.txt", "@file:up/outside.txt", "@folder:up"):
        out = expander(project).expand(ref, context_length=WINDOW)
        assert "secret" not in out.message, ref
        assert "via a symlink outside the working directory" in out.warnings[0], ref


@pytest.mark.parametrize("entry", SENSITIVE_HOME_DIRS)
def test_every_sensitive_home_folder_is_refused(tmp_path: Path, entry: str) -> None:
    home = tmp_path / "home"
    (home / entry).mkdir(parents=True)
    (home / entry / "creds").write_text("AKIA")
    guard = PathGuard(home, home=home)  # even with the home as the working directory
    for target in (f"{entry}/creds", entry):
        with pytest.raises(PathRefused, match="credentials"):
            guard.resolve(target)


@pytest.mark.parametrize("entry", SENSITIVE_HOME_FILES)
def test_every_sensitive_home_file_is_refused(tmp_path: Path, entry: str) -> None:
    home = tmp_path / "home"
    (home / entry).parent.mkdir(parents=True, exist_ok=True)
    (home / entry).write_text("x")
    with pytest.raises(PathRefused):
        PathGuard(home, home=home).resolve(entry)


@pytest.mark.parametrize("name", [".env", ".env.production", "server.pem", "id_rsa",
                                  "id_ed25519.pub", "tls.key", ".git-credentials"])
def test_secret_files_are_refused_by_name_anywhere(project: Path, name: str) -> None:
    (project / "src" / name).write_text("x")
    out = expander(project).expand(f"@file:src/{name}", context_length=WINDOW)
    assert out.references[0].status == "refused" and "secret" in out.warnings[0]


def test_refolds_own_data_directory_is_refused(project: Path) -> None:
    (project / "data").mkdir()
    (project / "data" / "refold.db").write_text("x")
    out = ReferenceExpander(local_root=project, deny_roots=[project / "data"]).expand(
        "@file:data/refold.db", context_length=WINDOW)
    assert "refold's own data directory" in out.warnings[0]


def test_binary_files_are_named_not_inlined(project: Path) -> None:
    (project / "blob.bin").write_bytes(b"\x00\x01\x02" * 100)
    out = expander(project).expand("@file:blob.bin", context_length=WINDOW)
    assert "(binary file, 300 bytes; not inlined)" in out.message


def test_missing_file_and_folder_are_warnings(project: Path) -> None:
    out = expander(project).expand("@file:nope.py @folder:src/app.py @file:src",
                                   context_length=WINDOW)
    assert [w.split(": ", 1)[1] for w in out.warnings] == [
        "file not found", "not a folder", "not a file (use @folder: for a directory)"]


def test_a_1mb_file_in_an_8k_window_is_cut_to_the_budget(project: Path) -> None:
    words = " ".join(f"word{i}" for i in range(200_000))
    (project / "big.txt").write_text(words[:1_000_000])
    out = expander(project).expand("@file:big.txt", context_length=WINDOW)
    assert out.tokens <= WINDOW // 2  # the hard limit: 50% of the window
    block = out.message.split("\n\n", 1)[1]
    assert estimate_tokens(block) <= WINDOW // 2  # measured on the text itself
    assert out.tokens > WINDOW // 4  # it used the budget, not a token of it
    assert out.references[0].status == "cut"
    assert any("cut from" in w for w in out.warnings)
    assert any("soft limit" in w for w in out.warnings)
    assert out.message.rstrip().endswith("[… cut to fit the attachment limit]")


def test_several_references_share_one_budget(project: Path) -> None:
    for name in ("a.txt", "b.txt", "c.txt"):
        (project / name).write_text(" ".join(f"{name}{i}" for i in range(750)))  # ~3K tokens
    out = expander(project).expand("@file:a.txt @file:b.txt @file:c.txt",
                                   context_length=WINDOW)
    assert out.tokens <= WINDOW // 2  # three files of ~3K tokens share 4K
    assert estimate_tokens(out.message.split("\n\n", 1)[1]) <= WINDOW // 2
    assert [r.status for r in out.references] == ["attached", "cut", "cut"]
    assert "cut from" in out.warnings[0] and "is spent" in out.warnings[1]
    assert "soft limit" in out.warnings[2]


def test_local_references_are_off_without_a_root(project: Path) -> None:
    out = ReferenceExpander().expand("@file:README.md @diff", context_length=WINDOW)
    assert out.message == "@file:README.md @diff"
    assert all("local references are off" in w for w in out.warnings) and len(out.warnings) == 2


def test_url_is_refused_unless_a_fetcher_is_given(project: Path) -> None:
    off = expander(project).expand("@url:https://example.com", context_length=WINDOW)
    assert "URL fetching is off" in off.warnings[0]
    seen: list[str] = []
    on = expander(project, url_fetcher=lambda u: seen.append(u) or "page text").expand(
        "@url:https://example.com @url:file:///etc/passwd", context_length=WINDOW)
    assert seen == ["https://example.com"] and "page text" in on.message
    assert "only http:// and https://" in on.warnings[0]


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root,
                   check=True, capture_output=True)


def test_diff_staged_and_git_revisions(project: Path) -> None:
    git(project, "init", "-q")
    git(project, "add", ".")
    git(project, "commit", "-qm", "first commit")
    (project / "README.md").write_text("# hello\nunstaged line\n")
    (project / "src" / "app.py").write_text("staged change\n")
    git(project, "add", "src/app.py")
    out = expander(project).expand("@diff @staged @git:HEAD @git:1", context_length=WINDOW)
    assert out.warnings == []
    diff, staged, show, log = out.message.split("\n\n@")[1:5]
    assert "+unstaged line" in diff and "staged change" not in diff
    assert "+staged change" in staged and "unstaged" not in staged
    assert "first commit" in show and "first commit" in log


def test_git_revisions_that_look_like_options_are_refused(project: Path) -> None:
    git(project, "init", "-q")
    out = expander(project).expand("@git:--output=/tmp/x @git:HEAD;rm", context_length=WINDOW)
    assert all("not a revision name" in w for w in out.warnings) and len(out.warnings) == 2


def test_git_argv_is_hardened() -> None:
    argv = hardened_argv("show", ["--stat"], ["HEAD"])
    assert argv[:2] == ["git", "--no-pager"]
    for setting in ("core.fsmonitor=false", "core.hooksPath=/dev/null", "diff.external="):
        assert setting in argv
    assert argv[-2:] == ["--end-of-options", "HEAD"] and "--no-ext-diff" in argv
    with pytest.raises(Exception, match="not allowed"):
        hardened_argv("config", [], [])


def test_a_repository_fsmonitor_hook_never_runs(project: Path) -> None:
    git(project, "init", "-q")
    marker = project.parent / "pwned"
    git(project, "config", "core.fsmonitor", f"touch {marker}; false")
    git(project, "config", "diff.external", f"touch {marker}")
    out = expander(project).expand("@diff", context_length=WINDOW)
    assert not marker.exists() and out.references[0].status == "attached"


def test_a_folder_with_a_name_that_is_not_utf8_and_a_dangling_link_is_listed(
        project: Path) -> None:
    """A file name that is not UTF-8 came through as lone surrogates: counting the listing's
    tokens raised a TypeError (every later turn of the session re-expanded the stored message
    and raised again) and ``refold mcp`` died writing it. A dangling link (an editor's lock
    file) made the whole folder "cannot read". Now the name shows U+FFFD and the link is
    listed as unreadable."""
    folder = project / "odd"
    folder.mkdir()
    os.close(os.open(os.fsencode(folder) + b"/caf\xe9.txt", os.O_CREAT | os.O_WRONLY))
    (folder / "ok.txt").write_text("ok")
    os.symlink("root@host.12345:1700000000", folder / ".#notes.txt")
    out = expander(project).expand("@folder:odd", context_length=WINDOW)
    assert out.warnings == [] and out.references[0].status == "attached"
    assert "caf\ufffd.txt (0 bytes)" in out.message and "ok.txt (2 bytes)" in out.message
    assert ".#notes.txt (unreadable)" in out.message
    out.message.encode("utf-8")  # no lone surrogate left in what is counted, stored and sent
