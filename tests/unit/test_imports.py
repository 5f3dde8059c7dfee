"""Every fleetfix module imports on its own, first: no import cycle waits for an import order.

A user's script (or a plugin) that imports `fleetfix.modules.copy` before the engine once got
"partially initialized module": the engine imported the modules and the modules the engine.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import fleetfix

SOURCE = Path(fleetfix.__file__).parent

IMPORT_EACH_FIRST = """
import importlib, sys
failed = []
for name in sys.argv[1:]:
    for loaded in [m for m in sys.modules if m == "fleetfix" or m.startswith("fleetfix.")]:
        del sys.modules[loaded]
    try:
        importlib.import_module(name)
    except Exception as exc:
        failed.append(f"{name}: {type(exc).__name__}: {exc}")
print("\\n".join(failed))
"""


def _module_names() -> list[str]:
    names = []
    for path in sorted(SOURCE.rglob("*.py")):
        parts = path.relative_to(SOURCE.parent).with_suffix("").parts
        if parts[-1] == "__main__":
            continue
        names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def test_every_module_imports_first() -> None:
    names = _module_names()
    assert "fleetfix.modules.copy" in names and "fleetfix.engine.kinds" in names
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_EACH_FIRST, *names],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "", done.stdout


START_LOADS = """
import sys
import fleetfix.cli.run_cmd
print(" ".join(m for m in sys.argv[1:] if m in sys.modules))
"""


def test_a_run_starts_without_what_it_may_not_need() -> None:
    # Each is start-up CPU for every run (issue 21): networkx until topology is asked for,
    # rich until the console draws, lxml until a tree is read, the PostgreSQL driver until
    # a team backend is used, uuid (which imports platform) not at all.
    later = ["networkx", "rich", "lxml", "psycopg", "uuid", "platform"]
    done = subprocess.run(
        [sys.executable, "-c", START_LOADS, *later],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == []
