"""Names a package loads on first use (PEP 562), so importing it stays cheap.

``__getattr__ = lazy_names(__name__, {"Name": "package.submodule", ...}, globals())`` in a
package's ``__init__``: the first ``package.Name`` imports its submodule, takes the name from it
and keeps it in the package, so later lookups are plain attribute reads.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    import logging


def lazy_names(package: str, names: Mapping[str, str],
               namespace: dict[str, Any]) -> Callable[[str], object]:
    def __getattr__(name: str) -> object:
        module_name = names.get(name)
        if module_name is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module_name), name)
        namespace[name] = value
        return value

    return __getattr__


class _Logger:
    """Stands in for ``logging.getLogger(name)`` and imports ``logging`` (5 ms) on first use:
    modules on the start-up path log only on rare events."""

    __slots__ = ("_logger", "_name")

    def __init__(self, name: str) -> None:
        self._name = name
        self._logger: Any = None

    def __getattr__(self, attr: str) -> Any:
        if self._logger is None:
            import logging

            self._logger = logging.getLogger(self._name)
        return getattr(self._logger, attr)


def logger(name: str) -> logging.Logger:
    """``logging.getLogger(name)``, with ``logging`` imported when something is first logged."""
    return cast("logging.Logger", _Logger(name))


__all__ = ["lazy_names", "logger"]
