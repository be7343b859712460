"""Settings, each declared once: its type, default, variable and description.

Three layers, each over the one before: the defaults here (they work locally),
the CLI's config file (``spotline.shared.settings_file``, written by ``spotline deploy``),
then the environment (``SPOTLINE_<NAME>``; the project also from
``GOOGLE_CLOUD_PROJECT``). Cloud Functions get every setting as a variable from
``to_env()`` at deploy and read no config file.

A bad value anywhere is one ``SettingsError`` naming every bad variable, its
value and what it should be.
"""

from __future__ import annotations

import ipaddress
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AliasChoices, Field, ValidationError, field_validator, model_validator
from pydantic.fields import FieldInfo
from pydantic_settings import (
    BaseSettings,
    JsonConfigSettingsSource,
    NoDecode,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
)

from spotline.shared.domain.bounds import JOB_ID_PATTERN as USER_PATTERN
from spotline.shared.domain.errors import SpotlineError
from spotline.shared.domain.pricing import CoolingRule
from spotline.shared.domain.tenancy import user_prefix
from spotline.shared.settings_file import config_path
from spotline.shared.topics import TOPICS

__all__ = ["DEFAULT_ZONES", "TOPICS", "Loaded", "Settings", "SettingsError", "load", "variables"]

DEFAULT_ZONES = {
    "us-central1": ("us-central1-a", "us-central1-b", "us-central1-c", "us-central1-f"),
    "us-east1": ("us-east1-b", "us-east1-c", "us-east1-d"),
    "europe-west4": ("europe-west4-a", "europe-west4-b", "europe-west4-c"),
}

ENV_PREFIX = "SPOTLINE_"
Origin = Literal["default", "config", "env", "flag"]
_DEFAULT_REGION = "us-central1"


class SettingsError(SpotlineError, ValueError):
    """One or more settings are bad; ``str()`` names each: where, value, expected."""

    def __init__(self, problems: list[str]) -> None:
        self.problems = problems
        count = "a bad setting" if len(problems) == 1 else f"{len(problems)} bad settings"
        super().__init__(f"spotline: {count}:\n" + "\n".join(f"  {p}" for p in problems))


