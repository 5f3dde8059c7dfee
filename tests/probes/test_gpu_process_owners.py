"""gpu_processes' owners and slurm-jobs sections: whose each GPU process is, and the orphans.

The cgroup paths are the ones Slurm documents for its processes: cgroup v2
`/system.slice/slurmstepd.scope/job_<id>/step_<step>/user/task_<n>` (Slurm's cgroup_v2 page,
https://slurm.schedmd.com/cgroup_v2.html, and `cat /proc/$$/cgroup` in a job step:
`0::/system.slice/slurmstepd.scope/job_840392/step_0/user/task_0`), cgroup v1
`/slurm/uid_<uid>/job_<id>/step_<step>/task_<n>` per controller (src/plugins/cgroup/v1/xcgroup.c;
`10:devices:/slurm/uid_2101171/job_280678/step_interactive/task_0` as NordicHPC/sonar quotes one),
`/slurm_<node>/...` under multiple-slurmd (plazonic/cgroup_exporter pull request 5).
"""

from __future__ import annotations

import os
import pwd
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleetfix.probes import gpu_processes
from fleetfix.probes.gpu_processes import parse
from fleetfix.probes.process_owners import job_of
from tests.support.gpu_processes_output import OWNERS, QUERY


def _jobs(*ids: int, rc: int = 0, said: str = "") -> str:
    body = "".join(f"{job}\n" for job in ids) + said
    return f"### fleetfix slurm-jobs timeout=15\n{body}### fleetfix end rc={rc}\n"


@pytest.mark.parametrize(
    ("cgroup", "job"),
    [
        ("0::/system.slice/slurmstepd.scope/job_840392/step_0/user/task_0", 840392),
        ("0::/system.slice/gpu017_slurmstepd.scope/job_18/step_0/user/task_0", 18),
        ("0::/system.slice/slurmstepd_scope/job_18/step_0", None),
        ("0::/system.slice/slurmstepd.scope/job_17/step_batch/user/task_0", 17),
        ("10:devices:/slurm/uid_2101171/job_280678/step_interactive/task_0", 280678),
        ("4:memory:/slurm/uid_1000/job_195428/step_batch,11:cpuset:/slurm", 195428),
        ("12:pids:/slurm_gpu01/uid_1000/job_7/step_0/task_0", 7),
        ("0::/user.slice/user-1000.slice/session-3.scope", None),
        ("0::/system.slice/slurmd.service", None),
        ("4:memory:/process_api/47d9a9efa7c80fb7d9370b6940bf1676", None),
        ("", None),
    ],
)
def test_the_job_is_read_from_slurms_cgroup_paths(cgroup: str, job: int | None) -> None:
    assert job_of(cgroup) == job


def test_each_process_gets_its_user_command_line_start_and_job() -> None:
    facts = parse(QUERY + OWNERS + _jobs(48213))
    by_pid = {p.pid: p for p in facts.processes}
    assert by_pid[5120].user == "bob"
    assert by_pid[5120].command_line == "python3 train.py --resume"
    assert by_pid[5120].started == "Mon Dec  7 09:01:12 2026"
    assert by_pid[5120].job_id == 48100
    assert by_pid[6230].job_id == 48213
    assert facts.slurm_jobs == (48213,)
    assert facts.owners_ok is True and facts.slurm_jobs_ok is True


def test_a_finished_jobs_process_is_an_orphan_a_running_jobs_is_not() -> None:
    facts = parse(QUERY + OWNERS + _jobs(48213))
    assert facts.orphan_pids == (5120,)


def test_nothing_is_an_orphan_while_every_job_runs() -> None:
    assert parse(QUERY + OWNERS + _jobs(48100, 48213)).orphan_pids == ()


def test_outside_any_job_is_an_orphan_only_on_a_node_slurm_has_no_job_on() -> None:
    owners = OWNERS.replace(
        "cgroup 6230 0::/system.slice/slurmstepd.scope/job_48213/step_0/user/task_0\n", ""
    )
    assert parse(QUERY + owners + _jobs()).orphan_pids == (5120, 6230)
    # proctrack/linuxproc: a running job's ranks are in no job cgroup either
    assert parse(QUERY + owners + _jobs(48213)).orphan_pids == (5120,)


def test_nvidias_daemons_are_never_orphans() -> None:
    query = QUERY + (
        "### fleetfix fuser timeout=15\n"
        "                     USER        PID ACCESS COMMAND\n"
        "/dev/nvidia0:        root       1913 F.... nvidia-persiste\n"
        "### fleetfix end rc=0\n"
    )
    owners = OWNERS.replace(
        "### fleetfix end",
        "pid 1913 root Mon Dec  7 08:00:01 2026 /usr/bin/nvidia-persistenced"
        " --user nvidia-persistenced\n### fleetfix end",
        1,
    )
    facts = parse(query + owners + _jobs())
    assert 1913 not in facts.orphan_pids
    assert facts.orphan_pids == (5120, 6230)


def test_a_process_ps_did_not_list_is_not_an_orphan() -> None:
    owners = (
        "### fleetfix owners\n" + OWNERS.splitlines(keepends=True)[2] + ("### fleetfix end rc=0\n")
    )
    facts = parse(QUERY + owners + _jobs())
    assert facts.orphan_pids == (6230,)


