"""Handlers and module results against ansible-playbook 2.19: a block written directly under
handlers: (ansible-core's implicit block of handlers), the handlers an include_role brings in
(notifiable once it has run), templated handler names, and Ansible's `action: {module: ...}`
form; plus what is refused at load with its place (a nested block of handlers, a templated
module name)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.parity import assert_same, copy_fixtures, fleetfix, load_errors

PARITY = Path(__file__).parents[2] / "fixtures" / "playbooks" / "parity"


@pytest.mark.parametrize(
    "playbook",
    [
        "handlers_block.yml",
        "handlers_include_role.yml",
        "values_action_module.yml",
        "values_now.yml",
        "values_loop_var.yml",
    ],
)
def test_handlers_and_values_agree_with_ansible(tmp_path: Path, playbook: str) -> None:
    theirs = copy_fixtures(PARITY, tmp_path, "ansible") / playbook
    ours = assert_same(theirs, copy_fixtures(PARITY, tmp_path, "fleetfix") / playbook)
    assert ours.exit_code == 0, ours.output


def _errors(tmp_path: Path, play: str) -> list[str]:
    book = tmp_path / "site.yml"
    book.write_text(f"- hosts: localhost\n  gather_facts: false\n{play}")
    return load_errors(book)


def test_a_block_inside_a_block_of_handlers_is_refused_where_it_is_written(
    tmp_path: Path,
) -> None:
    play = (
        "  tasks:\n    - command: 'true'\n      notify: fine\n"
        "  handlers:\n    - block:\n        - name: fine\n          debug:\n"
        "        - name: nested\n          block:\n            - name: inner\n"
        "              debug:\n"
    )
    assert _errors(tmp_path, play) == ["10:11 using a block as a handler is not supported"]


def test_rescue_in_a_block_of_handlers_is_refused(tmp_path: Path) -> None:
    """A flush runs a handler block's block: only; a rescue would silently never run."""
    play = (
        "  tasks:\n    - command: 'true'\n      notify: fine\n"
        "  handlers:\n    - block:\n        - name: fine\n          debug:\n"
        "      rescue:\n        - debug:\n"
    )
    assert _errors(tmp_path, play) == ["10:7 rescue: never runs in a block of handlers"]


def test_a_templated_module_name_is_refused_at_load(tmp_path: Path) -> None:
    play = "  tasks:\n    - action:\n        module: '{{ which }}'\n"
    errors = _errors(tmp_path, play)
    assert len(errors) == 1 and errors[0].startswith("5:17 action: module: '{{ which }}' names")


def test_a_custom_plugin_is_named_as_one(tmp_path: Path) -> None:
    """fleetfix runs no custom Python modules or action plugins (docs/decisions.md): a step
    naming one says so, with the file ansible-core would run."""
    (tmp_path / "action_plugins").mkdir()
    (tmp_path / "action_plugins" / "shell_no_failed.py").write_text("")
    play = "  tasks:\n    - shell_no_failed:\n        cmd: 'true'\n"
    errors = _errors(tmp_path, play)
    assert len(errors) == 1, errors
    assert errors[0].startswith("4:7 'shell_no_failed' is a custom Python plugin ("), errors
    assert "fleetfix does not run custom modules or action plugins" in errors[0]


def test_a_block_of_handlers_takes_block_keywords_only(tmp_path: Path) -> None:
    play = (
        "  tasks:\n    - command: 'true'\n      notify: fine\n"
        "  handlers:\n    - whne: true\n      block:\n        - name: fine\n          debug:\n"
        "    - loop: [1]\n      block:\n        - name: other\n          debug:\n"
    )
    errors = _errors(tmp_path, play)
    assert errors[0].startswith("7:7 unknown step keyword 'whne'"), errors
    assert len(errors) == 2 and errors[1].startswith("11:7 loop:"), errors


def test_a_loop_var_template_that_is_no_name_fails_the_host(tmp_path: Path) -> None:
    """A literal loop_var is checked at load; a template when the host renders it."""
    book = tmp_path / "site.yml"
    book.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n    - debug:\n"
        "      loop: [1]\n      loop_control:\n        loop_var: \"{{ 'not a name' }}\"\n"
    )
    seen = fleetfix(book)
    assert seen.exit_code == 2, seen.output
    assert "loop_control loop_var must be a variable name, not 'not a name'" in seen.output
