"""The safety invariants the engine enforces for every playbook, a user's included: ownership,
fail-closed gates, deferral of busy nodes, write-ahead intents, resume, the host boundary,
any_errors_fatal, honest exit codes. Over the fake transport, with a real journal where the
invariant is about what is journaled."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from fleetfix.engine.verification import VERIFIED_KEY
from fleetfix.events import ActionStarted, CommandRan, HostLeft, OwnershipOverridden
from fleetfix.journal import Journal
from fleetfix.results import JournaledStep, OpenIntent, Outcome, ResumeState, Status
from fleetfix.transport.fake import FakeTransport, Reply

from .conftest import Runner

IDLE_PROCESSES = (
    "### fleetfix query-compute-apps timeout=15\n### fleetfix end rc=0\n"
    "### fleetfix fuser timeout=15\n### fleetfix end rc=1\n"
)
NO_CONTROLLER = "slurm_load_node error: Unable to contact slurm controller (connect failure)"
REBOOT_BOOK = """
- hosts: gpu
  tasks:
    - name: reboot it
      action: reboot
      expect_unreachable: 5s
"""


def scontrol(node: str, state: str | None = "IDLE", reason: str | None = None) -> str:
    lines = [
        f"NodeName={node} Arch=x86_64",
        "   Gres=gpu:h100:8",
        f"   State={state} ThreadsPerCore=1",
        "   Partitions=gpu",
    ]
    if reason is not None:
        lines.append(f"   Reason={reason}")
    return "\n".join(lines) + "\n"


def node(fake: FakeTransport, name: str, *, state: str = "IDLE", reason: str | None = None) -> None:
    """A healthy idle node that answers the gate probes and reboots (new boot id each time)."""
    boots = iter(f"boot-{name}-{n}" for n in range(100))
    slurm = {"state": state, "reason": reason}

    def drain(_command: str, _hits: int) -> Reply:
        slurm.update(state="IDLE+DRAIN", reason="fleetfix: drained [root@2026-11-25]")
        return Reply()

    host = fake.host(name)
    host.on(r"scontrol update .*State=DRAIN", drain)
    host.on(r"^scontrol show node|node=", lambda _c, _h: Reply(stdout=scontrol(name, **slurm)))
    host.on(r"query-compute-apps", Reply(stdout=IDLE_PROCESSES))
    host.on(r"boot_id", lambda _cmd, hits: Reply(stdout=next(boots) + "\n"))
    host.on(r"reboot", Reply())


def reboots(fake: FakeTransport, host: str) -> int:
    return sum("systemctl reboot" in c for c in fake.commands_on(host))


async def test_someone_elses_drained_node_is_left_alone(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    node(fake, "gpu001", state="IDLE+DRAIN", reason="bad DIMM B2, OPS-1187 [bob@2026-11-25T03:00]")
    node(fake, "gpu002")
    run = await run_playbook(REBOOT_BOOK, hosts=["gpu001", "gpu002"], reconnect_poll=0.0)
    assert reboots(fake, "gpu001") == 0
    assert reboots(fake, "gpu002") == 1
    assert run.result.left["gpu001"] == "left alone: owned by bob: bad DIMM B2, OPS-1187"
    assert [e.kind for e in run.events if isinstance(e, HostLeft)] == ["owned"]
    assert run.result.outcome() is Outcome.HOST_FAILED  # a node left with its fault: not green


async def test_a_fleetfix_drained_node_is_fleetfixs_own(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    node(fake, "gpu001", state="IDLE+DRAIN", reason="fleetfix: xid79 remediation [root@2026-11-25]")
    run = await run_playbook(REBOOT_BOOK, hosts=["gpu001"])
    assert reboots(fake, "gpu001") == 1
    assert run.result.outcome() is Outcome.OK


async def test_an_explicit_override_acts_and_says_who(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    node(fake, "gpu001", state="DOWN", reason="PSU swap [alice@2026-11-25]")
    run = await run_playbook(
        REBOOT_BOOK,
        hosts=["gpu001"],
        override_ownership=frozenset({"gpu001"}),
        operator="carol",
    )
    assert reboots(fake, "gpu001") == 1
    overrides = [e for e in run.events if isinstance(e, OwnershipOverridden)]
    assert [(e.host, e.owner, e.by) for e in overrides] == [("gpu001", "alice", "carol")]


async def test_hands_off_list_and_inventory_var(run_playbook: Runner, fake: FakeTransport) -> None:
    for name in ("gpu001", "gpu002", "gpu003"):
        node(fake, name)
    run = await run_playbook(
        REBOOT_BOOK,
        inventory="[gpu]\ngpu001\ngpu002 fleetfix_hands_off='vendor on site'\ngpu003\n",
        hands_off={"gpu001": "burn-in until Friday"},
    )
    assert [reboots(fake, h) for h in ("gpu001", "gpu002", "gpu003")] == [0, 0, 1]
    assert "owned by the hands-off list: burn-in until Friday" in run.result.left["gpu001"]
    assert "vendor on site" in run.result.left["gpu002"]


async def test_a_slurm_state_that_cannot_be_read_refuses(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    node(fake, "gpu002")
    fake.host("gpu001").on(r"scontrol show node", Reply(stderr=NO_CONTROLLER, rc=1))
    node(fake, "gpu001")
    run = await run_playbook(REBOOT_BOOK, hosts=["gpu001", "gpu002"])
    assert reboots(fake, "gpu001") == 0
    assert "cannot evaluate its safety gates" in run.result.left["gpu001"]
    assert reboots(fake, "gpu002") == 1


async def test_a_node_outside_slurm_says_so_in_the_inventory(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    host = fake.host("gpu001")
    host.on(r"scontrol", Reply(stderr="scontrol: command not found", rc=127))
    node(fake, "gpu001")
    await run_playbook(REBOOT_BOOK, inventory="[gpu]\ngpu001 fleetfix_slurm=false\n")
    assert reboots(fake, "gpu001") == 1
    assert not any("scontrol" in c for c in fake.commands_on("gpu001"))


async def test_a_process_listing_that_hangs_refuses(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    fake.host("gpu001").on(r"query-compute-apps", Reply(hang=True))
    node(fake, "gpu001")
    run = await run_playbook(
        REBOOT_BOOK.replace("expect_unreachable: 5s", "expect_unreachable: 5s\n      timeout: 0.2"),
        hosts=["gpu001"],
    )
    assert reboots(fake, "gpu001") == 0
    assert "refused" in run.result.left["gpu001"]


async def test_the_intent_is_journaled_before_the_command_is_sent(
    run_playbook: Runner, fake: FakeTransport, tmp_path: Path
) -> None:
    journal = Journal(tmp_path / "j.sqlite")
    journal.start_run("pb.yml", [], check=False, hosts=1)
    seen_at_send: list[list[tuple[str, str]]] = []

    def reboot(_command: str, _hits: int) -> Reply:
        with sqlite3.connect(tmp_path / "j.sqlite") as db:  # another reader, as after kill -9
            seen_at_send.append(db.execute("SELECT action, state FROM actions").fetchall())
        return Reply()

    fake.host("gpu001").on(r"systemctl reboot", reboot)
    node(fake, "gpu001")
    run = await run_playbook(REBOOT_BOOK, hosts=["gpu001"], memory=journal, subscribe=journal)
    assert seen_at_send == [[("reboot", "started")]]
    starts = [e for e in run.events if isinstance(e, ActionStarted)]
    assert starts[0].evidence == {"boot_id": "boot-gpu001-0"}
    assert journal.action_times("gpu001", "reboot", 0)  # counts for max_attempts
    journal.close()


async def test_a_bounded_drain_wait_defers_the_busy_node_and_frees_the_rest(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    for name in ("gpu001", "gpu002"):
        node(fake, name)
    pending = "job(s) 51234 still running on gpu001 after 3s: left drained"
    fake.host("gpu001").on(r"deadline=", Reply(stdout=pending + "\n", rc=75))
    run = await run_playbook(
        """
        - hosts: gpu
          tasks:
            - name: drain
              action: {name: slurm_drain, wait: true, wait_timeout: 3s}
            - name: reboot
              action: reboot
              expect_unreachable: 5s
        """,
        hosts=["gpu001", "gpu002"],
    )
    assert reboots(fake, "gpu001") == 0
    assert reboots(fake, "gpu002") == 1
    assert run.result.left == {"gpu001": f"deferred: {pending}"}
    assert run.result.outcome() is Outcome.HOST_FAILED


async def test_a_bad_templated_parameter_fails_one_host_with_its_location(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    for name in ("gpu001", "gpu002"):
        node(fake, name)
    run = await run_playbook(
        """
        - hosts: gpu
          tasks:
            - name: drain
              action:
                name: slurm_drain
                wait: true
                wait_timeout: "{{ 'soon' if inventory_hostname == 'gpu001' else '5s' }}"
        """,
        hosts=["gpu001", "gpu002"],
    )
    first = [r for r in run.result.results if r.host == "gpu001"][-1]
    assert first.status is Status.FAILED
    assert "playbook.yml:4:" in first.message and "not a duration: 'soon'" in first.message
    assert run.recap("gpu002")["failed"] == 0


async def test_any_errors_fatal_stops_other_hosts_inside_a_block(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    fake.host("gpu001").on(r"first", Reply(rc=1))
    run = await run_playbook(
        """
        - hosts: gpu
          any_errors_fatal: true
          tasks:
            - block:
                - shell: first
                - shell: second
        """,
        hosts=["gpu001", "gpu002"],
    )
    assert "second" not in fake.commands_on("gpu002")
    assert run.result.outcome() is Outcome.HOST_FAILED


async def test_any_errors_fatal_stops_the_play_after_a_failed_handler(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    fake.host("gpu001").on(r"restart-it", Reply(rc=1))
    await run_playbook(
        """
        - hosts: gpu
          any_errors_fatal: true
          tasks:
            - shell: change
              notify: restart
            - meta: flush_handlers
            - shell: after
          handlers:
            - name: restart
              shell: restart-it
        """,
        hosts=["gpu001", "gpu002"],
    )
    assert "after" not in fake.commands_on("gpu002")


def _journaled(status: Status, **data: object) -> JournaledStep:
    return JournaledStep(status, status is Status.CHANGED, "", data)


async def test_resume_replays_facts_and_ended_hosts_instead_of_rerunning(
    run_playbook: Runner, fake: FakeTransport, tmp_path: Path
) -> None:
    book = tmp_path / "playbook.yml"
    fake.host("gpu001").on(r"read-fault", Reply(stdout="none\n"))  # the node changed since
    node(fake, "gpu001")
    node(fake, "gpu002")
    resume = ResumeState(
        run_id="r1",
        steps={
            ("gpu001", f"{book}:4:7"): _journaled(Status.OK, stdout="xid79\n", rc=0),
            ("gpu001", f"{book}:7:7"): _journaled(Status.OK, ansible_facts={"broken": True}),
            ("gpu002", f"{book}:4:7"): _journaled(Status.OK, stdout="none\n", rc=0),
            ("gpu002", f"{book}:7:7"): _journaled(Status.OK, ansible_facts={"broken": False}),
            ("gpu002", f"{book}:10:7"): _journaled(Status.OK),  # end_host ran
        },
    )
    run = await run_playbook(
        """
        - hosts: gpu
          tasks:
            - shell: read-fault
              register: fault
            - set_fact:
                broken: "{{ 'xid79' in fault.stdout }}"
            - meta: end_host
              when: not broken
            - name: reboot it
              action: reboot
              expect_unreachable: 5s
        """,
        hosts=["gpu001", "gpu002"],
        resume=resume,
    )
    assert "read-fault" not in fake.commands_on("gpu001")  # replayed, not re-read
    assert reboots(fake, "gpu001") == 1  # the journaled path: it was broken
    assert fake.commands_on("gpu002") == []  # it had ended: nothing at all
    assert run.result.outcome() is Outcome.OK


async def test_resume_does_not_repeat_a_reboot_that_happened(
    run_playbook: Runner, fake: FakeTransport, tmp_path: Path
) -> None:
    book = tmp_path / "playbook.yml"
    node(fake, "gpu001")  # its boot id is no longer the journaled one: the reboot happened
    intent = OpenIntent("reboot", at=0.0, evidence={"boot_id": "boot-before"}, record=1)
    run = await run_playbook(
        REBOOT_BOOK,
        hosts=["gpu001"],
        resume=ResumeState(run_id="r1", intents={("gpu001", f"{book}:4:7", "reboot"): intent}),
    )
    assert reboots(fake, "gpu001") == 0
    assert "verified, not repeated" in run.result.results[-1].message


async def test_resume_sends_a_reboot_that_never_left(
    run_playbook: Runner, fake: FakeTransport, tmp_path: Path
) -> None:
    book = tmp_path / "playbook.yml"
    journal = Journal(tmp_path / "j.sqlite")
    journal.start_run("pb.yml", [], check=False, hosts=1)
    boots = iter(["boot-before"] * 3 + [f"boot-after-{n}" for n in range(50)])
    fake.host("gpu001").on(r"boot_id", lambda _c, _h: Reply(stdout=next(boots) + "\n"))
    node(fake, "gpu001")
    journal(ActionStarted(host="gpu001", step="reboot it", key=f"{book}:4:7", action="reboot"))
    journal.finish_run(99)  # interrupted: its controller no longer holds it, it may be resumed
    record = journal.resume_state(journal.run_id or "").intents
    intent = next(iter(record.values()))
    intent = OpenIntent("reboot", at=0.0, evidence={"boot_id": "boot-before"}, record=intent.record)
    await run_playbook(
        REBOOT_BOOK,
        hosts=["gpu001"],
        resume=ResumeState(run_id="r1", intents={("gpu001", f"{book}:4:7", "reboot"): intent}),
        memory=journal,
    )
    assert reboots(fake, "gpu001") == 1
    assert journal.action_times("gpu001", "reboot", 0) == []  # the undelivered one no longer counts
    journal.close()


async def test_a_fault_left_in_service_fails_the_run(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    xid79 = "[  365.969676] NVRM: Xid (PCI:0000:52:00): 79, pid=0, GPU has fallen off the bus.\n"
    fake.host("gpu001").on(r"dmesg|journalctl", Reply(stdout=xid79))
    fake.host("gpu002").on(r"dmesg|journalctl", Reply(stdout=""))
    run = await run_playbook(
        """
        - hosts: gpu
          tasks:
            - probe: xid
              ignore_errors: true
        """,
        hosts=["gpu001", "gpu002"],
    )
    assert set(run.result.left) == {"gpu001"}
    assert run.result.left["gpu001"].startswith("unhealthy: xid: Xid 79")
    assert run.result.outcome() is Outcome.HOST_FAILED


DCGMI = Path(__file__).parents[2] / "fixtures" / "samples" / "dcgmi"


async def test_a_failed_dcgm_diag_fails_the_run(run_playbook: Runner, fake: FakeTransport) -> None:
    """A sweep that reads `dcgmi diag` is not green over a node DCGM fails (a real capture:
    persistence mode off on GPU 0), nor over one where the diagnostic could not run."""
    failed = DCGMI / "unresolved-gpumemtest-page-diag-r4-persistence-fail-memtest-pass.txt"
    paused = DCGMI / "synthetic-diag-json-runtime-error-paused.json"
    passed = DCGMI / "synthetic-diag-r1-json-3.x-gpu-ids-pass.json"
    for host, sample in (("gpu001", failed), ("gpu002", paused), ("gpu003", passed)):
        fake.host(host).on(r"dcgmi diag", Reply(stdout=sample.read_text()))
    run = await run_playbook(
        "- hosts: gpu\n  tasks:\n    - probe: dcgm_diag\n",
        hosts=["gpu001", "gpu002", "gpu003"],
    )
    assert set(run.result.left) == {"gpu001", "gpu002"}
    assert run.result.left["gpu001"] == (
        "unhealthy: dcgm_diag: DCGM diag failed: Persistence Mode on GPU 0"
    )
    assert run.result.left["gpu002"].startswith("unhealthy: dcgm_diag: DCGM diag did not run: ")
    assert run.result.outcome() is Outcome.HOST_FAILED


async def test_unrelated_commands_are_untouched(run_playbook: Runner, fake: FakeTransport) -> None:
    run = await run_playbook("- hosts: gpu\n  tasks:\n    - shell: echo hi\n", hosts=["gpu001"])
    assert not [
        e for e in run.events if isinstance(e, CommandRan) and "scontrol" in e.result.command
    ]
    assert run.result.outcome() is Outcome.OK


async def test_a_hold_is_not_rescued_as_a_failed_fix(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    """A repair budget of one node. gpu001's fix failed in the first play (gpu002 had nothing
    to fix there: a play whose every host failed would end the playbook), so it stays drained
    and holds the budget's place; gpu002's drain is then held. The rescue, written for a
    fix that failed, must not run on gpu002, which nothing was tried on: it stays held and the
    run exits 6."""
    for name in ("gpu001", "gpu002"):
        node(fake, name)
    run = await run_playbook(
        """
        - hosts: gpu
          tasks:
            - name: drain
              action: {name: slurm_drain, reason: "fleetfix: test"}
              when: inventory_hostname == 'gpu001'
            - name: the fix does not verify
              fail: {msg: "not fixed, left drained"}
              when: inventory_hostname == 'gpu001'
        - hosts: gpu
          tasks:
            - name: fix
              block:
                - name: drain
                  action: {name: slurm_drain, reason: "fleetfix: test"}
              rescue:
                - name: leave it drained
                  command: echo leave drained, needs RMA
        """,
        hosts=["gpu001", "gpu002"],
        repair_budget=1,
    )
    assert not any("needs RMA" in c for c in fake.commands_on("gpu002"))
    assert not any("State=DRAIN" in c for c in fake.commands_on("gpu002"))
    stats = run.result.stats["gpu002"]
    assert (stats.failed, stats.rescued) == (1, 0)
    assert [h for h in run.result.holds if h.startswith("gpu002")], run.result.holds
    assert run.result.outcome() is Outcome.SAFETY_ABORT


async def test_an_action_keeps_what_its_verification_saw(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    node(fake, "gpu001")
    run = await run_playbook(
        """
        - hosts: gpu
          tasks:
            - name: reboot it
              action: reboot
              expect_unreachable: 5s
              verify:
                - probe: gpu_processes
                  register: procs_after
        """,
        hosts=["gpu001"],
    )
    (reboot,) = [r for r in run.result.results if r.step == "reboot it"]
    kept = reboot.data[VERIFIED_KEY]
    assert kept["registered"]["procs_after"]["facts"]["count"] == 0
    assert kept["probes"]["gpu_processes"] == kept["registered"]["procs_after"]["facts"]


async def test_resume_replays_what_an_actions_verification_saw(
    run_playbook: Runner, fake: FakeTransport, tmp_path: Path
) -> None:
    """The reboot finished before the stop: the resumed run replays it with what its
    verification read, so the end-of-run check does not report the Xid read before the fix
    (exit 2 where the clean run exits 0) and later steps see the value `verify:` registered."""
    book = tmp_path / "playbook.yml"
    node(fake, "gpu001")
    before = {"reboot_required": True, "codes": [79]}
    after = {"reboot_required": False, "codes": []}
    verified = {"probes": {"xid": after}, "registered": {"xid_after": {"facts": after}}}
    resume = ResumeState(
        run_id="r1",
        steps={
            ("gpu001", f"{book}:4:7"): _journaled(Status.OK, facts=before),
            ("gpu001", f"{book}:6:7"): JournaledStep(
                Status.CHANGED, True, "", {"changed": True, VERIFIED_KEY: verified}
            ),
        },
    )
    run = await run_playbook(
        """
        - hosts: gpu
          tasks:
            - probe: xid
              register: xid
            - name: reboot it
              action: reboot
              expect_unreachable: 5s
              verify:
                - probe: xid
                  register: xid_after
            - name: the Xid is gone
              assert:
                that: not xid_after.facts.reboot_required
        """,
        hosts=["gpu001"],
        resume=resume,
    )
    assert reboots(fake, "gpu001") == 0
    assert run.result.left == {}
    assert run.result.outcome() is Outcome.OK
