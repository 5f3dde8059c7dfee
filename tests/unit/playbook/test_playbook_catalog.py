"""The keyword tables and value converters of the playbook language."""

from __future__ import annotations

import dataclasses

import pytest

from fleetfix.playbook import catalog
from fleetfix.playbook.model import Play, Step, StepKind


def test_play_keywords_are_exactly_the_play_fields() -> None:
    # role_defaults/role_vars are the public roles' layers, read from roles: (not keywords)
    derived = {"position", "templated", "role_defaults", "role_vars"}
    fields = {f.name for f in dataclasses.fields(Play)} - derived
    # roles: are read into tasks; the rest are given to the play's steps (playbook/loader.py)
    given_to_steps = {"ignore_errors", "ignore_unreachable", "run_once", "module_defaults"}
    assert fields | {"roles"} | given_to_steps == catalog.PLAY_KEYWORDS


def test_step_keywords_are_the_step_fields_minus_kind_parts() -> None:
    fields = {f.name for f in dataclasses.fields(Step)}
    assert (
        fields
        - {
            "kind",
            "args",
            "position",
            "block",
            "rescue",
            "always",
            "loop_flatten",  # set by with_items
            "item_key",  # set by the engine on a loop item's copy
            "via",  # set by import_tasks
            "role",  # set by roles: and import_role
        }
        | set(catalog.LOOP_KEYWORDS) - {"loop"}  # the with_ loops, read into loop
        == catalog.STEP_KEYWORDS
    )


def test_refused_keywords_never_overlap_accepted_ones() -> None:
    assert not catalog.PLAY_KEYWORDS & set(catalog.UNSUPPORTED_PLAY_KEYWORDS)
    assert not catalog.STEP_KEYWORDS & set(catalog.UNSUPPORTED_STEP_KEYWORDS)
    assert not set(catalog.STEP_KINDS) & set(catalog.ANSIBLE_MODULES)


def test_fqcn_aliases() -> None:
    assert catalog.STEP_KINDS["ansible.builtin.shell"] is StepKind.SHELL
    assert catalog.STEP_KINDS["ansible.legacy.meta"] is StepKind.META
    assert "ansible.builtin.probe" not in catalog.STEP_KINDS
    assert {kind.value for kind in StepKind} - {"module"} <= set(catalog.STEP_KINDS)
    assert "module" not in catalog.STEP_KINDS  # a module step is named by its module
    assert catalog.STEP_KINDS["ansible.builtin.lineinfile"] is StepKind.MODULE
    assert catalog.STEP_KINDS["systemd_service"] is StepKind.MODULE


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (90, 90.0),
        (1.5, 1.5),
        ("90", 90.0),
        ("90s", 90.0),
        ("15m", 900.0),
        ("2h", 7200.0),
        ("1d", 86400.0),
        ("1h30m", 5400.0),
        ("1.5h", 5400.0),
        (" 2 H ", 7200.0),
        ("15 minutes", None),
        ("m", None),
        ("", None),
        (True, None),
        (None, None),
        ([1], None),
    ],
)
def test_parse_duration(value: object, seconds: float | None) -> None:
    assert catalog.parse_duration(value) == seconds


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("smi", True),
        ("_x1", True),
        ("x-y", False),
        ("1x", False),
        ("class", False),
        ("none", False),
        ("loop", False),
        ("", False),
        (3, False),
    ],
)
def test_is_variable_name(name: object, ok: bool) -> None:
    assert catalog.is_variable_name(name) is ok


def test_suggest() -> None:
    assert catalog.suggest("retires", catalog.STEP_KEYWORDS) == "did you mean 'retries'?"
    assert catalog.suggest("zzzz", catalog.STEP_KEYWORDS) is None
