"""The studio's settings under their first address: every name here is studio.settings', where each is declared."""

from studio import settings as _settings
from studio.settings import *  # noqa: F403

__all__ = _settings.__all__
