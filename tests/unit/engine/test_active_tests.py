"""Active tests (nccl-tests, dcgmi diag -r 2+) run only on nodes taken out of scheduling:
the engine's gate, for any playbook, over the fake transport; and the reservation actions."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetfix.events import HostLeft
from fleetfix.results import OpenIntent, Outcome, ResumeState, Status
from fleetfix.transport.fake import FakeTransport, Reply

from .conftest import Run, Runner

SAMPLES = Path(__file__).resolve().parents[2] / "fixtures" / "samples"
NCCL_OUTPUT = (SAMPLES / "nccl-tests" / "synthetic-probe-command-two-ops-8xh100.txt").read_text()
DCGM_OUTPUT = SAMPLES / "dcgmi" / "gnosia93-diag-r3-3.3.9-570-2x2bb5-all-skip-duplicated.txt"
IDLE_PROCESSES = (
    "### fleetfix query-compute-apps timeout=15\n### fleetfix end rc=0\n"
    "### fleetfix fuser timeout=15\n### fleetfix end rc=1\n"
)
NCCL_BOOK = """
- hosts: gpu
  tasks:
    - name: all_reduce_perf on the node alone
      action: {name: nccl_tests, min_busbw: 1}
"""
RESERVED_BOOK = """
- hosts: gpu
  tasks:
    - name: reserve
      action: slurm_reserve
    - name: all_reduce_perf on the node alone
      action: {name: nccl_tests, min_busbw: 1}
    - name: release
      action: slurm_release
