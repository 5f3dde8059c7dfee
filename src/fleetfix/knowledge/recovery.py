"""The GPU recovery action the driver reports, in every wording it is printed, keyed by NVML value.

One table serves nvidia-smi (`-q` "GPU Recovery Action", XML `<gpu_recovery_action>`, CSV
`gpu_recovery_action`), NVML enum names, and the Xid 154 kernel message. Sources:

* NVML `nvmlDeviceGpuRecoveryAction_t` (nvml.h as shipped in NVIDIA/nvidia-settings): values 0-2
  since 565, DRAIN_P2P (3) and DRAIN_AND_RESET (4) since 570, RECOVER_IMEX_DOMAIN (5) in 610;
  BUS_RESET (6, "Reset the GPU's PCIe bus") and SYSTEM_REBOOT (7, "Reboot the system") from the
  cuda-python NVML bindings reference (cuda.bindings.nvml.DeviceGpuRecoveryAction);
* NVIDIA "GPU Memory Error Management", "Error Recovery and Response Flags": the nvidia-smi words
  None, Reset, Reboot, Drain P2P, Drain and Reset;
* Xid 154 as drivers print it, `GPU recovery action changed from 0x0 (None) to 0x2 (...)`:
  "GPU Reset Required" / "Node Reboot Required" (570-595), "Drain P2P", "Drain and Reset", and
  610's "PF FLR" (0x1) and "OS Reboot" (0x2), as quoted from kernel logs in public issue threads
  (NVIDIA/open-gpu-kernel-modules #1134, #1353).

The hex code in an Xid 154 message is the NVML value and the stable key: a wording this table does
not know still maps by its code. Reading tool output never raises: an unrecognised code or wording
is `RecoveryAction.UNKNOWN` (a driver asking for something fleetfix cannot name is not "no
action"). `parse_recovery_action` is the strict form for values a person typed.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from fleetfix.errors import KnowledgeError


class RecoveryAction(enum.StrEnum):
    """The GPU recovery action the driver reports (nvmlDeviceGpuRecoveryAction_t, Xid 154).

    Values are nvidia-smi's words; `fact_name` is the snake-case name probe facts carry.
    """

    NONE = "None"
    GPU_RESET = "Reset"
    NODE_REBOOT = "Reboot"
    DRAIN_P2P = "Drain P2P"
    DRAIN_AND_RESET = "Drain and Reset"
    RECOVER_IMEX_DOMAIN = "Recover IMEX Domain"
    BUS_RESET = "Bus Reset"
    SYSTEM_REBOOT = "System Reboot"
    UNKNOWN = "Unknown"
    """A code or wording this table does not know: the driver asks for something unnamed."""

    @property
    def fact_name(self) -> str:
        """`Drain and Reset` -> `drain_and_reset`; what nvidia_smi and xid facts hold."""
        return re.sub(r"[^a-z0-9]+", "_", self.value.lower()).strip("_")

    @property
    def code(self) -> int | None:
        """The NVML enum value; None for UNKNOWN."""
        return _CODES.get(self)


_CODES: Mapping[RecoveryAction, int] = MappingProxyType(
    {
        RecoveryAction.NONE: 0,
        RecoveryAction.GPU_RESET: 1,
        RecoveryAction.NODE_REBOOT: 2,
        RecoveryAction.DRAIN_P2P: 3,
        RecoveryAction.DRAIN_AND_RESET: 4,
        RecoveryAction.RECOVER_IMEX_DOMAIN: 5,
        RecoveryAction.BUS_RESET: 6,
        RecoveryAction.SYSTEM_REBOOT: 7,
    }
)
_BY_CODE: Mapping[int, RecoveryAction] = MappingProxyType({v: k for k, v in _CODES.items()})


@dataclass(frozen=True, slots=True)
class Wording:
    """One way a recovery action is printed, and where it is printed that way."""

    text: str
    action: RecoveryAction
    where: str


WORDINGS: tuple[Wording, ...] = (
    Wording("None", RecoveryAction.NONE, "nvidia-smi -q/XML/CSV; Xid 154 (all drivers)"),
    Wording("Reset", RecoveryAction.GPU_RESET, "nvidia-smi -q/XML/CSV"),
    Wording("GPU Reset", RecoveryAction.GPU_RESET, "NVML enum name"),
    Wording("Reset Gpu", RecoveryAction.GPU_RESET, "nvml.h enum comment"),
    Wording("GPU Reset Required", RecoveryAction.GPU_RESET, "Xid 154, drivers 550-595"),
    Wording("PF FLR", RecoveryAction.GPU_RESET, "Xid 154, driver 610"),
    Wording("Reboot", RecoveryAction.NODE_REBOOT, "nvidia-smi -q/XML/CSV"),
    Wording("Node Reboot", RecoveryAction.NODE_REBOOT, "NVML enum name"),
    Wording("Reboot Node", RecoveryAction.NODE_REBOOT, "nvml.h enum comment"),
    Wording("Node Reboot Required", RecoveryAction.NODE_REBOOT, "Xid 154, drivers 550-595"),
    Wording("OS Reboot", RecoveryAction.NODE_REBOOT, "Xid 154, driver 610"),
    Wording("Drain P2P", RecoveryAction.DRAIN_P2P, "nvidia-smi; NVML; Xid 154"),
    Wording("Drain and Reset", RecoveryAction.DRAIN_AND_RESET, "nvidia-smi; Xid 154"),
    Wording("Drain P2P and Reset Gpu", RecoveryAction.DRAIN_AND_RESET, "nvml.h enum comment"),
    Wording("Recover IMEX Domain", RecoveryAction.RECOVER_IMEX_DOMAIN, "NVML 610"),
    Wording("Bus Reset", RecoveryAction.BUS_RESET, "NVML bindings (BUS_RESET)"),
    Wording("Reset the GPU's PCIe bus", RecoveryAction.BUS_RESET, "NVML bindings doc"),
    Wording("System Reboot", RecoveryAction.SYSTEM_REBOOT, "NVML bindings (SYSTEM_REBOOT)"),
    Wording("Reboot the system", RecoveryAction.SYSTEM_REBOOT, "NVML bindings doc"),
    Wording("Unknown", RecoveryAction.UNKNOWN, "fleetfix's own name for an unreadable action"),
)
"""Every known wording; lookups ignore case, `_`/`-` vs space and NVML enum prefixes."""


@dataclass(frozen=True, slots=True)
class RecoveryChange:
    """An Xid 154 message: the recovery action the driver changed from and to."""

    previous: RecoveryAction
    previous_code: int | None
    previous_text: str | None
    action: RecoveryAction
    code: int | None
    """The NVML value printed as hex (`0x2`); None when the message did not show one."""
    text: str | None
    """The driver's wording, exactly as printed (`OS Reboot`)."""