class Settings(BaseSettings):
    """What the functions and the CLI are configured with.

    Built with keywords (``Settings(project="p", region="us-east1")``) it is
    exactly those keywords over the defaults; ``from_env`` reads the layers.
    """

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        case_sensitive=True,
        frozen=True,
        extra="forbid",
        validate_by_name=True,
    )

    project: str = Field(
        default="spotline-local",
        min_length=1,
        description="the Google Cloud project (also read from GOOGLE_CLOUD_PROJECT)",
        validation_alias=AliasChoices("project", "SPOTLINE_PROJECT", "GOOGLE_CLOUD_PROJECT"),
    )
    region: str = Field(
        default=_DEFAULT_REGION,
        min_length=1,
        description="where the functions and the schedule run",
    )
    zones: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description="zones VMs are tried in, in order (comma list; default: the region's)",
    )
    compute_endpoint: str | None = Field(
        default=None,
        description="Compute Engine's API endpoint (default: compute.googleapis.com; "
        "locally, the local cloud's URL)",
    )
    storage_root: str = Field(
        default="file:///tmp/spotline-storage",
        min_length=1,
        description="checkpoints and outputs go under it (gs://BUCKET/PREFIX in the cloud)",
    )
    image: str = Field(
        default="",
        description="the VMs' image (default: the project's spotline-agent image family)",
    )
    service_account: str | None = Field(
        default=None,
        description="the VMs' service account (default: Compute Engine's default)",
    )
    heartbeat_s: float = Field(
        default=30.0,
        gt=0,
        description="seconds between a VM's heartbeats",
    )
    max_event_age_s: float = Field(
        default=3600.0,
        gt=0,
        description="older deliveries are dropped with a log line (seconds)",
    )
    # The reaper's limits: a booted VM silent for stall_timeout_s, or a VM not
    # booted after boot_timeout_s, is stalled; a job left in REQUESTING_SERVER
    # for request_timeout_s (its function died) is placed again. 0 is allowed:
    # at the next tick (tests use it).
    stall_timeout_s: float = Field(
        default=300.0,
        ge=0,
        description="a booted VM silent this long (seconds) is stalled",
    )
    boot_timeout_s: float = Field(
        default=600.0,
        ge=0,
        description="a VM not booted after this long (seconds) is stalled",
    )
    request_timeout_s: float = Field(
        default=120.0,
        ge=0,
        description="a job requesting a VM this long (seconds) is placed again",
    )
    # A running job's cost in Firestore is at most this old: the reaper prices
    # it again then, not at every tick (one write per running job a minute
    # was most of a 10,000-job sweep).
    cost_refresh_s: float = Field(
        default=300.0,
        ge=0,
        description="the reaper prices a running job's cost so far this often (seconds)",
    )
    reaper_page_size: int = Field(
        default=500,
        ge=1,
        le=5000,
        description="documents per page the reaper tick hands out (users: a tenth as many)",
    )
    reaper_page_max_age_s: float = Field(
        default=60.0,
        gt=0,
        description="a reaper page delivered later than this (seconds) is dropped",
    )
    max_active_jobs: int = Field(
        default=5,
        ge=1,
        description="active jobs per user",
    )
    # Cooling price escalation: a baseline, then a unit per minute.
    cooling_baseline_min: int = Field(
        default=10,
        ge=0,
        description="minutes a cooling Spot VM is held at the Spot price",
    )
    cooling_unit: float = Field(
        default=0.01,
        gt=0,
        le=1,
        description="share of the gap to on-demand added per minute after the baseline",
    )
    max_active_instances: int = Field(
        default=5,
        ge=1,
        description="active VMs per user",
    )
    max_stopped_instances: int = Field(
        default=4,
        ge=0,
        description="stopped VMs kept per user for reuse",
    )
    # SECURITY.md: the mode in which spotline knows who submits and cancels.
    user_topics: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description="users who each publish on their own submit and cancel topics "
        "(spotline-submit-u-USER, spotline-cancel-u-USER; comma list), whose VMs publish "
        "on their own event topics (spotline-epoch-done-u-USER, ...); when set, only "
        "those topics are obeyed",
    )

    # docs/guides/notifications.md: where a job's webhook may go besides public
    # addresses (and over plain http); locally 127.0.0.0/8 for a test receiver.
    webhook_allowed_networks: Annotated[tuple[str, ...], NoDecode] = Field(
        default=(),
        description="networks (CIDR, comma list) a job's webhook_url may reach besides public "
        "addresses, plain http included; the metadata server never",
    )

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Keyword construction reads nothing else: from_env reads the layers
        # from the mapping it is given, which need not be os.environ.
        return (init_settings,)

    @field_validator("webhook_allowed_networks", mode="after")
    @classmethod
    def _networks(cls, networks: tuple[str, ...]) -> tuple[str, ...]:
        for network in networks:
            try:
                ipaddress.ip_network(network, strict=False)
            except ValueError as err:
                raise ValueError(f"{network}: not a network such as 127.0.0.0/8 ({err})") from err
        return networks

    @field_validator("zones", "user_topics", "webhook_allowed_networks", mode="before")
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            return tuple(item.strip() for item in value.split(",") if item.strip())
        return value

    @field_validator("user_topics", mode="after")
    @classmethod
    def _user_names(cls, users: tuple[str, ...]) -> tuple[str, ...]:
        bad = [user for user in users if not re.fullmatch(USER_PATTERN, user)]
        if bad:
            raise ValueError(f"{', '.join(bad)}: a user is lowercase letters, digits and -")
        return tuple(sorted(set(users)))

    @model_validator(mode="before")
    @classmethod
    def _derived_defaults(cls, data: Any) -> Any:
        """The region's zones and the project's image family, unless given."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        project = _given(data, "project")
        region = data.get("region", cls.model_fields["region"].default)
        if "zones" not in data and isinstance(region, str):
            data["zones"] = DEFAULT_ZONES.get(region, ())
        if not data.get("image"):
            name = project if isinstance(project, str) else cls.model_fields["project"].default
            data["image"] = f"projects/{name}/global/images/family/spotline-agent"
        return data

    @classmethod
    def from_env(
        cls, env: Mapping[str, str] | None = None, *, config_file: bool = True
    ) -> Settings:
        """The defaults, then the config file (unless ``config_file`` is false),
        then ``env`` (``os.environ`` when None). Raises SettingsError."""
        return load(env, config_file=config_file).settings

    def to_env(self) -> dict[str, str]:
        """The environment that ``from_env`` reads back as these settings: what
        ``spotline deploy`` gives the functions. Unset (empty) values are left
        out, so empty zones read back as the region's."""
        env = {}
        for name in type(self).model_fields:
            text = _text(getattr(self, name))
            if text:
                env[variables(name)[0]] = text
        return env

    def replace(self, **changes: Any) -> Settings:
        """A copy with ``changes``, validated (``dataclasses.replace`` for this model)."""
        values = {name: getattr(self, name) for name in type(self).model_fields}
        # A value derived from the old project or region follows the new one.
        if values["image"] == Settings(project=self.project).image:
            values.pop("image")
        if values["zones"] == DEFAULT_ZONES.get(self.region):
            values.pop("zones")
        return _validated({**values, **changes}, {})

    @property
    def topics(self) -> dict[str, str]:
        """The topic of each event (fixed names: the topology declares them)."""
        return dict(TOPICS)

    def job_prefix(self, job_id: str, user: str | None = None) -> str:
        """Where a job's checkpoints and outputs live (an fsspec URL). In the
        per-user mode, under its user's folder, the only one that user's VM
        account may touch (``spotline.shared.domain.tenancy``)."""
        return f"{self.user_root(user)}/jobs/{job_id}"

    def user_root(self, user: str | None = None) -> str:
        """The storage root as ``user``'s jobs see it: in the per-user mode
        the user's own folder (their jobs, the folders uploaded for them),
        else the storage root itself."""
        root = self.storage_root.rstrip("/")
        if user is not None and user in self.user_topics:
            root = f"{root}/{user_prefix(user)}"
        return root

    @property
    def cooling_rule(self) -> CoolingRule:
        return CoolingRule(self.cooling_baseline_min, self.cooling_unit)


