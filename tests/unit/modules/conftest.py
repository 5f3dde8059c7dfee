"""The engine imported first: it imports the module registry, which imports every module;
a test importing one module first would enter that cycle from its other end."""

from __future__ import annotations

import fleetfix.engine  # noqa: F401
