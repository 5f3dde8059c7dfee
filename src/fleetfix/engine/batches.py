"""Host ordering and serial batches, with Ansible's arithmetic (percentages floored, min 1)."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence


def order_hosts(hosts: Sequence[str], order: str) -> list[str]:
    """Apply a play's `order` keyword."""
    if order == "reverse_inventory":
        return list(reversed(hosts))
    if order == "sorted":
        return sorted(hosts)
    if order == "reverse_sorted":
        return sorted(hosts, reverse=True)
    if order == "shuffle":
        shuffled = list(hosts)
        random.shuffle(shuffled)
        return shuffled
    return list(hosts)


def batch_size(value: int | str, total: int) -> int:
    """One `serial` entry as a host count: ints as given, "25%" of total floored, min 1."""
    if isinstance(value, str) and value.strip().endswith("%"):
        percent = float(value.strip()[:-1])
        size = int(total * percent / 100.0)
    else:
        size = int(value)
    return max(1, size) if size > 0 or total > 0 else 1


def serial_batches(hosts: Sequence[str], serial: Sequence[int | str]) -> list[list[str]]:
    """Split hosts into batches; the last serial entry repeats until hosts run out."""
    if not serial:
        return [list(hosts)] if hosts else []
    batches: list[list[str]] = []
    start = 0
    step = 0
    while start < len(hosts):
        size = batch_size(serial[min(step, len(serial) - 1)], len(hosts))
        batches.append(list(hosts[start : start + size]))
        start += size
        step += 1
    return batches


def failure_exceeds(failed: int, batch: int, max_fail_percentage: float | None) -> bool:
    """Ansible's rule: the percentage must be exceeded, not merely reached."""
    if max_fail_percentage is None or batch == 0:
        return False
    return failed * 100.0 / batch > max_fail_percentage


def behind_parked(
    hosts: Sequence[str],
    parked: Collection[str],
    caps: Mapping[str, int],
    domains_of: Callable[[str], Mapping[str, str]],
) -> list[str]:
    """Hosts (in order) with a capped domain that parked hosts fill to its cap: they wait for
    a parked host's place (its wait over, or deferred) instead of being held by the cap."""
    load: Counter[tuple[str, str]] = Counter()
    for host in parked:
        load.update((kind, name) for kind, name in _domains(domains_of, host) if kind in caps)
    return [
        host
        for host in hosts
        if host not in parked
        and any(load[(k, n)] >= caps[k] for k, n in _domains(domains_of, host) if k in caps)
    ]


def _domains(domains_of: Callable[[str], Mapping[str, str]], host: str) -> list[tuple[str, str]]:
    try:
        return list(domains_of(host).items())
    except KeyError:  # a host the topology lacks has no capped domain
        return []
