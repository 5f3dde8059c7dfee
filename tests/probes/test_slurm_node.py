"""The slurm_node probe: scontrol/sinfo samples, state decoding, drained vs draining."""

from __future__ import annotations

import re

import pytest

from fleetfix.errors import ProbeParseError
from fleetfix.probes.slurm_node import (
    PROBE,
    SINFO_FORMAT,
    NodeState,
    SlurmNodeFacts,
    Source,
    decode_state,
    expand_hostlist,
)
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
    assert PROBE.command({}).startswith('node=$(hostname -s); scontrol show node "$node"')
    assert f"sinfo -N -n \"$node\" -o '{SINFO_FORMAT}'" in PROBE.command({})
    assert PROBE.command({"node": "gpu 1"}).startswith("node='gpu 1';")
