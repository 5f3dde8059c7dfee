"""include_vars: its arguments checked at load (with their place), and its values at
Ansible's precedence on each host, measured against ansible-playbook."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fleetfix.playbook.catalog import StepCatalog
from fleetfix.playbook.loader import validate_playbook
from tests.support.parity import assert_same

PARITY = Path(__file__).parents[2] / "fixtures" / "playbooks" / "parity"


def _problems(tmp_path: Path, catalog: StepCatalog, step: str) -> list[str]:
    playbook = tmp_path / "site.yml"
    playbook.write_text(f"- hosts: all\n  tasks:\n    - {step}\n", encoding="utf-8")
    return [
        f"{e.position.line}:{e.position.column} {e.message}" if e.position else e.message
        for e in validate_playbook(playbook, catalog)
    ]


@pytest.mark.parametrize(
    ("step", "expected"),
    [
        (
            "include_vars: {fil: a.yml}",
            "3:22 Unsupported parameters for (include_vars) module: fil",
        ),
        (
            "include_vars: {file: a.yml, dir: vars}",
            "3:21 parameters are mutually exclusive: file|dir",
        ),
        (
            "include_vars: {dir: vars, hash_behaviour: deep}",
            "3:33 value of hash_behaviour must be one of: merge, replace, got: deep",
        ),
    ],
)
def test_bad_arguments_are_refused_at_load_with_their_place(
    tmp_path: Path, catalog: StepCatalog, step: str, expected: str
) -> None:
    assert _problems(tmp_path, catalog, step) == [expected]


@pytest.mark.parametrize(
    "step",
    [
        "include_vars: vars/site.yml",
        "ansible.builtin.include_vars: {dir: vars, depth: 1, name: all_vars}",
        "include_vars: {file: '{{ site }}.yml', hash_behaviour: merge}",
    ],
)
def test_ansible_forms_load(tmp_path: Path, catalog: StepCatalog, step: str) -> None:
    assert _problems(tmp_path, catalog, step) == []


def test_a_missing_file_fails_the_host_at_run_time_as_ansible(tmp_path: Path) -> None:
    """Ansible looks for the file when the step runs (its name may be a template): the
    host fails with `message`, the play goes on for rescue/ignore_errors."""
    (tmp_path / "ansible").mkdir()
    (tmp_path / "fleetfix").mkdir()
    text = (
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        "    - include_vars: nowhere.yml\n"
        "      register: r\n      ignore_errors: true\n"
        "    - debug: msg=\"{{ r.failed }} {{ 'nowhere.yml' in r.message }}\"\n"
        "    - include_vars: nowhere.yml\n"
    )
    for side in ("ansible", "fleetfix"):
        (tmp_path / side / "p.yml").write_text(text, encoding="utf-8")
    seen = assert_same(tmp_path / "ansible" / "p.yml", tmp_path / "fleetfix" / "p.yml")
    assert seen.exit_code != 0


def test_include_vars_fixture_agrees_with_ansible(tmp_path: Path) -> None:
    """Files, directories (depth, files_matching, ignore_files, extensions), name,
    hash_behaviour, the vars/ search next to the task file, and the precedence: above play
    and step vars, below set_fact."""
    shutil.copytree(PARITY, tmp_path / "ansible")
    shutil.copytree(PARITY, tmp_path / "fleetfix")
    assert_same(
        tmp_path / "ansible" / "vars_include.yml", tmp_path / "fleetfix" / "vars_include.yml"
    )


def test_templated_vars_files_fixture_agrees_with_ansible(tmp_path: Path) -> None:
    """vars_files names rendered per host (play vars, magic vars), first-found alternatives
    with templates, and a name with an undefined variable skipped, as Ansible."""
    shutil.copytree(PARITY, tmp_path / "ansible")
    shutil.copytree(PARITY, tmp_path / "fleetfix")
    playbook = "vars_files_templated.yml"
    assert_same(tmp_path / "ansible" / playbook, tmp_path / "fleetfix" / playbook)
