"""`fleetfix healthcheck`: a node checks itself for Slurm's HealthCheckProgram and drains itself.

decide.py holds the rules (pure, over probe data); run.py runs the probes on this node under
deadlines and drains it with a `fleetfix:` reason. docs/slurm.md is the operator's page.
"""

from __future__ import annotations

from fleetfix.healthcheck.decide import CHECKS, DEFAULT_CHECKS, HealthOutcome
from fleetfix.healthcheck.run import Limits, Report, Settings, healthcheck

__all__ = [
    "CHECKS",
    "DEFAULT_CHECKS",
    "HealthOutcome",
    "Limits",
    "Report",
    "Settings",
    "healthcheck",
]