def variables(name: str) -> tuple[str, ...]:
    """The environment variables of setting ``name``, the one ``to_env`` writes first."""
    alias = Settings.model_fields[name].validation_alias
    if isinstance(alias, AliasChoices):
        return tuple(c for c in alias.choices if isinstance(c, str) and c.isupper())
    return (f"{ENV_PREFIX}{name.upper()}",)


class EnvironmentSource(PydanticBaseSettingsSource):
    """The declared variables, read from one mapping (not necessarily os.environ).

    A value is the variable's text; an empty variable counts as unset.
    ``found`` says which variable gave each setting.
    """

    def __init__(self, settings_cls: type[BaseSettings], env: Mapping[str, str]) -> None:
        super().__init__(settings_cls)
        self.env = env
        self.found: dict[str, str] = {}

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        for variable in variables(field_name):
            if self.env.get(variable):
                return self.env[variable], variable, False
        return None, "", False

    def __call__(self) -> dict[str, Any]:
        values = {}
        for name, field in self.settings_cls.model_fields.items():
            value, variable, _ = self.get_field_value(field, name)
            if value is not None:
                values[name] = value
                self.found[name] = variable
        return values


@dataclass(frozen=True)
class Loaded:
    """Settings with where each value came from."""

    settings: Settings
    origins: dict[str, Origin]  # setting name -> the layer that gave it
    sources: dict[str, str]  # setting name -> variable, flag or file key that gave it
    config_path: Path | None  # the config file read, when one was


