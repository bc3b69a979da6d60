"""Skill review after tool work, the index in the frozen snapshot, export, and the CLI."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner, Result

from refold.cli.main import cli
from refold.runtime import Engine
from refold.skills import FileSkills, SkillLibrary, export_library, open_skills, parse_skill
from refold.skills.review import SkillReviewer, extract_corrections
from refold.store import Store

BODY = "1. run the tests\n2. tag the release\n"


def tool_turn(rt: object, n: int) -> None:
    for i in range(n):
        rt.record({"role": "assistant", "content": "", "tool_calls": [  # type: ignore[attr-defined]
            {"id": f"c{i}", "type": "function", "function": {"name": "sh", "arguments": "{}"}}]})
        rt.prepare([{"role": "tool", "tool_call_id": f"c{i}", "content": "ok"}])  # type: ignore[attr-defined]
    rt.record({"role": "assistant", "content": "done"})  # type: ignore[attr-defined]


def test_corrections_are_extracted_once_each() -> None:
    messages = [{"role": "user", "content": "set up the release"},
                {"role": "assistant", "content": "using npm"},
                {"role": "user", "content": "No, use pnpm instead of npm."},
                {"role": "user", "content": "Don't push to main directly."},
                {"role": "user", "content": "Don't push to main directly."},
                {"role": "assistant", "content": "No, I will not."}]
    assert extract_corrections(messages) == ["No, use pnpm instead of npm.",
                                             "Don't push to main directly."]


def test_a_review_proposes_a_skill_after_two_corrections(sqlite_store: Store,
                                                         tmp_path: Path) -> None:
    staged = open_skills(tmp_path / "skills", mode="stage")
    review = SkillReviewer(staged, interval=4)
    with Engine(sqlite_store, model="m", context_length=100_000,
                skills=open_skills(tmp_path / "skills"), skill_review=review) as eng:
        rt = eng.open_session(new=True, title="Release 2.0")
        rt.prepare([{"role": "user", "content": "cut the 2.0 release"}])
        tool_turn(rt, 2)
        rt.prepare([{"role": "user", "content": "No, use pnpm, not npm."}])
        tool_turn(rt, 1)
        assert staged.pending() == []  # 3 tool iterations: under the interval
        rt.prepare([{"role": "user", "content": "Don't push tags before CI is green."}])
        tool_turn(rt, 1)
    pending = staged.pending()
    assert [(p["op"], p["name"], p["origin"]) for p in pending] == [
        ("create", "lessons-release-2-0", "review")]
    assert not (tmp_path / "skills" / "lessons-release-2-0").exists()  # waits for a person
    staged.approve(pending[0]["id"])
    body = staged.view("lessons-release-2-0").body
    assert "- No, use pnpm, not npm." in body and "- Don't push tags" in body


def test_the_review_patches_an_existing_lessons_skill(tmp_path: Path) -> None:
    lib = open_skills(tmp_path)
    review = SkillReviewer(lib, interval=1)
    first = [{"role": "user", "content": "No, use tabs."},
             {"role": "user", "content": "Don't add comments."}]
    assert review.review("style", first) is not None
    more = [*first, {"role": "user", "content": "Actually, keep lines under 100."}]
    result = review.review("style", more)
    assert result is not None and result.op == "patch"
    assert lib.view("lessons-style").body.count("- ") == 3
    assert review.review("style", more) is None  # nothing new


def test_the_interval_counts_tool_iterations_and_zero_disables(tmp_path: Path) -> None:
    review = SkillReviewer(open_skills(tmp_path), interval=15)
    assert [review.due("s", 7), review.due("s", 7), review.due("s", 1), review.due("s", 1)] \
        == [False, False, True, False]
    assert not SkillReviewer(open_skills(tmp_path), interval=0).due("s", 99)


def test_the_snapshot_carries_names_not_bodies(sqlite_store: Store, tmp_path: Path) -> None:
    lib = open_skills(tmp_path)
    lib.create("ship-it", "How to release this project.", "SECRET-STEP-BODY\n")
    with Engine(sqlite_store, model="m", context_length=100_000, skills=lib) as eng:
        rt = eng.open_session(new=True)
        sent = rt.prepare([{"role": "user", "content": "hi"}], system_prompt="You help.")
        lib.create("later", "Added mid-session.", BODY)
        again = rt.prepare([{"role": "user", "content": "more"}])
    system = sent.messages[0]["content"]
    assert "- ship-it: How to release this project." in system
    assert "SECRET-STEP-BODY" not in system
    assert again.messages[0]["content"] == system  # frozen for the session


def test_an_export_loads_back(tmp_path: Path) -> None:
    lib = open_skills(tmp_path / "skills")
    lib.create("ship-it", "How to release: carefully.", BODY)
    lib.create("triage", "Sort incoming bugs.", "# Triage\n- label it\n")
    (tmp_path / "skills" / "ship-it" / "references").mkdir()
    (tmp_path / "skills" / "ship-it" / "references" / "checklist.md").write_text("- x\n")
    out = tmp_path / "claude" / ".claude" / "skills"
    names = export_library(lib, out, source_dir=tmp_path / "skills")
    assert names == ["ship-it", "triage"]
    for name in names:
        loaded = parse_skill((out / name / "SKILL.md").read_text(), expected_name=name)
        assert loaded == lib.view(name)
    assert (out / "ship-it" / "references" / "checklist.md").read_text() == "- x\n"
    back = SkillLibrary(FileSkills(out))
    assert [s.to_dict() for s in back.list_skills()] == [s.to_dict() for s in lib.list_skills()]
    import pytest

    from refold.errors import Conflict, InvalidInput

    with pytest.raises(Conflict, match="already exists"):
        export_library(lib, out, source_dir=tmp_path / "skills")
    with pytest.raises(InvalidInput, match="library itself"):
        export_library(lib, tmp_path / "skills", source_dir=tmp_path / "skills")


def test_the_cli(tmp_path: Path, monkeypatch: object) -> None:
    home = tmp_path / "home"

    def run(*args: str, input: str | None = None) -> object:
        return CliRunner().invoke(cli, ["--home", str(home), "skills", *args], input=input)

    assert run("list").output == "no skills yet\n"
    added = run("add", "ship-it", "-d", "How to release.", "--body-file", "-", input=BODY)
    assert added.exit_code == 0, added.output  # type: ignore[attr-defined]
    assert json.loads(run("list", "--json").output) == [
        {"name": "ship-it", "description": "How to release."}]
    assert "2. tag the release" in run("show", "ship-it").output
    assert run("edit", "ship-it", "--old", "2. tag", "--new", "2. Tag").exit_code == 0
    assert json.loads(run("show", "ship-it", "--json").output)["body"].endswith("2. Tag the "
                                                                                "release\n")
    open_skills(home / "skills", mode="stage").create("queued", "d", BODY)
    pending = json.loads(run("pending", "--json").output)
    assert [p["name"] for p in pending] == ["queued"]
    assert run("approve", "--all").exit_code == 0
    assert run("export", str(tmp_path / "out")).output == "exported 2 skill(s) to " \
        f"{tmp_path / 'out'}\n"
    assert run("rm", "queued").exit_code == 0
    bad = CliRunner().invoke(cli, ["--home", str(home), "skills", "show", "../x"])
    assert bad.exit_code != 0 and "bad skill name" in str(bad.exception)
    assert run("add", "x", "-d", "d").exit_code != 0


def test_the_reviewer_keeps_no_count_per_session_it_has_nothing_for(tmp_path: Path) -> None:
    """A proxy sees a new session every request: counts stay bounded (one per session ever
    seen grew without end)."""
    from refold.skills.review import MAX_COUNTED

    review = SkillReviewer(open_skills(tmp_path), interval=3)
    for i in range(MAX_COUNTED * 2):
        assert review.due(f"quiet-{i}", 0) is False
        assert review.due(f"busy-{i}", 1) is False
    assert len(review._counts) == MAX_COUNTED
    assert review.due(f"busy-{MAX_COUNTED * 2 - 1}", 2) is True  # the newest are kept: 1 + 2
    assert review.due("fresh", 2) is False and review.due("fresh", 1) is True
    assert review.due("fresh", 2) is False  # counting starts over after a review


def test_a_body_file_that_cannot_be_read_or_is_not_utf8(tmp_path: Path) -> None:
    """`skills add --body-file` of a missing file or a directory was a traceback, and bytes
    that are not UTF-8 (a file, stdin, argv) ended the write in a UnicodeEncodeError."""
    from refold.errors import InvalidInput

    home = tmp_path / "home"

    def run(*args: str, input: bytes | None = None) -> Result:
        return CliRunner().invoke(cli, ["--home", str(home), "skills", *args], input=input)

    missing = run("add", "a", "-d", "d", "--body-file", str(tmp_path / "nope.md"))
    assert isinstance(missing.exception, InvalidInput), missing.exception
    assert "no such file" in str(missing.exception)
    folder = run("add", "a", "-d", "d", "--body-file", str(tmp_path))
    assert isinstance(folder.exception, InvalidInput), folder.exception
    latin1 = tmp_path / "latin1.md"
    latin1.write_bytes(b"1. caf\xe9 first\n")
    assert run("add", "from-file", "-d", "d", "--body-file", str(latin1)).exit_code == 0
    assert run("add", "from-stdin", "-d", "d", "--body-file", "-",
               input=b"1. caf\xe9 first\n").exit_code == 0
    # what a shell passes for an argument that is not UTF-8: a lone surrogate
    assert run("add", "from-argv", "-d", "caf\udce9", "--body", "1. caf\udce9").exit_code == 0
    assert run("edit", "from-argv", "--old", "1.", "--new", "2. \udce9").exit_code == 0
    for name in ("from-file", "from-stdin", "from-argv"):
        shown = json.loads(run("show", name, "--json").output)
        assert "caf\ufffd" in shown["body"] + shown["description"], shown


def test_a_staged_patch_shows_what_it_writes_and_show_lists_every_front_matter_key(
        tmp_path: Path) -> None:
    """A patch an agent staged was listed as "patch dep (from tool)": approving was blind to
    what it added, e.g. an ``allowed-tools`` key another agent's loader obeys; `skills show
    --json` and the tool's view left such keys out."""
    from refold.skills.tool import skill_manage_tool

    home = tmp_path / "home"

    def run(*args: str) -> object:
        return CliRunner().invoke(cli, ["--home", str(home), "skills", *args])

    open_skills(home / "skills").create("dep", "How to deploy.", "1. build\n2. ship\n")
    staged = open_skills(home / "skills", mode="stage")
    staged.patch("dep", "description: How to deploy.",
                 'description: How to deploy.\nallowed-tools: "Bash(rm:*)"')
    staged.create("new-one", "A new one.", "step\n" * 5)
    listed = run("pending").output  # type: ignore[attr-defined]
    assert '    + allowed-tools: "Bash(rm:*)"' in listed
    assert "    - description: How to deploy." in listed
    assert "    description: A new one." in listed and "(body: 5 lines)" in listed
    assert run("approve", "--all").exit_code == 0  # type: ignore[attr-defined]
    shown = json.loads(run("show", "dep", "--json").output)  # type: ignore[attr-defined]
    assert shown["front_matter"] == {"allowed-tools": "Bash(rm:*)"}
    viewed = json.loads(skill_manage_tool(open_skills(home / "skills")).handler(
        {"action": "view", "name": "dep"}))
    assert viewed["front_matter"] == {"allowed-tools": "Bash(rm:*)"}
