"""``SkillLibrary``: the skills and the rules every write follows.

A skill is instructions the agent will follow in later sessions, so a write is treated like a
memory write: its text goes through the memory scanner (``refold.memory.scan``) and is refused
with the reason when it matches; the approval mode (``allow``, ``stage``, ``block``; see
``refold.memory.approval``) applies to writes by the agent and the review — a staged write waits
in the queue for ``approve`` and is re-checked against the state at that time. Every write
takes the skill's lock, reloads it, and refuses to patch or delete a SKILL.md that was edited
outside refold (drift) until ``adopt``. A person at the CLI is the approver: ``origin="user"``
writes apply at once.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from refold._records import dataclass
from refold.errors import Conflict, InvalidInput, MemoryError_, NotFound
from refold.memory.approval import check_mode
from refold.memory.scan import scan_long
from refold.skills.backends import PENDING, Loaded, SkillBackend
from refold.skills.format import Skill, check_name, make_skill, parse_skill

OPS = ("create", "patch", "delete")


@dataclass(frozen=True)
class SkillInfo:
    name: str
    description: str
    blocked: str | None = None  # the scanner's reason: the index leaves this skill out

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description,
                **({"blocked": self.blocked} if self.blocked else {})}


@dataclass(frozen=True)
class SkillWrite:
    op: str
    name: str
    changed: bool
    staged: bool = False
    pending_id: str | None = None
    message: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if v is not None}


class SkillLibrary:
    """Skills over one backend; ``mode`` is the approval mode for non-user writes."""

    def __init__(self, backend: SkillBackend, *, mode: str = "allow") -> None:
        self.backend = backend
        self.mode = check_mode(mode)

    # -- reads ----------------------------------------------------------------------------------
    def list_skills(self) -> list[SkillInfo]:
        out: list[SkillInfo] = []
        for name in self.backend.names():
            try:
                skill = self.view(name)
            except InvalidInput as exc:
                out.append(SkillInfo(name, "", blocked=f"unreadable: {exc.message}"))
                continue
            out.append(SkillInfo(name, skill.description,
                                 blocked=scan_long(skill.description + "\n" + skill.body)))
        return out

    def view(self, name: str) -> Skill:
        loaded = self.backend.load(check_name(name))
        if loaded.text is None:
            raise NotFound(f"no skill named {name!r}", hint="list the skills to see the names")
        return parse_skill(loaded.text, expected_name=name)

    # -- writes ---------------------------------------------------------------------------------
    def create(self, name: str, description: str, body: str, *,
               origin: str = "tool") -> SkillWrite:
        skill = make_skill(name, description, body)
        _check_text(skill)
        return self._submit("create", skill.name, {"text": skill.render()}, origin)

    def patch(self, name: str, old_text: str, new_text: str, *,
              origin: str = "tool") -> SkillWrite:
        if not isinstance(old_text, str) or not old_text:
            raise InvalidInput("patch needs 'old_text': a unique piece of the current SKILL.md")
        if not isinstance(new_text, str):
            raise InvalidInput("patch needs 'new_text' (may be empty to cut old_text)")
        from refold.messages.validate import repair_text

        new_text = repair_text(new_text)  # lone surrogates could not be written (see make_skill)
        self._patched(self.backend.load(check_name(name)), name, old_text, new_text)
        return self._submit("patch", name, {"old_text": old_text, "new_text": new_text}, origin)

    def delete(self, name: str, *, origin: str = "tool") -> SkillWrite:
        self.view(name)
        return self._submit("delete", name, {}, origin)

    def adopt(self, name: str) -> Skill:
        """Accept an outside edit of ``name`` (it must still parse)."""
        skill = self.view(name)
        with self.backend.transaction(name):
            self.backend.adopt(name)
        return skill

    # -- the queue ------------------------------------------------------------------------------
    def pending(self) -> list[dict[str, Any]]:
        return self.backend.load_pending()

    def approve(self, pending_id: str) -> SkillWrite:
        item = self._take(pending_id)
        return self._apply(item["op"], item["name"], item.get("args") or {})

    def reject(self, pending_id: str) -> dict[str, Any]:
        return self._take(pending_id)

    def _take(self, pending_id: str) -> dict[str, Any]:
        with self.backend.transaction(PENDING):
            items = self.backend.load_pending()
            found = [i for i in items if i.get("id") == pending_id]
            if not found:
                raise NotFound(f"no pending skill write {pending_id!r}",
                               hint="refold skills pending lists them")
            self.backend.save_pending([i for i in items if i.get("id") != pending_id])
        return found[0]

    # -- internals ------------------------------------------------------------------------------
    def _submit(self, op: str, name: str, args: dict[str, Any], origin: str) -> SkillWrite:
        if origin == "user" or self.mode == "allow":
            return self._apply(op, name, args)
        if self.mode == "block":
            raise MemoryError_("skill writes are turned off (approval mode: block)",
                               hint="leave the skills unchanged")
        pending_id = uuid.uuid4().hex[:8]
        item = {"id": pending_id, "op": op, "name": name, "args": args, "origin": origin,
                "created_at": time.time()}
        with self.backend.transaction(PENDING):
            self.backend.save_pending([*self.backend.load_pending(), item])
        return SkillWrite(op, name, changed=False, staged=True, pending_id=pending_id,
                          message="staged for the user's approval; it is not saved yet")

    def _apply(self, op: str, name: str, args: dict[str, Any]) -> SkillWrite:
        with self.backend.transaction(name):
            loaded = self.backend.load(name)  # reload under the lock
            if op == "create":
                if loaded.text is not None:
                    raise Conflict(f"a skill named {name!r} already exists",
                                   hint="patch it, or pick another name")
                self.backend.save(name, str(args["text"]), loaded)
                return SkillWrite(op, name, True, message=f"created skill {name}")
            if loaded.text is None:
                raise NotFound(f"no skill named {name!r}")
            if loaded.drift:
                raise Conflict(f"SKILL.md of {name!r} was edited outside refold",
                               hint=f"review it, then `refold skills edit {name} --adopt`")
            if op == "patch":
                text = self._patched(loaded, name, str(args["old_text"]), str(args["new_text"]))
                self.backend.save(name, text, loaded)
                return SkillWrite(op, name, True, message=f"patched skill {name}")
            where = self.backend.delete(name, loaded)
            return SkillWrite(op, name, True, message=f"deleted skill {name}"
                              + (f" (kept at {where})" if where else ""))

    @staticmethod
    def _patched(loaded: Loaded, name: str, old_text: str, new_text: str) -> str:
        if loaded.text is None:
            raise NotFound(f"no skill named {name!r}", hint="create it first")
        count = loaded.text.count(old_text)
        if count != 1:
            raise InvalidInput(f"old_text occurs {count} times in {name}'s SKILL.md; it must "
                               "occur exactly once", hint="view the skill and quote more of it")
        text = loaded.text.replace(old_text, new_text, 1)
        _check_text(parse_skill(text, expected_name=name))
        return text


def _check_text(skill: Skill) -> None:
    reason = scan_long(skill.description + "\n" + skill.body)
    if reason:
        raise MemoryError_(f"skill refused: {reason}",
                           hint="skills are instructions for later sessions; write the "
                                "procedure without that")


__all__ = ["OPS", "SkillInfo", "SkillLibrary", "SkillWrite"]
