"""Who broke the job: the suspects of a triage, ranked, each with its evidence.

Pure functions over plain data: what the read-only probes said of each node of the job (their
facts as data, judged by knowledge/health.py, the same verdicts `fleetfix probe` and the run
reports print), the nodes that could not be reached, what the job's own logs say of its ranks
(joblogs), and the inventory's topology. Nothing here connects or prints.

What makes a suspect (and nothing else does: a triage names the planted faults, not every
warning of a busy fleet):

* a probe's BAD verdict on a node of the job (a GPU lost, an Xid that asks for a reset or a
  reboot, an uncorrected PCIe error, an InfiniBand port down): the node, or the GPU it names;
* a node that could not be reached;
* left-over GPU processes that no running job owns (`gpu_processes` facts' `orphans`);
* InfiniBand error counters that rose during the triage (`ib_counters` deltas): the link;
* what the logs say: the root cause of a torchrun failure, a rank that never entered the
  collective the others wait in, a host that several others name as the peer that failed them.

A leaf (or any topology domain) is named as the suspect instead of its nodes when the suspects
are concentrated under it beyond chance (topology/findings.correlated_failures): thirty nodes
failing together behind one switch are one switch fault.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fleetfix.knowledge.health import Level, summarize
from fleetfix.knowledge.ib_counters import explain, thresholds
from fleetfix.probes.ib_counters import (
    SPECS,
    CounterChange,
    IbCountersFacts,
    PortCounters,
    Source,
    deltas,
)

Data = Mapping[str, Any]


class Kind(enum.StrEnum):
    NODE = "node"
    GPU = "gpu"
    LINK = "link"
    PROCESS = "process"
    SWITCH = "switch"


class Weight(enum.IntEnum):
    """How strongly one piece of a node's evidence accuses: the suspects are ranked by the sum
    of their evidence's weights. The logs' accusations weigh what joblogs scores them (its
    root cause 100, a rank behind in the collectives 90, a peer others name 50+)."""

    PROBE_FAULT = 100
    UNREACHABLE = 90
    LINK_ERRORS = 50
    ORPHAN = 40


@dataclass(frozen=True, slots=True)
class Evidence:
    weight: int
    source: str
    """Where it was read: `probe xid`, `unreachable`, `log train.out:812`."""
    text: str
    fabric: bool = False
    """A fault of the node's hardware or links, which a switch could also explain (a probe's
    verdict, unreachable, rising link errors): what counts towards blaming a switch."""


@dataclass(frozen=True, slots=True)
class Suspect:
    kind: Kind
    target: str
    """What to look at: a node (`gpu004`), a GPU (`gpu004 GPU 0000:17:00.0`), a link
    (`gpu004 mlx5_3/1`), a process (`gpu006 pid 4242`), a switch (`leaf leaf-02`)."""
    hosts: tuple[str, ...]
    evidence: tuple[Evidence, ...]
    playbook: str | None
    """The runbook that remediates it, None where a human decides (a switch, a cable)."""

    @property
    def score(self) -> int:
        return sum(int(e.weight) for e in self.evidence)


@dataclass(frozen=True, slots=True)
class NodeReading:
    """What the triage read of one node of the job."""

    probes: Mapping[str, Data | None]
    """Probe name -> its facts as data, None where the probe gave none."""
    failures: Mapping[str, str]
    """Probe name -> why it gave no facts (a tool not installed is not listed here)."""
    unreachable: str | None = None


@dataclass(frozen=True, slots=True)
class LogSuspect:
    """One accusation read from the job's logs (triage/logs.py, from joblogs.suspects)."""

    host: str
    reason: str
    weight: int
    where: str
    """`log FILE:LINE, ...`: the lines that say so."""
    gpu: str | None = None
    """As the logs name it: `cuda 3 (busId 1b000)`."""
    kind: Kind = Kind.NODE


IB_BEFORE = "ib_counters@start"
"""The first of the triage's two reads of the InfiniBand counters (the second is `ib_counters`)."""
RECOVER = "playbooks/recover.yml"
ORPHANS = "playbooks/orphans.yml"
_HEALTH_PROBES = ("nvidia_smi", "xid", "ib", "nvlink")


