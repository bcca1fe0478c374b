"""Configuration: one frozen pydantic-settings model.

Sources, highest precedence first: keyword arguments, environment variables prefixed
``REFUSAL_AUDIT_`` (nested values as JSON, e.g. ``REFUSAL_AUDIT_POLICY_BUNDLES``), the TOML
config file (``--config FILE``, else ``$REFUSAL_AUDIT_CONFIG``, else ``./refusal-audit.toml``
when it exists), then the defaults below. Secrets are ``SecretStr`` and never printed.
"""

from __future__ import annotations

import json
import os
import re
import tomllib
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field, SecretStr, field_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    SettingsError,
    TomlConfigSettingsSource,
)

from refusal_audit.alerts.settings import AlertSettings
from refusal_audit.audit.settings import AuditSettings
from refusal_audit.calibration.settings import CalibrationSettings
from refusal_audit.clarification.settings import ClarificationSettings
from refusal_audit.encoders.settings import EncoderSettings
from refusal_audit.report.settings import ReportSettings
from refusal_audit.review.settings import ReviewSettings
from refusal_audit.streaming.settings import StreamingSettings

if TYPE_CHECKING:
    from streams.clients import KafkaConfig

DEFAULT_CONFIG_FILE = Path("refusal-audit.toml")
_config_file: ContextVar[Path | None] = ContextVar("refusal_audit_config_file", default=None)


def _header_safe(key: str, where: str) -> str:
    """``key`` when an HTTP Authorization header can carry it (printable ASCII, no whitespace
    inside); else ``ConfigError`` naming ``where`` only."""
    if any(not c.isascii() or not c.isprintable() or c.isspace() for c in key.strip()):
        raise ConfigError(
            f"the API key in {where} has non-ASCII, whitespace or control characters inside "
            "(an HTTP header carries printable ASCII only): check it was not pasted with a "
            "typographic dash or quote"
        )
    return key


