"""Loading a playbook against the built-in probes and actions (shared by run/validate/lab)."""

from __future__ import annotations

from fleetfix.actions import action_registry
from fleetfix.errors import InputErrors
from fleetfix.playbook.loader import StepCatalog, load_playbook, validate_playbook
from fleetfix.playbook.model import Playbook
from fleetfix.probes import probe_registry


def builtin_catalog() -> StepCatalog:
    """Every built-in probe and action with the parameters it accepts."""
    probes = {p.name: frozenset(p.params) for p in probe_registry()}
    actions = {a.name: frozenset(a.params) for a in action_registry()}
    return StepCatalog(probes=probes, actions=actions)


def load_builtin_playbook(path: str) -> Playbook:
    """Load `path`; with more than one problem, report them all (InputErrors)."""
    catalog = builtin_catalog()
    errors = validate_playbook(path, catalog)
    if len(errors) > 1:
        raise InputErrors(errors)
    return load_playbook(path, catalog)