"""


class SlurmNode:
    """A node's Slurm record that scontrol commands change, printed in 24.05's layout."""

    def __init__(self, name: str, state: str, reason: str | None, reservation: str | None):
        self.name, self.state, self.reason, self.reservation = name, state, reason, reservation

    def show(self, _command: str, _hits: int) -> Reply:
        lines = [
            f"NodeName={self.name} Arch=x86_64",
            "   CPUAlloc=0 CPUEfctv=224 CPUTot=224",
            "   Gres=gpu:h100:8",
            f"   State={self.state} ThreadsPerCore=2",
            "   Partitions=gpu",
        ]
        if self.reason is not None:
            lines.append(f"   Reason={self.reason}")
        if self.reservation is not None:
            lines.append(f"   ReservationName={self.reservation}")
        return Reply(stdout="\n".join(lines) + "\n")

    def create(self, command: str, _hits: int) -> Reply:
        self.reservation = command.split("ReservationName=")[1].split(maxsplit=1)[0]
        self.state = self.state.replace("IDLE", "IDLE+MAINTENANCE+RESERVED")
        return Reply(stdout=f"Reservation created: {self.reservation}\n")

    def delete(self, _command: str, _hits: int) -> Reply:
        self.reservation = None
        self.state = self.state.replace("+MAINTENANCE+RESERVED", "")
        return Reply()


def node(
    fake: FakeTransport,
    name: str,
    state: str = "IDLE",
    *,
    reason: str | None = None,
    reservation: str | None = None,
) -> SlurmNode:
    slurm = SlurmNode(name, state, reason, reservation)
    host = fake.host(name)
    host.on(r"all_reduce_perf", Reply(stdout=NCCL_OUTPUT))
    host.on(r"dcgmi diag", Reply(stdout=DCGM_OUTPUT.read_text()))
    host.on(r"scontrol create reservation", slurm.create)
    host.on(r"scontrol delete ReservationName=", slurm.delete)
    host.on(r"^scontrol show node|node=", slurm.show)
    host.on(r"query-compute-apps", Reply(stdout=IDLE_PROCESSES))
    return slurm


def ran_nccl(fake: FakeTransport, host: str) -> bool:
    return any("all_reduce_perf" in c for c in fake.commands_on(host))


def left(run: Run) -> dict[str, str]:
    """host -> kind, for every host the engine left (owned, refused, deferred); the fake
    answers no nvidia-smi, so the end-of-run health check is not what these tests look at."""
    return {e.host: e.kind for e in run.events if isinstance(e, HostLeft) and e.kind != "unhealthy"}


async def test_an_active_test_on_a_merely_idle_node_is_refused(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    node(fake, "gpu001")
    run = await run_playbook(NCCL_BOOK, hosts=["gpu001"])
    assert not ran_nccl(fake, "gpu001")
    assert run.result.left["gpu001"] == (
        "nccl_tests refused: an active test runs only on a node taken out of scheduling"
        " (drained, or in a fleetfix reservation: slurm_reserve); it is IDLE in Slurm: a job"
        " could start on it mid-test"
    )
    assert left(run) == {"gpu001": "refused"}
    assert run.result.outcome() is Outcome.HOST_FAILED


@pytest.mark.parametrize(
    ("state", "reason", "reservation", "runs", "why"),
    [
        ("IDLE+DRAIN", "fleetfix: nccl check [root@2026-11-25]", None, True, ""),
        ("IDLE+MAINTENANCE+RESERVED", None, "fleetfix-gpu001", True, ""),
        ("IDLE+DRAIN+MAINTENANCE+RESERVED", "fleetfix: x [root@t]", "fleetfix-gpu001", True, ""),
        (
            "IDLE+COMPLETING+DRAIN",
            "fleetfix: nccl check [root@2026-11-25]",
            None,
            False,
            "a job is still completing on it (state IDLE+COMPLETING+DRAIN)",
        ),
        (
            "MIXED+DRAIN",
            "fleetfix: nccl check [root@2026-11-25]",
            None,
            False,
            "Slurm has jobs on it (state MIXED+DRAIN)",
        ),
        (
            "IDLE+RESERVED",
            None,
            "root_7",
            False,
            "it is in root_7, not a fleetfix reservation (state IDLE+RESERVED)",
        ),
        (
            "IDLE+MAINTENANCE+RESERVED",
            None,
            None,
            False,
            "it is in a reservation Slurm does not name, not a fleetfix reservation",
        ),
    ],
)
async def test_out_of_scheduling_means_drained_or_in_a_fleetfix_reservation(
    run_playbook: Runner,
    fake: FakeTransport,
    state: str,
    reason: str | None,
    reservation: str | None,
    runs: bool,
    why: str,
) -> None:
    node(fake, "gpu001", state, reason=reason, reservation=reservation)
    run = await run_playbook(NCCL_BOOK, hosts=["gpu001"])
    assert ran_nccl(fake, "gpu001") is runs
    if runs:
        assert left(run) == {}
    else:
        assert why in run.result.left["gpu001"]


async def test_a_human_drained_node_is_theirs_for_active_tests_too(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    node(fake, "gpu001", "IDLE+DRAIN", reason="bad DIMM, OPS-1187 [bob@2026-11-25T03:00]")
    run = await run_playbook(NCCL_BOOK, hosts=["gpu001"])
    assert not ran_nccl(fake, "gpu001")
    assert run.result.left["gpu001"] == "left alone: owned by bob: bad DIMM, OPS-1187"


async def test_unreadable_slurm_refuses_and_no_slurm_runs(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    dark = "slurm_load_node error: Unable to contact slurm controller (connect failure)"
    fake.host("gpu001").on(r"scontrol show node", Reply(stderr=dark, rc=1))
    node(fake, "gpu001")
    node(fake, "gpu002")
    fake.host("gpu002").on(r"scontrol", Reply(stderr="scontrol: command not found", rc=127))
    run = await run_playbook(NCCL_BOOK, inventory="[gpu]\ngpu001\ngpu002 fleetfix_slurm=false\n")
    assert not ran_nccl(fake, "gpu001")
    assert "cannot evaluate its safety gates" in run.result.left["gpu001"]
    assert ran_nccl(fake, "gpu002") and left(run) == {"gpu001": "refused"}
    assert not any("scontrol" in c for c in fake.commands_on("gpu002"))


async def test_reserve_test_release(run_playbook: Runner, fake: FakeTransport) -> None:
    slurm = node(fake, "gpu001")
    run = await run_playbook(RESERVED_BOOK, hosts=["gpu001"])
    commands = fake.commands_on("gpu001")
    create = next(i for i, c in enumerate(commands) if "scontrol create reservation" in c)
    test = next(i for i, c in enumerate(commands) if "all_reduce_perf" in c)
    delete = next(i for i, c in enumerate(commands) if "scontrol delete" in c)
    assert create < test < delete
    assert commands[create] == (
        "scontrol create reservation ReservationName=fleetfix-gpu001 Nodes=gpu001"
        " StartTime=now Duration=120 Users=root Flags=MAINT"
    )
    assert slurm.reservation is None and left(run) == {}
    assert [r.status.value for r in run.result.results] == ["changed", "ok", "changed"]


async def test_reserving_is_repeatable_and_refuses_busy_or_others_nodes(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    node(fake, "gpu001", "IDLE+MAINTENANCE+RESERVED", reservation="fleetfix-gpu001")
    node(fake, "gpu002", "ALLOCATED")
    node(fake, "gpu003", "IDLE+RESERVED", reservation="root_7")
    book = """
    - hosts: gpu
      tasks:
        - name: reserve
          action: {name: slurm_reserve, duration: 30m}
          register: reserved
          ignore_errors: true
    """
    run = await run_playbook(book, hosts=["gpu001", "gpu002", "gpu003"])
    assert not any("scontrol create" in c for h in ("gpu001", "gpu002", "gpu003")
                   for c in fake.commands_on(h))  # fmt: skip
    messages = {r.host: (r.status.value, r.message) for r in run.result.results}
    assert messages["gpu001"] == (
        "ok",
        "slurm_reserve: nothing to do (gpu001 already in fleetfix reservation fleetfix-gpu001)",
    )
    assert messages["gpu002"] == (
        "ignored",
        "slurm_reserve refused: Slurm has jobs on gpu002 (state ALLOCATED)",
    )
    assert messages["gpu003"] == (
        "ignored",
        "slurm_reserve refused: gpu003 is in someone else's reservation (root_7)",
    )


async def test_check_mode_counts_the_planned_reservation(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    node(fake, "gpu001")
    node(fake, "gpu002")
    run = await run_playbook(RESERVED_BOOK, hosts=["gpu001"], check=True)
    assert left(run) == {}
    assert [r.status.value for r in run.result.results] == ["changed", "ok", "ok"]
    assert not any("scontrol create" in c or "all_reduce" in c for c in fake.commands_on("gpu001"))
    bare = await run_playbook(NCCL_BOOK, hosts=["gpu002"], check=True)
    assert "refused: an active test" in bare.result.left["gpu002"]


async def test_dcgm_diag_level_2_and_up_is_an_active_test(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    node(fake, "gpu001")
    node(fake, "gpu002", "IDLE+DRAIN", reason="fleetfix: diag [root@2026-11-25]")
    book = """
    - hosts: gpu
      tasks:
        - name: DCGM level 3
          action: {name: dcgm_diag, level: 3}
          register: diag
    """
    run = await run_playbook(book, hosts=["gpu001", "gpu002"])
    assert not any("dcgmi" in c for c in fake.commands_on("gpu001"))
    assert "dcgm_diag refused: an active test" in run.result.left["gpu001"]
    assert any(c.endswith("dcgmi diag -r 3 -j 2>&1") for c in fake.commands_on("gpu002"))
    assert left(run) == {"gpu001": "refused"}


async def test_a_test_the_interrupted_run_started_runs_again_on_resume(
    run_playbook: Runner, fake: FakeTransport, tmp_path: Path
) -> None:
    """A stop during nccl-tests leaves an intent with no result. A test changes nothing, so
    the resumed run runs it again; it used to fail it as "not repeated", and nccl-health.yml
    then drained the healthy node "below the floor"."""
    node(fake, "gpu001", "IDLE+DRAIN", reason="fleetfix: nccl check [root@2026-11-25]")
    book = tmp_path / "playbook.yml"
    intent = OpenIntent("nccl_tests", at=0.0, evidence={}, record=1)
    run = await run_playbook(
        NCCL_BOOK,
        hosts=["gpu001"],
        resume=ResumeState(run_id="r1", intents={("gpu001", f"{book}:4:7", "nccl_tests"): intent}),
    )
    assert ran_nccl(fake, "gpu001")
    (test,) = [r for r in run.result.results if r.step == "all_reduce_perf on the node alone"]
    assert test.status is Status.OK, test.message
