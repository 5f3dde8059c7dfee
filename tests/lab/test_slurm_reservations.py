"""Slurm reservations and COMPLETING in the lab: formats (against real samples), refusals, and
what they do to jobs, over SSH, in truth and in the audit."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetfix.lab.control import LabHandle
from fleetfix.lab.state import FleetState
from fleetfix.lab.tools.base import ToolContext
from fleetfix.lab.tools.table import tool_table
from fleetfix.probes import slurm_node
from tests.lab.support import NoHooks, call, eventually, offline_fleet, run, running_lab

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "samples" / "slurm"
CREATE = (
    "scontrol create reservation ReservationName={name} Nodes={nodes} StartTime=now"
    " Duration={duration} Users=root Flags={flags}"
)


def create(fleet: FleetState, node: str, nodes: str, name: str, flags: str = "MAINT") -> str:
    argv = CREATE.format(name=name, nodes=nodes, duration=120, flags=flags).split()[1:]
    reply = call(fleet, node, "scontrol", *argv)
    return f"{reply.rc}|{reply.stdout}{reply.stderr}"


@pytest.fixture
def fleet(tmp_path: Path) -> FleetState:
    return offline_fleet("xid79", tmp_path)


def test_show_reservation_has_the_real_layout(fleet: FleetState) -> None:
    assert create(fleet, "gpu001", "gpu[001-002]", "fleetfix-test") == (
        "0|Reservation created: fleetfix-test\n"
    )
    ours = call(fleet, "gpu001", "scontrol", "show", "reservation").stdout
    real = (FIXTURES / "nyush-scontrol-show-reservation-spec-nodes-23.x.txt").read_text()
    real_rows = real.splitlines()[1:]  # without the prompt line
    ours_rows = ours.splitlines()
    assert len(ours_rows) == len(real_rows) + 1 and ours_rows[-1] == ""  # a blank line ends it

    def keys(row: str) -> list[str]:
        return [word.split("=")[0] for word in row.split() if "=" in word]

    # Row by row the same keys, indented the same way; 24.05 dropped 23.x's `Watts=`.
    for mine, theirs in zip(ours_rows, real_rows, strict=False):
        assert keys(mine) == [k for k in keys(theirs) if k != "Watts"]
        assert re.match(r"^ *", mine)[0] == re.match(r"^ *", theirs)[0]  # type: ignore[index]
    assert "Nodes=gpu[001-002] NodeCnt=2 CoreCnt=224 " in ours
    assert "Flags=MAINT,SPEC_NODES" in ours and "TRES=cpu=448" in ours
    assert re.search(r"Duration=02:00:00$", ours_rows[0])
    assert "Users=root Groups=(null) Accounts=(null) Licenses=(null) State=ACTIVE" in ours
    one_line = call(fleet, "gpu001", "scontrol", "-o", "show", "res", "fleetfix-test").stdout
    assert one_line.count("\n") == 1 and one_line.startswith("ReservationName=fleetfix-test ")


def test_a_reserved_node_shows_it_like_real_slurm(fleet: FleetState) -> None:
    create(fleet, "gpu001", "gpu001", "fleetfix-gpu001")
    create(fleet, "gpu001", "gpu002", "root_resv", flags="IGNORE_JOBS")
    shown = call(fleet, "gpu001", "scontrol", "show", "node", "gpu001").stdout
    real = FIXTURES / "slonk-scontrol-show-node-idle-drain-maintenance-reserved-23.11.txt"
    assert "   State=IDLE+MAINTENANCE+RESERVED ThreadsPerCore=2" in shown
    assert shown.splitlines()[-2] == "   ReservationName=fleetfix-gpu001"
    assert real.read_text().splitlines()[-1] == "   ReservationName=example"  # same place
    facts = slurm_node.parse(shown)
    assert (facts.reserved, facts.maint, facts.reserved_by) == (True, True, "fleetfix")
    words = call(fleet, "gpu001", "sinfo", "-N", "-h", "-n", "gpu[001-003]", "-o", "%N %t %T")
    assert words.stdout == "gpu001 maint maint\ngpu002 resv reserved\ngpu003 idle idle\n"
    call(fleet, "gpu001", "scontrol", "update", "NodeName=gpu001", "State=DRAIN", "Reason=x")
    drained = call(fleet, "gpu001", "sinfo", "-N", "-h", "-n", "gpu001", "-o", "%t %T")
    assert drained.stdout == "drain$ drained$\n"
    state = call(fleet, "gpu001", "scontrol", "show", "node", "gpu001").stdout
    assert "State=IDLE+DRAIN+MAINTENANCE+RESERVED " in state  # the real sample's order


@pytest.mark.parametrize(
    ("nodes", "name", "user", "message"),
    [
        ("gpu005", "x", "root", "Error creating the reservation: Requested nodes are busy"),
        ("gpu001", "taken", "root", "Error creating the reservation: Duplicate reservation name"),
        ("gpu999", "y", "root", "Error creating the reservation: Invalid node name specified"),
        ("gpu002", "z", "carol", "Error creating the reservation: Access/permission denied"),
    ],
)
def test_create_refusals(fleet: FleetState, nodes: str, name: str, user: str, message: str) -> None:
    create(fleet, "gpu001", "gpu001", "taken")
    argv = CREATE.format(name=name, nodes=nodes, duration=120, flags="MAINT").split()[1:]
    context = ToolContext(fleet.nodes["gpu003"], fleet, NoHooks(), time.time(), user)
    reply = tool_table()["scontrol"](context, argv)
    assert (reply.rc, reply.stdout, reply.stderr) == (1, "", message + "\n")
    assert set(fleet.slurm.reservations) == {"taken"}


def test_ignore_jobs_overlap_and_scontrol_errors(fleet: FleetState) -> None:
    busy = create(fleet, "gpu001", "gpu005", "busy", flags="MAINT,IGNORE_JOBS")
    assert busy == "0|Reservation created: busy\n"
    assert create(fleet, "gpu001", "gpu005", "plain", flags="OVERLAP,IGNORE_JOBS") == (
        "0|Reservation created: plain\n"
    )  # MAINT reservations may be overlapped
    create(fleet, "gpu001", "gpu006", "first", flags="IGNORE_JOBS")
    assert create(fleet, "gpu001", "gpu006", "second", flags="IGNORE_JOBS") == (
        "1|Error creating the reservation: Requested reservation overlaps with another"
        " reservation\n"
    )
    missing = call(fleet, "gpu001", "scontrol", "create", "res", "Nodes=gpu007", "Users=root")
    assert missing.stderr == (
        "scontrol: error: A start time must be given.  No reservation created.\n"
    )
    unlimited = call(
        fleet, "gpu001", "scontrol", "create", "reservation", "starttime=now",
        "duration=UNLIMITED", "user=root", "nodes=gpu008",
    )  # fmt: skip
    assert unlimited.stdout == "Reservation created: root_1\n"  # Slurm's generated name
    shown = call(fleet, "gpu001", "scontrol", "show", "ReservationName=root_1").stdout
    assert "Duration=365-00:00:00" in shown and "Flags=SPEC_NODES" in shown


def test_delete_and_show_missing(fleet: FleetState) -> None:
    assert call(fleet, "gpu001", "scontrol", "show", "res").stdout == (
        "No reservations in the system\n"
    )
    create(fleet, "gpu001", "gpu001", "fleetfix-gpu001")
    gone = call(fleet, "gpu001", "scontrol", "delete", "ReservationName=fleetfix-gpu001")
    assert (gone.rc, gone.stdout, gone.stderr) == (0, "", "")
    again = call(fleet, "gpu001", "scontrol", "delete", "ReservationName=fleetfix-gpu001")
    assert (again.rc, again.stderr) == (
        1,
        "delete_reservation ReservationName=fleetfix-gpu001: Requested reservation is invalid\n",
    )
    missing = call(fleet, "gpu001", "scontrol", "show", "reservation", "fleetfix-gpu001")
    assert (missing.rc, missing.stdout) == (1, "Reservation fleetfix-gpu001 not found\n")


def test_a_reservation_ends_at_its_end_time(fleet: FleetState) -> None:
    create(fleet, "gpu001", "gpu001", "fleetfix-gpu001")
    fleet.slurm.settle(time.time() + 121 * 60)
    assert fleet.slurm.reservations == {}
    assert fleet.truth(time.time() + 121 * 60)["nodes"]["gpu001"]["slurm"]["reservation"] is None


# --- over SSH: jobs, COMPLETING, truth and audit -----------------------------------------------

SCENARIO = """\
name: resv
fleet: {spines: 1, leaves: 1, racks: 1, nodes_per_rack: 4, node_name: "r{:02d}"}
ssh: {port: 0}
timing: {epilog: 4s}
nodes:
  r04:
    slurm: {state: alloc, job_id: 900, user: carol}
