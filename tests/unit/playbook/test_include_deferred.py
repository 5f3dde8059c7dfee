"""A literal include_tasks file with problems: refused at load, unless the include has a
`when` (Ansible reads an include only when a host reaches it: a file for another platform
under a `when` that never holds here must not stop the playbook); then a host that reaches
it fails its include with the file's problem."""

from __future__ import annotations

from pathlib import Path

from fleetfix.cli.loading import builtin_catalog
from fleetfix.playbook.loader import validate_playbook
from tests.support.parity import fleetfix

BAD_FILE = """\
- name: clean up on another platform
  win_file:
    path: C:\\\\temp
    state: absent
"""


def _playbook(tmp_path: Path, when: str) -> Path:
    (tmp_path / "windows.yml").write_text(BAD_FILE)
    book = tmp_path / "site.yml"
    book.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        "    - name: platform cleanup\n      include_tasks: windows.yml\n"
        f"{when}"
        "    - name: after\n      debug:\n        msg: after\n"
    )
    return book


def test_an_unconditional_include_of_a_bad_file_is_refused_at_load(tmp_path: Path) -> None:
    errors = validate_playbook(_playbook(tmp_path, ""), builtin_catalog())
    assert [e.message for e in errors] == ["unknown step keyword 'win_file'"], errors


def test_a_conditional_include_of_a_bad_file_waits_for_a_host(tmp_path: Path) -> None:
    never = _playbook(tmp_path, "      when: false\n")
    assert validate_playbook(never, builtin_catalog()) == []
    seen = fleetfix(never)
    assert seen.exit_code == 0, seen.output
    assert seen.recap.startswith("ok=1 "), seen.output  # `after`; the include was skipped


def test_a_host_that_reaches_the_bad_file_fails_its_include(tmp_path: Path) -> None:
    reached = _playbook(tmp_path, "      when: true\n")
    seen = fleetfix(reached)
    assert seen.exit_code == 2, seen.output
    assert "win_file" in seen.output
    assert "after" not in seen.printed, seen.output
