"""Module arguments as Ansible checks them: aliases, types, choices, required and exclusive
parameters; literal values at load, templated ones once rendered."""

from __future__ import annotations

import re
from typing import Any

import pytest

from fleetfix.modules.spec import ModuleArgsError, problems, resolve, to_bool
from fleetfix.modules.specs import MODULE_SPECS, module_named
from fleetfix.playbook.conditions import is_template


def test_every_name_ansible_uses_finds_its_module() -> None:
    for written, name in (
        ("copy", "copy"),
        ("ansible.builtin.copy", "copy"),
        ("ansible.legacy.lineinfile", "lineinfile"),
        ("systemd_service", "systemd"),
        ("ansible.builtin.systemd_service", "systemd"),
    ):
        spec = module_named(written)
        assert spec is not None and spec.name == name
    assert module_named("cron") is None
    assert module_named("ansible.builtin.shell") is None  # a step kind of its own


@pytest.mark.parametrize(
    ("module", "given", "expected"),
    [
        ("stat", {"dest": "/etc/hosts"}, {"path": "/etc/hosts", "get_checksum": True}),
        ("stat", {"name": "/x", "checksum": "sha256"}, {"checksum_algorithm": "sha256"}),
        ("copy", {"content": "x", "dest": "/y", "thirsty": "no"}, {"force": False}),
        ("wait_for", {"port": "22", "timeout": "5"}, {"port": 22, "timeout": 5.0}),
        ("systemd", {"unit": "slurmd", "enabled": "yes"}, {"name": "slurmd", "enabled": True}),
        ("pause", {"minutes": 1}, {"minutes": 1.0, "seconds": None, "echo": True}),
    ],
)
def test_resolve_gives_canonical_names_types_and_defaults(
    module: str, given: dict[str, Any], expected: dict[str, Any]
) -> None:
    resolved = resolve(MODULE_SPECS[module], given)
    assert {key: resolved[key] for key in expected} == expected
    assert set(resolved) == set(MODULE_SPECS[module].params)


@pytest.mark.parametrize(
    ("module", "given", "message"),
    [
        ("copy", {"dest": "/y"}, "one of the following is required: src, content"),
        ("copy", {"src": "a", "content": "b", "dest": "/y"}, "mutually exclusive: src|content"),
        ("lineinfile", {"path": "/x", "regexp": "a", "search_string": "b"}, "mutually exclusive"),
        ("stat", {}, "missing required arguments: path"),
        ("stat", {"path": "/x", "follow": "maybe"}, "unable to convert to bool"),
        ("file", {"path": "/x", "state": "gone"}, "value of state must be one of"),
        ("wait_for", {"port": "http"}, "unable to convert to int"),
        ("slurp", {"src": "/x", "base64": True}, "Unsupported parameters for (slurp) module"),
    ],
)
def test_resolve_refuses_what_ansible_refuses(
    module: str, given: dict[str, Any], message: str
) -> None:
    with pytest.raises(ModuleArgsError, match=re.escape(message)):
        resolve(MODULE_SPECS[module], given)


def test_templated_values_are_checked_once_rendered() -> None:
    spec = MODULE_SPECS["wait_for"]
    assert problems(spec, {"port": "{{ port }}"}, is_template) == []
    assert problems(spec, {"port": "http"}, is_template) == [
        ("port", "argument 'port' is of type str and we were unable to convert to int:"
         " invalid literal for int() with base 10: 'http'")
    ]  # fmt: skip
    with pytest.raises(ModuleArgsError, match="port"):
        resolve(spec, {"port": "http"})


def test_an_alias_and_its_parameter_together_are_refused() -> None:
    found = problems(MODULE_SPECS["stat"], {"path": "/a", "dest": "/b"}, is_template)
    assert found == [("dest", "stat: dest and path are one parameter")]


@pytest.mark.parametrize(
    ("value", "expected"),
    [("yes", True), ("No", False), ("on", True), ("0", False), (1, True), (True, True)],
)
def test_booleans_as_ansible_reads_them(value: object, expected: bool) -> None:
    assert to_bool(value) is expected


def test_a_word_is_not_a_boolean() -> None:
    with pytest.raises(ValueError, match="not a valid boolean"):
        to_bool("maybe")
