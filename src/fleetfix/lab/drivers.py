"""What a driver version changes in the tools' output forms, and the GPU recovery actions.

The forms follow real captures (shared/samples/ and public nvidia-smi logs):

* before 570: `nvidia-smi -q` keys padded to column 42, `GPU Reset Status` with Reset Required
  / Drain and Reset Recommended Yes/No (550.127.05 and 560.35.03 logs), XML DTD v12;
* 570 to 579: still column 42, the two reset fields print "Requested functionality has been
  deprecated" and `GPU Recovery Action` follows them (a 570.124.06 log); XML DTD v13 with
  `<gpu_recovery_action>` and no `<gpu_reset_status>`;
* from 580: column 55 and only `GPU Recovery Action` (a real 580.159.04 H200 capture in
  tests/fixtures/samples/real-nodes/ and the 590.48.01 sample agree), the default table's frame
  under the banner drawn with `+`, `topo -m`'s header row underlined with ANSI escapes;
  EDPp Multiplier from 590 (590.44.01, 590.48.01, 595.84); the inactive remapped-row counters
  and Fabric Health's Partition Assigned in the 580 branch's later releases (580.159.04) and
  from 595 (595.84), not in 590.44.01 / 590.48.01.

From 570 the driver also logs Xid 154 when a GPU's recovery action changes, worded as in
real 580 logs (`0x1 (GPU Reset Required)`, `0x2 (Node Reboot Required)`) or, from 610, as in
610.43.02 logs (`0x1 (PF FLR)`, `0x2 (OS Reboot)`). The actions Bus Reset (NVML value 6) and
System Reboot (7) come from NVML's enum (the cuda-python bindings' DeviceGpuRecoveryAction); no
capture of nvidia-smi or an Xid 154 line naming them was available, so the lab prints NVML's
names in both places (`0x7 (System Reboot)`), and from 570 like the other actions.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

NONE = "None"
RESET = "Reset"
REBOOT = "Reboot"
DRAIN_P2P = "Drain P2P"
DRAIN_AND_RESET = "Drain and Reset"
RECOVER_IMEX = "Recover IMEX Domain"
BUS_RESET = "Bus Reset"
SYSTEM_REBOOT = "System Reboot"

ACTIONS = MappingProxyType(
    {
        "none": NONE,
        "reset": RESET,
        "reboot": REBOOT,
        "drain-p2p": DRAIN_P2P,
        "drain-and-reset": DRAIN_AND_RESET,
        "recover-imex": RECOVER_IMEX,
        "bus-reset": BUS_RESET,
        "system-reboot": SYSTEM_REBOOT,
    }
)
"""Scenario spelling -> what `nvidia-smi -q` prints as `GPU Recovery Action`."""

COLD_ACTIONS = frozenset({BUS_RESET, SYSTEM_REBOOT})
"""Actions a warm reboot does not give (NVML BUS_RESET "Reset the GPU's PCIe bus" and
SYSTEM_REBOOT "Reboot the system"): an Xid naming one needs a cold power cycle by default."""

_STRENGTH = (
    NONE,
    DRAIN_P2P,
    RESET,
    DRAIN_AND_RESET,
    RECOVER_IMEX,
    REBOOT,
    BUS_RESET,
    SYSTEM_REBOOT,
)
_NVML_VALUE = MappingProxyType(
    {
        NONE: 0,
        RESET: 1,
        REBOOT: 2,
        DRAIN_P2P: 3,
        DRAIN_AND_RESET: 4,
        RECOVER_IMEX: 5,
        BUS_RESET: 6,
        SYSTEM_REBOOT: 7,
    }
)
_XID154_WORDS = MappingProxyType(
    {
        NONE: "None",
        RESET: "GPU Reset Required",
        REBOOT: "Node Reboot Required",
        DRAIN_P2P: "Drain P2P",
        DRAIN_AND_RESET: "Drain and Reset",
        RECOVER_IMEX: "Recover IMEX Domain",
        BUS_RESET: "Bus Reset",
        SYSTEM_REBOOT: "System Reboot",
    }
)
_XID154_WORDS_610 = MappingProxyType({**_XID154_WORDS, RESET: "PF FLR", REBOOT: "OS Reboot"})
DEPRECATED = "Requested functionality has been deprecated"


def driver_major(driver: str) -> int:
    head = driver.split(".", 1)[0]
    return int(head) if head.isdigit() else 0


@dataclass(frozen=True, slots=True)
class DriverForms:
    """The output forms of one driver version."""

    major: int

    @property
    def key_width(self) -> int:
        return 55 if self.major >= 580 else 42

    @property
    def xml_v13(self) -> bool:
        return self.major >= 570

    @property
    def recovery_action(self) -> bool:
        """`nvidia-smi -q` reports `GPU Recovery Action` (and the driver logs Xid 154)."""
        return self.major >= 570

    @property
    def reset_status(self) -> str:
        """How -q prints `GPU Reset Status`: `flags` (Yes/No), `deprecated`, or `absent`."""
        if self.major >= 580:
            return "absent"
        return "deprecated" if self.major >= 570 else "flags"

    @property
    def platform_info(self) -> bool:
        """570+ -q: Platform Info (not Module ID), DRAM Encryption Mode, average and
        instantaneous power draw, Power Smoothing, Workload Power Profiles, Capabilities."""
        return self.major >= 570

    @property
    def q580(self) -> bool:
        """The 580.159.04 capture's (and the 590 sample's) further -q changes: GPU PDI,
        Display Attached, clock event counters, T.Limit temperatures, deprecated application
        clocks, no Voltage section, the table's `+` frame, topo -m's underlined header."""
        return self.major >= 580

    @property
    def edpp(self) -> bool:
        """-q's EDPp Multiplier (590.44.01, 590.48.01, 595.84; not 580.159.04)."""
        return self.major >= 590

    @property
    def deprecated_app_clocks(self) -> bool:
        """-q's application clocks read "Requested functionality has been deprecated" (the
        590.48.01 sample; 580.159.04 still prints them in MHz)."""
        return self.major >= 590

    @property
    def inactive_rows(self) -> bool:
        """Remapped Rows' Inactive Correctable/Uncorrectable Error and Fabric Health's
        Partition Assigned: in 580.159.04 and 595.84, not in 590.44.01 or 590.48.01."""
        return 580 <= self.major < 590 or self.major >= 595

    @property
    def repair_flags(self) -> bool:
        """-q lists Channel/TPC Repair Pending and Unrepairable Memory (580.159.04, 590)."""
        return self.major >= 580

    @property
    def topo_gpu_numa(self) -> bool:
        """`topo -m` has the GPU NUMA ID column: not in a 525.105.17 capture, in every
        capture from 550.127.05 on; the lab draws the line at 535 (no capture in between)."""
        return self.major >= 535

    @property
    def fabric_health(self) -> tuple[str, ...]:
        """The -q Fabric Health keys (non-classic boards)."""
        if self.major >= 580:
            partition = ("Partition Assigned",) if self.inactive_rows else ()
            return (
                "Summary",
                "Bandwidth",
                "Route Recovery in progress",
                "Route Unhealthy",
                "Access Timeout Recovery",
                "Incorrect Configuration",
                *partition,
            )
        if self.major >= 570:
            return (
                "Bandwidth",
                "Route Recovery in progress",
                "Route Unhealthy",
                "Access Timeout Recovery",
            )
        return ("Bandwidth",)

    def xid154_text(self, before: str, after: str) -> str:
        """The message of Xid 154 for a change of recovery action."""
        words = _XID154_WORDS_610 if self.major >= 610 else _XID154_WORDS
        return (
            f"GPU recovery action changed from 0x{_NVML_VALUE[before]:x} ({words[before]}) "
            f"to 0x{_NVML_VALUE[after]:x} ({words[after]})"
        )


def forms(driver: str) -> DriverForms:
    return DriverForms(driver_major(driver))


def strongest(actions: list[str]) -> str:
    """The action that covers all of `actions` (None < Drain P2P < Reset < ... < Reboot)."""
    return max(actions, key=_STRENGTH.index, default=NONE)


def default_action(code: int, recovery: str) -> str:
    """What the driver reports for an Xid when the scenario names no action.

    A GPU off the bus (79) and faults only a driver reload, a reboot or a cold power cycle
    clears call for a reboot; the rest for a GPU reset, `never` ones too: the driver cannot
    know a fault is permanent, nor that a warm reboot will not do (a scenario names `action:
    system-reboot` or `bus-reset` for that).
    """
    if code == 79 or recovery in ("reload", "reboot", "power_cycle"):
        return REBOOT
    return RESET
