"""The one configuration loader (INTERFACES.md), used by the CLI, the client and the Dagster resources.

Precedence: command-line flag > environment variable `SESSIONMEM_<KEY>` (dots become `__`) > config file
(`--config PATH`, else `./sessionmem.toml`, else `~/.config/sessionmem/config.toml`) > defaults. Every value
remembers where it came from so `sessionmem config` can say so. This is the only module that reads the environment.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any


ENV_PREFIX = "SESSIONMEM_"
LOCAL_CONFIG_NAME = "sessionmem.toml"
USER_CONFIG = Path("~/.config/sessionmem/config.toml")
SECRET_KEYS = frozenset({"embedding.api_key", "llm.api_key"})
PATH_KEYS = frozenset({"warehouse", "staging.path"})
PATH_LIST_KEYS = frozenset({"sources"})
PATTERN_LIST_KEYS = frozenset({"privacy.exclude_paths", "privacy.exclude_projects"})  # globs: only `~` expanded


def _machine_timezone() -> str:
    """The machine's IANA zone name when it has one, else its UTC offset name."""
    tz_env = os.environ.get("TZ")
    if tz_env:
        return tz_env
    localtime = Path("/etc/localtime")
    if localtime.is_symlink():
        target = str(localtime.resolve())
        if "zoneinfo/" in target:
            return target.split("zoneinfo/", 1)[1]
    return datetime.now().astimezone().tzname() or "UTC"


# key -> default; the default's type is the key's type (None means an optional string).
DEFAULTS: dict[str, Any] = {
    "warehouse": "warehouse/sessionmem.duckdb",
    "sources": [],
    "timezone": None,  # filled with the machine's zone at load time
    "embedding.provider": "local",
    "embedding.model": None,  # provider default: all-MiniLM-L6-v2 (local), text-embedding-3-small (openai)
    "embedding.base_url": None,
    "embedding.dimensions": 0,  # 0: the model's own
    "embedding.batch_size": 64,
    "embedding.api_key": None,
    "embedding.max_in_flight": 4,  # remote embedders: requests sent at once (a remote API is latency-bound)
    "embedding.batch_api": False,  # remote embedders: a large backlog goes through the provider's Batch API
    "embedding.batch_min_backlog": 1000,  # texts to embed below which plain requests are used
    "llm.provider": "none",
    "llm.model": "gpt-4o-mini",
    "llm.base_url": None,
    "llm.api_key": None,
    "llm.max_in_flight": 4,  # chat requests sent at once (topics, summaries); Retry-After pauses all of them
    "llm.batch_api": False,  # summaries' chat requests go through the provider's Batch API
    "llm.batch_min_backlog": 100,  # summary requests below which plain requests are used
    "staging.path": None,  # where parallel compute steps leave results for the writer; default: beside the warehouse
    "summaries.enabled": True,
    "summaries.idle_minutes": 30,
    "summaries.message_threshold": 20,
    "chunking.max_tokens": 500,
    "chunking.max_chunks": 2000,
    "validation.max_bad_line_share": 0.5,
    "search.rrf_k": 60,
    "search.vector_weight": 1.0,
    "search.bm25_weight": 1.0,
    "search.session_boost": 0.15,
    "search.time_boost": 0.3,
    "sensors.files_interval_minutes": 1.0,
    "sensors.summaries_interval_minutes": 5.0,
    "sensors.batches_interval_minutes": 10.0,  # how often Dagster polls open provider batches
    "privacy.exclude_paths": [],  # globs over session file paths (a pattern without "/" matches any one folder name)
    "privacy.exclude_projects": [],  # globs over project names and sessions' working folders
}
CHOICES: dict[str, tuple[str, ...]] = {
    "embedding.provider": ("local", "openai"),
    "llm.provider": ("none", "openai"),
}


class ConfigError(ValueError):
    """A configuration value or file is wrong; the message names the key, the origin and what is allowed."""


