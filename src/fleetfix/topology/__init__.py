"""Topology: the fleet's failure domains and fabric, the availability caps, and the findings.

graph.py     Topology: hosts, switches and domains (networkx behind a small API)
file.py      the topology file (YAML switches and links, or an ibnetdiscover dump)
caps.py      AvailabilityLedger: max_unavailable_per caps and canary-first batches
findings.py  correlated failures, busbw stragglers, intra-node link mismatches
"""

from __future__ import annotations

from fleetfix.topology.caps import AvailabilityLedger
from fleetfix.topology.findings import (
    Finding,
    FindingCategory,
    correlated_failures,
    held_hosts,
    intra_node_mismatches,
    stragglers,
)
from fleetfix.topology.graph import DOMAIN_KINDS, BlastRadius, Topology

__all__ = [
    "DOMAIN_KINDS",
    "AvailabilityLedger",
    "BlastRadius",
    "Finding",
    "FindingCategory",
    "Topology",
    "correlated_failures",
    "held_hosts",
    "intra_node_mismatches",
    "stragglers",
]
