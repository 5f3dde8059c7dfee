"""Registries make built-in plugins on first use; the tables naming them match the modules."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest

import fleetfix.actions
from fleetfix.actions import BUILTIN_ACTION_MODULES, BUILTIN_ACTIONS, action_registry
from fleetfix.plugins import Registry, UnknownPluginError
from fleetfix.probes import BUILTIN_PROBES, probe_registry


def test_the_action_table_names_every_action_of_every_module() -> None:
    root = Path(fleetfix.actions.__file__).parent
    defining = {p.stem for p in root.glob("*.py") if "\nACTIONS" in p.read_text(encoding="utf-8")}
    assert defining == set(BUILTIN_ACTION_MODULES)
    for module in BUILTIN_ACTION_MODULES:
        actions = importlib.import_module(f"fleetfix.actions.{module}").ACTIONS
        listed = {name for name, where in BUILTIN_ACTIONS.items() if where == module}
        assert {action.name for action in actions} == listed, module


def test_every_builtin_plugin_is_made_by_its_name() -> None:
    probes, actions = probe_registry(), action_registry()
    assert sorted(p.name for p in probes) == sorted(BUILTIN_PROBES)
    assert sorted(a.name for a in actions) == sorted(BUILTIN_ACTIONS)
    assert probes.get("xid") is probes.get("xid")  # made once


class _Named:
    def __init__(self, name: str) -> None:
        self.name = name


def _registry(made: list[str], **lazy: str) -> Registry[Any]:
    def maker(name: str, gives: str) -> Any:
        def make() -> _Named:
            made.append(name)
            return _Named(gives)

        return make

    makers = {name: maker(name, gives) for name, gives in lazy.items()}
    return Registry("widget", [_Named("eager")], key=lambda w: w.name, lazy=makers)


def test_a_lazy_plugin_is_made_when_first_asked_for_and_only_then() -> None:
    made: list[str] = []
    registry = _registry(made, alpha="alpha", beta="beta")

    assert "alpha" in registry and len(registry) == 3
    assert registry.names() == ["alpha", "beta", "eager"]
    assert made == []
    assert registry.get("beta").name == "beta"
    assert made == ["beta"]
    assert sorted(w.name for w in registry) == ["alpha", "beta", "eager"]
    assert made == ["beta", "alpha"]


def test_an_unknown_name_is_hinted_from_the_lazy_names_too() -> None:
    registry = _registry([], alpha="alpha")
    with pytest.raises(UnknownPluginError, match="did you mean 'alpha'"):
        registry.get("alpah")


def test_a_lazy_plugin_must_be_made_under_its_own_name() -> None:
    registry = _registry([], alpha="omega")
    with pytest.raises(ValueError, match="widget 'alpha' made one named 'omega'"):
        registry.get("alpha")


def test_an_extra_plugin_may_not_reuse_a_builtin_name() -> None:
    with pytest.raises(ValueError, match="duplicate probe 'xid'"):
        probe_registry(extra=(probe_registry().get("xid"),))
