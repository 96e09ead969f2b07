"""The embedded engine's settings the studio offers as its own (`engine_threads`, `engine_step_cache`, ...): made from
the engine's fields (EngineSettings), so that each keeps the engine's type, default, bounds, title and help. The
embedded launcher passes each one set away from the engine's default as the engine's own flag; the studio's flags
and the Server tab's engine levers are made from the fields made here.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from pydantic import BaseModel, create_model
from pydantic.fields import FieldInfo

from studio.settings.engine import EngineSettings


@dataclass(frozen=True)
class ExposedSetting:
    """One setting of the engine (an EngineSettings field) that the studio takes as one of its own."""

    name: str  # the engine's field, whose flag the launcher passes
    studio_name: str = ""  # the studio's field (default: engine_<name>)
    # The studio's type where it offers fewer values than the engine takes (None: the engine's type).
    narrowed: Any = None

    @property
    def field_name(self) -> str:
        return self.studio_name or f"engine_{self.name}"


@dataclass(frozen=True)
class ExposedEngineSettings:
    """Which settings of an engine the studio offers: those that say where it runs (given where the studio starts),
    and its levers, in columns of those that go together (the Server tab shows a column each)."""

    engine: type[BaseModel]
    placement: tuple[ExposedSetting, ...]
    lever_columns: tuple[tuple[ExposedSetting, ...], ...]

    @property
    def settings(self) -> tuple[ExposedSetting, ...]:
        return (*self.placement, *(setting for column in self.lever_columns for setting in column))

    def lever_names(self) -> tuple[tuple[str, ...], ...]:
        """The studio's fields of the levers, column by column."""
        return tuple(tuple(setting.field_name for setting in column) for column in self.lever_columns)

    def studio_field(self, setting: ExposedSetting) -> tuple[Any, FieldInfo]:
        """The studio's field of one engine setting: the engine's, under the studio's name (and narrowed type)."""
        field = copy.copy(self.engine.model_fields[setting.name])
        return (setting.narrowed or field.annotation, field)

    def group(self, name: str, base: type[BaseModel]) -> type[BaseModel]:
        """The studio's settings group of these engine settings, named `name`, on `base` (its title and help)."""
        fields = {setting.field_name: self.studio_field(setting) for setting in self.settings}
        return create_model(name, __base__=base, __doc__=base.__doc__, **fields)

    def engine_values(self, settings: BaseModel) -> dict[str, Any]:
        """The engine's settings, by the engine's names, that `settings` (the studio's) set away from the engine's
        defaults: what the engine is started with."""
        values = {}
        for setting in self.settings:
            value = getattr(settings, setting.field_name)
            if value != self.engine.model_fields[setting.name].default:
                values[setting.name] = value
        return values


# The attention kernels the studio offers: the engine's fastest exact one, FlashAttention 3's exact Hopper kernel, or an
# 8-bit kernel (SageAttention's, FlashAttention 3's fp8 forward). The engine itself takes any diffusers backend name
# (its own --attention-backend).
StudioAttention = Literal["auto", "flash3", "sage", "flash3-fp8"]

EMBEDDED_ENGINE = ExposedEngineSettings(
    engine=EngineSettings,
    placement=(
        ExposedSetting("device", studio_name="device"),
        ExposedSetting("threads"),
        ExposedSetting("blocklist", studio_name="blocklist"),
    ),
    lever_columns=(
        (ExposedSetting("step_cache"), ExposedSetting("step_cache_interval")),
        (ExposedSetting("quantization"), ExposedSetting("attention_backend", "engine_attention", StudioAttention)),
        (ExposedSetting("previews"), ExposedSetting("preview_interval_s")),
    ),
)


class _EmbeddedEngineGroup(BaseModel):
    """The studio's own engine, where it runs, how it guards prompts, and its levers."""

    group_title: ClassVar[str] = "embedded engine"


EmbeddedEngineSettings = EMBEDDED_ENGINE.group("EmbeddedEngineSettings", _EmbeddedEngineGroup)