class Settings(
    StreamingSettings,
    AuditSettings,
    EncoderSettings,
    ReviewSettings,
    ClarificationSettings,
    AlertSettings,
    ReportSettings,
    CalibrationSettings,
    BaseSettings,
):
    """All settings of refusal-audit, composed of one group per capability (each room's
    ``settings.py``: :class:`~refusal_audit.streaming.settings.StreamingSettings`,
    :class:`~refusal_audit.audit.settings.AuditSettings`, ...) plus the shared ones below
    (state directory, warehouse, the HTTP servers' limits). Field names, config keys and
    environment variables are the same as when this was one flat class. See
    docs/configuration.md (generated from this class)."""

    model_config = SettingsConfigDict(
        env_prefix="REFUSAL_AUDIT_", frozen=True, extra="forbid", env_nested_delimiter=None
    )

    # storage
    data_dir: Path = Field(
        default=Path(".refusal-audit"), description="Local state directory (embedded warehouse)."
    )
    warehouse_dsn: str | None = Field(
        default=None,
        description="chdb:///abs/path (embedded) or http(s)://user@host:8123 (server); "
        "unset means chdb://<data_dir>/chdb.",
    )
    warehouse_database: str = Field(
        default="refusal_audit", description="ClickHouse database holding the tables."
    )
    warehouse_password: SecretStr | None = Field(
        default=None, description="Password for an http(s) warehouse, if not in the DSN."
    )
    warehouse_insert_retries: int = Field(
        default=5, ge=0, description="Attempts per insert on transient errors (backoff)."
    )

    # the HTTP servers (refusal-audit review serve, clarify serve)
    http_header_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        le=600,
        description="Seconds a client has to send a request's line and headers (from the "
        "connection's start or the previous response); then the connection is closed.",
    )
    http_body_timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        le=3600,
        description="Seconds a client has to send a request's body after its headers; then "
        "the connection is closed.",
    )
    http_keep_alive_seconds: int = Field(
        default=5, ge=1, le=600, description="Seconds an idle keep-alive connection is kept."
    )
    http_max_connections: int = Field(
        default=1000,
        ge=1,
        le=1_000_000,
        description="Open connections a server accepts in all (at most half the process's "
        "open-file limit); more are answered 503 and closed.",
    )
    http_max_connections_per_client: int = Field(
        default=100,
        ge=1,
        le=1_000_000,
        description="Open connections a server accepts from one peer address (behind a "
        "reverse proxy every connection comes from the proxy: raise it to the proxy's pool); "
        "more are answered 503 and closed.",
    )

    @field_validator("data_dir", mode="before")
    @classmethod
    def _data_dir_named(cls, value: object) -> object:
        if isinstance(value, str) and not value.strip():
            raise ValueError("data_dir must not be empty (use . for the current directory)")
        return value

    @property
    def resolved_warehouse_dsn(self) -> str:
        """The warehouse DSN, defaulting to an embedded chDB store under ``data_dir``."""
        if self.warehouse_dsn:
            return self.warehouse_dsn
        return f"chdb://{(self.data_dir / 'chdb').resolve()}"

    @property
    def resolved_encoder_dir(self) -> Path:
        """The sentence-encoder cache: ``encoder_dir``, else ``<data_dir>/encoders``."""
        return self.encoder_dir if self.encoder_dir is not None else self.data_dir / "encoders"

    @property
    def resolved_engine(self) -> Literal["local", "openai"]:
        """The engine to use: the setting, else openai when an endpoint or key is set."""
        if self.engine is not None:
            return self.engine
        configured = self.openai_base_url or self.openai_api_key or self.openai_api_key_file
        return "openai" if configured else "local"

    def kafka(self) -> KafkaConfig:
        """How every Kafka client of the application reaches the brokers
        (``streams.clients.KafkaConfig``): built here and nowhere else, from
        ``kafka_bootstrap_servers`` (the Kafka client library is imported on first use)."""
        from streams.clients import KafkaConfig

        return KafkaConfig(self.kafka_bootstrap_servers)

    def openai_key(self) -> str | None:
        """The API key: the setting, else the key file's first line, else $OPENAI_API_KEY.

        Raises ``ConfigError`` when the key file cannot be read, or a key has characters an
        HTTP header cannot carry (non-ASCII, whitespace or control characters inside): the
        message names where the key came from, never the key or the character's position.
        """
        if self.openai_api_key is not None:
            return _header_safe(self.openai_api_key.get_secret_value(), "openai_api_key")
        if self.openai_api_key_file is not None:
            try:
                text = self.openai_api_key_file.read_text(encoding="utf-8").strip()
            except UnicodeDecodeError:
                raise ConfigError("openai_api_key_file is not UTF-8 text") from None
            except OSError as exc:
                raise ConfigError(f"cannot read openai_api_key_file: {exc}") from exc
            return _header_safe(text, "openai_api_key_file")
        key = os.environ.get("OPENAI_API_KEY")
        return None if key is None else _header_safe(key, "$OPENAI_API_KEY")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        sources: list[PydanticBaseSettingsSource] = [init_settings, env_settings]
        path = _config_file.get()
        if path is not None:
            sources.append(TomlConfigSettingsSource(settings_cls, toml_file=path))
        return (*sources, file_secret_settings)


class ConfigError(ValueError):
    """Raised for a missing or invalid configuration file or setting."""


def load_settings(config_file: Path | None = None, **overrides: object) -> Settings:
    """Load settings from ``config_file`` (or the env/default file), the environment and overrides.

    Raises ``ConfigError`` when an explicitly named config file does not exist or a value is
    invalid.
    """
    from pydantic import ValidationError

    path = config_file
    if path is None and os.environ.get("REFUSAL_AUDIT_CONFIG"):
        path = Path(os.environ["REFUSAL_AUDIT_CONFIG"])
        if not path.is_file():
            raise ConfigError(f"REFUSAL_AUDIT_CONFIG names a missing file: {path}")
    elif path is None and DEFAULT_CONFIG_FILE.is_file():
        path = DEFAULT_CONFIG_FILE
    elif path is not None and not path.is_file():
        raise ConfigError(f"config file not found: {path}")
    token = _config_file.set(path)
    try:
        return Settings(**overrides)  # type: ignore[arg-type]
    except ValidationError as exc:
        raise ConfigError(describe_invalid(exc)) from exc
    except SettingsError as exc:  # a value that is not valid JSON for a list/map setting
        raise ConfigError(describe_unparsable(exc)) from exc
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc
    finally:
        _config_file.reset(token)


