"""Everything a user can configure, composed of its groups; the groups in order; settings with CLI overrides."""

from __future__ import annotations

import json
from typing import TypeVar, get_args

from pydantic import BaseModel, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from studio.settings.access import AccessSettings
from studio.settings.client import ClientSettings
from studio.settings.embedded import EmbeddedEngineSettings
from studio.settings.engine_choice import EngineChoice, ManagedEngineMode
from studio.settings.fleet import FleetSettings
from studio.settings.managed_server import ManagedServerSettings
from studio.settings.page import PageSettings
from studio.settings.scaling import ScalingSettings
from studio.settings.server_levers import ServerLevers
from studio.settings.sharing import SharingSettings


class StudioSettings(
    AccessSettings,
    PageSettings,
    SharingSettings,
    ScalingSettings,
    FleetSettings,
    ClientSettings,
    ManagedServerSettings,
    ServerLevers,
    EmbeddedEngineSettings,
    EngineChoice,
    BaseSettings,
):
    """Everything a user can configure, composed of its groups (SETTINGS_GROUPS), the way vLLM composes its
    configuration: each field is declared once, in its group, with its title (the page's label), its help and its
    bounds; the CLI's argument groups and the Server tab's forms iterate a group's fields. The groups are bases, not
    nested fields, so that every flag and environment variable keeps its flat name (--replicas,
    OMNI_STUDIO_REPLICAS) and every reader its `settings.replicas`; `part(Group)` gives a group on its own.
    CLI flags are passed as init values and win over env."""

    model_config = SettingsConfigDict(
        env_prefix="OMNI_STUDIO_", env_file=".env", env_file_encoding="utf-8", extra="ignore"
    )

    @field_validator("remote_urls", "auth", "operators", "forwarded_allow_ips", mode="before")
    @classmethod
    def _split_urls(cls, value: object) -> object:
        # Env gives a string; accept "a,b" besides JSON.
        if isinstance(value, str):
            if value.lstrip().startswith("["):
                return json.loads(value)
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @model_validator(mode="after")
    def _scaling_bounds(self) -> StudioSettings:
        low, high = self.replicas_min, self.replicas_max
        if low is None and high is None:
            return self
        if low is None or high is None:
            raise ValueError(
                "--replicas-min and --replicas-max go together: give both for a fleet that scales with its load, "
                "or neither for a fleet of --replicas"
            )
        if low > high:
            raise ValueError(f"--replicas-min {low} is more than --replicas-max {high}")
        if self.engine not in get_args(ManagedEngineMode):
            raise ValueError(
                "--replicas-min/--replicas-max scale a fleet the studio runs "
                f"(--engine {' or '.join(get_args(ManagedEngineMode))}), "
                f"not {self.engine} servers"
            )
        if "replicas" not in self.model_fields_set:
            self.replicas = low  # a scaling fleet starts small
        elif not low <= self.replicas <= high:
            raise ValueError(
                f"--replicas {self.replicas} (the replicas it starts with) is outside --replicas-min {low} to "
                f"--replicas-max {high}"
            )
        return self

    @property
    def scales(self) -> bool:
        """The fleet follows its load (--replicas-min/--replicas-max)."""
        return self.replicas_min is not None and self.replicas_max is not None

    def api_key_value(self) -> str | None:
        return self.api_key.get_secret_value() if self.api_key else None

    def part(self, group: type[Group]) -> Group:
        """One group of these settings on its own (the scaling policy is made of ScalingSettings, ...)."""
        return group.model_validate(self.model_dump(include=set(group.model_fields)))


Group = TypeVar("Group", bound=BaseModel)
# The groups, in the order the CLI's help and the Server tab show them.
SETTINGS_GROUPS: tuple[type[BaseModel], ...] = (
    EngineChoice,
    EmbeddedEngineSettings,
    ServerLevers,
    ManagedServerSettings,
    ClientSettings,
    FleetSettings,
    ScalingSettings,
    SharingSettings,
    PageSettings,
    AccessSettings,
)
# What makes a managed engine and how it is started: the flags `ui`, `generate` and `bench` share.
ENGINE_GROUPS = SETTINGS_GROUPS[:4]


def load_settings(**overrides: object) -> StudioSettings:
    """Settings with CLI overrides; None means "not given" and leaves env or default in place."""
    return StudioSettings(**{key: value for key, value in overrides.items() if value is not None})
