"""Slurm node state words, decoded: scontrol's `BASE+FLAG+...` and sinfo's short/long words.

scontrol prints the base state and every flag (`IDLE+DRAIN`, `MIXED+DRAIN`,
`DOWN*+NOT_RESPONDING`, `IDLE+COMPLETING+DRAIN`, `IDLE+DRAIN+MAINTENANCE+RESERVED`); sinfo
prints one lower-case word with at most one suffix mark (`drng@`, `fail*`, `idle~`, `drain$`,
`maint`, `resv`). The words and marks are Slurm's own (src/common/slurm_protocol_defs.c,
node_state_string and node_state_string_compact; `man sinfo`, NODE STATE CODES).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

BASES = frozenset({"IDLE", "ALLOCATED", "MIXED", "DOWN", "ERROR", "FUTURE", "UNKNOWN"})
SUFFIX_FLAGS: dict[str, tuple[str, ...]] = {
    "*": ("NOT_RESPONDING",),
    "~": ("POWERED_DOWN",),
    "#": ("POWERING_UP",),
    "!": ("POWER_DOWN",),
    "%": ("POWERING_DOWN",),
    # `man sinfo`: "The node is currently in a reservation with a flag value of maintenance".
    "$": ("MAINTENANCE", "RESERVED"),
    "@": ("REBOOT_REQUESTED",),
    "^": ("REBOOT_ISSUED",),
    "-": ("PLANNED",),
}
# sinfo words (short %t and long %T forms): base state, flags, and whether jobs hold the node.
SINFO_WORDS: dict[str, tuple[str | None, tuple[str, ...], bool]] = {
    "idle": ("IDLE", (), False),
    "alloc": ("ALLOCATED", (), True),
    "allocated": ("ALLOCATED", (), True),
    "mix": ("MIXED", (), True),
    "mixed": ("MIXED", (), True),
    "down": ("DOWN", (), False),
    "err": ("ERROR", (), False),
    "error": ("ERROR", (), False),
    "futr": ("FUTURE", (), False),
    "future": ("FUTURE", (), False),
    "unk": ("UNKNOWN", (), False),
    "unknown": ("UNKNOWN", (), False),
    "drain": (None, ("DRAIN",), False),
    "drained": (None, ("DRAIN",), False),
    "drng": (None, ("DRAIN",), True),
    "draining": (None, ("DRAIN",), True),
    "comp": (None, ("COMPLETING",), True),
    "completing": (None, ("COMPLETING",), True),
    "fail": (None, ("FAIL",), False),
    "failg": (None, ("FAIL",), True),
    "failing": (None, ("FAIL",), True),
    # An idle node in a maintenance reservation (sinfo says `maint`; scontrol MAINTENANCE).
    "maint": (None, ("MAINTENANCE",), False),
    "resv": (None, ("RESERVED",), False),
    "reserved": (None, ("RESERVED",), False),
    "plnd": ("IDLE", ("PLANNED",), False),
    "planned": ("IDLE", ("PLANNED",), False),
    "inval": (None, ("INVALID_REG",), False),
    "invalid": (None, ("INVALID_REG",), False),
    "npc": (None, ("PERFCTRS",), False),
    "perfctrs": (None, ("PERFCTRS",), False),
    "pow_dn": (None, ("POWERED_DOWN",), False),
    "powered_down": (None, ("POWERED_DOWN",), False),
    "powering_down": (None, ("POWERING_DOWN",), False),
    "pow_up": (None, ("POWERING_UP",), False),
    "powering_up": (None, ("POWERING_UP",), False),
    "boot": (None, ("REBOOT_ISSUED",), False),
    "reboot": (None, ("REBOOT_REQUESTED",), False),
    "reboot_requested": (None, ("REBOOT_REQUESTED",), False),
    "reboot_issued": (None, ("REBOOT_ISSUED",), False),
    "blocked": (None, ("BLOCKED",), False),
    "cloud": (None, ("CLOUD",), False),
}


@dataclass(frozen=True, slots=True)
class NodeState:
    """A decoded Slurm state word: base state (None when the word hides it) and flags."""

    base_state: str | None
    flags: tuple[str, ...]
    busy: bool
    """The word itself says jobs hold the node (sinfo `drng`, `mix`, `alloc`, `comp`...)."""


def decode_state(word: str) -> NodeState:
    """Decode an scontrol (`MIXED+DRAIN`, `DOWN*+NOT_RESPONDING`) or sinfo (`drng@`) state.

    Raises:
        ValueError: the word is not a Slurm node state.
    """
    parts = word.strip().split("+")
    head = parts[0].rstrip("".join(SUFFIX_FLAGS))
    marks = tuple(flag for char in parts[0][len(head) :] for flag in SUFFIX_FLAGS[char])
    extra = tuple(part.upper() for part in parts[1:] if part)
    if any(not re.fullmatch(r"[A-Z_]+", flag) for flag in extra):
        raise ValueError(f"not a Slurm node state: {word!r}")
    base: str | None
    flags: tuple[str, ...]
    if head.upper() in BASES:
        base, flags, busy = head.upper(), (), head.upper() in ("ALLOCATED", "MIXED")
    elif head.lower() in SINFO_WORDS:
        base, flags, busy = SINFO_WORDS[head.lower()]
    else:
        raise ValueError(f"not a Slurm node state: {word!r}")
    merged = tuple(dict.fromkeys((*flags, *marks, *extra)))
    return NodeState(base_state=base, flags=merged, busy=busy or "COMPLETING" in merged)
