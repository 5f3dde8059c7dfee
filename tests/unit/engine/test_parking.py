"""A busy node never holds the fleet (issue 19): its drain is sent and it is parked; its batch
and the later ones go on; the play looks at it again until its wait ends, runs again for it
once its jobs have left, and defers it at the deadline. Over the fake transport: the Slurm
state each node answers is scripted, and what the engine sent is read from the fake's log."""

from __future__ import annotations

import time
from pathlib import Path

from fleetfix.engine.batches import behind_parked
from fleetfix.engine.kinds import LEFT_KEY
from fleetfix.engine.parking import PARK_KEY, parked_data
from fleetfix.events import BatchStarted, HostBackInService, HostLeft
from fleetfix.results import JournaledStep, Outcome, ResumeState, Status
from fleetfix.transport.fake import FakeTransport, Reply

from .conftest import Run, Runner
from .test_safety_invariants import IDLE_PROCESSES, scontrol

JOB = "job(s) 51234 still running on gpu001"
BOOK = """
- hosts: gpu
  serial: 1
  tasks:
    - name: drain
      action: {{name: slurm_drain, reason: "fleetfix: xid79", wait: true, wait_timeout: {wait}}}
    - name: reboot
      action: reboot
      expect_unreachable: 5s
"""


def busy_node(fake: FakeTransport, name: str) -> dict[str, str]:
    """A node running a job: a drain leaves it draining (MIXED+DRAIN) until the returned
    record's state is set to IDLE+DRAIN (the job ended); its first look says it is busy."""
    slurm = {"state": "MIXED", "reason": ""}

    def drain(_command: str, _hits: int) -> Reply:
        slurm["state"] = "IDLE+DRAIN" if slurm["state"].startswith("IDLE") else "MIXED+DRAIN"
        slurm["reason"] = "fleetfix: xid79"
        return Reply()

    def first_look(_command: str, _hits: int) -> Reply:
        if slurm["state"].startswith("MIXED"):
            return Reply(stdout=f"{JOB}\n", rc=75)
        return Reply()

    host = fake.host(name)
    host.on(r"scontrol update .*State=DRAIN", drain)
    host.on(r"deadline=", first_look)
    host.on(
        r"^scontrol show node|node=",
        lambda _c, _h: Reply(stdout=scontrol(name, slurm["state"], slurm["reason"] or None)),
    )
    host.on(r"query-compute-apps", Reply(stdout=IDLE_PROCESSES))
    boots = iter(f"boot-{name}-{n}" for n in range(100))
    host.on(r"boot_id", lambda _cmd, _hits: Reply(stdout=next(boots) + "\n"))
    return slurm


def idle_node(fake: FakeTransport, name: str, *, on_reboot: dict[str, str] | None = None) -> None:
    """An idle node; its reboot ends the job on `on_reboot` (another node's Slurm record)."""
    slurm = busy_node(fake, name)
    slurm["state"] = "IDLE"

    def reboot(_command: str, _hits: int) -> Reply:
        if on_reboot is not None:
            on_reboot["state"] = "IDLE+DRAIN"
        return Reply()

    host = fake.host(name).on(r"reboot", reboot)
    host.rules.insert(0, host.rules.pop())  # before busy_node's rules: the first match answers


def deferrals(run: Run) -> list[str]:
    return [e.host for e in run.events if isinstance(e, HostLeft) and e.kind == "deferred"]


def reboot_order(fake: FakeTransport) -> list[str]:
    return [r.host for r in fake.ran if "reboot" in r.command]


