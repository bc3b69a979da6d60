"""Settings for every surface: defaults < ``refold.toml`` < ``REFOLD_*`` env < flags.

The library proper never reads the environment: this module is the explicit loader, and only
the surfaces (``cli/``, ``server/``) call ``load_settings``. ``refold.assembly`` turns the
result into parts (store, summarizer, memory, engine). ``refold.toml`` is read from the data
home (``REFOLD_HOME`` / ``--home``).

Every setting has one flat name (``threshold_percent``, ``summarizer_timeout``, ``api_keys``),
which is also its ``REFOLD_<NAME>`` variable. In ``refold.toml`` a setting goes at the top
level (or under ``[refold]``) by that name, or in its section's table by its short name
(``[compaction] threshold_percent``, ``[summarizer] timeout``, ``[memory] enabled``,
``[serve] port``); the settings of no section may also go in ``[general]``, the table ``refold
config show`` prints them under, so its output reads back as a ``refold.toml``. The compaction
settings are exactly the fields of ``CompactionPolicy``, so a field added there is reachable
here with no other change. Unknown keys are an error naming the key and the valid ones, and
values out of range (``BOUNDS``) an error naming the setting and its range, when the settings
are loaded; ``Settings.source_of(name)`` says where each value came from.
"""

from __future__ import annotations

import functools
import json
import math
import os
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from refold import _records as records
from refold._records import dataclass, field
from refold.compaction.policy import CompactionPolicy, ModelOverride
from refold.errors import InvalidInput

ENV_PREFIX = "REFOLD_"
DEFAULT_SOURCE = "default"


def _default_home() -> Path:
    import platformdirs  # only when no home was given

    return Path(platformdirs.user_data_dir("refold"))