def load(
    env: Mapping[str, str] | None = None,
    *,
    config_file: bool = True,
    flags: Mapping[str, Any] | None = None,
) -> Loaded:
    """Read the layers: defaults < config file < ``env`` < ``flags`` (setting
    name -> a command line's value). Raises SettingsError naming every bad value."""
    env = os.environ if env is None else env
    layers: list[tuple[Origin, dict[str, Any], dict[str, str]]] = []
    path = config_path(env) if config_file else None
    if path is not None and path.exists():
        written = _read_config(path)
        layers.append(("config", written, {name: name for name in written}))
    else:
        path = None
    environment = EnvironmentSource(Settings, env)
    layers.append(("env", environment(), environment.found))
    given = {name: value for name, value in (flags or {}).items() if value is not None}
    layers.append(("flag", given, {name: f"--{name.replace('_', '-')}" for name in given}))

    values: dict[str, Any] = {}
    origins: dict[str, Origin] = {}
    sources: dict[str, str] = {}
    zones_region = None  # the region in effect where the zones were given
    for origin, layer, named in layers:
        values.update(layer)
        origins.update(dict.fromkeys(layer, origin))
        sources.update(named)
        if "zones" in layer:
            zones_region = values.get("region", _DEFAULT_REGION)
    if "zones" in values and zones_region != values.get("region", _DEFAULT_REGION):
        # Zones chosen in a lower layer for another region do not carry over.
        del values["zones"], origins["zones"], sources["zones"]
    files = {name: path for name, origin in origins.items() if origin == "config" and path}
    settings = _validated(values, sources, files)
    for name in Settings.model_fields:
        origins.setdefault(name, "default")
    return Loaded(settings, origins, sources, path)


def _read_config(path: Path) -> dict[str, Any]:
    try:
        values = JsonConfigSettingsSource(Settings, json_file=path)()
    except (OSError, ValueError) as err:
        raise SettingsError([f"{path}: not a readable JSON object ({err})"]) from None
    if not isinstance(values, dict):
        raise SettingsError([f"{path}: expected a JSON object of settings"])
    return values


def _validated(
    values: dict[str, Any], sources: Mapping[str, str], files: Mapping[str, Path] | None = None
) -> Settings:
    """``Settings(**values)``, or a SettingsError naming each bad value by the
    variable, flag or config file key (``sources``; in ``files``) that gave it."""
    try:
        return Settings(**values)
    except ValidationError as err:
        problems = []
        for error in err.errors():
            name = str(error["loc"][0]) if error["loc"] else ""
            field = Settings.model_fields.get(name)
            about = f" -- {field.description}" if field is not None and field.description else ""
            value = values.get(name, error["input"])
            place = f" in {files[name]}" if files and name in files else ""
            label = sources.get(name) or name
            problems.append(f"{label}={value!r}{place}: {_expected(error)}{about}")
        raise SettingsError(problems) from None


def _expected(error: Any) -> str:
    """What a value should have been, from pydantic's error (its own words otherwise)."""
    ctx = error.get("ctx") or {}
    known = {
        "int_parsing": "expected a whole number",
        "int_from_float": "expected a whole number",
        "float_parsing": "expected a number",
        "greater_than": f"expected a number greater than {_number(ctx.get('gt'))}",
        "greater_than_equal": f"expected a number of at least {_number(ctx.get('ge'))}",
        "less_than_equal": f"expected a number of at most {_number(ctx.get('le'))}",
        "literal_error": f"expected {ctx.get('expected')}",
        "string_too_short": "expected a value, not an empty one",
        "extra_forbidden": "not a setting",
    }
    message = str(error["msg"]).removeprefix("Value error, ")
    return known.get(error["type"], message.replace("Input should be", "expected"))


def _number(bound: Any) -> str:
    return f"{bound:g}" if isinstance(bound, float) else str(bound)


def _given(data: dict[str, Any], name: str) -> Any:
    """A setting's value in validator input, under its name or any of its aliases."""
    for key in (name, *variables(name)):
        if key in data:
            return data[key]
    return None


def _text(value: Any) -> str:
    """A value as its variable holds it."""
    if value is None:
        return ""
    if isinstance(value, tuple):
        return ",".join(value)
    if isinstance(value, float):
        return repr(value)
    return str(value)
