"""Facts and the variables around them against ansible-playbook: each facts_*.yml fixture
under fixtures/playbooks/parity runs under both tools on localhost (Ansible's default
gathering) and must show the same banners, verdicts, printed values, recap and exit code."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import cast

import pytest

from fleetfix.engine import runhosts
from fleetfix.engine.context import HostState, RunContext
from fleetfix.engine.runhosts import RuntimeHosts
from fleetfix.inventory import Inventory, load_inventory
from tests.support.parity import assert_same, copy_fixtures, fleetfix

PARITY = Path(__file__).parents[2] / "fixtures" / "playbooks" / "parity"


def test_gathered_facts_sit_below_play_vars(tmp_path: Path) -> None:
    """A play var named like a fact wins over the gathered value, a set_fact over both (and
    into the next play); ansible_facts and hostvars keep the gathered value."""
    ours = assert_same(
        copy_fixtures(PARITY, tmp_path, "ansible") / "facts_precedence.yml",
        copy_fixtures(PARITY, tmp_path, "fleetfix") / "facts_precedence.yml",
    )
    assert ours.exit_code == 0, ours.output
    assert '"ansible_system": "system_from_play_vars"' in ours.stdout
    assert '"ansible_system": "system_from_set_fact"' in ours.stdout


def test_set_fact_name_reserved_for_ansible_is_refused_at_load(tmp_path: Path) -> None:
    """`_ansible_*` is refused before anything runs, whatever ignore_errors says."""
    ours = assert_same(
        copy_fixtures(PARITY, tmp_path, "ansible") / "facts_refused" / "reserved_set_fact.yml",
        copy_fixtures(PARITY, tmp_path, "fleetfix") / "facts_refused" / "reserved_set_fact.yml",
    )
    assert ours.exit_code != 0
    assert "The prefix '_ansible_' is reserved for internal use only." in ours.output
    assert "reserved_set_fact.yml:12:9" in ours.output


@pytest.mark.parametrize("free_form", [False, True], ids=["mapping", "free form"])
def test_reserved_name_points_at_its_place(tmp_path: Path, free_form: bool) -> None:
    """fleetfix's message names the file, line and column of the reserved name."""
    written = "set_fact: _ansible_x=1" if free_form else "set_fact:\n        _ansible_x: 1"
    playbook = tmp_path / "reserved.yml"
    playbook.write_text(f"- hosts: localhost\n  gather_facts: false\n  tasks:\n    - {written}\n")
    seen = fleetfix(playbook)
    assert seen.exit_code != 0
    assert "reserved.yml:" in seen.output
    assert "'_ansible_x'" in seen.output
    assert "Traceback" not in seen.output


def test_refresh_inventory_reads_the_sources_again(tmp_path: Path) -> None:
    """meta: refresh_inventory mid-play: the host gone leaves the play, the new one is in the
    next, variables are read again, add_host's host and group_by's groups are kept; a block's
    run_once reaches its steps, and hosts that ran nothing have no recap line."""
    theirs = copy_fixtures(PARITY, tmp_path, "ansible") / "facts_refresh"
    ours_dir = copy_fixtures(PARITY, tmp_path, "fleetfix") / "facts_refresh"
    ours = assert_same(theirs / "playbook.yml", ours_dir / "playbook.yml", "-i", "current.yml")
    assert ours.exit_code == 0, ours.output
    assert "node-a in row r1" not in ours.stdout
    assert '"msg": "node-b in row r2"' in ours.stdout
    assert not any(line.startswith(("node-c ", "node-x ")) for line in ours.stdout.splitlines())


@dataclass
class _RunInventory:
    """What runhosts.refresh and unlisted read of a run: its inventory, additions and hosts."""

    inventory: Inventory
    runtime_hosts: RuntimeHosts = field(default_factory=RuntimeHosts)
    hosts: dict[str, HostState] = field(default_factory=dict)


def test_a_host_refresh_brings_gets_no_fleetfix_action(tmp_path: Path) -> None:
    """Leases, the repair budget and the topology were taken for the hosts listed when the run
    started: a host only a refresh_inventory brought is refused fleetfix actions, as add_host's
    are; a listed host that stays listed is not, and one the refresh removed is reported gone."""
    before, after = tmp_path / "before.ini", tmp_path / "after.ini"
    before.write_text("gpu001 row=r1\ngpu002\n")
    after.write_text("gpu001 row=r2\ngpu003\n")
    run = _RunInventory(load_inventory([str(before)]))
    run.hosts = {
        name: HostState(name, run.inventory.host_vars(name)) for name in ("gpu001", "gpu002")
    }
    ctx = cast("RunContext", run)
    assert runhosts.group_by(ctx, "gpu002", "spares", ["all"]) is None
    gone = runhosts.refresh(ctx, load_inventory([str(after)]))
    assert gone == ["gpu002"]
    assert run.hosts["gpu001"].base_vars["row"] == "r2"
    assert run.inventory.hosts_in("spares") == []  # a grouping of a host gone is dropped
    assert runhosts.unlisted(ctx, "gpu001") is None
    refused = runhosts.unlisted(ctx, "gpu003")
    assert refused is not None and "refresh_inventory" in refused
