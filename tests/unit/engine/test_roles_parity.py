"""Roles against ansible-playbook 2.19: meta: end_role (it ends the current use of a role for
the host, a nested role's end leaves its parent running) and which uses of a role a host runs
(a use whose steps all skipped has not run; an equal use after one that ran is skipped unless
duplicates are allowed), on one host and on several; plus end_role where ansible-core refuses
it (in a handler, outside of a role), refused at load with its place."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetfix.cli.loading import builtin_catalog
from fleetfix.playbook.loader import load_playbook
from fleetfix.results import JournaledStep, ResumeState, Status
from tests.support.parity import ansible_playbook, assert_same, copy_fixtures, fleetfix, load_errors

from .conftest import Runner

PARITY = Path(__file__).parents[2] / "fixtures" / "playbooks" / "parity"
HOSTS = ("localhost", "node1", "node2")


@pytest.mark.parametrize(
    "playbook",
    ["roles_end_role.yml", "roles_dedupe.yml", "roles_vars_layers.yml", "roles_privacy.yml"],
)
def test_roles_agree_with_ansible(tmp_path: Path, playbook: str) -> None:
    theirs = copy_fixtures(PARITY, tmp_path, "ansible") / playbook
    ours = assert_same(theirs, copy_fixtures(PARITY, tmp_path, "fleetfix") / playbook)
    assert ours.exit_code == 0, ours.output


def test_role_uses_agree_with_ansible_on_several_hosts(tmp_path: Path) -> None:
    theirs = copy_fixtures(PARITY, tmp_path, "ansible") / "roles_dedupe.yml"
    ours = assert_same(
        theirs, copy_fixtures(PARITY, tmp_path, "fleetfix") / "roles_dedupe.yml", hosts=HOSTS
    )
    assert ours.exit_code == 0, ours.output


def test_an_end_on_some_hosts_agrees_with_ansible(tmp_path: Path) -> None:
    """node1 runs the role to its end where the others end it. ansible-playbook prints an
    end_role's banner once per host that reaches it (its linear strategy runs the meta host
    by host), fleetfix once, as for flush_handlers: everything else must agree."""
    theirs_copy = copy_fixtures(PARITY, tmp_path, "ansible") / "roles_end_role.yml"
    ours_copy = copy_fixtures(PARITY, tmp_path, "fleetfix") / "roles_end_role.yml"
    theirs = ansible_playbook(theirs_copy, hosts=HOSTS)
    ours = fleetfix(ours_copy, hosts=HOSTS)
    where = f"\n--- ansible-playbook:\n{theirs.output}\n--- fleetfix:\n{ours.output}"
    assert ours.banners == _once(theirs.banners), where
    assert (ours.verdicts, ours.printed) == (theirs.verdicts, theirs.printed), where
    assert (ours.recap, ours.exit_code) == (theirs.recap, theirs.exit_code), where
    assert "runs 1, past the end True" in ours.output  # node1 ran it to the end
    assert ours.exit_code == 0, ours.output


def test_a_templated_extra_var_agrees_with_ansible(tmp_path: Path) -> None:
    """-e with a template: rendered where it is used, with the play's variables."""
    options = ("-e", '{"from_cli": "{{ private_setting | string }} via -e"}')
    theirs = copy_fixtures(PARITY, tmp_path, "ansible") / "roles_privacy.yml"
    ours = assert_same(
        theirs, copy_fixtures(PARITY, tmp_path, "fleetfix") / "roles_privacy.yml", *options
    )
    assert "private False, False via -e" in ours.output


def _once(banners: tuple[str, ...]) -> tuple[str, ...]:
    """The banners with each repeat of the one before it left out."""
    return tuple(b for i, b in enumerate(banners) if i == 0 or banners[i - 1] != b)


def _errors(tmp_path: Path, play: str) -> list[str]:
    (tmp_path / "roles" / "r" / "tasks").mkdir(parents=True)
    (tmp_path / "roles" / "r" / "tasks" / "main.yml").write_text("- meta: end_role\n")
    book = tmp_path / "site.yml"
    book.write_text(f"- hosts: localhost\n  gather_facts: false\n{play}")
    return load_errors(book)


def test_end_role_in_a_role_loads(tmp_path: Path) -> None:
    assert _errors(tmp_path, "  roles:\n    - r\n") == []


def test_end_role_outside_a_role_is_refused_where_it_is_written(tmp_path: Path) -> None:
    play = "  tasks:\n    - meta: end_role\n"
    assert _errors(tmp_path, play) == ["4:7 Cannot execute 'end_role' from outside of a role"]


def test_end_role_in_a_handler_is_refused_where_it_is_written(tmp_path: Path) -> None:
    play = "  roles:\n    - r\n  handlers:\n    - name: h\n      meta: end_role\n"
    assert _errors(tmp_path, play) == ["6:7 Cannot execute 'end_role' from a handler"]


async def test_a_resumed_run_keeps_a_journaled_end_role(
    run_playbook: Runner, tmp_path: Path
) -> None:
    """The interrupted run ended the role on gpu001: the resumed run replays the end, and the
    rest of the role stays skipped there (gpu002, which never got that far, runs it all)."""
    tasks = tmp_path / "roles" / "r" / "tasks"
    tasks.mkdir(parents=True)
    (tasks / "main.yml").write_text(
        "- meta: end_role\n  when: inventory_hostname == 'gpu001'\n"
        "- name: after the end\n  set_fact:\n    after: true\n"
    )
    book = "- hosts: gpu\n  gather_facts: false\n  roles:\n    - r\n"
    (tmp_path / "playbook.yml").write_text(book)
    end = load_playbook(tmp_path / "playbook.yml", builtin_catalog()).plays[0].tasks[0]
    journaled = JournaledStep(Status.OK, False, "ending role r for gpu001", {})
    resume = ResumeState(run_id="r1", steps={("gpu001", end.key): journaled})
    run = await run_playbook(book, hosts=["gpu001", "gpu002"], resume=resume)
    ran = {(r.host, r.step) for r in run.result.results}
    assert ("gpu002", "r : after the end") in ran
    assert ("gpu001", "r : after the end") not in ran