@dataclass(init=False)
class Settings:
    """Every setting a surface can take. Field names map to ``REFOLD_<NAME>`` env variables.

    ``Settings(**values)`` checks and converts each value (text from the environment becomes
    the field's type) and raises ``BadSetting`` naming the setting; unknown names are an error.
    Plain Python on purpose: every ``refold`` command loads settings, and this keeps a validation
    framework off the start-up path. ``BOUNDS`` holds the numeric limits.
    """

    home: Path = field(default_factory=_default_home)
    db: str | None = None  # database URL or path; default: <home>/refold.db
    model: str = "gpt-4o-mini"
    context_length: int = 128_000
    # upstream LLM (serve / chat / llm summarizer)
    upstream: str | None = None  # OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1
    upstream_api_key: str | None = field(default=None, repr=False)  # secrets stay out of logs
    upstream_format: str = "openai"  # openai (chat completions) | anthropic (Messages API)
    # summarizer
    summarizer: str = "builtin"  # builtin | llm
    summarizer_url: str | None = None  # defaults to upstream
    summarizer_model: str | None = None  # defaults to model
    summarizer_api_key: str | None = field(default=None, repr=False)
    summarizer_timeout: float = 120.0  # seconds for one summary, all attempts
    summarizer_cache_friendly: bool = False  # replay the conversation prefix (prompt caches)
    abort_on_summary_failure: bool = False  # a failed llm summary aborts (no builtin fallback)
    # serve
    api_keys: list[str] = field(default_factory=list, repr=False)  # client keys; empty: no auth
    host: str = "127.0.0.1"
    port: int = 8765
    max_body_bytes: int = 16 * 1024 * 1024
    header_timeout: float = 10.0  # seconds for a request's headers to arrive
    body_timeout: float = 30.0  # seconds for a request's whole body to arrive
    max_json_depth: int = 100  # deeper request JSON is a 400
    # SQLite commit durability for serve: NORMAL (WAL) survives a proxy crash, not power loss;
    # FULL fsyncs every commit. The library and the other commands always use FULL.
    serve_sqlite_synchronous: str = "NORMAL"
    serve_workers: int = 1  # processes accepting on serve's one port
    serve_session_cache: int = 256  # live session runtimes kept (LRU)
    # glibc malloc arenas for `refold serve` (0: glibc's default, 8 per core): each thread that
    # allocates may get its own arena, and a proxy's many threads then held ever more freed
    # memory (RSS +1.5 MiB per 1,000 new conversations; with 2 arenas +0.4, with 1 +0.2)
    serve_malloc_arenas: int = 2
    token_cache_entries: int = 16_384  # message counts kept (LRU)
    # memory
    memory_enabled: bool = True  # off: no snapshot, no memory tool, no review
    memory_approval: str = "allow"  # allow | stage | block
    memory_backend: str = "file"  # file (<home>/memories) | db (the refold store, by profile)
    memory_profile: str = "default"  # the profile keying memory rows when memory_backend=db
    # an external memory provider (entry point in refold.memory_providers) beside the builtin
    memory_provider: str | None = None
    memory_char_limit: int = 2200  # MEMORY.md
    user_char_limit: int = 1375  # USER.md
    memory_review_every_turns: int = 10  # 0: never by turns
    memory_review_every_tool_iterations: int = 15  # 0: never by tool calls
    # a session with unflushed rows and no new message for this long counts as ended: `refold
    # serve` flushes it (its process may have died before the session's end); 0: never
    memory_flush_idle_minutes: float = 30.0
    # references (refold.references): the directory the proxy lets @file/@folder/@diff/@git
    # read (None: off in the proxy; `refold chat` and `refold expand` use their working dir)
    allow_local_refs: Path | None = None
    # skills (refold.skills): tool iterations between skill reviews (0: no review)
    skills_creation_nudge_interval: int = 15
    # cost: per-model prices overriding refold.pricing's table, USD per million tokens:
    # {"model": {"input": …, "output": …, "cache_read": …, "cache_write": …}}
    pricing: dict[str, dict[str, float]] = field(default_factory=dict)
    # a session's spend (cost_usd, its summaries and reviews included) past which a turn warns
    # (budget_action = "warn") or is refused (budget_action = "refuse"); None: no budget
    session_budget_usd: float | None = None
    budget_action: str = "warn"  # warn | refuse
    # import: the largest transcript `refold import` reads (bytes; 0 = no limit)
    import_max_bytes: int = 64 * 1024 * 1024
    # recall (refold.search.recall): past sessions searched with each new user message, the
    # best snippets put in that turn's request (never stored, never the system prompt)
    recall_enabled: bool = False
    recall_max_tokens: int = 400  # above 0, at most 8000
    recall_limit: int = 3  # snippets at most (1–20)
    recall_mode: str | None = None  # fts | vector | hybrid; None: as `refold search`
    # background embedding (refold.search.indexer, needs refold[embed]): auto keeps vectors
    # current once `refold index` built them; on always embeds new messages; off never does
    embed_background: str = "auto"  # auto | on | off
    # compaction: every field of CompactionPolicy (flat names fold in here)
    compaction: CompactionPolicy = field(default_factory=CompactionPolicy)

    def __init__(self, **values: Any) -> None:
        values = _fold_compaction(values)
        for name in values:
            if name not in _OWN_NAMES:
                raise _unknown(name, "settings", list(SETTING_NAMES))
        for spec in records.fields(self):
            if spec.name in values:
                value = _checked(spec.name, _field_types()[spec.name], values[spec.name])
            elif spec.default is not records.MISSING:
                value = spec.default
            else:
                value = spec.default_factory()
            setattr(self, spec.name, value)
        self._sources: dict[str, str] = {}

    @property
    def db_url(self) -> str:
        return self.db or str(self.home / "refold.db")

    @property
    def memories_dir(self) -> Path:
        return self.home / "memories"

    @property
    def rotate_on_compaction(self) -> bool:
        return self.compaction.rotate_on_compaction

    def source_of(self, name: str) -> str:
        """Where setting ``name`` came from: default, refold.toml, env REFOLD_X or a flag."""
        return self._sources.get(name, DEFAULT_SOURCE)

    def value_of(self, name: str) -> Any:
        if name in COMPACTION_FIELDS:
            return getattr(self.compaction, name)
        return getattr(self, name)

    def updated(self, **fields: Any) -> Settings:
        """A copy with ``fields`` changed, validated again (the changed ones count as flags)."""
        data = {n: self.value_of(n) for n in SETTING_NAMES}
        data.update(fields)
        fresh = Settings(**data)
        fresh._sources = {**self._sources, **{k: "flag" for k in fields}}
        return fresh


class BadSetting(InvalidInput):
    """A setting's value has the wrong type or is out of range."""

    def __init__(self, name: str, given: Any, reason: str) -> None:
        super().__init__(f"bad setting {name} = {given!r}: {reason}",
                         hint="check refold.toml, REFOLD_* variables and flags")
        self.setting, self.given, self.reason = name, given, reason