def test_without_squeue_nothing_is_an_orphan_and_the_facts_say_why() -> None:
    said = "slurm_load_jobs error: Unable to contact slurm controller (connect failure)\n"
    facts = parse(QUERY + OWNERS + _jobs(rc=1, said=said))
    assert facts.slurm_jobs_ok is False
    assert facts.orphan_pids == ()
    assert any("squeue exited 1" in error for error in facts.errors)
    assert any("Unable to contact slurm controller" in error for error in facts.errors)


def test_squeue_not_installed_is_said() -> None:
    said = "timeout: failed to run command 'squeue': No such file or directory\n"
    facts = parse(QUERY + OWNERS + _jobs(rc=127, said=said))
    assert facts.slurm_jobs_ok is False
    assert "squeue is not installed (rc=127)" in facts.errors


def test_ps_listing_none_of_the_pids_is_an_answer() -> None:
    owners = "### fleetfix owners\n### fleetfix end rc=1\n"
    facts = parse(QUERY + owners + _jobs())
    assert facts.owners_ok is True
    assert facts.orphan_pids == ()


def test_output_without_the_new_sections_reads_as_before() -> None:
    facts = parse(QUERY)
    assert facts.owners_ok is None and facts.slurm_jobs_ok is None
    assert facts.processes[0].job_id is None


@pytest.mark.parametrize(
    ("section", "reason", "unread"),
    [
        (
            "### fleetfix owners\npid 5120 bob yesterday python3\n### fleetfix end rc=0\n"
            + _jobs(),
            "not a 'pid' or 'cgroup' line of the owners section (line 6)",
            "owners_ok",
        ),
        (
            OWNERS + _jobs(said="JOBID\n"),
            "not a job id in the slurm-jobs section (line 12)",
            "slurm_jobs_ok",
        ),
    ],
)
def test_a_foreign_line_leaves_its_section_unread_naming_it(
    section: str, reason: str, unread: str
) -> None:
    """Only the section fails: the compute apps and fuser (what a reset's gate reads) stand."""
    facts = parse(QUERY + section)
    assert getattr(facts, unread) is False
    assert reason in facts.errors
    assert facts.orphan_pids == ()
    assert facts.compute_pids == (5120, 6230) and facts.query_ok is True


def test_the_owners_section_reads_real_procps_output_of_a_process_this_test_started(
    tmp_path: Path,
) -> None:
    """The probe's own shell code, run with the machine's real ps on a child of this test:
    what procps prints (widths, lstart, the cgroup column) is what the parser reads."""
    # it lives until this test kills it: pause() waits for a signal, not for a time
    child = subprocess.Popen([sys.executable, "-c", "import signal; signal.pause()", "orphan-arg"])
    try:
        (tmp_path / "q").write_text(f"{child.pid}, python3, GPU-x, 00000000:18:00.0, 40 MiB\n")
        (tmp_path / "f").write_text("")
        script = f"d={shlex.quote(str(tmp_path))}; {gpu_processes._OWNERS}"
        said = subprocess.run(
            ["bash", "-c", script], capture_output=True, text=True, check=True, timeout=30
        ).stdout
        query = "### fleetfix query-compute-apps\n" + (tmp_path / "q").read_text()
        facts = parse(query + "### fleetfix end rc=0\n" + said + _jobs())
    finally:
        child.kill()
        child.wait()
    (process,) = facts.processes
    assert process.user == pwd.getpwuid(os.getuid()).pw_name
    assert process.command_line is not None and process.command_line.endswith(
        "signal.pause() orphan-arg"
    )
    assert process.started is not None and process.started.endswith(time.strftime("%Y"))
    assert facts.owners_ok is True


def test_squeue_asks_for_the_named_slurm_node_else_the_short_hostname() -> None:
    assert "squeue -h -w gpu-001.a -o %A" in gpu_processes.command({"node": "gpu-001.a"})
    assert 'squeue -h -w "$(hostname -s)" -o %A' in gpu_processes.command({})


def test_squeue_is_asked_only_when_a_process_holds_a_gpu(tmp_path: Path) -> None:
    """The probe's own shell code with an squeue that records its calls: an idle node sends
    slurmctld nothing (no RPC per node of an idle fleet), a busy one asks once."""
    calls = tmp_path / "calls"
    fake = tmp_path / "bin" / "squeue"
    fake.parent.mkdir()
    fake.write_text(f"#!/bin/sh\necho called >> {shlex.quote(str(calls))}\necho 48213\n")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{fake.parent}:{os.environ['PATH']}"}
    section = gpu_processes._SLURM_JOBS.format(limit="5", node="gpu001")

    def run(pids: str) -> str:
        script = f"p={shlex.quote(pids)}; {section}"
        return subprocess.run(
            ["bash", "-c", script], capture_output=True, text=True, check=True, env=env
        ).stdout

    assert run("") == "" and not calls.exists()
    assert run("4242") == "### fleetfix slurm-jobs timeout=5\n48213\n### fleetfix end rc=0\n"
    assert calls.read_text() == "called\n"
