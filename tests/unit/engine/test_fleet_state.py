"""Admission under caps as the whole fleet stands: Slurm's out nodes count against a rack."""

from __future__ import annotations

import subprocess
from pathlib import Path

from fleetfix.engine.cap_slots import clear_script, slot_script
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


def _slot(root: Path, run: str, host: str, cap: int = 1, known: tuple[str, ...] = ()) -> str:
    script = slot_script(
        root=str(root), domain="rack-r01", run=run, host=host, cap=cap, known=list(known),
        seconds=600,
    )  # fmt: skip
    done = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_racks_slot_is_taken_once_across_runs_and_lapses(tmp_path: Path) -> None:
    """The cap node's slots, run by a real sh in a temporary root: another run's live slot
    fills the rack, this run's own does not count twice, known-out hosts count, a lapsed
    slot is swept, and a run clears only its own."""
    assert _slot(tmp_path, "run-a", "gpu002") == "TAKEN"
    assert _slot(tmp_path, "run-b", "gpu003") == "FULL  gpu002(run:run-a)"
    assert _slot(tmp_path, "run-a", "gpu004") == "TAKEN"  # run-a counts its own hosts itself
    assert _slot(tmp_path, "run-b", "gpu003", cap=3) == "TAKEN"
    assert _slot(tmp_path, "run-c", "gpu005", cap=3, known=("gpu009",)).startswith("FULL gpu009")
    slot = tmp_path / "caps" / "rack-r01" / "gpu002"
    slot.write_text("run-a 1\n")  # lapsed (the node's clock is past its expiry)
    clear = clear_script(root=str(tmp_path), domain="rack-r01", run="run-b", host="gpu004")
    subprocess.run(["sh", "-c", clear], check=True)
    assert (tmp_path / "caps" / "rack-r01" / "gpu004").exists()  # run-a's: not run-b's to clear
    assert _slot(tmp_path, "run-b", "gpu006") == "FULL  gpu004(run:run-a)"
    assert not slot.exists()  # swept
    clear = clear_script(root=str(tmp_path), domain="rack-r01", run="run-a", host="gpu004")
    subprocess.run(["sh", "-c", clear], check=True)
    assert _slot(tmp_path, "run-d", "gpu006", cap=2) == "TAKEN"


def test_two_runs_racing_for_one_slot_get_it_once(tmp_path: Path) -> None:
    """Eight processes, eight hosts of one rack, cap 1: the lock makes count-and-claim one."""
    scripts = [
        slot_script(
            root=str(tmp_path),
            domain="rack-r01",
            run=f"run-{n}",
            host=f"gpu00{n}",
            cap=1,
            known=[],
            seconds=600,
        )
        for n in range(8)
    ]
    racers = [subprocess.Popen(["sh", "-c", s], stdout=subprocess.PIPE, text=True) for s in scripts]
    answers = [racer.communicate(timeout=60)[0].split()[0] for racer in racers]
    assert sorted(answers) == ["FULL"] * 7 + ["TAKEN"], answers
