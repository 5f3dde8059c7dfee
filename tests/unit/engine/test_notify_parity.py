"""A notify naming what only a handler include brings in (or a handler import by its own
name) against ansible-playbook 2.19: both run the steps and handlers before it and stop the
run at the step that notifies it (exit 1, no recap, no later step). One difference, in
decisions.md: fleetfix prints that step's verdict line before the error. A notify naming
nothing at all is still refused at load."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.parity import ansible_playbook, copy_fixtures, fleetfix, load_errors

NOTIFY = Path(__file__).parents[2] / "fixtures" / "playbooks" / "parity_notify"


@pytest.mark.parametrize("playbook", ["included.yml", "imported.yml"])
def test_a_notify_of_a_brought_in_handler_fails_at_run_time_as_ansible(
    tmp_path: Path, playbook: str
) -> None:
    theirs = ansible_playbook(copy_fixtures(NOTIFY, tmp_path, "ansible") / playbook)
    ours = fleetfix(copy_fixtures(NOTIFY, tmp_path, "fleetfix") / playbook)
    where = f"\n--- ansible-playbook:\n{theirs.output}\n--- fleetfix:\n{ours.output}"
    assert ours.banners == theirs.banners, where
    assert ours.printed == theirs.printed, where
    assert ours.recap == theirs.recap == "", where
    assert ours.exit_code == theirs.exit_code == 1, where
    # the notifying step's verdict: printed by fleetfix, not by ansible-playbook
    assert ours.verdicts == (*theirs.verdicts, "changed"), where
    assert "never runs" not in "".join(ours.banners), where
    assert "was not found in either the main handlers list" in ours.output, where


def test_a_notify_naming_no_handler_at_all_is_still_refused_at_load(tmp_path: Path) -> None:
    book = tmp_path / "site.yml"
    book.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        "    - command: 'true'\n      notify: restart fabricmanagr\n"
        "  handlers:\n    - name: restart services\n      include_tasks: restart.yml\n"
    )
    (tmp_path / "restart.yml").write_text("- name: restart fabricmanager\n  debug:\n")
    assert load_errors(book) == [
        "5:15 notify names no handler of this play: 'restart fabricmanagr'"
    ]
