"""The slurm_node probe: scontrol/sinfo samples, state decoding, drained vs draining."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from fleetfix.errors import ProbeParseError, ToolNotInstalled
from fleetfix.probes import slurm_node, slurm_node_records, slurm_node_state
from fleetfix.probes.base import verdict
from fleetfix.probes.slurm_node import (
    PROBE,
    SINFO_FORMAT,
    NodeState,
    SlurmNodeFacts,
    Source,
    decode_state,
    expand_hostlist,
)
from tests.probes.absent import REAL_NODE, SHELLS, shell_says
from tests.probes.cases import SAMPLES


def _sample(name: str) -> SlurmNodeFacts:
    return PROBE.parse((SAMPLES / "slurm" / name).read_text(encoding="utf-8"))


def test_idle_drain_by_slurm_is_drained_and_not_ours() -> None:
    facts = _sample("issue-awsome-195-scontrol-show-node-idle-drain-gres-mismatch-24.05.txt")
    assert (facts.name, facts.state, facts.base_state, facts.flags) == (
        "yigou-dev-102-68",
        "IDLE+DRAIN",
        "IDLE",
        ("DRAIN",),
    )
    assert (facts.drained, facts.draining, facts.has_jobs) == (True, False, False)
    assert facts.reason == "gres/gpu count reported lower than configured (0 < 1)"
    assert (facts.reason_user, facts.reason_time) == ("slurm", "2024-12-19T11:03:34")
    assert facts.reason_is_fleetfix is False
    assert (facts.gpus_total, facts.gpus_alloc) == (1, 0)
    assert (facts.cpus_alloc, facts.cpus_idle, facts.cpus_total) == (0, 8, 8)
    assert facts.partitions == ("compute100",)


def test_mixed_drain_with_jobs_is_draining_not_drained() -> None:
    facts = _sample("synthetic-scontrol-show-node-mixed-drain-fleetfix-reason-h100.txt")
    assert (facts.drained, facts.draining, facts.allocated, facts.has_jobs) == (
        False,
        True,
        True,
        True,
    )
    assert facts.reason == "fleetfix: xid79 on GPU 3"
    assert facts.reason_is_fleetfix is True
    assert (facts.reason_user, facts.reason_time) == ("root", "2026-01-01T03:00:00")
    assert (facts.gpus_total, facts.gpus_alloc) == (8, 4)
    assert facts.partitions == ("gpu", "debug")


def test_one_line_form_keeps_the_human_reason_whole() -> None:
    facts = _sample("synthetic-scontrol-oneline-down-not-responding-human-reason.txt")
    assert facts.state == "DOWN+DRAIN+NOT_RESPONDING"
    assert (facts.down, facts.not_responding, facts.drained) == (True, True, True)
    assert facts.reason == "PSU swap, ticket OPS-1234"
    assert facts.reason_user == "alice"
    assert facts.reason_is_fleetfix is False
    assert facts.boot_time is None  # BootTime=None is Slurm's "unknown", not a time


def test_sinfo_fallback_format() -> None:
    facts = _sample("synthetic-sinfo-N-fallback-format-drained-fleetfix.txt")
    assert facts.source is Source.SINFO
    assert (facts.name, facts.state, facts.drained, facts.reason_is_fleetfix) == (
        "gpu042",
        "drained",
        True,
        True,
    )
    assert facts.partitions == ("gpu", "debug")
    assert (facts.cpus_alloc, facts.cpus_total, facts.gpus_total) == (0, 224, 8)
    assert facts.gpus_alloc is None  # sinfo's %G lists configured GRES only


def test_sinfo_default_node_view_short_state() -> None:
    facts = _sample("synthetic-sinfo-N-default-draining-two-partitions.txt")
    assert (facts.name, facts.state, facts.draining, facts.drained) == (
        "gpu007",
        "drng",
        True,
        False,
    )
    assert facts.reason is None


@pytest.mark.parametrize(
    "sample",
    [
        "issue-arjuna-69-sinfo-drng-fail-maint-states.txt",
        "issue-citc-11-sinfo-3-nodes-drain.txt",
        "sienahpc-sinfo-default-partition-view-down-star-mix.txt",
    ],
)
def test_partition_summaries_are_refused_not_blurred(sample: str) -> None:
    with pytest.raises(ProbeParseError, match="slurm_node reads one node"):
        _sample(sample)


@pytest.mark.parametrize(
    ("word", "base", "flags", "busy"),
    [
        ("IDLE+DRAIN", "IDLE", ("DRAIN",), False),
        ("MIXED+DRAIN", "MIXED", ("DRAIN",), True),
        ("DOWN*+NOT_RESPONDING", "DOWN", ("NOT_RESPONDING",), False),
        ("ALLOCATED+COMPLETING+DRAIN", "ALLOCATED", ("COMPLETING", "DRAIN"), True),
        ("IDLE+COMPLETING", "IDLE", ("COMPLETING",), True),
        # words from the real sinfo samples (arjuna-69, sienahpc, citc-11, vpenso)
        ("drng@", None, ("DRAIN", "REBOOT_REQUESTED"), True),
        ("fail*", None, ("FAIL", "NOT_RESPONDING"), False),
        ("maint", None, ("MAINTENANCE",), False),
        ("mix", "MIXED", (), True),
        ("down*", "DOWN", ("NOT_RESPONDING",), False),
        ("drain", None, ("DRAIN",), False),
        ("drained*", None, ("DRAIN", "NOT_RESPONDING"), False),
        ("idle~", "IDLE", ("POWERED_DOWN",), False),
        ("alloc", "ALLOCATED", (), True),
    ],
)
def test_decode_state(word: str, base: str | None, flags: tuple[str, ...], busy: bool) -> None:
    assert decode_state(word) == NodeState(base_state=base, flags=flags, busy=busy)


@pytest.mark.parametrize("word", ["", "hello", "IDLE+drain me", "idle?"])
def test_decode_state_refuses_non_states(word: str) -> None:
    with pytest.raises(ValueError, match="not a Slurm node state"):
        decode_state(word)


def test_draining_and_drained_from_the_same_flag() -> None:
    record = "NodeName=n1 CPUAlloc={alloc} CPUTot=8\n   State={state}\n   Reason=x [a@b]\n"
    drained = PROBE.parse(record.format(alloc=0, state="IDLE+DRAIN"))
    draining = PROBE.parse(record.format(alloc=4, state="IDLE+DRAIN"))
    assert (drained.drained, drained.draining) == (True, False)
    # CPUs still allocated: jobs hold the node even if the base word says IDLE.
    assert (draining.drained, draining.draining) == (False, True)


def test_expand_hostlist() -> None:
    assert expand_hostlist("c[002,008-010]") == ("c002", "c008", "c009", "c010")
    assert expand_hostlist("node12") == ("node12",)
    assert len(expand_hostlist("d[001-032],f[001-004,006-024]")) == 55


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty output"),
        ("Node gpu042 not found\n", "Slurm does not know the node"),
        ("just some words\n", "not scontrol show node output"),
        ("NodeName=n1 Arch=x86_64\n", "without State="),
        ("NodeName=n1 State=EXPLODED\n", "not a Slurm node state"),
        ("NodeName=n1 State=IDLE\nNodeName=n2 State=IDLE\n", "several nodes"),
        ("NodeName=n1 CPUAlloc=lots State=IDLE\n", "not a number"),
        ("NODELIST|STATE\n", "no node row"),
        ("NODELIST|STATE\nn1|idle|extra\n", "3 cells for 2 columns"),
    ],
)
def test_garbage_is_refused(text: str, reason: str) -> None:
    with pytest.raises(ProbeParseError, match=re.escape(reason)):
        PROBE.parse(text)


def test_command_quotes_the_node_and_falls_back_to_sinfo() -> None:
    assert PROBE.command({}).startswith("node=$(hostname -s); ")
    assert 'scontrol show node "$node" >"$d/o" 2>"$d/e"' in PROBE.command({})
    assert f"sinfo -N -n \"$node\" -o '{SINFO_FORMAT}'" in PROBE.command({})
    assert PROBE.command({"node": "gpu 1"}).startswith("node='gpu 1';")


@pytest.mark.parametrize(
    ("state", "alloc", "drained", "draining"),
    [
        ("IDLE+DRAIN", 0, True, False),
        # An epilog still runs: jobs have not fully left, and Slurm says DRAINING too.
        ("IDLE+COMPLETING+DRAIN", 0, False, True),
        ("IDLE+DRAIN+COMPLETING", 0, False, True),
        ("ALLOCATED+DRAIN", 8, False, True),
        ("MIXED+DRAIN", 4, False, True),
        ("ALLOCATED+COMPLETING+DRAIN", 8, False, True),
        ("DOWN+DRAIN", 0, True, False),
        ("IDLE", 0, False, False),
    ],
)
def test_scontrol_drained_only_when_no_job_is_left(
    state: str, alloc: int, drained: bool, draining: bool
) -> None:
    facts = PROBE.parse(f"NodeName=n1 CPUAlloc={alloc} CPUTot=8\n   State={state}\n")
    assert (facts.drained, facts.draining) == (drained, draining)
    assert facts.has_jobs is draining


@pytest.mark.parametrize(
    ("word", "drained", "draining"),
    [
        ("drng", False, True),
        ("drng@", False, True),
        ("draining", False, True),
        ("drain", True, False),
        ("drained", True, False),
        ("drain*", True, False),
        ("comp", False, False),
    ],
)
def test_sinfo_drain_words(word: str, drained: bool, draining: bool) -> None:
    facts = PROBE.parse(f"NODELIST|STATE\nn1|{word}\n")
    assert (facts.drained, facts.draining) == (drained, draining)


@pytest.mark.parametrize(
    ("gres", "total"),
    [
        ("gpu:8", 8),
        ("gpu:h100:8", 8),
        ("gpu:h100:8(S:0-1)", 8),
        ("gpu:nvidia_h100_80gb_hbm3:8(S:0-1),nic:mlx5:4", 8),
        ("gpu:a100:4(S:0),gpu:a100:4(S:1)", 8),
        ("nic:4", None),
        ("(null)", None),
    ],
)
def test_gpus_total_from_gres(gres: str, total: int | None) -> None:
    scontrol = PROBE.parse(f"NodeName=n1 State=IDLE\n   Gres={gres}\n")
    sinfo = PROBE.parse(f"NODELIST|STATE|GRES\nn1|idle|{gres}\n")
    aligned = PROBE.parse(f"NODELIST STATE GRES\nn1       idle  {gres}\n")
    assert (scontrol.gpus_total, sinfo.gpus_total, aligned.gpus_total) == (total, total, total)


def test_cfgtres_gpus_win_over_gres() -> None:
    record = "NodeName=n1 State=MIXED\n   Gres=gpu:8\n   CfgTRES=cpu=8,gres/gpu=4\n"
    assert PROBE.parse(record).gpus_total == 4


def _fallback(scontrol: tuple[int, str], sinfo: tuple[int, str]) -> str:
    return (
        f"### fleetfix scontrol rc={scontrol[0]}\n{scontrol[1]}"
        f"### fleetfix sinfo rc={sinfo[0]}\n{sinfo[1]}"
    )


UNREACHABLE = "Unable to contact slurm controller (connect failure)\n"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        (
            _fallback((1, "slurm_load_node error: " + UNREACHABLE), (1, "sinfo: error: x\n")),
            "cannot reach the Slurm controller: slurm_load_node error: Unable to contact",
        ),
        (
            _fallback((1, "scontrol: error: x\n"), (1, "slurm_load_partitions: " + UNREACHABLE)),
            "cannot reach the Slurm controller: slurm_load_partitions: Unable",
        ),
        (
            _fallback((127, "sh: 1: scontrol: not found\n"),
                      (127, "bash: sinfo: command not found\n")),
            "slurm is not installed on this node; for hosts outside Slurm set the host var"
            " fleetfix_slurm: false",
        ),
        (
            _fallback((1, "Node gpu9 not found\n"), (0, "NODELIST|STATE\n")),
            "Slurm does not know the node (Node gpu9 not found)",
        ),
        (
            _fallback((1, "Invalid user for SlurmUser slurm, ignored\n"), (1, "")),
            "Slurm did not answer (scontrol exited 1: Invalid user for SlurmUser slurm, ignored;"
            " sinfo exited 1: (nothing))",
        ),
        (
            _fallback((127, "sh: scontrol: not found\n"), (2, "sinfo: invalid option\n")),
            "Slurm did not answer (scontrol exited 127",
        ),
        (_fallback((1, ""), (0, "")), "empty output (scontrol exited 1: (nothing))"),
        ("### fleetfix scontrol rc=1\nx\n### fleetfix mystery\n", "unknown fleetfix marker"),
        ("idle\n### fleetfix sinfo rc=0\nNODELIST|STATE\nn1|idle\n", "output before the first"),
    ],
)  # fmt: skip
def test_a_failed_slurm_is_a_typed_parse_error(text: str, reason: str) -> None:
    with pytest.raises(ProbeParseError, match=re.escape(reason)):
        PROBE.parse(text)


def test_the_real_node_without_slurm_has_it_not_installed() -> None:
    parsed = verdict(PROBE, (REAL_NODE / "probe-slurm_node.txt").read_text(encoding="utf-8"))
    assert (parsed.absent, parsed.facts) == ("slurm", None)
    assert parsed.error is not None and "set the host var fleetfix_slurm: false" in parsed.error


@pytest.mark.parametrize("shell", SHELLS)
def test_both_tools_missing_is_not_installed_in_either_shell(shell: str) -> None:
    text = _fallback((127, shell_says(shell, "scontrol")), (127, shell_says(shell, "sinfo")))
    with pytest.raises(ToolNotInstalled) as raised:
        PROBE.parse(text)
    assert raised.value.tool == "slurm"


def test_a_missing_scontrol_with_a_failing_sinfo_is_a_fault_not_not_installed() -> None:
    text = _fallback((127, "sh: 1: scontrol: not found\n"), (1, UNREACHABLE))
    with pytest.raises(ProbeParseError, match="cannot reach the Slurm controller") as raised:
        PROBE.parse(text)
    assert not isinstance(raised.value, ToolNotInstalled)


def test_sinfo_answers_when_scontrol_failed() -> None:
    text = _fallback((127, "sh: 1: scontrol: not found\n"), (0, "NODELIST|STATE\nn1|drng\n"))
    facts = PROBE.parse(text)
    assert (facts.source, facts.name, facts.draining) == (Source.SINFO, "n1", True)
    with pytest.raises(ProbeParseError, match="3 cells for 2 columns") as raised:
        PROBE.parse(text.replace("n1|drng", "n1|drng|extra"))
    assert raised.value.line == 5  # numbered as in the whole output


def test_expand_hostlist_refuses_a_list_too_large_to_expand() -> None:
    with pytest.raises(ValueError, match=r"names 1000000000000 nodes, more than 1,000,000"):
        expand_hostlist("c[0-999999999999]")
    with pytest.raises(ValueError, match="more than 1,000,000"):
        expand_hostlist("r[0-9999]n[0-9999]")
    with pytest.raises(ProbeParseError, match="unreadable node list"):
        PROBE.parse("NODELIST|STATE\nc[0-999999999999]|idle\n")


def _stub(directory: Path, name: str, body: str) -> None:
    tool = directory / name
    tool.write_text(f"#!/bin/sh\n{body}\n", encoding="utf-8")
    tool.chmod(0o755)


def _run(tools: Path) -> subprocess.CompletedProcess[str]:
    # Only the stubs and the base tools (sh, mktemp, cat, rm): no real Slurm is ever found.
    base = ":".join(
        str(Path(found).parent)
        for found in (shutil.which("mktemp"), shutil.which("cat"), shutil.which("rm"))
        if found
    )
    return subprocess.run(
        ["sh", "-c", PROBE.command({"node": "gpu001"})],
        env={"PATH": f"{tools}:{base}"},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


@pytest.mark.skipif(shutil.which("scontrol") is not None, reason="a real Slurm is installed")
def test_the_command_in_a_real_shell(tmp_path: Path) -> None:
    down = "echo 'slurm_load_node error: Unable to contact slurm controller (connect failure)' >&2"
    _stub(tmp_path, "sinfo", down.replace("load_node", "load_partitions") + "; exit 1")
    none = _run(tmp_path / "nothing-here")
    assert none.returncode == 127
    with pytest.raises(ToolNotInstalled, match="slurm is not installed on this node") as raised:
        PROBE.parse(none.stdout)
    assert raised.value.tool == "slurm"
    _stub(tmp_path, "scontrol", down + "; exit 1")
    unreachable = _run(tmp_path)
    assert unreachable.returncode == 1
    with pytest.raises(ProbeParseError, match="cannot reach the Slurm controller"):
        PROBE.parse(unreachable.stdout)
    _stub(tmp_path, "scontrol", "echo 'NodeName=gpu001 State=IDLE+DRAIN'; echo noise >&2")
    answered = _run(tmp_path)
    assert (answered.returncode, answered.stdout) == (0, "NodeName=gpu001 State=IDLE+DRAIN\n")
    assert PROBE.parse(answered.stdout).drained is True


# --- out of scheduling: COMPLETING and reservations -------------------------------------------

REAL_24_05 = "issue-awsome-195-scontrol-show-node-idle-drain-gres-mismatch-24.05.txt"


def _real_with(state: str, extra: str = "") -> SlurmNodeFacts:
    """The real 24.05 record with another State= word (and lines Slurm appends, e.g. a
    ReservationName=): the layout stays the real one."""
    text = (SAMPLES / "slurm" / REAL_24_05).read_text(encoding="utf-8")
    assert "   State=IDLE+DRAIN " in text
    return PROBE.parse(text.replace("State=IDLE+DRAIN ", f"State={state} ") + extra)


def test_idle_completing_drain_is_not_drained() -> None:
    # The job has ended but its epilog still runs: Slurm calls the node DRAINING, and an
    # active test must not start yet.
    facts = _real_with("IDLE+COMPLETING+DRAIN")
    assert (facts.drained, facts.draining, facts.completing, facts.has_jobs) == (
        False,
        True,
        True,
        True,
    )
    assert facts.cpus_alloc == 0  # no CPU allocated any more, yet not drained
    assert (facts.reserved, facts.reserved_by) == (False, None)


def test_a_fleetfix_maintenance_reservation_is_ours() -> None:
    facts = _real_with("IDLE+MAINTENANCE+RESERVED", "   ReservationName=fleetfix-gpu003\n")
    assert facts.flags == ("MAINTENANCE", "RESERVED")
    assert (facts.reserved, facts.maint, facts.reservation) == (True, True, "fleetfix-gpu003")
    assert (facts.reserved_by, facts.reservation_is_fleetfix) == ("fleetfix", True)
    assert (facts.drained, facts.has_jobs) == (False, False)


def test_someone_elses_reservation_and_an_unnamed_one() -> None:
    theirs = _real_with("IDLE+RESERVED", "   ReservationName=root_7\n")
    assert (theirs.reserved, theirs.maint, theirs.reserved_by) == (True, False, "someone else")
    # Slurm before 23.02 does not name the reservation: reserved, by nobody we can tell.
    unnamed = _real_with("IDLE+MAINTENANCE+RESERVED")
    assert (unnamed.reservation, unnamed.reserved_by) == (None, "unknown")
    assert unnamed.reservation_is_fleetfix is False


@pytest.mark.parametrize(
    ("word", "reserved", "maint", "drained"),
    [
        ("maint", True, True, False),
        ("maint*", True, True, False),
        ("drain$", True, True, True),
        ("drng$", True, True, False),
        ("resv", True, False, False),
        ("reserved", True, False, False),
        ("idle", False, False, False),
    ],
)
def test_sinfo_reservation_words(word: str, reserved: bool, maint: bool, drained: bool) -> None:
    facts = PROBE.parse(f"NODELIST|STATE\nn1|{word}\n")
    assert (facts.reserved, facts.maint, facts.drained) == (reserved, maint, drained)
    assert facts.reserved_by == ("unknown" if reserved else None)  # sinfo never names it


def test_decode_state_dollar_is_a_maintenance_reservation() -> None:
    assert decode_state("drain$") == NodeState(None, ("DRAIN", "MAINTENANCE", "RESERVED"), False)


def test_the_split_modules_keep_the_public_names() -> None:
    assert slurm_node.decode_state is slurm_node_state.decode_state
    assert slurm_node.expand_hostlist is slurm_node_records.expand_hostlist
    assert slurm_node.Source is slurm_node_records.Source
    assert slurm_node.MAX_HOSTLIST_NAMES == 1_000_000
