"""The engine's playbook runner (tests/unit/engine/conftest.py) for tests that gather facts."""

from __future__ import annotations

import fleetfix.engine  # noqa: F401  (the engine first: it imports the module registry)
from tests.unit.engine.conftest import fake, run_playbook

__all__ = ["fake", "run_playbook"]
