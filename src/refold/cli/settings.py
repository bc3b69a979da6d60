"""The CLI's settings are the library's: ``refold.config`` loads them for every surface.

Kept so ``from refold.cli.settings import Settings`` (older call sites, plugins) keeps working.
"""

from refold.config import ENV_PREFIX, Settings, load_settings

__all__ = ["ENV_PREFIX", "Settings", "load_settings"]
