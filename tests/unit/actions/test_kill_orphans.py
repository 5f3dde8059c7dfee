"""kill_orphans: its plan on gpu_processes facts, and its command run in a real shell on
processes this test starts (never another process of the machine)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from fleetfix.actions import action_registry
from fleetfix.actions.base import ActionContext, ActionPlan
from fleetfix.actions.orphans import kill_script
from fleetfix.probes import slurm_node
from fleetfix.probes.gpu_processes import parse
from tests.support import wait_until
from tests.support.gpu_processes_output import OWNERS, QUERY
from tests.unit.actions.node_facts import SAMPLES

ACTION = action_registry().get("kill_orphans")
RUNNING_48213 = "### fleetfix slurm-jobs timeout=15\n48213\n### fleetfix end rc=0\n"


def _plan(text: str, **params: Any) -> ActionPlan:
    ctx = ActionContext("gpu01", params, {"gpu_processes": parse(text)}, {})
    return ACTION.plan(ctx)


def test_only_the_finished_jobs_process_is_planned_with_its_evidence() -> None:
    plan = _plan(QUERY + OWNERS + RUNNING_48213)
    assert plan.refused is None
    (command,) = plan.commands
    assert "5120" in command.command and "6230" not in command.command
    (note,) = plan.notes
    assert note == (
        "pid 5120 user bob job 48100 (not on the node any more) started Mon Dec  7 09:01:12"
        " 2026: 40960 MiB on 00000000:18:00.0: python3 train.py --resume"
    )
    assert plan.before["orphan_pids"] == "5120@Mon Dec  7 09:01:12 2026"
    assert plan.before["orphans"] == note


def test_nothing_to_do_while_every_job_runs() -> None:
    jobs = "### fleetfix slurm-jobs\n48100\n48213\n### fleetfix end rc=0\n"
    plan = _plan(QUERY + OWNERS + jobs)
    assert plan.noop
    assert plan.notes == ("no orphan GPU processes (Slurm jobs on the node: 48100, 48213)",)


@pytest.mark.parametrize(
    ("sections", "reason"),
    [
        (
            OWNERS + "### fleetfix slurm-jobs\nslurm_load_jobs error: Socket timed out\n"
            "### fleetfix end rc=1\n",
            "cannot tell which jobs Slurm has on the node (squeue: squeue exited 1; "
            "slurm_load_jobs error: Socket timed out)",
        ),
        (
            "### fleetfix owners\nbash: ps: command not found\n### fleetfix end rc=127\n"
            + RUNNING_48213,
            "cannot tell whose the GPU processes are (ps: ps is not installed (rc=127); "
            "bash: ps: command not found)",
        ),
        ("", "the gpu_processes facts say nothing of owners"),
    ],
)
def test_unknown_owners_or_jobs_refuse(sections: str, reason: str) -> None:
    plan = _plan(QUERY + sections)
    assert plan.refused is not None and plan.refused.startswith(reason)
    assert not plan.commands


def test_no_job_from_squeue_while_slurm_says_jobs_hold_the_node_refuses() -> None:
    """A real scontrol record of an allocated node (slonk capture) beside an empty squeue
    answer: the name squeue was given is not the node's, nothing is an orphan."""
    record = SAMPLES / "slurm/slonk-scontrol-show-node-allocated-maintenance-reserved-23.11.txt"
    slurm = slurm_node.parse(record.read_text(encoding="utf-8"))
    empty = "### fleetfix slurm-jobs\n### fleetfix end rc=0\n"
    facts = {"gpu_processes": parse(QUERY + OWNERS + empty), "slurm_node": slurm}
    plan = ACTION.plan(ActionContext("cluster-h100-9-69", {}, facts, {}))
    assert plan.refused == (
        "Slurm says jobs hold cluster-h100-9-69 (ALLOCATED+MAINTENANCE+RESERVED) but squeue"
        " listed none for it (is its Slurm name not its short hostname? the gpu_processes"
        " param `node` names it): no process is known to be an orphan"
    )