# What nvidia-smi prints when it has no value: the action is absent, not "None".
_NOT_REPORTED = frozenset(
    {"", "n/a", "na", "not supported", "requested functionality has been deprecated"}
)
_CHANGE = re.compile(
    r"recovery action changed from\s+(?P<old>0x[0-9a-f]+|\d+)(?:\s*\((?P<old_text>[^)]*)\))?"
    r"\s+to\s+(?P<new>0x[0-9a-f]+|\d+)(?:\s*\((?P<new_text>[^)]*)\))?",
    re.IGNORECASE,
)


def _key(text: str) -> str:
    key = re.sub(r"[\s_\-\[\]]+", " ", text.strip().lower()).strip()
    for prefix in ("nvml gpu recovery action ", "gpu recovery action "):
        key = key.removeprefix(prefix)
    return key


_ALIASES: Mapping[str, RecoveryAction] = MappingProxyType(
    {_key(w.text): w.action for w in WORDINGS}
)


def action_for_code(code: int) -> RecoveryAction:
    """The action an NVML value (the hex code in Xid 154) names; UNKNOWN for a value not in NVML."""
    return _BY_CODE.get(code, RecoveryAction.UNKNOWN)


def read_recovery_action(raw: str | None) -> RecoveryAction | None:
    """A recovery action as a tool printed it, never raising.

    Accepts every wording in WORDINGS, NVML enum names and NVML values (`2`, `0x2`). Returns None
    when nothing is reported (None, "", "N/A", "[Not Supported]", deprecated) and UNKNOWN for
    anything else it cannot read.
    """
    if raw is None:
        return None
    key = _key(raw)
    if key in _NOT_REPORTED:
        return None
    if key in _ALIASES:
        return _ALIASES[key]
    number = _as_number(key)
    return action_for_code(number) if number is not None else RecoveryAction.UNKNOWN


def parse_recovery_action(value: str | RecoveryAction | None) -> RecoveryAction | None:
    """A recovery action a person gave (CLI, playbook), in any wording `read_recovery_action` reads.

    Returns None when nothing is reported (None, "", "N/A", "[Not Supported]").

    Raises:
        KnowledgeError: the value is not a recovery action fleetfix knows (UNKNOWN included:
            a recommendation cannot be built on an action nobody can name).
    """
    action = value if isinstance(value, RecoveryAction) else read_recovery_action(value)
    if action is RecoveryAction.UNKNOWN:
        raise KnowledgeError(f"unrecognised GPU recovery action {value!r}")
    return action


def recovery_action_name(raw: str | None) -> str | None:
    """The fact name (`drain_and_reset`, `unknown`) of a printed action; None when not reported."""
    action = read_recovery_action(raw)
    return None if action is None else action.fact_name


def read_xid154(message: str) -> RecoveryChange | None:
    """The change an Xid 154 message announces; None if the message does not state one.

    The hex code decides (`0x1 (PF FLR)` is a GPU reset whatever the wording); the wording is
    only used when the code is not an NVML value.
    """
    match = _CHANGE.search(message)
    if match is None:
        return None
    previous, previous_code = _side(match["old"], match["old_text"])
    action, code = _side(match["new"], match["new_text"])
    return RecoveryChange(
        previous=previous,
        previous_code=previous_code,
        previous_text=_clean(match["old_text"]),
        action=action,
        code=code,
        text=_clean(match["new_text"]),
    )


def _side(number: str, wording: str | None) -> tuple[RecoveryAction, int | None]:
    code = _as_number(number.lower())
    by_code = action_for_code(code) if code is not None else RecoveryAction.UNKNOWN
    if by_code is not RecoveryAction.UNKNOWN or wording is None:
        return by_code, code
    by_wording = read_recovery_action(wording)
    return by_wording or RecoveryAction.UNKNOWN, code


def _clean(text: str | None) -> str | None:
    return None if text is None else " ".join(text.split())


def _as_number(key: str) -> int | None:
    try:
        return int(key, 16) if key.startswith("0x") else int(key)
    except ValueError:
        return None