async def test_a_parked_node_lets_the_next_batch_go_and_is_fixed_once_its_job_ends(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    busy = busy_node(fake, "gpu001")
    idle_node(fake, "gpu002", on_reboot=busy)  # the job on gpu001 ends when gpu002 reboots
    run = await run_playbook(BOOK.format(wait="60s"), hosts=["gpu001", "gpu002"])
    # gpu002, in the batch after gpu001's, was rebooted first: it did not wait for the job
    assert reboot_order(fake) == ["gpu002", "gpu001"], fake.ran
    assert deferrals(run) == []
    parked = next(r for r in run.result.results if r.host == "gpu001" and r.step == "drain")
    assert parked.message.startswith(f"parked: {JOB}; looked at again until"), parked.message
    assert parked.data[LEFT_KEY]["kind"] == "parked"
    revisits = [e for e in run.events if isinstance(e, BatchStarted) and e.revisit]
    assert [e.hosts for e in revisits] == [("gpu001",)]
    # the drain's first look ran once: the play looked again with a Slurm read, not the loop
    assert sum("deadline=" in c for c in fake.commands_on("gpu001")) == 1


async def test_a_job_that_outlives_the_wait_is_deferred_at_the_deadline(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    busy_node(fake, "gpu001")
    idle_node(fake, "gpu002")
    run = await run_playbook(BOOK.format(wait="7s"), hosts=["gpu001", "gpu002"])
    assert reboot_order(fake) == ["gpu002"]
    deferred = run.result.left["gpu001"]
    # the wait the playbook asked for, not the first look's measured time (the fake's is 0 s;
    # a real one counts whole seconds and may come in a second short) plus the rest
    assert deferred.startswith(f"deferred: {JOB} after 7s: "), deferred
    assert "the next run finishes the work" in deferred
    assert deferrals(run) == ["gpu001"]
    # deferred at its deadline, not at once: Slurm was read again after the first look (5 s,
    # faked as instant) for the 2 s left of the 7 s wait
    ran = fake.commands_on("gpu001")
    first_look = next(i for i, command in enumerate(ran) if "deadline=" in command)
    assert any("scontrol show node" in c for c in ran[first_look + 1 :]), ran
    back = {e.host for e in run.events if isinstance(e, HostBackInService)}
    assert back == {"gpu002"}, "a parked node is never counted back in service"
    assert run.result.outcome() is Outcome.HOST_FAILED, run.result.left


async def test_a_wait_within_the_first_look_defers_at_once(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    busy_node(fake, "gpu001")
    idle_node(fake, "gpu002")
    run = await run_playbook(BOOK.format(wait="3s"), hosts=["gpu001", "gpu002"])
    assert deferrals(run) == ["gpu001"] and run.result.left["gpu001"] == f"deferred: {JOB}"
    assert not any(isinstance(e, BatchStarted) and e.revisit for e in run.events)
    assert reboot_order(fake) == ["gpu002"]


async def test_a_resumed_run_parks_the_node_again_until_the_journaled_deadline(
    run_playbook: Runner, fake: FakeTransport, tmp_path: Path
) -> None:
    """The interrupted run parked gpu001; its job has ended since: the resumed run replays the
    park (no drain sent again in its batch), looks again, and runs the play afresh for it."""
    busy = busy_node(fake, "gpu001")
    busy.update(state="IDLE+DRAIN", reason="fleetfix: pending xid79; waiting for job(s) 51234")
    park = parked_data("slurm_drain", JOB, time.time() + 60, 60.0)
    reason = f"parked: {JOB}; looked at again until later"
    data = {PARK_KEY: park, LEFT_KEY: {"kind": "parked", "reason": reason}}
    resume = ResumeState(
        run_id="r1",
        steps={
            ("gpu001", f"{tmp_path / 'playbook.yml'}:5:7"): JournaledStep(
                Status.CHANGED, True, reason, data
            )
        },
    )
    run = await run_playbook(BOOK.format(wait="60s"), hosts=["gpu001"], resume=resume)
    assert reboot_order(fake) == ["gpu001"]
    assert deferrals(run) == []
    drains = [c for c in fake.commands_on("gpu001") if "scontrol update" in c]
    assert drains and "State=DRAIN" not in drains[0], drains  # its reason reset, not drained
    assert [e.hosts for e in run.events if isinstance(e, BatchStarted) and e.revisit] == [
        ("gpu001",)
    ]


def test_hosts_behind_a_parked_host_are_those_its_capped_domains_have_no_room_for() -> None:
    racks = {"a1": "r1", "a2": "r1", "a3": "r1", "b1": "r2", "x": "r3"}

    def domains_of(host: str) -> dict[str, str]:
        if host == "unknown":
            raise KeyError(host)
        return {"rack": racks[host], "leaf": "l1"}

    hosts = ["a2", "a3", "b1", "unknown"]
    assert behind_parked(hosts, {"a1"}, {"rack": 1}, domains_of) == ["a2", "a3"]
    assert behind_parked(hosts, {"a1"}, {"rack": 2}, domains_of) == []
    assert behind_parked(hosts, {"a1", "x"}, {"leaf": 2}, domains_of) == ["a2", "a3", "b1"]
    assert behind_parked(hosts, set(), {"rack": 1}, domains_of) == []
