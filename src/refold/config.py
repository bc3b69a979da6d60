"""Settings for every surface: defaults < ``refold.toml`` < ``REFOLD_*`` env < flags.

The library proper never reads the environment: this module is the explicit loader, and only
the surfaces (``cli/``, ``server/``) call ``load_settings``. ``refold.assembly`` turns the
result into parts (store, summarizer, memory, engine). ``refold.toml`` is read from the data
home (``REFOLD_HOME`` / ``--home``).

Every setting has one flat name (``threshold_percent``, ``summarizer_timeout``, ``api_keys``),
which is also its ``REFOLD_<NAME>`` variable. In ``refold.toml`` a setting goes at the top
level (or under ``[refold]``) by that name, or in its section's table by its short name
(``[compaction] threshold_percent``, ``[summarizer] timeout``, ``[memory] enabled``,
``[serve] port``). The compaction settings are exactly the fields of ``CompactionPolicy``, so a
field added there is reachable here with no other change. Unknown keys are an error naming the
key and the valid ones; ``Settings.source_of(name)`` says where each value came from.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import tomllib
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import platformdirs
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError, model_validator

from refold.compaction.policy import CompactionPolicy
from refold.errors import InvalidInput

ENV_PREFIX = "REFOLD_"
DEFAULT_SOURCE = "default"


class Settings(BaseModel):
    """Every setting a surface can take. Field names map to ``REFOLD_<NAME>`` env variables."""

    model_config = ConfigDict(extra="forbid")

    home: Path = Field(default_factory=lambda: Path(platformdirs.user_data_dir("refold")))
    db: str | None = None  # database URL or path; default: <home>/refold.db
    model: str = "gpt-4o-mini"
    context_length: int = 128_000
    # upstream LLM (serve / chat / llm summarizer)
    upstream: str | None = None  # OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1
    upstream_api_key: str | None = None
    upstream_format: str = "openai"  # openai (chat completions) | anthropic (Messages API)
    # summarizer
    summarizer: str = "builtin"  # builtin | llm
    summarizer_url: str | None = None  # defaults to upstream
    summarizer_model: str | None = None  # defaults to model
    summarizer_api_key: str | None = None
    summarizer_timeout: float = Field(default=120.0, gt=0)  # seconds for one summary, all attempts
    summarizer_cache_friendly: bool = False  # replay the conversation prefix (prompt caches)
    abort_on_summary_failure: bool = False  # a failed llm summary aborts (no builtin fallback)
    # serve
    api_keys: list[str] = Field(default_factory=list)  # client keys; empty: no auth
    host: str = "127.0.0.1"
    port: int = Field(default=8765, ge=0, le=65535)
    max_body_bytes: int = Field(default=16 * 1024 * 1024, gt=0)
    header_timeout: float = Field(default=10.0, gt=0)  # seconds for a request's headers to arrive
    body_timeout: float = Field(default=30.0, gt=0)  # seconds for a request's whole body to arrive
    max_json_depth: int = Field(default=100, ge=2)  # deeper request JSON is a 400
    # SQLite commit durability for serve: NORMAL (WAL) survives a proxy crash, not power loss;
    # FULL fsyncs every commit. The library and the other commands always use FULL.
    serve_sqlite_synchronous: str = "NORMAL"
    serve_workers: int = Field(default=1, ge=1)  # processes accepting on serve's one port
    serve_session_cache: int = Field(default=256, ge=1)  # live session runtimes kept (LRU)
    token_cache_entries: int = Field(default=16_384, ge=0)  # message counts kept (LRU)
    # memory
    memory_enabled: bool = True  # off: no snapshot, no memory tool, no review
    memory_approval: str = "allow"  # allow | stage | block
    memory_backend: str = "file"  # file (<home>/memories) | db (the refold store, by profile)
    memory_profile: str = "default"  # the profile keying memory rows when memory_backend=db
    # an external memory provider (entry point in refold.memory_providers) beside the builtin
    memory_provider: str | None = None
    memory_char_limit: int = Field(default=2200, gt=0)  # MEMORY.md
    user_char_limit: int = Field(default=1375, gt=0)  # USER.md
    memory_review_every_turns: int = Field(default=10, ge=0)  # 0: never by turns
    memory_review_every_tool_iterations: int = Field(default=15, ge=0)  # 0: never by tool calls
    # references (refold.references): the directory the proxy lets @file/@folder/@diff/@git
    # read (None: off in the proxy; `refold chat` and `refold expand` use their working dir)
    allow_local_refs: Path | None = None
    # skills (refold.skills): tool iterations between skill reviews (0: no review)
    skills_creation_nudge_interval: int = 15
    # cost: per-model prices overriding refold.pricing's table, USD per million tokens:
    # {"model": {"input": …, "output": …, "cache_read": …, "cache_write": …}}
    pricing: dict[str, dict[str, float]] = Field(default_factory=dict)
    # import: the largest transcript `refold import` reads (bytes; 0 = no limit)
    import_max_bytes: int = Field(default=64 * 1024 * 1024, ge=0)
    # compaction: every field of CompactionPolicy (flat names fold in here)
    compaction: CompactionPolicy = Field(default_factory=CompactionPolicy)

    _sources: dict[str, str] = PrivateAttr(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _fold_compaction(cls, data: Any) -> Any:
        """``Settings(threshold_percent=0.6)`` means ``compaction.threshold_percent``."""
        if not isinstance(data, dict):
            return data
        flat = {k: data[k] for k in COMPACTION_FIELDS if k in data}
        if not flat:
            return data
        rest = {k: v for k, v in data.items() if k not in flat}
        base = rest.get("compaction", {})
        if dataclasses.is_dataclass(base) and not isinstance(base, type):
            base = {f.name: getattr(base, f.name) for f in dataclasses.fields(base)}
        rest["compaction"] = {**base, **flat}
        return rest

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


COMPACTION_FIELDS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(CompactionPolicy))
_OWN_FIELDS = tuple(n for n in Settings.model_fields if n != "compaction")
SETTING_NAMES: tuple[str, ...] = (*_OWN_FIELDS, *COMPACTION_FIELDS)

# Tables in refold.toml: short name -> setting. A table also takes the settings' full names.
SECTIONS: dict[str, dict[str, str]] = {
    "compaction": {name: name for name in COMPACTION_FIELDS},
    "summarizer": {"kind": "summarizer", "url": "summarizer_url", "endpoint": "summarizer_url",
                   "model": "summarizer_model", "api_key": "summarizer_api_key",
                   "timeout": "summarizer_timeout", "cache_friendly": "summarizer_cache_friendly",
                   "abort_on_failure": "abort_on_summary_failure"},
    "memory": {"enabled": "memory_enabled", "approval": "memory_approval",
               "backend": "memory_backend", "profile": "memory_profile",
               "provider": "memory_provider", "memory_char_limit": "memory_char_limit",
               "user_char_limit": "user_char_limit",
               "review_every_turns": "memory_review_every_turns",
               "review_every_tool_iterations": "memory_review_every_tool_iterations"},
    "serve": {"api_keys": "api_keys", "host": "host", "port": "port",
              "max_body_bytes": "max_body_bytes", "header_timeout": "header_timeout",
              "body_timeout": "body_timeout", "max_json_depth": "max_json_depth",
              "sqlite_synchronous": "serve_sqlite_synchronous", "workers": "serve_workers",
              "session_cache": "serve_session_cache",
              "upstream": "upstream", "upstream_api_key": "upstream_api_key"},
}
SECRET_SETTINGS = frozenset({"upstream_api_key", "summarizer_api_key", "api_keys"})


def section_of(name: str) -> str:
    """The table a setting is shown under (``general`` when it has none)."""
    for section, keys in SECTIONS.items():
        if name in keys.values():
            return section
    return "general"


def _type_of(name: str) -> Any:
    if name in COMPACTION_FIELDS:
        return typing.get_type_hints(CompactionPolicy)[name]
    return Settings.model_fields[name].annotation


def _unknown(key: str, where: str, valid: list[str]) -> InvalidInput:
    close = difflib.get_close_matches(key, valid, n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    return InvalidInput(f"unknown setting {key!r} in {where}",
                        hint=hint + "valid keys: " + ", ".join(sorted(valid)))


# -- values from text (REFOLD_* variables and --set) -----------------------------------------
def parse_text(name: str, raw: str) -> Any:
    """A setting's value from text: lists are comma-separated, ``overrides`` is JSON, an
    optional number takes ``none``; everything else is validated by the model."""
    kind = _type_of(name)
    origin = typing.get_origin(kind)
    args = typing.get_args(kind)
    if name == "overrides":
        try:
            return json.loads(raw)
        except ValueError as exc:
            raise InvalidInput(f"{name}: not JSON: {exc}",
                               hint='e.g. [{"match": "gpt-4o", "threshold_percent": 0.6}]') from exc
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
    ignored = {"REFOLD_DEBUG", "REFOLD_TEST_POSTGRES_URL", "REFOLD_REQUIRE_POSTGRES"}
    return sorted(k for k in environ if k.startswith(ENV_PREFIX) and k not in known | ignored)


def _table_layer(data: Mapping[str, Any], where: str) -> Layer:
    """Top-level keys by full name, ``[section]`` tables by short or full name."""
    out: Layer = {}
    top_valid = [*SETTING_NAMES, *SECTIONS]
    for key, value in data.items():
        if key == "refold" and isinstance(value, dict):
            out.update(_table_layer(value, where))
        elif key in SECTIONS and isinstance(value, dict):
            keys = SECTIONS[key]
            for sub, item in value.items():
                name = keys.get(sub) or (sub if sub in keys.values() else None)
                if name is None:
                    raise _unknown(f"{key}.{sub}", where, [f"{key}.{k}" for k in keys])
                out[name] = (item, where)
        elif key in SETTING_NAMES:
            out[key] = (value, where)
        else:
            raise _unknown(key, where, top_valid)
    return out


def _toml_layer(home: Path) -> Layer:
    path = home / "refold.toml"
    if not path.is_file():
        return {}
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
    except ValidationError as exc:
        raise _bad_value(exc, merged) from exc
    settings._sources = {name: where for name, (_, where) in merged.items()}
    return settings


def _bad_value(exc: ValidationError, merged: Layer) -> InvalidInput:
    first = exc.errors()[0]
    loc = [str(p) for p in first.get("loc", ())]
    name = loc[1] if loc[:1] == ["compaction"] and len(loc) > 1 else (loc[0] if loc else "?")
    given, where = merged.get(name, (first.get("input"), "?"))
    return InvalidInput(f"bad setting {name} = {given!r} (from {where}): {first.get('msg')}",
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
        return [dataclasses.asdict(v) if dataclasses.is_dataclass(v) and not isinstance(v, type)
                else v for v in value]
    return value


def effective(settings: Settings) -> list[dict[str, Any]]:
    """Every setting with its section, displayed value and source (``refold config show``)."""
    return [{"name": name, "section": section_of(name), "value": shown_value(settings, name),
             "source": settings.source_of(name)} for name in SETTING_NAMES]


__all__ = ["COMPACTION_FIELDS", "ENV_PREFIX", "SECTIONS", "SETTING_NAMES", "Settings",
           "effective", "load_settings", "parse_text", "section_of", "unknown_env"]