def test_check_fails_while_the_same_process_still_holds_its_memory() -> None:
    plan = _plan(QUERY + OWNERS + RUNNING_48213)
    after = parse(QUERY + OWNERS + RUNNING_48213)
    ctx = ActionContext("gpu01", {}, {"gpu_processes": after}, {}, plan=plan)
    assert ACTION.check is not None
    assert ACTION.check(ctx) == "orphan process(es) still on the GPUs: [5120] (40960 MiB held)"
    # the PID now belongs to a new process (another start time): the orphan is gone
    reused = OWNERS.replace("Mon Dec  7 09:01:12", "Mon Dec  7 16:00:00")
    ctx = ActionContext("gpu01", {}, {"gpu_processes": parse(QUERY + reused)}, {}, plan=plan)
    assert ACTION.check(ctx) is None
    # settling an interrupted attempt: no plan of its own, what that attempt journaled
    interrupted = ActionContext(
        "gpu01", {}, {"gpu_processes": after}, {}, interrupted=dict(plan.before)
    )
    assert ACTION.check(interrupted) == (
        "orphan process(es) still on the GPUs: [5120] (40960 MiB held)"
    )


def test_a_bad_wait_is_refused_before_anything_runs() -> None:
    assert ACTION.validate is not None
    assert ACTION.validate({"wait": "soon"}) == (
        "wait: not a duration: 'soon' (use seconds or e.g. 15m, 2h)"
    )


# -- the command, in a real shell, on this test's own processes ----------------------------

IGNORES_TERM = (
    "import signal\nsignal.signal(signal.SIGTERM, signal.SIG_IGN)\nwhile True: signal.pause()"
)
"""A process that only SIGKILL ends (it waits for signals, never for a time)."""
LIVES = "import signal; signal.pause()"
"""A process that lives until a signal ends it."""


@pytest.fixture
def children() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for child in started:
        if child.poll() is None:
            child.kill()
        child.wait()


def _start(children: list[subprocess.Popen[bytes]], code: str) -> subprocess.Popen[bytes]:
    child = subprocess.Popen([sys.executable, "-c", code])
    children.append(child)
    return child


def _ignores_term(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status").read_text(encoding="ascii")
    ignored = next(line for line in status.splitlines() if line.startswith("SigIgn:"))
    return bool(int(ignored.split()[1], 16) & (1 << (15 - 1)))


def _lstart(pid: int) -> str:
    out = subprocess.run(
        ["ps", "-o", "lstart=", "-p", str(pid)],
        capture_output=True,
        text=True,
        env={"LC_ALL": "C", "PATH": "/usr/bin:/bin"},
        check=True,
    )
    return out.stdout.strip()


def test_term_then_kill_and_a_reused_pid_is_left_alone(
    children: list[subprocess.Popen[bytes]],
) -> None:
    polite = _start(children, LIVES)
    stubborn = _start(children, IGNORES_TERM)
    stranger = _start(children, LIVES)
    # the ignore must be in place before the TERM comes: wait until python has started
    for child in (polite, stubborn, stranger):
        assert _lstart(child.pid)
    targets = [
        (polite.pid, _lstart(polite.pid)),
        (stubborn.pid, _lstart(stubborn.pid)),
        (stranger.pid, "Thu Jan  1 00:00:00 1970"),  # as if its PID had been reused since
    ]
    assert wait_until(lambda: _ignores_term(stubborn.pid), 10), "python never ignored SIGTERM"
    done = subprocess.run(
        ["bash", "-c", kill_script(targets, 1, ["pid x user y: evidence"])],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert polite.wait(10) == -15
    assert stubborn.wait(10) == -9
    assert stranger.poll() is None
    assert f"pid {polite.pid}: SIGTERM" in done.stdout
    assert f"pid {stubborn.pid}: SIGKILL after 1s" in done.stdout
    assert f"pid {stranger.pid}: started" in done.stdout and "left alone" in done.stdout
    assert "orphan pid x user y: evidence" in done.stdout
