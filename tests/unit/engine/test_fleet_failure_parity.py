"""Fleet-wide failure and handlers against ansible-playbook, on three hosts (issue 22):
any_errors_fatal inside blocks (rescue, always, nested, run_once, the free strategy),
end_play in a block, handler chains, listen, notify on blocks and includes, flush_handlers
in rescue and always, force_handlers, and Ansible's default fact gathering. Each fixture
under fixtures/playbooks/parity_fleet runs under both tools and must show the same banners,
verdicts, printed values, recap and exit code."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.parity import Seen, ansible_playbook, assert_same, copy_fixtures, fleetfix

FIXTURES = Path(__file__).parents[2] / "fixtures" / "playbooks" / "parity_fleet"
HOSTS = ("gpu001", "gpu002", "gpu003")
NOT_STRICT = {"handlers_chain.yml", "free_fatal.yml"}
"""Fixtures with an intended or display-only difference, each with its own test below."""


@pytest.mark.parametrize(
    "playbook", sorted(p.name for p in FIXTURES.glob("*.yml") if p.name not in NOT_STRICT)
)
def test_fleet_playbook_agrees_with_ansible(tmp_path: Path, playbook: str) -> None:
    theirs, ours = (
        copy_fixtures(FIXTURES, tmp_path, "ansible"),
        copy_fixtures(FIXTURES, tmp_path, "fleetfix"),
    )
    assert_same(theirs / playbook, ours / playbook, hosts=HOSTS)


def test_force_handlers_on_the_command_line(tmp_path: Path) -> None:
    """--force-handlers reaches the second play, which does not say force_handlers."""
    theirs, ours = (
        copy_fixtures(FIXTURES, tmp_path, "ansible"),
        copy_fixtures(FIXTURES, tmp_path, "fleetfix"),
    )
    seen = assert_same(
        theirs / "force_handlers.yml", ours / "force_handlers.yml", "--force-handlers", hosts=HOSTS
    )
    assert any("second restart" in banner for banner in seen.banners)


def test_any_errors_fatal_stops_every_host(tmp_path: Path) -> None:
    """The safety promise behind the parity: with any_errors_fatal, no host runs a step
    after the block once one host failed in it, and each host ran the always."""
    theirs, ours = (
        copy_fixtures(FIXTURES, tmp_path, "ansible"),
        copy_fixtures(FIXTURES, tmp_path, "fleetfix"),
    )
    seen = assert_same(
        theirs / "fatal_always_only.yml", ours / "fatal_always_only.yml", hosts=HOSTS
    )
    assert "SHOULD NOT HAPPEN" not in seen.stdout
    assert seen.stdout.count('"msg": "always ') == len(HOSTS)
    assert seen.exit_code == 2


def _collapsed(banners: tuple[str, ...]) -> list[str]:
    """Banners (or verdicts, where "" marks a banner) with a run of the same shown once."""
    return [b for i, b in enumerate(banners) if i == 0 or banners[i - 1] != b]


def test_handler_chains_agree_with_ansible(tmp_path: Path) -> None:
    """Chains both ways, listen, notify on a block and an import, flush in rescue and always:
    the same handlers run on the same hosts in the same order, with the same values and
    recap. One display difference is left out: when several hosts reach a flush_handlers
    meta step together, ansible-playbook prints its `TASK [meta]` banner once per host."""
    theirs = ansible_playbook(
        copy_fixtures(FIXTURES, tmp_path, "ansible") / "handlers_chain.yml", hosts=HOSTS
    )
    ours = fleetfix(
        copy_fixtures(FIXTURES, tmp_path, "fleetfix") / "handlers_chain.yml", hosts=HOSTS
    )
    where = f"\n--- ansible-playbook:\n{theirs.output}\n--- fleetfix:\n{ours.output}"
    assert _collapsed(ours.banners) == _collapsed(theirs.banners), where
    assert _same_run(ours, theirs), where
    handlers = [b for b in ours.banners if b.startswith("RUNNING HANDLER")]
    # once per flush: after pre_tasks, in the rescue, in the always, after tasks, after post_tasks
    assert handlers.count("RUNNING HANDLER [self notify]") == 5, where


def _same_run(ours: Seen, theirs: Seen) -> bool:
    return (
        _collapsed(ours.verdicts) == _collapsed(theirs.verdicts)
        and ours.printed == theirs.printed
        and ours.other_recaps == theirs.other_recaps
        and ours.exit_code == theirs.exit_code
    )


def test_free_strategy_any_errors_fatal_stops_the_fleet(tmp_path: Path) -> None:
    """An intended difference (docs/decisions.md): ansible-playbook warns that the free
    strategy does not support any_errors_fatal and lets the other hosts go on; fleetfix
    stops every other host before its next step, because a runbook that says "stop the
    fleet at the first failure" must stop it whatever its strategy."""
    theirs = ansible_playbook(
        copy_fixtures(FIXTURES, tmp_path, "ansible") / "free_fatal.yml", hosts=HOSTS
    )
    ours = fleetfix(copy_fixtures(FIXTURES, tmp_path, "fleetfix") / "free_fatal.yml", hosts=HOSTS)
    where = f"\n--- ansible-playbook:\n{theirs.output}\n--- fleetfix:\n{ours.output}"
    assert "not supported" in theirs.output and "SHOULD NOT HAPPEN" in theirs.stdout, where
    assert "SHOULD NOT HAPPEN" not in ours.stdout, where
    assert ours.exit_code == theirs.exit_code == 2, where
