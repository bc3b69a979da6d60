"""``refold skills …``: list, show, add, edit, rm, pending, approve, reject, export.

The person at the terminal is the approver: add/edit/rm write at once (the safety scan and the
drift rule still apply); ``pending`` / ``approve`` / ``reject`` work the queue the agent's
``skill_manage`` tool (with ``memory_approval = "stage"``) and the skill review fill. Skills
live in ``<home>/skills`` (or the database with ``memory_backend = "db"``).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from refold.cli.app import AppContext, emit, pass_app
from refold.cli.terminal import safe_text
from refold.errors import InvalidInput
from refold.skills import SkillLibrary

_JSON = click.option("--json", "as_json", is_flag=True, help="Print JSON.")


def _library(app: AppContext) -> SkillLibrary:
    from refold.assembly import tenant_skills

    store = app.store if app.settings.memory_backend == "db" else None
    return tenant_skills(app.settings, store, "")


def _body(text: str | None, body_file: str | None) -> str | None:
    """The body: ``--body``, or ``--body-file`` read as UTF-8 (what is not becomes U+FFFD); a
    file that cannot be read is an ``InvalidInput`` (it was a traceback)."""
    if body_file is None:
        return text
    if body_file == "-":
        raw = sys.stdin.buffer.read()
    else:
        path = Path(body_file).expanduser()
        if path.is_dir():
            raise InvalidInput(f"--body-file {body_file}: a directory, not a file")
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            raise InvalidInput(f"--body-file {body_file}: no such file",
                               hint="check the path") from None
        except OSError as exc:
            raise InvalidInput(f"--body-file {body_file}: cannot read it "
                               f"({exc.strerror or exc})") from None
    return raw.decode("utf-8", errors="replace")


@click.group("skills")
def skills_group() -> None:
    """The skills library: one SKILL.md per kind of task (Claude Code / Hermes format)."""


@skills_group.command("list")
@_JSON
@pass_app
def list_cmd(app: AppContext, as_json: bool) -> None:
    """Names and descriptions."""
    skills = [s.to_dict() for s in _library(app).list_skills()]
    emit(skills, as_json, lambda rows: click.echo("\n".join(
        safe_text(f"{r['name']}: {r['description']}" + (f"  [BLOCKED: {r['blocked']}]"
                                                        if r.get("blocked") else ""))
        for r in rows) or "no skills yet"))


@skills_group.command("show")
@click.argument("name")
@_JSON
@pass_app
def show_cmd(app: AppContext, name: str, as_json: bool) -> None:
    """Print one skill's SKILL.md."""
    skill = _library(app).view(name)
    emit({"name": skill.name, "description": skill.description, "body": skill.body,
          "front_matter": dict(skill.extra)},  # every other key (allowed-tools…): seen
         # control sequences in the SKILL.md shown as escapes (as `skills pending` and
         # `sessions show` do), not obeyed by the terminal; --json keeps the text as stored
         as_json, lambda _: click.echo(safe_text(skill.render()), nl=False))


@skills_group.command("add")
@click.argument("name")
@click.option("--description", "-d", required=True, help="One line: when to use it.")
@click.option("--body", help="The steps (Markdown).")
@click.option("--body-file", metavar="FILE", help="Read the body from a file ('-': stdin).")
@pass_app
def add_cmd(app: AppContext, name: str, description: str, body: str | None,
            body_file: str | None) -> None:
    """Create a skill."""
    text = _body(body, body_file)
    if text is None:
        raise InvalidInput("give --body TEXT or --body-file FILE")
    click.echo(_library(app).create(name, description, text, origin="user").message)


@skills_group.command("edit")
@click.argument("name")
@click.option("--old", "old_text", help="A unique piece of the SKILL.md to replace.")
@click.option("--new", "new_text", default="", help="What replaces it.")
@click.option("--adopt", is_flag=True, help="Accept the SKILL.md as edited outside refold first (a skill "
              "changed behind refold's back is not patched until adopted).")
