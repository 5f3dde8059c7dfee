"""Admission under caps as the whole fleet stands: Slurm's out nodes count against a rack."""

from __future__ import annotations

from fleetfix.engine.fleet_state import parse_out
from fleetfix.engine.safety import Safety
from fleetfix.events import EventBus
from fleetfix.topology import Topology

# The states of ../shared/samples/slurm/issue-arjuna-69-sinfo-drng-fail-maint-states.txt (a real
# cluster's sinfo), one node each, as `sinfo -h -N -o '%N|%t'` prints them, and the long words
# `%T` prints for the same states.
SHORT = "c002|drng@\nc003|maint\nc020|fail*\nc006|mix\ne001|idle\nf005|fail*\n"
LONG = "c002|draining@\nc003|maintenance\nc006|mixed\ne001|idle\nd001|drained\nd002|down*\n"


def test_every_state_that_runs_no_new_job_counts_as_out() -> None:
    members = ["c002", "c003", "c006", "c020", "e001"]
    assert parse_out(SHORT, members) == {"c002", "c003", "c020"}  # f005: not a member
    long_members = ["c002", "c003", "c006", "e001", "d001", "d002"]
    assert parse_out(LONG, long_members) == {"c002", "c003", "d001", "d002"}
    assert parse_out("c006|allocated\nc007|idle~\n", ["c006", "c007"]) == {"c007"}  # powered off


def _rack() -> Topology:
    hosts = {f"gpu00{n}": {"rack": "r01"} for n in range(1, 5)}
    return Topology.from_hosts({**hosts, "gpu009": {"rack": "r02"}})


def test_a_node_the_scheduler_has_out_fills_the_racks_slot() -> None:
    safety = Safety(_rack(), EventBus())
    safety.start_play({"rack": 1})
    assert safety.capped_members("gpu001") == ["gpu002", "gpu003", "gpu004"]
    held = safety.admit("gpu001", dry=False, scheduler_out=frozenset({"gpu003"}))
    assert held is not None and "rack r01" in held and "gpu003" in held
    assert "gpu001" not in safety.out
    assert safety.admit("gpu009", dry=False, scheduler_out=frozenset({"gpu003"})) is None
    assert safety.admit("gpu001", dry=False) is None  # gpu003 back in service
    assert safety.admit("gpu002", dry=False) is not None  # this run's own gpu001 is out
