"""Findings from a run's results: correlated failures, busbw stragglers, intra-node mismatches.

Correlated failures (the "27 of 32 failures sit under leaf-07" case). For every domain
(kind, name) with n considered hosts of which k failed:

- the failure rate elsewhere is p = (F - k + 1/2) / (N - n + 1), F failures among N considered
  hosts in the whole run. The domain's own hosts are left out, so one big cluster of failures
  does not raise the baseline it is judged against; the 1/2 keeps p above zero when nothing
  failed elsewhere (a zero rate would make any failure "impossible");
- its p-value is the one-sided binomial tail P(X >= k | n, p), Bonferroni-corrected: multiplied
  by the number of domains tested (every domain with a considered host);
- it is a finding when the corrected p-value is below `alpha`, k >= `min_failures`, and the
  domain holds a clear majority of all failures (k > F / 2): a domain that explains only a
  minority of the failures is not "the" shared component.

Nested domains are explained away: candidates are accepted from the smallest up, and a larger
domain is re-tested without the hosts of accepted domains inside it, so a failing leaf does
not also make its spine a suspect. Domains with exactly the same considered hosts (a rack that
is a leaf) give one finding naming the others in `also`.
"""

from __future__ import annotations

import enum
import math
import statistics
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

from fleetfix.topology.graph import Topology, natural_sorted

SUSPECT_ORDER: tuple[str, ...] = ("leaf", "nvlink_domain", "pdu", "rack", "rail", "spine", "pod")
"""Which kind a finding names when several domains hold exactly the same hosts."""

SUSPECTS: Mapping[str, tuple[str, str]] = {
    # kind -> (preposition, what to suspect)
    "leaf": ("under", "the leaf switch"),
    "spine": ("under", "the spine switch"),
    "rack": ("in", "the rack (power, cooling, cabling)"),
    "pdu": ("on", "the PDU"),
    "pod": ("in", "shared pod infrastructure"),
    "nvlink_domain": ("in", "the NVLink domain (NVSwitch trays, backplane)"),
    "rail": ("on", "the rail (its switches or cables)"),
}
MAD_TO_SIGMA = 0.6745
MEAN_AD_TO_SIGMA = 0.7979  # sqrt(2/pi): the mean absolute deviation of a normal is 0.7979 sigma
MIN_PEERS = 4


class FindingCategory(enum.StrEnum):
    CORRELATED_FAILURE = "correlated_failure"
    STRAGGLER = "straggler"
    INTRA_NODE_MISMATCH = "intra_node_mismatch"


@dataclass(frozen=True, slots=True)
class Finding:
    """Something the fleet as a whole says that no single host's result does.

    `kind`/`domain`: the domain for a correlated failure, ("host", name) for the per-host
    categories. `failed`: the failing hosts; `members`: the considered hosts of the domain (for
    a straggler: its peers of the same GPU model). `hold_disruptive`: disruptive actions in the
    domain should wait for a human. `evidence`: category-specific numbers, JSON-friendly.
    """

    category: FindingCategory
    kind: str
    domain: str
    message: str
    failed: tuple[str, ...] = ()
    members: tuple[str, ...] = ()
    p_value: float | None = None
    hold_disruptive: bool = False
    also: tuple[str, ...] = ()
    evidence: Mapping[str, Any] = field(default_factory=dict)


# -- correlated failures ---------------------------------------------------------------------


def correlated_failures(
    topology: Topology,
    failed: set[str],
    considered: set[str],
    *,
    alpha: float = 0.01,
    min_failures: int = 3,
) -> list[Finding]:
    """Domains whose failures are concentrated beyond chance (see the module docstring).

    Failures outside `considered` are ignored. Findings come most specific first.
    """
    failed = failed & considered
    groups = _domain_groups(topology, considered)
    tests = len(groups)
    accepted: list[tuple[frozenset[str], Finding]] = []
    for hosts, names in sorted(groups.items(), key=lambda g: (len(g[0]), _group_key(g[1]))):
        inside = [h for prior, _ in accepted if prior < hosts for h in prior]
        test = _Test(hosts - set(inside), failed - set(inside), considered - set(inside))
        if test.significant(tests, alpha, min_failures):
            accepted.append((hosts, _finding(names, test, tests)))
    return [finding for _, finding in accepted]


def held_hosts(topology: Topology, findings: Iterable[Finding]) -> set[str]:
    """Every host in a domain whose finding holds disruptive actions."""
    held: set[str] = set()
    for finding in findings:
        if finding.hold_disruptive:
            held.update(topology.members(finding.kind, finding.domain))
            for alias in finding.also:
                kind, _, name = alias.partition(" ")
                held.update(topology.members(kind, name))
    return held


