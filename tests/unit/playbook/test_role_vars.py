"""Role variable scoping as ansible-playbook 2.19: which roles' defaults and vars are the
play's (Play.role_defaults/role_vars), public:, private_role_vars and defaults directories;
the run against ansible-playbook is fixtures/playbooks/parity/rolevars_public.yml."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetfix.errors import PlaybookError
from fleetfix.playbook.catalog import StepCatalog
from fleetfix.playbook.loader import load_playbook
from fleetfix.playbook.model import Play

_ROLES = {
    "roles/listed/defaults/main.yml": "listed_default: 1\n",
    "roles/listed/vars/main.yml": "listed_var: 1\nshared: listed\n",
    "roles/listed/tasks/main.yml": "- debug: msg=listed\n",
    "roles/imported/vars/main.yml": "imported_var: 1\nshared: imported\n",
    "roles/imported/tasks/main.yml": "- debug: msg=imported\n",
    "roles/included/vars/main.yml": "included_var: 1\n",
    "roles/included/tasks/main.yml": "- debug: msg=included\n",
}


def _play(root: Path, catalog: StepCatalog, site: str) -> Play:
    for name, text in {**_ROLES, "site.yml": site}.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return load_playbook(root / "site.yml", catalog).plays[0]


@pytest.fixture(autouse=True)
def _no_setting(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("ANSIBLE_PRIVATE_ROLE_VARS", raising=False)
    monkeypatch.setenv("ANSIBLE_CONFIG", str(tmp_path / "none.cfg"))
    monkeypatch.chdir(tmp_path)


def test_listed_and_imported_roles_are_the_plays_in_order(
    tmp_path: Path, catalog: StepCatalog
) -> None:
    play = _play(
        tmp_path,
        catalog,
        "- hosts: all\n  roles: [listed]\n  tasks:\n    - import_role: name=imported\n"
        "    - include_role: name=included\n",
    )
    assert play.role_defaults == {"listed_default": 1}
    assert play.role_vars == {"listed_var": 1, "shared": "imported", "imported_var": 1}


def test_public_false_keeps_an_import_private(tmp_path: Path, catalog: StepCatalog) -> None:
    play = _play(
        tmp_path, catalog, "- hosts: all\n  tasks:\n    - import_role: name=imported public=no\n"
    )
    assert play.role_vars == {}


def test_a_public_include_is_exposed_when_it_runs_not_at_load(
    tmp_path: Path, catalog: StepCatalog
) -> None:
    play = _play(
        tmp_path,
        catalog,
        "- hosts: all\n  tasks:\n    - include_role:\n        name: included\n"
        "        public: true\n",
    )
    assert play.role_vars == {}
    assert play.tasks[0].args["public"] == ({}, {"included_var": 1})


@pytest.mark.parametrize(("setting", "exposed"), [("1", False), ("0", True)])
def test_private_role_vars_decides_for_imports_and_includes(
    tmp_path: Path,
    catalog: StepCatalog,
    monkeypatch: pytest.MonkeyPatch,
    setting: str,
    exposed: bool,
) -> None:
    monkeypatch.setenv("ANSIBLE_PRIVATE_ROLE_VARS", setting)
    play = _play(
        tmp_path,
        catalog,
        "- hosts: all\n  roles: [listed]\n  tasks:\n    - include_role: name=included\n",
    )
    assert bool(play.role_vars) is exposed
    assert ("public" in play.tasks[-1].args) is exposed


def test_public_must_be_a_boolean(tmp_path: Path, catalog: StepCatalog) -> None:
    with pytest.raises(PlaybookError, match="public must be a boolean"):
        _play(
            tmp_path,
            catalog,
            "- hosts: all\n  tasks:\n    - import_role:\n        name: imported\n"
            "        public: [1]\n",
        )


def test_a_defaults_directory_merges_its_files_in_name_order(
    tmp_path: Path, catalog: StepCatalog
) -> None:
    files = {
        "roles/dirs/defaults/main/10.yml": "value: second\nonly_ten: 10\n",
        "roles/dirs/defaults/main/00.yml": "value: first\n",
        "roles/dirs/defaults/main/empty.yml": "",
        "roles/dirs/tasks/main.yml": "- debug: msg=dirs\n",
    }
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    play = _play(tmp_path, catalog, "- hosts: all\n  roles: [dirs]\n")
    assert play.role_defaults == {"value": "second", "only_ten": 10}