@dataclass(frozen=True)
class Settings:
    """The effective configuration: flat dotted keys to values, and each value's origin."""

    values: Mapping[str, Any]
    origins: Mapping[str, str]
    config_file: Path | None = None
    base_dir: Path = field(default_factory=Path.cwd)

    def __getitem__(self, key: str) -> Any:
        return self.values[key]

    @property
    def warehouse(self) -> Path:
        return Path(self.values["warehouse"])

    @property
    def sources(self) -> tuple[Path, ...]:
        return tuple(Path(p) for p in self.values["sources"])

    @property
    def timezone(self) -> str:
        return self.values["timezone"]

    @property
    def remote_embeddings(self) -> bool:
        return self.values["embedding.provider"] != "local"

    @property
    def llm_enabled(self) -> bool:
        return self.values["llm.provider"] != "none"

    def with_overrides(self, overrides: Mapping[str, Any], origin: str = "flag") -> Settings:
        """A copy with some values replaced (flags, or a test's choices), checked like any other value."""
        values, origins = dict(self.values), dict(self.origins)
        for key, value in overrides.items():
            if value is None:
                continue
            values[key] = _coerce(key, value, origin, Path.cwd())
            origins[key] = origin
        return Settings(values, origins, self.config_file, self.base_dir)

    def display(self) -> list[tuple[str, str, str]]:
        """(key, value, origin) rows with secrets masked."""
        rows = []
        for key in sorted(self.values):
            value = self.values[key]
            if key in SECRET_KEYS and value:
                shown = f"{str(value)[:3]}…{str(value)[-2:]}" if len(str(value)) > 8 else "***"
            elif isinstance(value, list):
                shown = os.pathsep.join(str(v) for v in value)
            else:
                shown = "" if value is None else str(value)
            rows.append((key, shown, self.origins[key]))
        return rows


def find_config_file(explicit: str | Path | None, cwd: Path, home: Path) -> Path | None:
    """The config file in precedence order; an explicit path must exist."""
    if explicit:
        path = Path(explicit).expanduser()
        if not path.is_file():
            raise ConfigError(f"{path}: config file not found (given with --config)")
        return path.resolve()
    local = cwd / LOCAL_CONFIG_NAME
    if local.is_file():
        return local.resolve()
    user = home / USER_CONFIG.relative_to("~")
    return user.resolve() if user.is_file() else None


