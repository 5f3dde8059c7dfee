"""The lease on the node (engine/node_lease.py): its script's semantics in real sh against a
temporary lease root, two takers racing as two processes, and the engine taking, refusing and
releasing leases around a disruptive action (over the fake transport, whose lease commands run
in real sh against a per-host directory)."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from fleetfix.engine.node_lease import (
    LeaseAnswer,
    LeaseOwner,
    LeaseRecord,
    Mode,
    Verdict,
    lease_script,
    read_answer,
)
from fleetfix.results import CommandResult, OpenIntent, ResumeState, Status
from fleetfix.transport.fake import FakeTransport, Reply

from .conftest import Runner
from .test_safety_invariants import REBOOT_BOOK, node

ME = LeaseOwner("20260101-120000-aaaaaa", "laptop-a", 111)
OTHER = LeaseOwner("20260101-120001-bbbbbb", "laptop-b", 222)


def run_sh(script: str) -> CommandResult:
    done = subprocess.run(
        ["/bin/sh", "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    return CommandResult(script, done.returncode, done.stdout, done.stderr)


def ask(
    root: Path, mode: Mode, owner: LeaseOwner = ME, *, seconds: int = 600, take_from: str = ""
) -> LeaseAnswer | str:
    script = lease_script(mode, owner, seconds=seconds, root=str(root), take_from=take_from)
    return read_answer(run_sh(script))


def answered(answer: LeaseAnswer | str) -> LeaseAnswer:
    assert isinstance(answer, LeaseAnswer), answer
    return answer


def lease_line(root: Path) -> LeaseRecord:
    return LeaseRecord.parse((root / "lease").read_text())


def test_a_free_node_is_taken_and_the_lease_names_run_controller_pid_and_expiry(
    tmp_path: Path,
) -> None:
    root = tmp_path / "var-lib-fleetfix"  # created by the script, as on a fresh node
    before = int(time.time())
    taken = answered(ask(root, Mode.TAKE, seconds=600))
    assert taken.verdict is Verdict.TAKEN
    on_node = lease_line(root)
    assert taken.record == on_node
    assert (on_node.run, on_node.controller, on_node.pid) == (ME.run, "laptop-a", 111)
    assert on_node.since is not None and before <= on_node.since <= int(time.time())
    assert on_node.expires == on_node.since + 600


def test_another_runs_live_lease_is_held_and_named(tmp_path: Path) -> None:
    assert answered(ask(tmp_path, Mode.TAKE, OTHER)).verdict is Verdict.TAKEN
    held = answered(ask(tmp_path, Mode.TAKE))
    assert held.verdict is Verdict.HELD
    assert held.record is not None and held.record.run == OTHER.run
    since = held.record.since
    assert since is not None
    when = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(since))
    assert held.record.holder() == (
        f"being remediated by run {OTHER.run} from controller laptop-b since {when}"
    )
    assert lease_line(tmp_path).run == OTHER.run  # untouched


def test_an_expired_lease_is_taken_over(tmp_path: Path) -> None:
    (tmp_path / "lease").write_text(
        f"{OTHER.line()} since={int(time.time()) - 700} expires={int(time.time()) - 1}\n"
    )
    taken = answered(ask(tmp_path, Mode.TAKE))
    assert taken.verdict is Verdict.TAKEN
    assert lease_line(tmp_path).run == ME.run


def test_this_runs_own_lease_is_taken_again_keeping_since(tmp_path: Path) -> None:
    """A resumed run (same run id, another controller process) holds what it held."""
    (tmp_path / "lease").write_text(
        f"run={ME.run} controller=laptop-a pid=99 since=1000 expires={int(time.time()) + 300}\n"
    )
    again = answered(ask(tmp_path, Mode.TAKE, LeaseOwner(ME.run, "laptop-a", 555)))
    assert again.verdict is Verdict.TAKEN
    assert (lease_line(tmp_path).pid, lease_line(tmp_path).since) == (555, 1000)


def test_a_live_lease_of_a_run_known_dead_is_taken_over_only_when_named(tmp_path: Path) -> None:
    assert answered(ask(tmp_path, Mode.TAKE, OTHER)).verdict is Verdict.TAKEN
    wrong = answered(ask(tmp_path, Mode.TAKE, take_from="some-other-run"))
    assert wrong.verdict is Verdict.HELD
    taken = answered(ask(tmp_path, Mode.TAKE, take_from=OTHER.run))
    assert taken.verdict is Verdict.TAKEN and lease_line(tmp_path).run == ME.run


def test_renewal_extends_this_runs_lease_and_notices_one_taken_over(tmp_path: Path) -> None:
    assert answered(ask(tmp_path, Mode.TAKE, seconds=5)).verdict is Verdict.TAKEN
    first = lease_line(tmp_path)
    renewed = answered(ask(tmp_path, Mode.RENEW, seconds=900))
    assert renewed.verdict is Verdict.RENEWED
    now = lease_line(tmp_path)
    assert now.expires is not None and first.expires is not None
    assert now.expires >= first.expires + 895
    assert now.since == first.since
    (tmp_path / "lease").write_text(f"{OTHER.line()} since=1 expires={int(time.time()) + 60}\n")
    lost = answered(ask(tmp_path, Mode.RENEW))
    assert lost.verdict is Verdict.LOST and lost.record is not None
    assert lost.record.run == OTHER.run and lease_line(tmp_path).run == OTHER.run


def test_release_removes_only_this_runs_lease(tmp_path: Path) -> None:
    assert answered(ask(tmp_path, Mode.RELEASE)).verdict is Verdict.GONE
    assert answered(ask(tmp_path, Mode.TAKE, OTHER)).verdict is Verdict.TAKEN
    assert answered(ask(tmp_path, Mode.RELEASE)).verdict is Verdict.NOT_OURS
    assert lease_line(tmp_path).run == OTHER.run
    assert answered(ask(tmp_path, Mode.RELEASE, OTHER)).verdict is Verdict.RELEASED
    assert not (tmp_path / "lease").exists()


def test_an_unreadable_lease_or_root_is_a_reason_to_refuse_never_a_take(tmp_path: Path) -> None:
    (tmp_path / "lease").write_text("garbage without a run\n")
    said = ask(tmp_path, Mode.TAKE)
    assert isinstance(said, str) and "unreadable lease file" in said
    assert (tmp_path / "lease").read_text() == "garbage without a run\n"
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    failed = ask(blocked / "fleetfix", Mode.TAKE)
    assert isinstance(failed, str) and "rc=3" in failed
    assert "no output" in str(read_answer(CommandResult("x", 0, "", "")))  # a silent node


@pytest.mark.parametrize("round_", range(4))
def test_two_takers_racing_exactly_one_wins(tmp_path: Path, round_: int) -> None:
    """Two processes, released together by one file: one TAKEN, the other HELD naming it."""
    go = tmp_path / "go"
    racers = []
    for owner in (ME, OTHER):
        script = lease_script(Mode.TAKE, owner, seconds=600, root=str(tmp_path / "root"))
        wait = f"while [ ! -e {go} ]; do sleep 0.005; done\n"
        racers.append(
            subprocess.Popen(["/bin/sh", "-c", wait + script], stdout=subprocess.PIPE, text=True)
        )
    go.write_text("")
    outputs = [racer.communicate(timeout=60)[0] for racer in racers]
    answers = [answered(read_answer(CommandResult("x", 0, out, ""))) for out in outputs]
    verdicts = sorted(a.verdict for a in answers)
    assert verdicts == [Verdict.HELD, Verdict.TAKEN], (round_, outputs)
    winner = next(a for a in answers if a.verdict is Verdict.TAKEN)
    loser = next(a for a in answers if a.verdict is Verdict.HELD)
    assert loser.record is not None and winner.record is not None
    assert loser.record.run == winner.record.run == lease_line(tmp_path / "root").run


# --- through the engine --------------------------------------------------------------------

LEASE_ROOT = "/fleetfix-test-lease-root"
"""The run's lease root as the script names it; each fake host runs it in its own directory."""