@dataclass(frozen=True, slots=True)
class _Test:
    """One domain's numbers: its considered hosts, the failures, the whole considered set."""

    hosts: AbstractSet[str]
    failed: AbstractSet[str]
    considered: AbstractSet[str]

    @property
    def k(self) -> int:
        return len(self.hosts & self.failed)

    @property
    def n(self) -> int:
        return len(self.hosts)

    @property
    def rest_failed(self) -> int:
        return len(self.failed) - self.k

    @property
    def rest(self) -> int:
        return len(self.considered) - self.n

    def p_value(self, tests: int) -> float:
        rate = (self.rest_failed + 0.5) / (self.rest + 1)
        return min(1.0, binomial_tail(self.k, self.n, rate) * tests)

    def significant(self, tests: int, alpha: float, min_failures: int) -> bool:
        if self.rest == 0 or self.k < max(min_failures, 1) or 2 * self.k <= len(self.failed):
            return False  # no hosts outside to compare with, too few, or not a majority
        return self.p_value(tests) < alpha


def binomial_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), summed in log space so tiny tails do not vanish early."""
    if k <= 0:
        return 1.0
    if k > n or p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    log_p, log_q = math.log(p), math.log1p(-p)
    logs = [_log_comb(n, i) + i * log_p + (n - i) * log_q for i in range(k, n + 1)]
    top = max(logs)
    return min(1.0, math.exp(top) * math.fsum(math.exp(v - top) for v in logs))


def _log_comb(n: int, i: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)


def _domain_groups(topology: Topology, considered: set[str]) -> dict[frozenset[str], list[str]]:
    """Considered hosts of each domain -> the domains ("leaf leaf-07") holding exactly them."""
    groups: dict[frozenset[str], list[str]] = {}
    for kind in topology.kinds():
        for name in topology.domains(kind):
            hosts = frozenset(topology.members(kind, name)) & considered
            if hosts:
                groups.setdefault(hosts, []).append(f"{kind} {name}")
    for names in groups.values():
        names.sort(key=_suspect_rank)
    return groups


def _suspect_rank(label: str) -> tuple[int, str]:
    kind = label.split(" ", 1)[0]
    return (SUSPECT_ORDER.index(kind) if kind in SUSPECT_ORDER else len(SUSPECT_ORDER), label)


def _group_key(names: list[str]) -> tuple[int, str]:
    return _suspect_rank(names[0])


def _finding(names: list[str], test: _Test, tests: int) -> Finding:
    kind, _, domain = names[0].partition(" ")
    preposition, suspect = SUSPECTS[kind]
    k, n, total = test.k, test.n, len(test.failed)
    also = f"; same hosts as {', '.join(names[1:])}" if len(names) > 1 else ""
    message = (
        f"{k} of {total} failures sit {preposition} {kind} {domain} ({k} of {n} nodes there "
        f"failed; fleet elsewhere {test.rest_failed} of {test.rest}{also}): suspect {suspect}, "
        "not the nodes"
    )
    p_value = test.p_value(tests)
    return Finding(
        category=FindingCategory.CORRELATED_FAILURE,
        kind=kind,
        domain=domain,
        message=message,
        failed=tuple(natural_sorted(test.hosts & test.failed)),
        members=tuple(natural_sorted(test.hosts)),
        p_value=p_value,
        hold_disruptive=True,
        also=tuple(names[1:]),
        evidence={
            "failures_total": total,
            "elsewhere_failed": test.rest_failed,
            "elsewhere_considered": test.rest,
            "domains_tested": tests,
        },
    )


# -- stragglers ------------------------------------------------------------------------------


def stragglers(
    busbw: Mapping[str, float], models: Mapping[str, str], *, threshold: float = 3.5
) -> list[Finding]:
    """Hosts whose nccl-tests busbw is a low outlier among hosts with the same GPU model.

    Modified z-score 0.6745 * (x - median) / MAD (Iglewicz and Hoaglin); when more than half the
    values are equal (MAD = 0) the mean absolute deviation stands in (z = (x - median) /
    (1.2533 * meanAD)); when all are equal nobody is a straggler. Only the low side is
    reported (fast is not a fault); groups under 4 hosts are skipped; non-finite values ignored.
    """
    groups: dict[str, dict[str, float]] = {}
    for host, value in busbw.items():
        if isinstance(value, (int, float)) and math.isfinite(value):
            groups.setdefault(models.get(host) or "unknown model", {})[host] = float(value)
    findings: list[Finding] = []
    for model in sorted(groups):
        findings.extend(_group_stragglers(model, groups[model], threshold))
    return findings


def _group_stragglers(model: str, values: Mapping[str, float], threshold: float) -> list[Finding]:
    if len(values) < MIN_PEERS:
        return []
    median = statistics.median(values.values())
    deviations = [abs(v - median) for v in values.values()]
    mad = statistics.median(deviations)
    scale = mad / MAD_TO_SIGMA if mad > 0 else statistics.fmean(deviations) / MEAN_AD_TO_SIGMA
    if scale <= 0:
        return []
    peers = tuple(natural_sorted(values))
    out = []
    for host in peers:
        z = (values[host] - median) / scale
        if z <= -threshold:
            evidence = {"busbw": values[host], "median": median, "mad": mad, "z": round(z, 2)}
            out.append(_straggler(host, model, peers, evidence))
    return out


def _straggler(
    host: str, model: str, peers: tuple[str, ...], evidence: dict[str, float]
) -> Finding:
    message = (
        f"{host}: nccl-tests busbw {evidence['busbw']:.1f} GB/s is far below its "
        f"{len(peers) - 1} {model} peers (median {evidence['median']:.1f} GB/s, robust z "
        f"{evidence['z']:.1f}): a slow node drags every job it joins"
    )
    return Finding(
        category=FindingCategory.STRAGGLER,
        kind="host",
        domain=host,
        message=message,
        failed=(host,),
        members=peers,
        evidence={**evidence, "model": model},
    )


# -- intra-node topology ---------------------------------------------------------------------


def intra_node_mismatches(seen: Mapping[str, Any], expected: Mapping[Any, Any]) -> list[Finding]:
    """Hosts whose GPU/NIC link types differ from what is expected.

    `seen`: host -> matrix; `expected`: host -> matrix, or one matrix for every host. A
    matrix is {(a, b): "NV18"} or {a: {b: "NV18"}}; pairs are unordered and the diagonal ("X")
    is ignored. Only pairs the expectation names are checked; a pair missing from what was
    seen (a GPU fell off the bus) is a mismatch. Hosts with no seen matrix are skipped.
    """
    fleet_wide = _is_matrix(expected)
    findings = []
    for host in natural_sorted(seen):
        matrix = seen[host]
        want = expected if fleet_wide else expected.get(host)
        if matrix is None or want is None:
            continue
        pairs = _differences(_pairs(matrix), _pairs(want))
        if pairs:
            findings.append(_mismatch(host, pairs))
    return findings


def _is_matrix(value: Mapping[Any, Any]) -> bool:
    """A matrix has pair keys, or rows whose values are strings (not per-host matrices)."""
    for key, row in value.items():
        if isinstance(key, tuple):
            return True
        if isinstance(row, Mapping):
            if any(isinstance(k, tuple) for k in row):
                return False  # host -> {(a, b): link}
            return any(isinstance(v, str) for v in row.values())
    return False


def _pairs(matrix: Mapping[Any, Any]) -> dict[tuple[str, str], str]:
    """Both matrix shapes as {sorted (a, b): link}, the diagonal left out."""
    out: dict[tuple[str, str], str] = {}
    for key, value in matrix.items():
        if isinstance(key, tuple) and len(key) == 2:
            _put(out, str(key[0]), str(key[1]), value)
        elif isinstance(value, Mapping):
            for other, link in value.items():
                _put(out, str(key), str(other), link)
    return out


def _put(out: dict[tuple[str, str], str], a: str, b: str, link: Any) -> None:
    if a != b and link is not None:
        ordered = (a, b) if (a, b) <= (b, a) else (b, a)
        out.setdefault(ordered, str(link))


def _differences(
    seen: Mapping[tuple[str, str], str], expected: Mapping[tuple[str, str], str]
) -> list[dict[str, str]]:
    return [
        {"a": a, "b": b, "expected": link, "seen": seen.get((a, b), "absent")}
        for (a, b), link in sorted(expected.items())
        if seen.get((a, b)) != link
    ]


def _mismatch(host: str, pairs: list[dict[str, str]]) -> Finding:
    shown = "; ".join(
        f"{p['a']}-{p['b']} {p['seen']} (expected {p['expected']})" for p in pairs[:4]
    )
    more = f"; and {len(pairs) - 4} more" if len(pairs) > 4 else ""
    return Finding(
        category=FindingCategory.INTRA_NODE_MISMATCH,
        kind="host",
        domain=host,
        message=f"{host}: {len(pairs)} GPU/NIC link(s) differ from the expected topology: "
        f"{shown}{more}",
        failed=(host,),
        members=(host,),
        evidence={"pairs": pairs},
    )


__all__ = [
    "SUSPECT_ORDER",
    "Finding",
    "FindingCategory",
    "binomial_tail",
    "correlated_failures",
    "held_hosts",
    "intra_node_mismatches",
    "stragglers",
]
