"""Settings for every surface: defaults < ``refold.toml`` < ``REFOLD_*`` env < flags.

The library proper never reads the environment: this module is the explicit loader, and only
the surfaces (``cli/``, ``server/``) call ``load_settings``. ``refold.assembly`` turns the
result into parts (store, summarizer, memory, engine). ``refold.toml`` is read from the data
home (``REFOLD_HOME`` / ``--home``).
"""

from __future__ import annotations

import os
import tomllib
from pathlib import Path
from typing import Any

import platformdirs
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from refold.errors import InvalidInput

ENV_PREFIX = "REFOLD_"


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
    summarizer: str = "builtin"  # builtin | llm
    summarizer_url: str | None = None  # defaults to upstream
    summarizer_model: str | None = None  # defaults to model
    summarizer_api_key: str | None = None
    # serve
    api_keys: list[str] = Field(default_factory=list)  # client keys; empty: no auth
    host: str = "127.0.0.1"
    port: int = 8765
    max_body_bytes: int = 16 * 1024 * 1024
    header_timeout: float = 10.0  # seconds for a request's headers to arrive (slow clients)
    body_timeout: float = 30.0  # seconds for a request's whole body to arrive
    max_json_depth: int = 100  # deeper request JSON is a 400
    # SQLite commit durability for serve: NORMAL (WAL) survives a proxy crash, not power loss;
    # FULL fsyncs every commit. The library and the other commands always use FULL.
    serve_sqlite_synchronous: str = "NORMAL"
    # memory
    memory_approval: str = "allow"  # allow | stage | block
    memory_backend: str = "file"  # file (<home>/memories) | db (the refold store, by profile)
    memory_profile: str = "default"  # the profile keying memory rows when memory_backend=db
    # an external memory provider (entry point in refold.memory_providers) beside the builtin
    memory_provider: str | None = None
    rotate_on_compaction: bool = False

    @property
    def db_url(self) -> str:
        return self.db or str(self.home / "refold.db")

    @property
    def memories_dir(self) -> Path:
        return self.home / "memories"


def _env_values(environ: dict[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, field in Settings.model_fields.items():
        raw = environ.get(ENV_PREFIX + name.upper())
        if raw is None or raw == "":
            continue
        if field.annotation == list[str]:
            out[name] = [item.strip() for item in raw.split(",") if item.strip()]
        else:
            out[name] = raw
    return out


def _toml_values(home: Path) -> dict[str, Any]:
    path = home / "refold.toml"
    if not path.is_file():
        return {}
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise InvalidInput(f"cannot read {path}: {exc}", hint="fix or remove the file") from exc
    return dict(data.get("refold", data))


def load_settings(flags: dict[str, Any] | None = None,
                  environ: dict[str, str] | None = None) -> Settings:
    """Merge defaults, refold.toml, REFOLD_* env and explicit flags (None flags are ignored)."""
    env = dict(os.environ if environ is None else environ)
    given = {k: v for k, v in (flags or {}).items() if v is not None}
    env_vals = _env_values(env)
    home_raw = given.get("home") or env_vals.get("home")
    home = Path(home_raw).expanduser() if home_raw else Settings().home
    merged: dict[str, Any] = {}
    merged.update(_toml_values(home))
    merged.update(env_vals)
    merged.update(given)
    merged["home"] = home
    try:
        return Settings(**merged)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise InvalidInput(f"bad setting {where}: {first.get('msg')}",
                           hint="check refold.toml, REFOLD_* variables and flags") from exc