def lease_in(fake: FakeTransport, host: str, directory: Path) -> None:
    """`host` answers lease scripts by running them in real sh with its own lease directory."""

    def respond(command: str, _hits: int) -> Reply:
        done = run_sh(command.replace(LEASE_ROOT, str(directory)))
        return Reply(stdout=done.stdout, stderr=done.stderr, rc=done.rc or 0)

    fake.host(host).on(r"flock", respond)


async def test_the_engine_takes_the_lease_before_acting_leaves_a_held_node_and_releases(
    run_playbook: Runner, fake: FakeTransport, tmp_path: Path
) -> None:
    mine, theirs = tmp_path / "gpu001", tmp_path / "gpu002"
    for name, directory in (("gpu001", mine), ("gpu002", theirs)):
        lease_in(fake, name, directory)
        node(fake, name)
    theirs.mkdir()
    (theirs / "lease").write_text(f"{OTHER.line()} since=1767225600 expires=99999999999\n")
    run = await run_playbook(
        REBOOT_BOOK,
        hosts=["gpu001", "gpu002"],
        run_id=ME.run,
        node_lease_seconds=600,
        node_lease_root=LEASE_ROOT,
    )
    ran = {h: [c.command for c in fake.ran if c.host == h] for h in ("gpu001", "gpu002")}
    lease_at = next(i for i, c in enumerate(ran["gpu001"]) if "flock" in c)
    reboot_at = next(i for i, c in enumerate(ran["gpu001"]) if "systemctl reboot" in c)
    assert lease_at < reboot_at  # taken before the disruptive command was sent
    assert run.statuses("gpu001")[-1][1] == Status.CHANGED.value
    assert not (mine / "lease").exists()  # released at the end
    assert not any("systemctl reboot" in c for c in ran["gpu002"])
    assert run.result.left["gpu002"] == (
        f"being remediated by run {OTHER.run} from controller laptop-b"
        " since 2026-01-01T00:00:00+00:00"
    )
    assert lease_line(theirs).run == OTHER.run  # theirs is never released by us


