"""Roles from collections against ansible-playbook 2.19: `roles:`, include_role and
import_role of NS.COL.ROLE found under the playbook's collections/ and under collections_path
(the fixture's ansible.cfg), banners by FQCN, role_name by short name, and the role's handlers
notified as `NS.COL.ROLE : X` and `ROLE : X`."""

from __future__ import annotations

from pathlib import Path

from fleetfix.cli.loading import builtin_catalog
from fleetfix.playbook.loader import validate_playbook
from tests.support.parity import assert_same, copy_fixtures

COLLECTIONS = Path(__file__).parents[2] / "fixtures" / "playbooks" / "parity_collections"


def test_roles_from_collections_agree_with_ansible(tmp_path: Path) -> None:
    theirs = copy_fixtures(COLLECTIONS, tmp_path, "ansible") / "site.yml"
    ours = assert_same(theirs, copy_fixtures(COLLECTIONS, tmp_path, "fleetfix") / "site.yml")
    assert ours.exit_code == 0, ours.output
    assert "RUNNING HANDLER [ops.gpu.fabric : restart fabricmanager]" in ours.banners
    assert "TASK [site.tools.probe : a role from collections_path]" in ours.banners


def test_a_collection_role_not_found_says_where_it_looked(tmp_path: Path) -> None:
    (tmp_path / "collections" / "ansible_collections" / "ops" / "gpu" / "roles").mkdir(parents=True)
    book = tmp_path / "site.yml"
    book.write_text("- hosts: localhost\n  gather_facts: false\n  roles:\n    - ops.gpu.missing\n")
    (error,) = validate_playbook(book, builtin_catalog())
    assert error.message == "role not found: ops.gpu.missing"
    assert error.position is not None
    assert (error.position.line, error.position.column) == (4, 7)
    assert error.hint is not None
    assert error.hint.startswith(f"looked in {tmp_path}/collections/ansible_collections, ")
