"""Names a package loads on first use (PEP 562), so importing it stays cheap.

``__getattr__ = lazy_names(__name__, {"Name": "package.submodule", ...}, globals())`` in a
package's ``__init__``: the first ``package.Name`` imports its submodule, takes the name from it
and keeps it in the package, so later lookups are plain attribute reads.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


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


__all__ = ["lazy_names"]