# numeric limits: name -> (lowest, is the lowest allowed itself, highest or None)
BOUNDS: dict[str, tuple[float, bool, float | None]] = {
    "summarizer_timeout": (0, False, None), "port": (0, True, 65535),
    "max_body_bytes": (0, False, None), "header_timeout": (0, False, None),
    "body_timeout": (0, False, None), "max_json_depth": (2, True, None),
    "memory_char_limit": (0, False, None), "user_char_limit": (0, False, None),
    "memory_review_every_turns": (0, True, None),
    "memory_review_every_tool_iterations": (0, True, None),
    "memory_flush_idle_minutes": (0, True, None),
    "import_max_bytes": (0, True, None), "session_budget_usd": (0, True, None),
    "recall_max_tokens": (0, False, 8000), "recall_limit": (1, True, 20),
    "serve_workers": (1, True, None), "serve_session_cache": (1, True, None),
    "serve_malloc_arenas": (0, True, None),
    "token_cache_entries": (0, True, None),
    # the window, and the compaction trigger's shares of it (CompactionPolicy's fields are
    # checked by the same table when they come in through settings)
    "context_length": (0, False, None), "threshold_percent": (0, False, 1),
    "small_window_floor_percent": (0, False, 1), "max_trigger_percent": (0, False, 1),
}
CHOICES: dict[str, tuple[str, ...]] = {"budget_action": ("warn", "refuse"),
                                       "recall_mode": ("fts", "vector", "hybrid"),
                                       "embed_background": ("auto", "on", "off")}
_TRUE, _FALSE = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def _fold_compaction(data: dict[str, Any]) -> dict[str, Any]:
    """``Settings(threshold_percent=0.6)`` means ``compaction.threshold_percent``."""
    flat = {k: data[k] for k in COMPACTION_FIELDS if k in data}
    if not flat:
        return data
    rest = {k: v for k, v in data.items() if k not in flat}
    base = rest.get("compaction", {})
    if isinstance(base, CompactionPolicy):
        base = {f.name: getattr(base, f.name) for f in records.fields(base)}
    rest["compaction"] = {**base, **flat}
    return rest


def _checked(name: str, kind: Any, value: Any) -> Any:
    """``value`` as type ``kind`` (text converted as the environment gives it), or BadSetting."""
    try:
        out = _convert(kind, value)
    except BadSetting:
        raise
    except (TypeError, ValueError) as exc:
        raise BadSetting(name, value, str(exc)) from None
    reason = _out_of_bounds(name, out)
    if reason:
        raise BadSetting(name, value, reason)
    if name in CHOICES and out is not None and out not in CHOICES[name]:
        raise BadSetting(name, value, "must be one of " + ", ".join(CHOICES[name]))
    return out


def _out_of_bounds(name: str, value: Any) -> str | None:
    """Why ``value`` is outside ``BOUNDS[name]`` (``must be above 0 and at most 1``), or None."""
    if name not in BOUNDS or value is None:
        return None
    low, inclusive, high = BOUNDS[name]
    if value < low or (value == low and not inclusive) or (high is not None and value > high):
        ceiling = f" and at most {high:g}" if high is not None else ""
        return f"must be {'at least' if inclusive else 'above'} {low:g}{ceiling}"
    return None


def _convert(kind: Any, value: Any) -> Any:
    origin, args = typing.get_origin(kind), typing.get_args(kind)
    if args and type(None) in args:  # X | None
        if value is None:
            return None
        return _convert(next(a for a in args if a is not type(None)), value)
    if kind is bool:
        return _to_bool(value)
    if kind is int:
        return _to_int(value)
    if kind is float:
        return _to_float(value)
    if kind is str:
        if not isinstance(value, str):
            raise TypeError(f"expected text, got {type(value).__name__}")
        return value
    if kind is Path:
        if not isinstance(value, str | Path):
            raise TypeError(f"expected a path, got {type(value).__name__}")
        return Path(value)
    if kind is CompactionPolicy:
        return _to_policy(value)
    if kind is ModelOverride:
        return _to_dataclass(ModelOverride, value)
    if origin in (list, tuple):
        if not isinstance(value, list | tuple):
            raise TypeError(f"expected a list, got {type(value).__name__}")
        items = [_convert(args[0], v) for v in value]
        return items if origin is list else tuple(items)
    if origin is dict:
        if not isinstance(value, Mapping):
            raise TypeError(f"expected a table, got {type(value).__name__}")
        return {_convert(args[0], k): _convert(args[1], v) for k, v in value.items()}
    raise TypeError(f"cannot read a {kind}")  # a field type this module does not know yet


