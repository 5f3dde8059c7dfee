"""include_role with a templated name: read when a host reaches it, against ansible-playbook
(fixtures/playbooks/parity/roles_runtime.yml), and what fleetfix refuses or fails about it."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from fleetfix.cli.loading import builtin_catalog
from fleetfix.errors import PlaybookError, SourcePosition
from fleetfix.playbook.role_loader import RoleRequest, role_loader
from tests.support.parity import assert_same, fleetfix

PARITY = Path(__file__).parents[2] / "fixtures" / "playbooks" / "parity"


def test_templated_include_role_agrees_with_ansible(tmp_path: Path) -> None:
    shutil.copytree(PARITY, tmp_path / "ansible")
    shutil.copytree(PARITY, tmp_path / "fleetfix")
    ours = assert_same(
        tmp_path / "ansible" / "roles_runtime.yml", tmp_path / "fleetfix" / "roles_runtime.yml"
    )
    assert "TASK [rt_dep : dependency first]" in ours.output


def _request(name: str, **files: str) -> RoleRequest:
    return RoleRequest(name, tuple(files.items()), str(PARITY), SourcePosition("site.yml", 3, 9))


def test_the_loader_reads_a_role_once_with_its_dependency_first() -> None:
    load = role_loader(builtin_catalog())
    role = load(_request("rt_ecc"))
    assert [s.name for s in role.steps] == ["rt_dep : dependency first", "rt_ecc : check ecc"]
    assert load(_request("rt_ecc")) is role


def test_a_missing_role_or_file_is_a_playbook_error_with_its_place() -> None:
    load = role_loader(builtin_catalog())
    with pytest.raises(PlaybookError, match="role not found: nope") as missing:
        load(_request("nope"))
    assert missing.value.position == SourcePosition("site.yml", 3, 9)
    with pytest.raises(PlaybookError, match=r"has no tasks/absent\.yml"):
        load(_request("rt_xid", tasks_from="absent"))


def _write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root / "site.yml"


def test_a_run_time_role_notifying_its_own_handler_fails_the_include_saying_why(
    tmp_path: Path,
) -> None:
    site = _write(
        tmp_path,
        {
            "site.yml": (
                "- hosts: localhost\n  gather_facts: false\n  vars: {which: rt_h}\n  tasks:\n"
                "    - include_role:\n        name: '{{ which }}'\n"
            ),
            "roles/rt_h/tasks/main.yml": "- debug: {msg: x}\n  changed_when: true\n"
            "  notify: restart it\n",
            "roles/rt_h/handlers/main.yml": "- name: restart it\n  debug: {msg: h}\n",
        },
    )
    seen = fleetfix(site)
    assert seen.exit_code == 2
    assert "roles/rt_h/tasks/main.yml:1:3: notify 'restart it' names a handler" in seen.output
    assert "Traceback" not in seen.output


def test_a_file_argument_that_is_not_a_string_is_refused_at_load(tmp_path: Path) -> None:
    site = _write(
        tmp_path,
        {
            "site.yml": (
                "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
                "    - include_role:\n        name: rt_v\n        vars_from: [a.yml]\n"
            ),
            "roles/rt_v/tasks/main.yml": "- debug: {msg: x}\n",
        },
    )
    seen = fleetfix(site)
    assert seen.exit_code == 1
    assert "site.yml:6:20: include_role vars_from must be a string" in seen.output
