"""process_owners on real captures (tests/fixtures/process-owners/MANIFEST.md): the Slurm job read
from /proc/PID/cgroup as a cgroup v1 and a cgroup v2 cluster printed it, and ps rows with a real
`lstart` read as the owners section reads them.

Each test says which lines (or columns) of its capture it hands to the parser; the fixtures are
never edited.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetfix.errors import ProbeParseError
from fleetfix.probes.process_owners import ProcessOwner, job_of, read_owners

CAPTURES = Path(__file__).resolve().parents[1] / "fixtures" / "process-owners"
CAVINESS_V1 = "caviness-hpc-intro-cgroup-v1-job-11811379.txt"
ORFEO_V2 = "hpc-data-infra-2024-slurm-md-cgroup-v2-job-840392.txt"
SUSE_HEAD = "issue-supportutils-262-ps-user-pid-ppid-lstart-etime-cmd-head.txt"
SUSE_DAEMONS = "issue-supportutils-262-ps-user-pid-ppid-lstart-etime-cmd-daemons.txt"


def _text(name: str) -> str:
    return (CAPTURES / name).read_text(encoding="utf-8")


def _numbered(lines: list[str]) -> list[tuple[int, str]]:
    return list(enumerate(lines, start=1))


# -- cgroup ---------------------------------------------------------------------------------------


def _caviness_entries() -> list[str]:
    """The capture's /proc/PID/cgroup lines: everything after its `List of cgroups ...:` heading
    and the blank line under it (the job script's own indentation is left on)."""
    lines = _text(CAVINESS_V1).splitlines()
    assert lines[0].strip() == "List of cgroups to which this job is assigned:"
    assert lines[1] == ""
    return lines[2:]


def test_cgroup_v1_job_is_read_from_a_real_proc_cgroup() -> None:
    entries = _caviness_entries()
    assert len(entries) == 11
    assert job_of("\n".join(entries)) == 11811379


def test_cgroup_v1_each_slurm_controller_line_names_the_job_and_the_others_none() -> None:
    """memory, freezer, cpuset and cpuacct,cpu are Slurm's; pids, devices, blkio and
    name=systemd stayed in slurmd.service, and the root entries are `/`."""
    by_controller = {line.strip().split(":")[1]: job_of(line) for line in _caviness_entries()}
    assert by_controller == {
        "pids": None,
        "net_prio,net_cls": None,
        "memory": 11811379,
        "devices": None,
        "hugetlb": None,
        "freezer": 11811379,
        "cpuset": 11811379,
        "blkio": None,
        "cpuacct,cpu": 11811379,
        "perf_event": None,
        "name=systemd": None,
    }


def test_cgroup_v1_as_ps_prints_it_in_the_cgroup_column() -> None:
    """procps's `cgroup` column is the entries that are not the root (`/`), joined with commas:
    the same capture's entries, so joined, as the owners section's `cgroup PID ...` line."""
    joined = ",".join(
        entry.strip() for entry in _caviness_entries() if not entry.strip().endswith(":/")
    )
    assert joined.startswith("11:pids:/system.slice/slurmd.service,9:memory:/slurm/uid_2179/")
    assert job_of(joined) == 11811379


def test_cgroup_v2_job_is_read_from_a_real_proc_cgroup() -> None:
    """The capture is a session: srun's prompt line, `cat /proc/$$/cgroup`, then its one line."""
    prompt, cat, cgroup = _text(ORFEO_V2).splitlines()
    assert cat.endswith("cat /proc/$$/cgroup")
    assert cgroup == "0::/system.slice/slurmstepd.scope/job_840392/step_0/user/task_0"
    assert job_of(cgroup) == 840392
    assert job_of(prompt) is None and job_of(cat) is None


# -- ps -------------------------------------------------------------------------------------------


def _suse_header() -> str:
    lines = _text(SUSE_HEAD).splitlines()
    assert lines[1].startswith("# /bin/ps -eo user,pid,ppid,lstart,etime,cmd")
    return lines[2]


def _as_owner_line(row: str, header: str) -> str:
    """One `ps -eo user,pid,ppid,lstart,etime,cmd` row as the probe's
    `ps -ww -o pid=,user:32=,lstart=,args=` would print that process, after its sed (`pid ` in
    front): the pid, user, lstart and cmd columns are taken where the capture's header puts them
    (lstart is ps's fixed 24 characters ending under STARTED, cmd starts under CMD); ppid and
    etime are left out."""
    started_end = header.index("STARTED") + len("STARTED")
    user, pid = row[: started_end - 24].split()[:2]
    lstart = row[started_end - 24 : started_end]
    args = row[header.index("CMD") :]
    return f"pid {pid} {user:<32} {lstart} {args}"


def _suse_owners(name: str, skip: int) -> dict[int, ProcessOwner]:
    header = _suse_header()
    rows = _text(name).splitlines()[skip:]
    lines = [_as_owner_line(row, header) for row in rows]
    text = "\n".join(lines) + "\n"
    return {owner.pid: owner for owner in read_owners(_numbered(lines), text)}


def test_real_lstart_and_command_lines_are_read_for_each_process() -> None:
    """The first capture's rows after its command comment and header (lines 4-15)."""
    owners = _suse_owners(SUSE_HEAD, skip=3)
    assert sorted(owners) == [1, 2, 3, 4, 5, 6, 8, 11, 12, 13, 14, 15, 16]
    init = owners[1]
    assert (init.user, init.started) == ("root", "Mon Jun 16 14:23:09 2025")
    assert init.command_line == "/usr/lib/systemd/systemd --switched-root --system --deserialize=31"
    assert owners[2].command_line == "[kthreadd]"
    assert owners[8].command_line == "[kworker/0:0H-events_highpri]"
    assert all(owner.job_id is None and owner.cgroup is None for owner in owners.values())


def test_real_daemon_rows_keep_their_arguments_and_ps_truncated_user() -> None:
    """The second capture: every row (no header there; the first capture's header, from the same
    ps command in the same pull request description, places the columns). `haclust+` is ps
    cutting `hacluster` to its default 8-character USER column: the probe asks for user:32, and
    the parser keeps whatever ps printed."""
    owners = _suse_owners(SUSE_DAEMONS, skip=0)
    assert len(owners) == 12
    assert owners[984].command_line == (
        "/usr/lib/sssd/sssd_be --domain example.com --uid 0 --gid 0 --logger=files"
    )
    assert owners[984].started == "Mon Jun 16 14:23:25 2025"
    assert owners[1121].started == "Mon Jun 16 14:23:27 2025"
    hawk = owners[1771]
    assert (hawk.user, hawk.started) == ("haclust+", "Mon Jun 16 14:23:34 2025")
    assert hawk.command_line == "puma 4.3.12 (unix:///usr/share/hawk/tmp/hawk.sock) [hawk]"


def test_a_process_row_and_its_cgroup_line_from_real_captures_join_on_the_pid() -> None:
    """A real ps row (pid 984) with a real /proc cgroup line (cgroup v2 capture) under its PID:
    the owner gets the cgroup and the job it names."""
    row = _as_owner_line(_text(SUSE_DAEMONS).splitlines()[3], _suse_header())
    cgroup = _text(ORFEO_V2).splitlines()[2]
    lines = [row, f"cgroup 984 {cgroup}"]
    (owner,) = read_owners(_numbered(lines), "\n".join(lines) + "\n")
    assert (owner.pid, owner.cgroup, owner.job_id) == (984, cgroup, 840392)


@pytest.mark.parametrize("index", [0, 1, 2])
def test_the_captures_own_comment_and_header_lines_are_refused_naming_the_line(
    index: int,
) -> None:
    """The first capture's supportconfig banner, its command comment and ps's header line, each
    alone: not `pid`/`cgroup` lines, so a clear error naming the line, not an empty answer."""
    line = _text(SUSE_HEAD).splitlines()[index]
    with pytest.raises(ProbeParseError, match="not a 'pid' or 'cgroup' line") as info:
        read_owners([(1, line)], line + "\n")
    assert info.value.line == 1


def test_a_raw_row_without_the_probes_pid_prefix_is_refused() -> None:
    """A ps row as ps printed it (no `pid ` from the probe's sed) is not read as an owner."""
    row = _text(SUSE_DAEMONS).splitlines()[0]
    with pytest.raises(ProbeParseError) as info:
        read_owners([(1, row)], row + "\n")
    assert info.value.line == 1


def test_every_capture_is_in_the_manifest() -> None:
    manifest = _text("MANIFEST.md")
    files = sorted(p.name for p in CAPTURES.iterdir() if p.name != "MANIFEST.md")
    assert len(files) >= 4
    for name in files:
        assert f"| {name} |" in manifest, name