@pass_app
def edit_cmd(app: AppContext, name: str, old_text: str | None, new_text: str,
             adopt: bool) -> None:
    """Patch a skill (--old/--new), or --adopt an outside edit."""
    library = _library(app)
    if adopt:
        library.adopt(name)
        click.echo(f"adopted the current SKILL.md of {name}")
    if old_text is not None:
        click.echo(library.patch(name, old_text, new_text, origin="user").message)
    elif not adopt:
        raise InvalidInput("give --old TEXT --new TEXT, or --adopt")


@skills_group.command("rm")
@click.argument("name")
@pass_app
def rm_cmd(app: AppContext, name: str) -> None:
    """Remove a skill (its folder is kept under skills/.trash)."""
    click.echo(_library(app).delete(name, origin="user").message)


@skills_group.command("pending")
@_JSON
@pass_app
def pending_cmd(app: AppContext, as_json: bool) -> None:
    """Skill writes waiting for approval."""
    items = _library(app).pending()
    emit(items, as_json, lambda rows: click.echo("\n".join(_pending_lines(i) for i in rows)
                                                 or "nothing pending"))


SHOWN_LINES = 24  # of a staged write's text, under its line in `skills pending`


def _pending_lines(item: dict[str, Any]) -> str:
    """A staged write and what it would write: a patch's lines out and in, a new skill's
    front matter (every key: what a tool may set besides the name and description, such as
    ``allowed-tools``, is seen before it is approved) and the size of its body."""
    lines = [f"{item['id']}  {item['op']} {item['name']} (from {item.get('origin', '?')})"]
    args = item.get("args") or {}
    if item.get("op") == "patch":
        lines += [f"    - {line}" for line in str(args.get("old_text", "")).splitlines()]
        lines += [f"    + {line}" for line in str(args.get("new_text", "")).splitlines()]
    elif args.get("text"):
        _, _, rest = str(args["text"]).partition("---\n")
        head, _, body = rest.partition("\n---")
        lines += [f"    {line}" for line in head.splitlines()]
        lines.append(f"    (body: {len(body.strip().splitlines())} lines)")
    shown = lines[:SHOWN_LINES + 1]
    if len(lines) > len(shown):
        shown.append(f"    … {len(lines) - len(shown)} more line(s): --json shows them all")
    return "\n".join(safe_text(line) if len(line) <= 200 else safe_text(line[:199]) + "…"
                     for line in shown)


@skills_group.command("approve")
@click.argument("ids", nargs=-1)
@click.option("--all", "every", is_flag=True, help="Every pending write.")
@pass_app
def approve_cmd(app: AppContext, ids: tuple[str, ...], every: bool) -> None:
    """Apply staged writes."""
    library = _library(app)
    for pending_id in _ids(library, ids, every):
        click.echo(library.approve(pending_id).message)


@skills_group.command("reject")
@click.argument("ids", nargs=-1)
@click.option("--all", "every", is_flag=True, help="Every pending write.")
@pass_app
def reject_cmd(app: AppContext, ids: tuple[str, ...], every: bool) -> None:
    """Drop staged writes."""
    library = _library(app)
    for pending_id in _ids(library, ids, every):
        item = library.reject(pending_id)
        click.echo(f"rejected {pending_id} ({item['op']} {item['name']})")


def _ids(library: SkillLibrary, ids: tuple[str, ...], every: bool) -> list[str]:
    if every:
        found = [str(i["id"]) for i in library.pending()]
        if not found:  # said, not silence: `approve --all` printed nothing at all
            click.echo("no pending skill writes")
        return found
    if not ids:
        raise InvalidInput("name the pending ids (refold skills pending), or pass --all")
    return list(ids)


@skills_group.command("export", short_help="Write the library as DIR/<name>/SKILL.md.")
@click.argument("directory", type=click.Path(file_okay=False))
@pass_app
def export_cmd(app: AppContext, directory: str) -> None:
    """Write the library as DIR/<name>/SKILL.md (load it in Claude Code or Hermes)."""
    from refold.skills import FileSkills, export_library

    library = _library(app)
    source = library.backend.directory if isinstance(library.backend, FileSkills) else None
    settings = app.settings  # refold's own folders: never an export's (home/<skill>/SKILL.md)
    names = export_library(library, directory, source_dir=source,
                           refused=(settings.home, settings.memories_dir, settings.home / "skills",
                                    settings.home / "tenants"))
    click.echo(f"exported {len(names)} skill(s) to {directory}")
