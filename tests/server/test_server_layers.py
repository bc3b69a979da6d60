"""``server/`` never imports ``cli/``: settings and assembly live in the library."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import refold

SRC = Path(refold.__file__).parent


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_no_server_module_imports_the_cli() -> None:
    offenders = {str(p.relative_to(SRC)): sorted(m for m in _imported_modules(p)
                                                 if m.startswith("refold.cli"))
                 for p in (SRC / "server").rglob("*.py")}
    assert {k: v for k, v in offenders.items() if v} == {}


def test_no_library_module_below_the_surfaces_imports_server_or_cli() -> None:
    surfaces = ("cli", "server", "mcpserver", "integrations",
                "__main__.py")  # (``python -m refold``: the command, as ``cli`` is)
    bad: dict[str, list[str]] = {}
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC)
        if rel.parts[0] in surfaces:
            continue
        hits = [m for m in _imported_modules(path)
                if m.startswith(("refold.cli", "refold.server"))]
        if hits:
            bad[str(rel)] = hits
    assert bad == {}


def test_building_the_app_loads_no_cli_module(tmp_path: Path) -> None:
    code = ("import sys; from refold.server import create_app; "
            f"create_app(upstream='http://127.0.0.1:9/v1', home={str(tmp_path)!r}); "
            "print(sorted(m for m in sys.modules if m.startswith('refold.cli')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "[]"
