"""How many GPUs a node should have, and whether it shows them: one rule for every check.

The expected count never rests on one source: it is the most that any of these claims, since a
GPU that failed to initialise or fell off the bus is missing from nvidia-smi but not from the
node (safety.md, "a node short of GPUs"):

* the inventory's `gpus` host var (what the operator says the node has);
* Slurm's configured Gres (`gpu:8`: what the scheduler hands out);
* the PCI bus: NVIDIA 3D/VGA controllers `lspci` (or sysfs) lists, including one the driver
  could not bring up (`RmInitAdapter failed!`);
* the most GPUs fleetfix ever saw on the node (this run or any run in the journal).

The validation before `slurm_resume` (actions/validation.py) and the end-of-run health check
(engine/health.py) both ask `expected_gpus` and `shortfall`, so a node short of a GPU is
unhealthy wherever it is found, not only on its way back to service.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Expected:
    """The GPUs a node should show and which source claims that many."""

    count: int
    source: str


def expected_gpus(
    *, inventory: Any = None, gres: Any = None, pci: Any = None, seen: Any = None
) -> Expected | None:
    """The largest claim, or None when no source knows (then nobody can say the node is whole)."""
    claims = [
        (_count(inventory), "the inventory's gpus"),
        (_count(gres), "Slurm's Gres"),
        (_count(pci), "NVIDIA GPUs on the PCI bus"),
        (_count(seen), "the most GPUs fleetfix saw on this node"),
    ]
    known = [(count, source) for count, source in claims if count]
    if not known:
        return None
    count, source = max(known, key=lambda claim: claim[0])
    return Expected(count, source)


def shortfall(visible: int | None, expected: Expected | None) -> str | None:
    """Why the node is short of GPUs (`7 of 8 GPUs visible (Slurm's Gres)`), or None."""
    if expected is None or visible is None or visible >= expected.count:
        return None
    return f"{visible} of {expected.count} GPUs visible ({expected.source})"


def _count(value: Any) -> int | None:
    """A positive whole number of GPUs, or None (unset, empty, not a number)."""
    if value is None or value is False or value == "":
        return None
    try:
        count = int(value)
    except (TypeError, ValueError):
        return None
    return count if count > 0 else None