def _setting_names(field: str) -> str:
    """``field`` as a user writes it: the config key and its environment variable."""
    return f"{field} (REFUSAL_AUDIT_{field.upper()})"


def _example(field: str) -> str:
    """The field's default written as JSON (what a list or map setting looks like)."""
    info = Settings.model_fields.get(field)
    if info is None:
        return ""
    default = info.default_factory() if info.default_factory is not None else info.default  # type: ignore[call-arg]
    try:
        return f", e.g. '{json.dumps(default)}'" if isinstance(default, (list, tuple, dict)) else ""
    except TypeError:
        return ""


def describe_invalid(exc: Exception) -> str:
    """A pydantic ``ValidationError`` of ``Settings`` as one line per bad setting: the config
    key and environment variable, what is wrong, and the value given (no documentation
    links, no traceback)."""
    errors: list[dict[str, Any]] = list(getattr(exc, "errors", list)())
    if not errors:
        return f"invalid configuration: {exc}"
    lines = []
    for e in errors:
        loc = [str(part) for part in e.get("loc", ())]
        field = loc[0] if loc else "?"
        where = ".".join(loc[1:])
        given = e.get("input")
        shown = "" if isinstance(given, dict) else f" (given: {given!r})"
        message = str(e.get("msg", "invalid")).removeprefix("Value error, ")
        item = f" item {where}" if where else ""
        lines.append(f"{_setting_names(field)}{item}: {message}{shown}{_example(field)}")
    return "invalid configuration: " + "; ".join(lines)


_UNPARSABLE = re.compile(r'field "(?P<field>\w+)" from source "(?P<source>\w+)"')


def describe_unparsable(exc: Exception) -> str:
    """A pydantic-settings ``SettingsError`` (a list or map setting whose environment value
    is not JSON) as one line naming the setting, its environment value and the JSON form
    it needs."""
    m = _UNPARSABLE.search(str(exc))
    if m is None:
        return f"invalid configuration: {exc} (lists and maps are JSON)"
    field = m.group("field")
    given = os.environ.get(f"REFUSAL_AUDIT_{field.upper()}")
    shown = f" (given: {given!r})" if given is not None else ""
    return (
        f"invalid configuration: {_setting_names(field)} is not valid JSON{shown}: lists "
        f"and maps are written in JSON{_example(field)}"
    )


def settings_reference() -> str:
    """The table of docs/configuration.md (Markdown rows), generated from ``Settings``: the
    shared settings first, then each capability's group in the order of ``Settings``'s bases,
    with the group named in the first column."""
    rows = [
        "| group | setting | environment variable | default | meaning |",
        "| --- | --- | --- | --- | --- |",
    ]
    for group, name, field in _fields_by_group():
        if name == "policy_bundles":
            default = "example bundle"
        elif field.default_factory is not None:
            default = str(field.default_factory())  # type: ignore[call-arg]
        elif field.default is None:
            default = "unset"
        elif isinstance(field.default, tuple) and all(isinstance(v, str) for v in field.default):
            default = ",".join(field.default)
        elif isinstance(field.default, tuple):
            default = str(list(field.default))  # a JSON list, as the environment takes it
        else:
            default = str(field.default)
        rows.append(
            f"| {group} | `{name}` | `REFUSAL_AUDIT_{name.upper()}` | `{default}` | "
            f"{field.description} |"
        )
    return "\n".join(rows)


def _fields_by_group() -> list[tuple[str, str, FieldInfo]]:
    """``(group, name, field)`` of every setting: the shared ones (group ``shared``), then
    each group class among ``Settings``'s bases in order (its room's name), fields in the
    order they are written."""
    groups: list[type[BaseModel]] = [
        b for b in Settings.__bases__ if issubclass(b, BaseModel) and b is not BaseSettings
    ]
    owned = {name for b in groups for name in b.model_fields}
    out = [("shared", n, f) for n, f in Settings.model_fields.items() if n not in owned]
    for base in groups:
        room = base.__module__.split(".")[1]
        out += [(room, n, Settings.model_fields[n]) for n in base.model_fields]
    return out
