"""The ``skill_manage`` tool, the skills index for the system prompt, and ``export``.

Progressive disclosure: the frozen system-prompt snapshot carries only each skill's name and
description (bounded by ``INDEX_CHARS``; skills the scanner flags are left out), and the model
reads a body with ``skill_manage view`` when a task calls for it.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

from refold.errors import Conflict, InvalidInput, StorageError
from refold.memory.files import atomic_write
from refold.skills.library import SkillLibrary
from refold.tools.registry import Tool, arg_str, to_json

INDEX_CHARS = 3000
INDEX_OPEN, INDEX_CLOSE = "<available-skills>", "</available-skills>"
ACTIONS = ("list", "view", "create", "patch", "delete")

DESCRIPTION = (
    "Your skills library: how to do recurring kinds of task, one SKILL.md each. "
    "action=list names them; action=view reads one (do this before a task a skill covers); "
    "action=create saves a new procedure (name: lowercase-with-hyphens; description: one line "
    "saying when to use it; body: the steps in Markdown); action=patch replaces a unique "
    "old_text with new_text; action=delete removes one. Save a skill when you learned a "
    "procedure the hard way or the user corrected how you work.")

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "action": {"type": "string", "enum": list(ACTIONS)},
        "name": {"type": "string"},
        "description": {"type": "string"},
        "body": {"type": "string", "description": "Markdown steps (create)."},
        "old_text": {"type": "string", "description": "Unique text to replace (patch)."},
        "new_text": {"type": "string", "description": "Replacement (patch)."},
    },
    "required": ["action"],
    "additionalProperties": False,
}


def skill_manage_tool(library: SkillLibrary, *, origin: str = "tool") -> Tool:
    def handle(args: dict[str, Any]) -> str:
        action = arg_str(args, "action") or ""
        name = arg_str(args, "name") or ""
        if action == "list":
            return to_json({"skills": [s.to_dict() for s in library.list_skills()]})
        if action not in ACTIONS:
            raise InvalidInput(f"action must be one of {', '.join(ACTIONS)}")
        if not name:
            raise InvalidInput(f"action={action} needs 'name'",
                               hint="action=list shows the names")
        if action == "view":
            skill = library.view(name)
            return to_json({"name": skill.name, "description": skill.description,
                            "body": skill.body, **({"front_matter": dict(skill.extra)}
                                                   if skill.extra else {})})
        if action == "create":
            result = library.create(name, arg_str(args, "description") or "",
                                    arg_str(args, "body") or "", origin=origin)
        elif action == "patch":
            result = library.patch(name, arg_str(args, "old_text") or "",
                                   arg_str(args, "new_text") or "", origin=origin)
        else:
            result = library.delete(name, origin=origin)
        return to_json(result.to_dict())

    return Tool("skill_manage", DESCRIPTION, PARAMETERS, handle)


class SkillResources:
    """The skills as MCP resources: ``skill://<name>`` → that skill's SKILL.md."""

    PREFIX = "skill://"

    def __init__(self, library: SkillLibrary) -> None:
        self.library = library

    def resources(self) -> list[tuple[str, str, str]]:
        return [(f"{self.PREFIX}{s.name}", s.name, s.description)
                for s in self.library.list_skills() if not s.blocked]

    def read(self, uri: str) -> str:
        if not uri.startswith(self.PREFIX):
            raise InvalidInput(f"not a skill resource: {uri}")
        return self.library.view(uri.removeprefix(self.PREFIX).strip("/")).render()


def skills_index(library: SkillLibrary, *, limit: int = INDEX_CHARS) -> str:
    """The system-prompt block: one line per skill (name: description), bounded."""
    lines: list[str] = []
    size = 0
    skills = [s for s in library.list_skills() if not s.blocked]
    for number, skill in enumerate(skills):
        line = f"- {skill.name}: {skill.description}"
        if size + len(line) > limit:
            lines.append(f"- … {len(skills) - number} more (skill_manage action=list)")
            break
        lines.append(line)
        size += len(line) + 1
    if not lines:
        return ""
    return "\n".join([INDEX_OPEN, "Skills you can read with skill_manage action=view before "
                      "a task they cover:", *lines, INDEX_CLOSE])


def export_library(library: SkillLibrary, target: str | os.PathLike[str], *,
                   source_dir: Path | None = None,
                   refused: tuple[Path, ...] = ()) -> list[str]:
    """Write every skill as ``target/<name>/SKILL.md`` (with its references/, templates/,
    scripts/ when ``source_dir`` has them): a folder Claude Code (``.claude/skills``) or Hermes
    loads; created (with its parents) when missing. Refuses to overwrite a skill folder
    already in ``target``, to export into the library itself, or into ``refused``: refold's
    home (first: a skill's folder there sat beside the database and settings), and its own
    folders after it, or anything under those. A folder that cannot be written is a ``StorageError`` naming it."""
    out = Path(target).expanduser()
    where = out.resolve()
    if source_dir is not None and where == source_dir.resolve():
        raise InvalidInput("the export folder is the skills library itself")
    for number, own in enumerate(path.resolve() for path in refused):
        if where == own or (number and own in where.parents):  # the home itself; the others
            # and anything under them
            raise InvalidInput(f"{out} is {'' if where == own else 'inside '}refold's own "
                               f"folder {own}, not a place to export skills to",
                               hint="export into a folder of its own, e.g. .claude/skills")
    written: list[str] = []
    try:
        out.mkdir(parents=True, exist_ok=True)
        for info in library.list_skills():
            if info.blocked:
                continue
            folder = out / info.name
            if folder.exists():
                raise Conflict(f"{folder} already exists", hint="export into an empty folder")
            folder.mkdir(parents=True)
            atomic_write(folder / "SKILL.md", library.view(info.name).render().encode("utf-8"))
            for extra in ("references", "templates", "scripts"):
                src = source_dir / info.name / extra if source_dir is not None else None
                if src is not None and src.is_dir() and not src.is_symlink():
                    shutil.copytree(src, folder / extra, symlinks=True)
            written.append(info.name)
        (out / ".refold-export.json").write_text(json.dumps({"skills": written}))
    except (OSError, shutil.Error) as exc:
        raise StorageError(f"cannot export the skills to {out}: "
                           f"{getattr(exc, 'strerror', None) or exc}"
                           + (f" (after {len(written)} skill(s))" if written else ""),
                           hint="check that the folder can be written") from exc
    return written


__all__ = ["INDEX_CHARS", "SkillResources", "export_library", "skill_manage_tool", "skills_index"]