async def test_a_lease_that_cannot_be_taken_refuses_the_action(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    """A node that gives no lease answer (the fake's empty success) is not acted on."""
    node(fake, "gpu001")
    run = await run_playbook(REBOOT_BOOK, hosts=["gpu001"], run_id=ME.run, node_lease_seconds=600)
    assert not any("systemctl reboot" in c.command for c in fake.ran)
    assert "cannot take the node lease" in run.result.left["gpu001"]


async def test_a_resumed_reboot_waits_for_the_node_before_taking_its_lease(
    run_playbook: Runner, fake: FakeTransport, tmp_path: Path
) -> None:
    """The interrupted run rebooted the node and died while it was down. The resumed run
    waits for the node to answer before taking the lease (which needs an answer), then judges
    the reboot done by its new boot id: not refused, not repeated."""
    book = tmp_path / "playbook.yml"
    down = {"answers": 3}  # the node answers nothing for this many tries

    def rebooting(reply: Callable[[str, int], Reply]) -> Callable[[str, int], Reply]:
        def respond(command: str, hits: int) -> Reply:
            if down["answers"] > 0:
                down["answers"] -= 1
                return Reply(drop=True)
            return reply(command, hits)

        return respond

    lease_dir = tmp_path / "gpu001"
    host = fake.host("gpu001")
    host.on(r"flock", rebooting(lambda c, _h: _lease_reply(c, lease_dir)))
    host.on(r"boot_id", rebooting(lambda _c, _h: Reply(stdout="boot-after\n")))
    node(fake, "gpu001")
    intent = OpenIntent("reboot", at=0.0, evidence={"boot_id": "boot-before"}, record=1)
    run = await run_playbook(
        REBOOT_BOOK,
        hosts=["gpu001"],
        run_id=ME.run,
        node_lease_seconds=600,
        node_lease_root=LEASE_ROOT,
        resume=ResumeState(run_id=ME.run, intents={("gpu001", f"{book}:4:7", "reboot"): intent}),
    )
    assert "gpu001" not in run.result.left, run.result.left
    assert not any("systemctl reboot" in c for c in fake.commands_on("gpu001"))
    assert "verified, not repeated" in run.result.results[-1].message
    assert down["answers"] == 0


def _lease_reply(command: str, directory: Path) -> Reply:
    done = run_sh(command.replace(LEASE_ROOT, str(directory)))
    return Reply(stdout=done.stdout, stderr=done.stderr, rc=done.rc or 0)
