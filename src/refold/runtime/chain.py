"""``KnownChain``: what a runtime knows its session's stored active chain to be.

A proxy client re-sends its whole history every call. Hashing all of it again to find what is
stored already (``Store.sync_messages``) costs O(history) per turn; instead the runtime keeps the
chain it last wrote or synced — each message in a comparable form, and the identity of the last
one — and when a request starts with exactly that chain, only the new suffix is validated,
counted, hashed and appended, with ``append_messages(expect_last=tip)`` checking *inside the
write transaction* that the stored chain still ends there. Any doubt falls back to the full sync.

Invariants:
- a ``KnownChain`` is only kept while the stored active chain of ``session_id`` is exactly
  ``messages`` (the runtime drops it on any write it did not account for, on a Conflict, and
  whenever the session changes); other processes are caught by the in-transaction tip check;
- "exactly" is the identity's notion, made stricter: messages compare with underscore keys and
  None-valued keys ignored at the top level (neither reaches the identity, and validation reads
  a None key as a missing one), every other value by type and value (``1``, ``1.0`` and ``True``
  differ, as their JSON does) — so a prefix that matches would hash to the same identities;
  with two exceptions: a stored reply re-sent in another spelling (``resent``) is that stored
  reply — the chain keeps the stored form, and the request is built from it; and a stored tool
  result the client re-sends cleared (``cleared``: OpenCode's pruning) is that stored result —
  the chain keeps the client's cleared form, which is what goes upstream;
- the stored forms are deep copies of the containers (strings are immutable and shared, not
  copied): a caller mutating its message dicts later cannot alter them.

Cost: a runtime holds about one copy of its session's message text (the strings of the request
that first carried each message); the proxy's LRU of runtimes bounds how many are held.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Sequence
from itertools import repeat
from operator import is_, methodcaller
from typing import Any

from refold._records import dataclass
from refold.messages.model import IDENTITY_KEYS, Message, copy_json


def comparable(message: dict[str, Any]) -> dict[str, Any]:
    """The message as the prefix check sees it: no ``_`` keys, no None values (top level)."""
    if not any(map(_PRIVATE, message)) and not any(map(is_, message.values(), repeat(None))):
        return dict(message)  # (the usual message: a copy at C speed)
    return {k: v for k, v in message.items() if v is not None and not k.startswith("_")}


_PRIVATE = methodcaller("startswith", "_")
_NESTED = (dict, list)  # (a tuple: ``dict | list`` is built anew at each use)


def same(a: Any, b: Any) -> bool:
    """JSON-exact equality: same types all the way down (``1 != 1.0 != True``; ``-0.0 != 0.0``)."""
    kind = type(a)
    if kind is not type(b):
        return False
    if kind is dict:
        return bool(a.keys() == b.keys() and all(same(v, b[k]) for k, v in a.items()))
    if kind is list:
        return len(a) == len(b) and all(map(same, a, b))
    if kind is float:
        return repr(a) == repr(b)
    return bool(a == b)


def resent_form(form: dict[str, Any]) -> dict[str, Any]:
    """A reply's ``comparable`` form as clients re-send a reply they were given, whatever they
    changed of its spelling: its text without surrounding white space (Hermes strips it), empty
    text as none (``""`` beside tool calls: the Vercel AI SDK's, OpenCode's), no calls as none,
    each call's arguments as JSON values (``{"a":1}`` is ``{"a": 1}``) and of each call only
    its id, type and function name. What the model said is all there: only its spelling is set
    aside. Any other message is compared as it is."""
    if form.get("role") != "assistant":
        return form
    out = dict(form)
    content = out.get("content")
    if isinstance(content, str):
        if content.strip():
            out["content"] = content.strip()
        else:
            del out["content"]
    calls = out.get("tool_calls")
    if isinstance(calls, list) and calls:
        out["tool_calls"] = [_call_core(c) for c in calls]
    elif calls == []:
        del out["tool_calls"]
    return out


#: What clients send in place of an old tool result they stopped sending to save context:
#: OpenCode's ``compaction.prune`` (1.x) and Claude Code's microcompaction re-send each
#: cleared result as the first; Hermes-Agent's context compressor prunes to the second.
CLEARED_RESULTS = frozenset({"[Old tool result content cleared]",
                             "[Old tool output cleared to save context space]"})


def cleared(raw: dict[str, Any], stored: dict[str, Any]) -> bool:
    """True when ``raw`` is the tool result ``stored`` (a ``comparable`` form) as a client
    re-sends it after clearing it (its content one of ``CLEARED_RESULTS``, the rest the same):
    the same result — the tool said what is stored — of which the client now sends less."""
    if raw.get("role") != "tool" or stored.get("role") != "tool":
        return False
    content = raw.get("content")
    if isinstance(content, list) and len(content) == 1 and isinstance(content[0], dict) \
            and content[0].get("type") == "text" and set(content[0]) == {"type", "text"}:
        content = content[0]["text"]
    if not isinstance(content, str) or content not in CLEARED_RESULTS:
        return False
    # the rest of the identity the same (the call it answers); what is kept beside the chat
    # form (the Anthropic tool_result block the cleared text came in, say) is no part of it
    mine, theirs = _identity_core(raw), _identity_core(stored)
    _drop_lone_name(mine, theirs)
    return theirs.pop("content", None) != mine.pop("content", None) and same(mine, theirs)


def unnamed(raw: dict[str, Any], stored: dict[str, Any]) -> bool:
    """True when ``raw`` is the tool result ``stored`` (a ``comparable`` form) re-sent without
    the ``name`` it was stored with, or with one it was stored without, the rest the same: the
    name is the call's, which the result answers by id. Hermes-Agent restores a resumed
    session's tool messages from its own database without ``name`` (it keeps ``tool_name``):
    each resume rewound the conversation from the first tool result and stored it again."""
    if raw.get("role") != "tool" or stored.get("role") != "tool":
        return False
    mine, theirs = _identity_core(raw), _identity_core(stored)
    return _drop_lone_name(mine, theirs) and same(mine, theirs)


def resent_result(raw: dict[str, Any], stored: dict[str, Any]) -> bool:
    """``raw`` is the stored tool result re-sent cleared (``cleared``) or without its name
    (``unnamed``): the stored one."""
    return cleared(raw, stored) or unnamed(raw, stored)


def _drop_lone_name(mine: dict[str, Any], theirs: dict[str, Any]) -> bool:
    """Set aside a tool result's ``name`` that only one of two identity cores has: True when
    one did."""
    if ("name" in mine) == ("name" in theirs):
        return False
    mine.pop("name", None)
    theirs.pop("name", None)
    return True


def _call_core(call: Any) -> Any:
    if not isinstance(call, dict) or not isinstance(call.get("function"), dict):
        return call
    function = call["function"]
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        with contextlib.suppress(ValueError):  # not JSON: compared as written
            arguments = json.loads(arguments)
    return {"id": call.get("id"), "type": call.get("type") or "function",
            "function": {"name": function.get("name"), "arguments": arguments}}


def resent(raw: dict[str, Any], stored: dict[str, Any]) -> bool:
    """True when ``raw`` is the reply ``stored`` (a ``comparable`` form) as a client re-sent it
    (``resent_form``): the same reply, to be matched to the stored row, never stored again.
    A re-sent call may carry arguments the model left out at their empty default (Claude Code
    re-sends each Edit call with ``"replace_all": false``): every such turn forked a branch
    holding the whole history again."""
    if raw.get("role") != "assistant" or stored.get("role") != "assistant":
        return False
    mine, theirs = resent_form(comparable(raw)), resent_form(stored)
    if same(mine, theirs):
        return True
    calls, stored_calls = mine.get("tool_calls"), theirs.get("tool_calls")
    if not (isinstance(calls, list) and isinstance(stored_calls, list) and calls
            and len(calls) == len(stored_calls)):
        return False
    rest = {k: v for k, v in mine.items() if k != "tool_calls"}
    stored_rest = {k: v for k, v in theirs.items() if k != "tool_calls"}
    return same(rest, stored_rest) and all(map(_same_call_but_defaults, calls, stored_calls))


# argument values a client may add to a call it re-sends, where the model left them out: an
# optional flag's off and null (``0``, ``""``, ``[]`` can be values the model would have meant)
_EMPTY_DEFAULTS: tuple[Any, ...] = (False, None)


def _same_call_but_defaults(call: Any, stored: Any) -> bool:
    """``call`` is ``stored`` (both ``_call_core`` forms) with only arguments added whose values
    are ``False`` or ``None`` (``_EMPTY_DEFAULTS``), under its own id."""
    if same(call, stored):
        return True
    if not (isinstance(call, dict) and isinstance(stored, dict) and call.get("id")
            and same({k: v for k, v in call.items() if k != "function"},
                     {k: v for k, v in stored.items() if k != "function"})):
        return False
    function, stored_function = call.get("function") or {}, stored.get("function") or {}
    arguments, stored_arguments = function.get("arguments"), stored_function.get("arguments")
    if not (same(function.get("name"), stored_function.get("name"))
            and isinstance(arguments, dict) and isinstance(stored_arguments, dict)
            and stored_arguments.keys() <= arguments.keys()):
        return False
    return all(same(arguments[k], v) for k, v in stored_arguments.items()) and all(
        any(same(arguments[k], empty) for empty in _EMPTY_DEFAULTS)
        for k in arguments.keys() - stored_arguments.keys())


def adopt_stored(conversation: list[Message], stored: Sequence[Message],
                 sent: dict[int, Message] | None = None) -> list[Message]:
    """``conversation`` with each reply that re-sends the stored one at its place (``resent``)
    spelled as stored, along the prefix the two share by identity: so its identities are the
    stored ones, and a re-spelled reply neither diverges from the ledger nor is stored twice.
    Only the identity's fields take the stored spelling; the rest (its reasoning, say) stays
    as the client sent it. A stored reply of several calls that the client re-sends split,
    each call followed by its result (``regrouped``), is the stored reply with the results
    after it. A stored tool result the client re-sends cleared (``cleared``) is the stored
    one too; ``sent`` (when given) gets the client's message at its index in the result, to
    be sent as the client sent it."""
    out = list(conversation)
    index = 0
    while index < min(len(out), len(stored)):
        raw, row = out[index], stored[index]
        mine, theirs = _identity_core(raw), _identity_core(row)
        if not same(mine, theirs):
            if resent(mine, theirs):
                out[index] = _spelled_as(raw, theirs)
            elif resent_result(mine, theirs):
                out[index] = _spelled_as(raw, theirs)
                if sent is not None:
                    sent[index] = raw
            else:
                grouped = regrouped(out, index, theirs)
                if grouped is None:
                    break
                merged, results, end = grouped
                out[index:end] = [merged, *results]
        index += 1
    return out


def regrouped(conversation: Sequence[Message], index: int, stored: dict[str, Any]
              ) -> tuple[Message, list[Message], int] | None:
    """The stored reply ``stored`` (an identity core) of several tool calls when
    ``conversation[index:end]`` is that reply as a client re-sent it split into one assistant
    message per call (or per few), each followed by its result — the Responses API's items
    (OpenAI Codex re-sends parallel calls as ``function_call``, ``function_call_output``,
    ``function_call``, …) and chat clients that keep one message per call: (the reply as
    stored, the results that sat between its pieces in their order, ``end``). Only pieces with
    nothing of their own (no text, no reasoning: a later model turn has some, or is a reply of
    its own in the ledger) and results of calls already seen join; None when it is not that."""
    calls = stored.get("tool_calls")
    first = conversation[index]
    if stored.get("role") != "assistant" or not isinstance(calls, list) or len(calls) < 2 \
            or first.get("role") != "assistant" or not isinstance(first.get("tool_calls"), list):
        return None
    ids = [c.get("id") if isinstance(c, dict) else None for c in calls]
    got = list(first["tool_calls"])
    results: list[Message] = []
    end = index + 1
    while len(got) < len(calls) and end < len(conversation):
        message = conversation[end]
        seen = ids[:len(got)]
        if message.get("role") == "tool" and message.get("tool_call_id") in seen:
            results.append(message)
        elif message.get("role") == "assistant" and isinstance(message.get("tool_calls"), list) \
                and message["tool_calls"] and not message.get("content") \
                and set(comparable(message)) <= {"role", "content", "tool_calls"}:
            got += message["tool_calls"]
        else:
            return None
        end += 1
    merged = {**first, "tool_calls": got}
    core = _identity_core(merged)
    if len(got) != len(calls) or not (same(core, stored) or resent(core, stored)):
        return None
    return _spelled_as(merged, stored), results, end


def _is_known(raw: dict[str, Any], stored: dict[str, Any], simple: bool) -> bool:
    """``raw`` (a message a client sent) is the chain's ``stored`` form (``simple``: its
    ``_plain`` flag)."""
    if simple and raw == stored:
        return True  # the common case, at C speed: equal to a dict of strings is exact
    return same(comparable(raw), stored) or resent(raw, stored)


def _spelled_as(raw: Message, core: dict[str, Any]) -> Message:
    return {**{k: v for k, v in raw.items() if k not in IDENTITY_KEYS}, **core}


def _identity_core(message: Message) -> dict[str, Any]:
    return {k: message[k] for k in IDENTITY_KEYS if message.get(k) is not None}


identity_core = _identity_core  # what a message's identity hashes (``refold.runtime.window``)


def _frozen(message: Message) -> dict[str, Any]:
    form = comparable(message)
    if any(map(isinstance, form.values(), repeat(_NESTED))):
        return copy_json(form)
    return form  # a new dict of immutable values: already a snapshot


def _plain(form: dict[str, Any]) -> bool:
    """No number and no boolean anywhere: every value a ``str``, or None, or a list or a dict
    (of ``str`` keys) of such. Then ``==`` with it is JSON-exact: a value equal to it has the
    same keys and lengths all the way down, and each leaf equal to a str is a str and equal
    to None is None (only numbers compare equal across types: ``1 == 1.0 == True``, ``-0.0 ==
    0.0``; and NaN is unequal to itself)."""
    if set(map(type, form.values())) <= {str}:
        return True  # (the usual message: checked at C speed)
    return _numberless(form)


def _numberless(value: Any) -> bool:
    kind = type(value)
    if kind is str or value is None:
        return True
    if kind is dict:
        return all(type(k) is str for k in value) and all(map(_numberless, value.values()))
    if kind is list:
        return all(map(_numberless, value))
    return False


@dataclass(frozen=True)
class KnownChain:
    session_id: str
    messages: tuple[dict[str, Any], ...]
    tip: str  # identity of the last stored active message
    plain: tuple[bool, ...] = ()  # per message: ``_plain`` (computed once, when it is frozen)

    @classmethod
    def of(cls, session_id: str, messages: Sequence[Message], tip: str) -> KnownChain:
        forms = tuple(map(_frozen, messages))
        return cls(session_id, forms, tip, tuple(map(_plain, forms)))

    def extended(self, messages: Sequence[Message], tip: str) -> KnownChain:
        forms = tuple(map(_frozen, messages))
        return KnownChain(self.session_id, self.messages + forms, tip,
                          self.plain + tuple(map(_plain, forms)))

    def ends_at(self, raw: Any) -> bool:
        """Is ``raw`` (a message a client sent) the chain's last message?"""
        if not self.messages or type(raw) is not dict:
            return False
        stored = self.messages[-1]
        if raw.get("role") != stored.get("role"):
            return False
        text, stored_text = raw.get("content"), stored.get("content")
        if type(text) is str and type(stored_text) is str and text.strip() != stored_text.strip():
            return False  # (not even re-spelled: ``resent`` compares the texts stripped)
        simple = self.plain[-1] if len(self.plain) == len(self.messages) else False
        return _is_known(raw, stored, simple)

    def tail(self, drop: int) -> KnownChain:
        """The chain without its first ``drop`` messages (it ends on the same tip)."""
        plain = self.plain[drop:] if len(self.plain) == len(self.messages) else ()
        return KnownChain(self.session_id, self.messages[drop:], self.tip, plain)

    @property
    def all_plain(self) -> bool:
        """Every stored form ``_plain`` (then a list ``==`` compares the chain exactly)."""
        return len(self.plain) == len(self.messages) and all(self.plain)

    def regrouped(self, conversation: list[Any]) -> list[Any] | None:
        """``conversation`` with the chain's replies of several calls that it re-sends split
        (``regrouped``: OpenAI Codex's parallel calls) put back together, so that
        start with all of the chain (as ``known_prefix`` would find it); None when it has none
        of them, or differs otherwise. Each turn of such a conversation took the full path
        before (7 ms a turn at 240 messages against 1.2 ms, growing with the history)."""
        out = list(conversation)
        changed = False
        plain = self.plain if len(self.plain) == len(self.messages) else (False,) * len(
            self.messages)
        for index, (stored, simple) in enumerate(zip(self.messages, plain, strict=True)):
            if index >= len(out) or type(out[index]) is not dict:
                return None
            if not _is_known(out[index], stored, simple):  # out[index] answers stored
                grouped = regrouped(out, index, _identity_core(stored))
                if grouped is None:
                    return None
                merged, results, end = grouped
                out[index:end] = [merged, *results]
                changed = True
        return out if changed else None

    def known_prefix(self, conversation: Sequence[Any]) -> int | None:
        """How many leading messages are known (all of the chain), or None if they differ."""
        known = len(self.messages)
        if len(conversation) < known:
            return None
        plain = self.plain if len(self.plain) == known else (False,) * known
        head = list(conversation[:known])
        if self.all_plain and head == list(self.messages) and set(map(type, head)) <= {dict}:
            return known  # every stored form plain: ``==`` is exact (the usual turn, C speed)
        for raw, stored, simple in zip(head, self.messages, plain, strict=True):
            if type(raw) is not dict:
                return None
            if not (simple and raw == stored) and not _is_known(raw, stored, simple):
                return None  # (the first test is _is_known's own first, without the call)
        return known