def _to_bool(value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE + _FALSE:
        return value.strip().lower() in _TRUE
    raise ValueError("expected true or false")


def _to_int(value: Any) -> int:
    if isinstance(value, bool):
        raise TypeError("expected a whole number, got true/false")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip().replace("_", ""))
        except ValueError:
            pass
    raise ValueError("expected a whole number")


def _to_float(value: Any) -> float:
    if isinstance(value, bool):
        raise TypeError("expected a number, got true/false")
    try:
        out = float(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        raise ValueError("expected a number") from None
    if not math.isfinite(out):
        raise ValueError("expected a finite number")
    return out


def _to_dataclass(cls: Any, value: Any) -> Any:
    if isinstance(value, cls):
        return value
    if not isinstance(value, Mapping):
        raise TypeError(f"expected a table, got {type(value).__name__}")
    hints = typing.get_type_hints(cls)
    unknown = sorted(set(value) - set(hints))
    if unknown:
        raise ValueError(f"unknown key {unknown[0]!r} (valid: {', '.join(hints)})")
    fields = {k: _convert(hints[k], v) for k, v in value.items()}
    for key, item in fields.items():  # an override's threshold_percent, context_length
        reason = _out_of_bounds(key, item)
        if reason:
            raise ValueError(f"{key} = {item!r}: {reason}")
    return cls(**fields)


def _to_policy(value: Any) -> CompactionPolicy:
    if isinstance(value, CompactionPolicy):
        return value
    if not isinstance(value, Mapping):
        raise TypeError(f"expected a table, got {type(value).__name__}")
    hints = _policy_types()
    for key in value:
        if key not in hints:
            raise _unknown(str(key), "compaction", list(hints))
    return CompactionPolicy(**{k: _checked(k, hints[k], v) for k, v in value.items()})


@functools.cache
def _policy_types() -> dict[str, Any]:
    """The policy's field types (evaluated on first use: a command given no setting, such as
    a plain ``refold search``, never needs them)."""
    return typing.get_type_hints(CompactionPolicy)


@functools.cache
def _field_types() -> dict[str, Any]:
    return typing.get_type_hints(Settings)


COMPACTION_FIELDS: tuple[str, ...] = tuple(f.name for f in records.fields(CompactionPolicy))
_OWN_FIELDS = tuple(f.name for f in records.fields(Settings) if f.name != "compaction")
_OWN_NAMES = frozenset(f.name for f in records.fields(Settings))
SETTING_NAMES: tuple[str, ...] = (*_OWN_FIELDS, *COMPACTION_FIELDS)

# Tables in refold.toml: short name -> setting. A table also takes the settings' full names.
SECTIONS: dict[str, dict[str, str]] = {
    # ``[compaction] enabled`` / ``auto``: the on/off switch of automatic compaction
    "compaction": {**{name: name for name in COMPACTION_FIELDS}, "enabled": "auto_compact",
                   "auto": "auto_compact"},
    "summarizer": {"kind": "summarizer", "url": "summarizer_url", "endpoint": "summarizer_url",
                   "model": "summarizer_model", "api_key": "summarizer_api_key",
                   "timeout": "summarizer_timeout", "cache_friendly": "summarizer_cache_friendly",
                   "abort_on_failure": "abort_on_summary_failure"},
    "memory": {"enabled": "memory_enabled", "approval": "memory_approval",
               "backend": "memory_backend", "profile": "memory_profile",
               "provider": "memory_provider", "memory_char_limit": "memory_char_limit",
               "user_char_limit": "user_char_limit",
               "review_every_turns": "memory_review_every_turns",
               "review_every_tool_iterations": "memory_review_every_tool_iterations",
               "flush_idle_minutes": "memory_flush_idle_minutes"},
    "serve": {"api_keys": "api_keys", "host": "host", "port": "port",
              "max_body_bytes": "max_body_bytes", "header_timeout": "header_timeout",
              "body_timeout": "body_timeout", "max_json_depth": "max_json_depth",
              "sqlite_synchronous": "serve_sqlite_synchronous", "workers": "serve_workers",
              "session_cache": "serve_session_cache", "malloc_arenas": "serve_malloc_arenas",
              "upstream": "upstream", "upstream_api_key": "upstream_api_key"},
    "cost": {"session_budget_usd": "session_budget_usd", "budget_usd": "session_budget_usd",
             "budget_action": "budget_action", "pricing": "pricing"},
    "recall": {"enabled": "recall_enabled", "max_tokens": "recall_max_tokens",
               "limit": "recall_limit", "mode": "recall_mode"},
    "search": {"embed_background": "embed_background"},
}
SECRET_SETTINGS = frozenset({"upstream_api_key", "summarizer_api_key", "api_keys"})


GENERAL = "general"  # the table of the settings no section holds (``config show`` prints it)


def section_of(name: str) -> str:
    """The table a setting is shown under (``general`` when it has none)."""
    for section, keys in SECTIONS.items():
        if name in keys.values():
            return section
    return GENERAL


@functools.cache
def _general_keys() -> dict[str, str]:
    """``[general]``'s keys: the settings of no section, by their full names."""
    return {name: name for name in SETTING_NAMES if section_of(name) == GENERAL}


def _table_keys(table: str) -> dict[str, str] | None:
    """A table's short name -> setting (None: no such table)."""
    return _general_keys() if table == GENERAL else SECTIONS.get(table)


def _type_of(name: str) -> Any:
    if name in COMPACTION_FIELDS:
        return _policy_types()[name]
    return _field_types()[name]


def _unknown(key: str, where: str, valid: list[str]) -> InvalidInput:
    import difflib  # only for the error

    close = difflib.get_close_matches(key, valid, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return InvalidInput(f"unknown setting {key!r} in {where}",
                        hint=hint + "valid keys: " + ", ".join(sorted(set(valid))))


_JSON_EXAMPLES = {"overrides": '[{"match": "gpt-4o", "threshold_percent": 0.6}]',
                  "pricing": '{"my-model": {"input": 0.5, "output": 1.5}}'}


# -- values from text (REFOLD_* variables and --set) -----------------------------------------
def parse_text(name: str, raw: str) -> Any:
    """A setting's value from text: lists are comma-separated, ``overrides`` and ``pricing`` are
    JSON, an optional value takes ``none``; everything else is converted by ``Settings``."""
    kind = _type_of(name)
    origin = typing.get_origin(kind)
    args = typing.get_args(kind)
    if name in _JSON_EXAMPLES:
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise InvalidInput(f"{name}: not JSON: {exc}",
                               hint="e.g. " + _JSON_EXAMPLES[name]) from exc
    if origin in (list, tuple):
        return [item.strip() for item in raw.split(",") if item.strip()]
    if type(None) in args and raw.strip().lower() in ("none", "null", ""):
        return None
    return raw


# -- sources ---------------------------------------------------------------------------------
Layer = dict[str, tuple[Any, str]]  # setting -> (value, where it came from)


def _env_layer(environ: Mapping[str, str]) -> Layer:
    out: Layer = {}
    for name in SETTING_NAMES:
        var = ENV_PREFIX + name.upper()
        raw = environ.get(var)
        if raw is None or raw == "":
            continue
        out[name] = (parse_text(name, raw), f"env {var}")
    return out


def unknown_env(environ: Mapping[str, str]) -> list[str]:
    """``REFOLD_*`` variables that name no setting (typos are shown by ``config show``)."""
    known = {ENV_PREFIX + n.upper() for n in SETTING_NAMES}
    ignored = {"REFOLD_DEBUG", "REFOLD_TEST_POSTGRES_URL", "REFOLD_REQUIRE_POSTGRES",
               "REFOLD_NATIVE", "REFOLD_REQUIRE_NATIVE",
               "REFOLD_READAHEAD"}  # (switches, not settings)
    return sorted(k for k in environ if k.startswith(ENV_PREFIX) and k not in known | ignored)


def _table_layer(data: Mapping[str, Any], where: str) -> Layer:
    """Top-level keys by full name, ``[section]`` tables by short or full name, ``[general]``
    (the settings of no section, as ``config show`` prints them) by full name."""
    out: Layer = {}
    tables = ("refold", GENERAL, *SECTIONS)
    for key, value in data.items():
        keys = _table_keys(key)
        if key == "refold" and isinstance(value, dict):
            out.update(_table_layer(value, where))
        elif keys is not None and isinstance(value, dict):
            for sub, item in value.items():
                name = keys.get(sub) or (sub if sub in keys.values() else None)
                if name is None and sub in SETTING_NAMES:  # a setting of another table
                    raise InvalidInput(f"setting {sub!r} in [{key}] of {where} belongs in "
                                       f"[{section_of(sub)}] (or at the top level)")
                if name is None:
                    raise _unknown(f"{key}.{sub}", where, [f"{key}.{k}" for k in keys])
                out[name] = (item, where)
        elif key in SETTING_NAMES:
            out[key] = (value, where)
        elif key in tables:
            raise InvalidInput(f"{key!r} in {where} must be a table ([{key}])")
        else:
            raise _unknown(key, where, [*SETTING_NAMES, *tables])
    return out


def _toml_layer(home: Path) -> Layer:
    path = home / "refold.toml"
    if not path.is_file():
        return {}
    import tomllib  # only with a settings file: most commands of a new install have none

    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise InvalidInput(f"cannot read {path}: {exc}", hint="fix or remove the file") from exc
    return _table_layer(data, str(path))


def _set_layer(pairs: tuple[str, ...] | list[str]) -> Layer:
    """``--set KEY=VALUE`` (``KEY`` a setting or ``section.key``), parsed like the env."""
    out: Layer = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        key = key.strip()
        if not sep or not key:
            raise InvalidInput(f"--set {pair!r}: expected KEY=VALUE")
        section, dot, sub = key.partition(".")
        if dot:
            table = _table_layer({section: {sub: raw}}, "--set")
            name = next(iter(table))
        elif key in SETTING_NAMES:
            name = key
        else:
            raise _unknown(key, "--set", list(SETTING_NAMES))
        out[name] = (parse_text(name, raw), f"flag --set {key}")
    return out


def _flag_layer(flags: Mapping[str, Any]) -> Layer:
    out: Layer = {}
    for name, value in flags.items():
        if value is None:
            continue
        if name not in SETTING_NAMES:
            raise _unknown(name, "flags", list(SETTING_NAMES))
        out[name] = (value, f"flag --{name.replace('_', '-')}")
    return out


def load_settings(flags: Mapping[str, Any] | None = None,
                  environ: Mapping[str, str] | None = None, *,
                  sets: tuple[str, ...] | list[str] = ()) -> Settings:
    """Merge defaults < refold.toml < REFOLD_* env < ``sets`` (``--set``) < ``flags``.

    ``None`` flags are ignored. ``environ`` defaults to the process environment: this is the
    one library function that reads it, and only the surfaces call it.
    """
    env = os.environ if environ is None else environ
    flag_layer = _flag_layer(flags or {})
    env_layer = _env_layer(env)
    set_layer = _set_layer(sets)
    home_value = next((layer["home"][0] for layer in (flag_layer, set_layer, env_layer)
                       if "home" in layer), None)
    home = Path(home_value).expanduser() if home_value else Settings().home
    merged: Layer = {}
    for layer in (_toml_layer(home), env_layer, set_layer, flag_layer):
        merged.update(layer)
    values = {name: value for name, (value, _) in merged.items()}
    values["home"] = home
    try:
        settings = Settings(**values)
    except BadSetting as exc:
        raise _bad_value(exc, merged) from None
    settings._sources = {name: where for name, (_, where) in merged.items()}
    return settings


def _bad_value(exc: BadSetting, merged: Layer) -> InvalidInput:
    given, where = merged.get(exc.setting, (exc.given, "?"))
    return InvalidInput(f"bad setting {exc.setting} = {given!r} (from {where}): {exc.reason}",
                        hint="check refold.toml, REFOLD_* variables and flags")


# -- display ---------------------------------------------------------------------------------
def shown_value(settings: Settings, name: str) -> Any:
    """A setting's value for display: secrets masked, paths and dataclasses as plain data."""
    value = settings.value_of(name)
    if name in SECRET_SETTINGS and value:
        return ["***"] * len(value) if isinstance(value, list) else "***"
    if name == "db" and isinstance(value, str):
        from refold.store.urls import redact_url

        return redact_url(value)
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, tuple):
        return [records.asdict(v) if records.is_record(v) and not isinstance(v, type)
                else v for v in value]
    return value


def effective(settings: Settings) -> list[dict[str, Any]]:
    """Every setting with its section, displayed value and source (``refold config show``)."""
    return [{"name": name, "section": section_of(name), "value": shown_value(settings, name),
             "source": settings.source_of(name)} for name in SETTING_NAMES]


__all__ = [
    "BOUNDS",
    "COMPACTION_FIELDS",
    "ENV_PREFIX",
    "GENERAL",
    "SECTIONS",
    "SETTING_NAMES",
    "BadSetting",
    "Settings",
    "effective",
    "load_settings",
    "parse_text",
    "section_of",
    "unknown_env",
]