def rank(readings: Mapping[str, NodeReading], logs: Sequence[LogSuspect] = ()) -> list[Suspect]:
    """The job's suspects, most accused first (ties by target name)."""
    found: dict[tuple[Kind, str], tuple[list[str], list[Evidence], str | None]] = {}

    def accuse(kind: Kind, target: str, host: str, evidence: Evidence, book: str | None) -> None:
        hosts, seen, _ = found.setdefault((kind, target), ([], [], book))
        if host not in hosts:
            hosts.append(host)
        seen.append(evidence)

    for host, reading in sorted(readings.items()):
        for kind, target, evidence, book in _from_probes(host, reading):
            accuse(kind, target, host, evidence, book)
    for item in logs:
        kind, target = _log_target(item)
        if (Kind.NODE, item.host) in found and kind is not Kind.NODE:
            kind, target = Kind.NODE, item.host  # the node is accused already: one suspect
        book = None if kind is Kind.LINK else RECOVER  # a cable or a port is a human's job
        accuse(kind, target, item.host, Evidence(item.weight, item.where, item.reason), book)
    suspects = [
        Suspect(kind, target, tuple(hosts), tuple(evidence), book)
        for (kind, target), (hosts, evidence, book) in found.items()
    ]
    return sorted(suspects, key=lambda s: (-s.score, s.target))


def _log_target(item: LogSuspect) -> tuple[Kind, str]:
    if item.kind is Kind.LINK:
        return Kind.LINK, f"{item.host} InfiniBand"
    if item.kind is Kind.GPU and item.gpu:
        return Kind.GPU, f"{item.host} GPU {item.gpu}"
    return Kind.NODE, item.host


def _from_probes(
    host: str, reading: NodeReading
) -> Iterable[tuple[Kind, str, Evidence, str | None]]:
    if reading.unreachable is not None:
        yield (
            Kind.NODE,
            host,
            Evidence(Weight.UNREACHABLE, "unreachable", reading.unreachable, fabric=True),
            RECOVER,
        )
        return
    for name in _HEALTH_PROBES:
        data = reading.probes.get(name)
        if name in reading.failures:
            continue  # a probe that could not read its tool accuses nobody; listed as unread
        if data is None:
            continue
        verdict = summarize(name, data)
        if verdict.level is Level.BAD:
            kind, target = _gpu_target(host, name, data)
            evidence = Evidence(Weight.PROBE_FAULT, f"probe {name}", verdict.text, fabric=True)
            yield kind, target, evidence, RECOVER
    yield from _orphans(host, reading.probes.get("gpu_processes"))
    yield from _links(host, reading)


def _gpu_target(host: str, probe: str, data: Data) -> tuple[Kind, str]:
    """The GPU a verdict is about when it names exactly one, else the node."""
    if probe == "xid":
        gpus = {str(b) for b in data.get("failed_gpus", ())} | {
            str(b) for b in data.get("reset_required_gpus", ())
        }
        aer = data.get("aer") or {}
        gpus |= {str(b) for b in aer.get("cannot_recover_gpus", ())}
        gpus |= {
            str(bus)
            for bus, seen in (aer.get("devices") or {}).items()
            if seen.get("gpu")
            and seen.get("uncorrected_fatal", 0) + seen.get("uncorrected_nonfatal", 0)
        }
        if len(gpus) == 1:
            return Kind.GPU, f"{host} GPU {gpus.pop()}"
    return Kind.NODE, host


def _orphans(host: str, data: Data | None) -> Iterable[tuple[Kind, str, Evidence, str | None]]:
    """One suspect per left-over process (gpu_processes' `orphan_pids`: no running job owns
    it), its GPUs and memory summed over the rows the driver listed for it."""
    if not data or not data.get("orphan_pids"):
        return
    rows: dict[int, list[Data]] = {}
    for process in data.get("processes") or ():
        rows.setdefault(int(process.get("pid", -1)), []).append(process)
    for pid in data["orphan_pids"]:
        seen = rows.get(int(pid), [])
        first: Data = seen[0] if seen else {}
        memory = sum(int(p.get("used_memory_mib") or 0) for p in seen)
        gpus = sorted({str(p.get("gpu_bus_id") or p.get("gpu_uuid")) for p in seen} - {"None"})
        job = f"job {first['job_id']} (ended)" if first.get("job_id") else "no job"
        text = (
            f"{first.get('name') or '?'} of {first.get('user') or '?'}, {job}, holds {memory} MiB"
            f" on GPU {', '.join(gpus) or '?'}: no running job owns it"
        )
        evidence = Evidence(Weight.ORPHAN, "probe gpu_processes", text)
        yield Kind.PROCESS, f"{host} pid {pid}", evidence, ORPHANS