def _flatten(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in table.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(_flatten(value, dotted + "."))
        else:
            flat[dotted] = value
    return flat


def _coerce(key: str, value: Any, origin: str, base_dir: Path) -> Any:
    """The value in its key's type; strings from the environment are parsed; paths resolved against base_dir."""
    if key not in DEFAULTS:
        known = ", ".join(sorted(DEFAULTS))
        raise ConfigError(f"{origin}: unknown configuration key '{key}' (known keys: {known})")
    default = DEFAULTS[key]
    try:
        if isinstance(default, bool):
            if isinstance(value, str):
                lowered = value.strip().lower()
                if lowered not in ("1", "0", "true", "false", "yes", "no", "on", "off"):
                    raise ValueError(f"expected true or false, got {value!r}")
                value = lowered in ("1", "true", "yes", "on")
            value = bool(value)
        elif isinstance(default, int):
            value = int(value)
        elif isinstance(default, float):
            value = float(value)
        elif isinstance(default, list):
            if isinstance(value, str):
                value = [part for part in value.split(os.pathsep) if part]
            if not isinstance(value, list):
                raise ValueError(f"expected a list, got {value!r}")
            value = [str(v) for v in value]
        elif value is not None:
            value = str(value)
    except ValueError as exc:
        raise ConfigError(f"{origin}: {key}: {exc}") from None
    if key in CHOICES and value not in CHOICES[key]:
        raise ConfigError(f"{origin}: {key} must be one of {', '.join(CHOICES[key])}, got {value!r}")
    if key in PATH_KEYS and value:
        value = str((base_dir / Path(value).expanduser()).resolve())
    if key in PATH_LIST_KEYS:
        value = [str((base_dir / Path(v).expanduser()).resolve()) for v in value]
    if key in PATTERN_LIST_KEYS:
        value = [os.path.expanduser(v) for v in value]
    return value


def load_settings(
    config_path: str | Path | None = None,
    flags: Mapping[str, Any] | None = None,
    *,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    home: Path | None = None,
) -> Settings:
    """Defaults, then the config file, then `SESSIONMEM_*` variables, then flags (None flags are ignored)."""
    env = os.environ if env is None else env
    cwd = (cwd or Path.cwd()).resolve()
    home = home or Path.home()
    values: dict[str, Any] = {}
    origins: dict[str, str] = {}
    for key, default in DEFAULTS.items():
        values[key] = _coerce(key, default, "default", cwd) if default is not None else None
        origins[key] = "default"
    values["timezone"] = _machine_timezone()
    origins["timezone"] = "default (machine)"

    config_file = find_config_file(config_path, cwd, home)
    base_dir = config_file.parent if config_file else cwd
    if config_file:
        try:
            table = tomllib.loads(config_file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
            raise ConfigError(f"{config_file}: cannot read the config file: {exc}") from None
        for key, value in _flatten(table).items():
            values[key] = _coerce(key, value, str(config_file), base_dir)
            origins[key] = str(config_file)

    for name, raw in env.items():
        if not name.startswith(ENV_PREFIX) or name == ENV_PREFIX + "HOME":
            continue
        key = name[len(ENV_PREFIX) :].lower().replace("__", ".")
        values[key] = _coerce(key, raw, f"env {name}", cwd)
        origins[key] = f"env {name}"

    for section in ("embedding", "llm"):  # the usual key variable, used only once a remote provider is chosen
        key = f"{section}.api_key"
        if values[f"{section}.provider"] == "openai" and not values[key] and env.get("OPENAI_API_KEY"):
            values[key], origins[key] = env["OPENAI_API_KEY"], "env OPENAI_API_KEY"

    settings = Settings(values, origins, config_file, base_dir)
    return settings.with_overrides(flags or {}, "flag")


def render_config_file(sources: list[Path], warehouse: str) -> str:
    """A commented starting config for `sessionmem init`."""
    source_list = ", ".join(f'"{p}"' for p in sources)
    return f"""# sessionmem configuration (see README: Configuration). Precedence: flag > SESSIONMEM_* env > this file.
warehouse = "{warehouse}"
sources = [{source_list}]
# timezone = "Europe/Berlin"

[embedding]
provider = "local"            # "openai" sends chunk text to the embedding service at base_url
# model = "text-embedding-3-small"
# base_url = "http://localhost:11434/v1"
# dimensions = 1536

[llm]
provider = "none"             # "openai" sends redacted transcripts to the chat model at base_url
# model = "gpt-4o-mini"
# base_url = "http://localhost:11434/v1"

[summaries]
enabled = true
idle_minutes = 30
message_threshold = 20

[chunking]
max_tokens = 500

[privacy]                     # kept out of memory (README: Privacy); also .sessionmem-ignore files and <private> tags
# exclude_paths = ["*/clients/acme/*", "scratch"]
# exclude_projects = ["acme-*", "~/work/secret/*"]
"""


def detect_source_roots(home: Path) -> list[Path]:
    """Transcript folders of the agents this machine has: Claude Code, Codex CLI, and every registered format's
    default Linux and macOS folders (Gemini CLI, Cline/Roo Code, Cursor, ...) that exist."""
    from sessionmem_pipeline.core.formats import REGISTRY  # every format's parser: only when looking for sources

    candidates = [home / ".claude" / "projects", home / ".codex" / "sessions"]
    return [path for path in candidates if path.is_dir()] + REGISTRY.default_locations(home)
