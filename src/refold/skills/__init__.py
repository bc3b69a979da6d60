"""Layer 4 of memory: the skills library — "how to do this kind of task", one SKILL.md each.

    library = open_skills(home / "skills", mode="stage")
    library.create("deploy-checklist", "How to ship a release safely.", "1. …")
    tool = skill_manage_tool(library)            # for the agent
    block = skills_index(library)                # names + descriptions for the system prompt

The folder format is the one Claude Code and Hermes load (``SKILL.md`` with ``name`` and
``description`` front matter, optional ``references/``, ``templates/``, ``scripts/``).
"""

from __future__ import annotations

import os

from refold.skills.backends import DBSkills, FileSkills
from refold.skills.format import Skill, parse_skill
from refold.skills.library import SkillInfo, SkillLibrary, SkillWrite
from refold.skills.tool import export_library, skill_manage_tool, skills_index


def open_skills(directory: str | os.PathLike[str], *, mode: str = "allow") -> SkillLibrary:
    """The file-backed library under ``directory`` (``<home>/skills``)."""
    return SkillLibrary(FileSkills(directory), mode=mode)


__all__ = ["DBSkills", "FileSkills", "Skill", "SkillInfo", "SkillLibrary", "SkillWrite",
           "export_library", "open_skills", "parse_skill", "skill_manage_tool", "skills_index"]