def _links(host: str, reading: NodeReading) -> Iterable[tuple[Kind, str, Evidence, str | None]]:
    """A port whose error counters rose between the triage's two reads past the catalog's
    per-read threshold (knowledge/ib_counters.yml): the link, for a human (a cable, a
    transceiver, a switch port)."""
    before, after = reading.probes.get(IB_BEFORE), reading.probes.get("ib_counters")
    if not before or not after:
        return
    for port in deltas(counters_from_data(before), counters_from_data(after)).ports:
        crossed = [
            change
            for change in port.risen()
            if SPECS[change.counter].error
            and (limit := thresholds().get(change.counter)) is not None
            and limit.exceeded(change.rise)
        ]
        if not crossed:
            continue
        text = "; ".join(_rose(change) for change in crossed)
        evidence = Evidence(Weight.LINK_ERRORS, "probe ib_counters", text, fabric=True)
        where = port.ca if port.ca is not None else f"lid {port.lid}"  # perfquery: no CA name
        yield Kind.LINK, f"{host} {where}/{port.port}", evidence, None


def _rose(change: CounterChange) -> str:
    info = explain(change.counter)
    said = f": {info.title.lower()}, {info.action.split('.')[0].lower()}" if info else ""
    return f"{change.counter} +{change.rise} ({change.before} -> {change.after}){said}"


def counters_from_data(data: Data) -> IbCountersFacts:
    """ib_counters facts back from their data (`to_data`), to compare two reads."""
    return IbCountersFacts(
        source=Source(data["source"]),
        ports=tuple(
            PortCounters(
                ca=port.get("ca"),
                port=int(port["port"]),
                lid=port.get("lid"),
                counters=dict(port.get("counters") or {}),
                saturated=tuple(port.get("saturated") or ()),
            )
            for port in data.get("ports") or ()
        ),
        errors=tuple(data.get("errors") or ()),
        complete=bool(data.get("complete", True)),
    )


def fabric_suspects(suspects: Sequence[Suspect]) -> set[str]:
    """Hosts accused by evidence a switch could explain (not a left-over process, not a log)."""
    return {h for s in suspects if any(e.fabric for e in s.evidence) for h in s.hosts}


def with_switches(
    suspects: Sequence[Suspect], domains: Sequence[tuple[str, Sequence[str], str]]
) -> list[Suspect]:
    """`suspects` with a switch suspect for each domain the topology found them concentrated
    in: (its label, its failed hosts, the finding's message), most accused first."""
    found = [
        Suspect(
            Kind.SWITCH,
            label,
            tuple(sorted(hosts)),
            (Evidence(Weight.PROBE_FAULT + len(hosts), "topology", message),),
            None,
        )
        for label, hosts, message in domains
    ]
    return sorted([*found, *suspects], key=lambda s: (-s.score, s.target))


def remediation(suspects: Sequence[Suspect], inventory: str) -> list[str]:
    """The commands that remediate the suspects, one per runbook, hosts in name order. A
    switch suspect holds the node runbooks of its nodes: a human looks at the switch first."""
    held = {h for s in suspects if s.kind is Kind.SWITCH for h in s.hosts}
    books: dict[str, set[str]] = {}
    for suspect in suspects:
        if suspect.playbook is None:
            continue
        hosts = {h for h in suspect.hosts if h not in held}
        if hosts:
            books.setdefault(suspect.playbook, set()).update(hosts)
    return [
        f"fleetfix run {book} -i {inventory} --limit {','.join(sorted(hosts))}"
        for book, hosts in sorted(books.items())
    ]