"""


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabHandle]:
    scenario = tmp_path_factory.mktemp("scenario") / "resv.yml"
    scenario.write_text(SCENARIO, encoding="utf-8")
    with running_lab(str(scenario), tmp_path_factory.mktemp("state")) as handle:
        yield handle


async def test_no_job_lands_on_a_reserved_node(lab: LabHandle) -> None:
    made = await run(lab, "r01", CREATE.format(name="fleetfix-r01", nodes="r01", duration=120,
                                               flags="MAINT"))  # fmt: skip
    assert (made.rc, made.stdout) == (0, "Reservation created: fleetfix-r01\n")
    refused = await lab.ainject("r01", {"become_busy": {"job_id": 701, "user": "erin"}})
    assert refused == {
        "applied": False,
        "outcome": "no job started: the node is reserved (fleetfix-r01)",
    }
    inside = await lab.ainject(
        "r01", {"become_busy": {"job_id": 702, "user": "root", "reservation": "fleetfix-r01"}}
    )
    assert inside["applied"], inside
    in_use = await run(lab, "r01", "scontrol delete ReservationName=fleetfix-r01")
    assert in_use.stderr == (
        "delete_reservation ReservationName=fleetfix-r01: Requested reservation is in use\n"
    )
    await run(lab, "r01", "scancel 702")
    truth = await lab.atruth()
    assert truth["reservations"][0]["name"] == "fleetfix-r01"
    assert truth["reservations"][0]["flags"] == ["MAINT", "SPEC_NODES"]
    assert truth["nodes"]["r01"]["slurm"]["reservation"] == "fleetfix-r01"

    deleted = await run(lab, "r01", "scontrol delete ReservationName=fleetfix-r01")
    assert (deleted.rc, deleted.stderr) == (0, "")  # an ending job does not hold it
    after = await lab.atruth()
    assert after["reservations"] == [] and after["nodes"]["r01"]["slurm"]["reservation"] is None
    audit = [e["argv"][:2] for e in after["nodes"]["r01"]["audit"] if e["tool"] == "scontrol"]
    assert ["create", "reservation"] in audit
    assert ["delete", "ReservationName=fleetfix-r01"] in audit

    async def epilog_over() -> bool:
        return not (await lab.atruth())["nodes"]["r01"]["slurm"]["completing"]

    await eventually(epilog_over, what="job 702's epilog to end")
    assert (await lab.ainject("r01", {"become_busy": {"job_id": 703}}))["applied"]


async def test_a_job_that_ends_leaves_the_node_completing_for_the_epilog(lab: LabHandle) -> None:
    drain = "scontrol update NodeName=r04 State=DRAIN Reason='fleetfix: test'"
    busy = await run(lab, "r04", f"{drain}; scontrol show node r04 | grep -o 'State=[^ ]*'")
    assert busy.stdout == "State=ALLOCATED+DRAIN\n"
    ended = await run(
        lab, "r04", "scancel 900; scontrol show node r04; squeue -h -w r04 -o '%i %t'"
    )
    assert "   State=IDLE+COMPLETING+DRAIN ThreadsPerCore=2" in ended.stdout
    assert ended.stdout.endswith("900 CG\n")
    facts = slurm_node.parse(ended.stdout.rsplit("900 CG\n", 1)[0])
    assert (facts.drained, facts.draining, facts.completing) == (False, True, True)
    sinfo = await run(lab, "r04", "sinfo -h -N -n r04 -o %t")
    assert sinfo.stdout in ("drng\n", "drain\n")  # drng until the epilog is over
    truth = (await lab.atruth())["nodes"]["r04"]["slurm"]
    assert truth["completing"] or truth["job_id"] is None
    refused = await lab.ainject("r04", {"become_busy": {"job_id": 901}})
    assert not refused["applied"]

    async def drained() -> bool:
        shown = await run(lab, "r04", slurm_node.command({"node": "r04"}))
        return slurm_node.parse(shown.stdout).drained

    await eventually(drained, what="the epilog to end")
    assert (await run(lab, "r04", "squeue -h -w r04")).stdout == ""
    assert (await lab.atruth())["nodes"]["r04"]["slurm"]["completing"] is False
