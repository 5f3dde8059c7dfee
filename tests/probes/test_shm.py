"""The shm probe (synthetic fixtures and the real H200 VM's output) and stale_files."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetfix.errors import ProbeParseError, ToolNotInstalled
from fleetfix.probes.shm import PROBE, ShmFacts, stale_files
from tests.probes.absent import BASE_TOOLS, REAL_NODE, SHELLS, bare_path, run
from tests.probes.cases import SAMPLES


def _sample(name: str) -> ShmFacts:
    return PROBE.parse((SAMPLES / "synthetic-shm" / name).read_text(encoding="utf-8"))


def test_usage_ages_and_open_state() -> None:
    facts = _sample("synthetic-shm-root-nccl-mixed.txt")
    assert (facts.usage_percent, facts.size_bytes) == (13, 263856128 * 1024)
    assert facts.file_count == 6
    assert facts.open_scan_complete is True
    by_name = {f.name: f for f in facts.files}
    assert by_name["nccl-Zz99Yy"].age_s == 86400.0
    assert by_name["nccl-Zz99Yy"].held_open is True
    assert by_name["nccl-Qq11Ww"].held_open is False
    assert by_name["sem.mp-abc def"].path == "/dev/shm/sem.mp-abc def"
    assert len(facts.nccl_files) == 4


def test_stale_files_skips_open_young_and_unmatched_files() -> None:
    facts = _sample("synthetic-shm-root-nccl-mixed.txt")
    assert [f.name for f in stale_files(facts, 3600)] == ["nccl-Qq11Ww", "nccl-Mm22Nn"]
    assert [f.name for f in stale_files(facts, 100_000)] == ["nccl-Mm22Nn"]
    assert [f.name for f in stale_files(facts, 600, ["torch_*"])] == ["torch_12345_678_0"]
    assert [f.name for f in stale_files(facts, 0, ["/dev/shm/sem.*"])] == ["sem.mp-abc def"]


def test_without_root_unseen_files_are_unknown_and_never_stale() -> None:
    facts = _sample("synthetic-shm-nonroot-open-unknown.txt")
    assert [f.held_open for f in facts.files] == [True, None]
    assert facts.open_scan_complete is False
    assert stale_files(facts, 0) == ()


def test_full_shm() -> None:
    facts = _sample("synthetic-shm-full-enospc.txt")
    assert (facts.usage_percent, facts.available_bytes) == (100, 0)
    assert [f.name for f in stale_files(facts, 60)] == ["nccl-Full02"]


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "missing section"),
        ("garbage\n### now\n1\n", "before the first section marker"),
        ("### now\nsoon\n### uid\n0\n### df\n### files\n### open\n", "'now' must hold one integer"),
        (
            "### now\n1\n### uid\n0\n### df\ndf: /dev/shm: No such file\n### files\n### open\n",
            "df -P",
        ),
        (
            "### now\n1\n### uid\n0\n### df\n"
            "Filesystem 1024-blocks Used Available Capacity Mounted on\n"
            "tmpfs 10 1 9 10% /dev/shm\n### files\nnot a find line\n### open\n",
            "find line",
        ),
    ],
)
def test_rejects_garbage(text: str, reason: str) -> None:
    with pytest.raises(ProbeParseError, match=reason):
        PROBE.parse(text)


def test_command_checks_fds_and_mmaps() -> None:
    command = PROBE.command({})
    for part in ("date +%s", "id -u", "df -P /dev/shm", "-printf '%T@ %s %u %p\\n'", "/maps"):
        assert part in command


@pytest.mark.parametrize("shell", SHELLS)
def test_a_node_without_one_of_the_tools_says_which(shell: str, tmp_path: Path) -> None:
    """Not sections silently left empty: the missing tool, before anything runs."""
    path = bare_path(tmp_path, tuple(t for t in BASE_TOOLS if t != "df"))
    done = run(PROBE.command({}), shell, path)
    assert (done.returncode, done.stdout) == (0, "### fleetfix not-installed df\n")
    with pytest.raises(ToolNotInstalled) as raised:
        PROBE.parse(done.stdout)
    assert raised.value.tool == "df"


def test_the_real_h200_vm_reads_empty_and_fully_scanned() -> None:
    facts = PROBE.parse((REAL_NODE / "probe-shm.txt").read_text(encoding="utf-8"))
    assert (facts.file_count, facts.usage_percent, facts.open_scan_complete) == (0, 0, True)
    assert facts.size_bytes == 134217728 * 1024
