"""Settings of the studio and of its embedded engine, each declared once: its default, its bounds, its title and its
help. One module per group (as vLLM's config package has one per config), composed into StudioSettings
(studio.py); the engine's own settings (engine.py), of which the studio's `engine_*` settings are made (embedded.py).

Read from flags, then env (OMNI_STUDIO_* / OMNI_STUDIO_ENGINE_*), then `.env`. The command-line flags are built
from these fields (studio/settings_flags.py): a field's flag is its name in kebab case unless `json_schema_extra`
names others under "flags"; a list takes one comma-separated value unless it says "repeat". Nothing here imports the
back end: what an engine kind is beyond its name (studio/backend/engine_kinds.py) is the back end's.
"""

from studio.engine_levers import DEFAULT_PREVIEW_INTERVAL_S, QuantizationName, StepCacheName
from studio.settings.access import AccessSettings
from studio.settings.client import ClientSettings
from studio.settings.embedded import (
    EMBEDDED_ENGINE,
    EmbeddedEngineSettings,
    ExposedEngineSettings,
    ExposedSetting,
    StudioAttention,
)
from studio.settings.engine import DEFAULT_GPU_WARMUP, Device, EngineSettings
from studio.settings.engine_choice import AttachedEngineMode, EngineChoice, EngineMode, ManagedEngineMode
from studio.settings.fleet import Cluster, FleetSettings
from studio.settings.managed_server import ManagedServerSettings
from studio.settings.page import PageSettings
from studio.settings.paths import (
    ASSETS_DIR,
    DEFAULT_BLOCKLIST,
    DEFAULT_MODEL_DIR,
    PROJECT_ROOT,
    SMALL_MODEL_DIR,
    TINY_WAN_DIR,
)
from studio.settings.scaling import ScalingSettings
from studio.settings.server_levers import SERVER_DEFAULT_WORDS, ServerLevers, ServerOptionName
from studio.settings.sharing import MAX_IN_FLIGHT_SLOTS, MAX_QUEUED_REQUESTS, SharingSettings
from studio.settings.studio import ENGINE_GROUPS, SETTINGS_GROUPS, StudioSettings, load_settings

__all__ = [
    "ASSETS_DIR",
    "DEFAULT_BLOCKLIST",
    "DEFAULT_GPU_WARMUP",
    "DEFAULT_MODEL_DIR",
    "DEFAULT_PREVIEW_INTERVAL_S",
    "EMBEDDED_ENGINE",
    "ENGINE_GROUPS",
    "MAX_IN_FLIGHT_SLOTS",
    "MAX_QUEUED_REQUESTS",
    "PROJECT_ROOT",
    "SERVER_DEFAULT_WORDS",
    "SETTINGS_GROUPS",
    "SMALL_MODEL_DIR",
    "TINY_WAN_DIR",
    "AccessSettings",
    "AttachedEngineMode",
    "ClientSettings",
    "Cluster",
    "Device",
    "EmbeddedEngineSettings",
    "EngineChoice",
    "EngineMode",
    "EngineSettings",
    "ExposedEngineSettings",
    "ExposedSetting",
    "FleetSettings",
    "ManagedEngineMode",
    "ManagedServerSettings",
    "PageSettings",
    "QuantizationName",
    "ScalingSettings",
    "ServerLevers",
    "ServerOptionName",
    "SharingSettings",
    "StepCacheName",
    "StudioAttention",
    "StudioSettings",
    "load_settings",
]
