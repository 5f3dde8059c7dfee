"""lineinfile's registered result against ansible-playbook 2.19, key for key: its `diff` list
(the content's texts only under --diff, the file attributes' changes always), the dict form
when --check would create the file, and no diff when state=absent finds no file. The fixture's
asserts state Ansible's values; test_language_parity runs it without --diff."""

from __future__ import annotations

from pathlib import Path

from tests.support.parity import assert_same, copy_fixtures

PARITY = Path(__file__).parents[2] / "fixtures" / "playbooks" / "parity"


def test_lineinfile_diff_under_diff_agrees_with_ansible(tmp_path: Path) -> None:
    theirs = copy_fixtures(PARITY, tmp_path, "ansible") / "lineinfile_diff.yml"
    ours = copy_fixtures(PARITY, tmp_path, "fleetfix") / "lineinfile_diff.yml"
    seen = assert_same(theirs, ours, "--diff")
    assert seen.exit_code == 0, seen.output
    assert "failed=0" in seen.recap, seen.output
