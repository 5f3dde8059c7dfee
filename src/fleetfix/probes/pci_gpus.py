"""The `pci_gpus` probe: the NVIDIA GPUs on the node's PCI bus, whatever the driver made of them.

nvidia-smi lists the GPUs the driver brought up. A GPU whose initialisation failed
(`NVRM: ... RmInitAdapter failed!`) is not there, and with no Xid line nothing else says so; the
bus still has it. This count is one of the claims knowledge/gpu_count.py weighs: a node whose
bus shows 8 NVIDIA GPUs and whose nvidia-smi shows 7 is short of one.

The command reads `lspci -nn -D -d 10de:` where pciutils is installed, else sysfs (containers
and minimal images often lack lspci; the real H200 node in tests/fixtures did):

    ### fleetfix lspci
    0000:1b:00.0 3D controller [0302]: NVIDIA Corporation GH100 [H100 SXM5] [10de:2330] (rev a1)
    0000:05:00.0 Bridge [0680]: NVIDIA Corporation Device [10de:22a3] (rev a1)
    ### fleetfix sysfs
    0000:00:06.0 0x030200 0x2335

Only display-class functions count (PCI class 0300 VGA, 0302 3D controller): NVSwitches are
bridges (0680) and Grace's root ports are PCI bridges. A function that reads `(rev ff)` answers
config reads with all ones (fallen off the bus): it is still a GPU the node has, flagged `lost`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fleetfix.errors import ProbeParseError
from fleetfix.probes.base import Probe
from fleetfix.probes.text import clean_lines

NAME = "pci_gpus"
GPU_CLASSES = frozenset({"0300", "0302"})
"""PCI class codes of display controllers: VGA compatible (0300) and 3D controller (0302)."""

_LSPCI = re.compile(
    r"^(?P<slot>(?:[0-9a-f]{4,8}:)?[0-9a-f]{2}:[0-9a-f]{2}\.[0-7])\s+"
    r"(?P<cls>[^:]+?): (?P<rest>.*)$",
    re.IGNORECASE,
)
_CLASS_CODE = re.compile(r"(?:^|\[)(?P<code>[0-9a-f]{4})\]?$", re.IGNORECASE)
_CLASS_NAMES = {"vga compatible controller": "0300", "3d controller": "0302"}
"""Class names plain `lspci` prints (no -n) for the GPU classes."""
_DEVICE_ID = re.compile(r"\[10de:(?P<device>[0-9a-f]{4})\]|\b10de:(?P<plain>[0-9a-f]{4})\b", re.I)
_SYSFS = re.compile(
    r"^(?P<slot>[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]) 0x(?P<cls>[0-9a-f]{6}) "
    r"0x(?P<device>[0-9a-f]{4})$",
    re.IGNORECASE,
)
_MARK = re.compile(r"^### fleetfix (?P<source>lspci|sysfs)$")


@dataclass(frozen=True, slots=True)
class PciGpu:
    """One NVIDIA display-class PCI function."""

    slot: str
    """Domain:bus:device.function, lower case (`0000:1b:00.0`)."""
    device_id: str | None
    """The PCI device id (`2330` for an H100 SXM5), when printed."""
    lost: bool
    """Config space reads all ones (`rev ff`): the GPU fell off the bus but is still there."""


@dataclass(frozen=True, slots=True)
class PciGpusFacts:
    count: int
    gpus: tuple[PciGpu, ...]
    source: str
    """`lspci`, `sysfs`, or `paste` for a bare `lspci` output without fleetfix's marker."""


def command(params: Mapping[str, Any]) -> str:
    del params
    return (
        "if command -v lspci >/dev/null 2>&1; then echo '### fleetfix lspci';"
        " lspci -nn -D -d 10de: 2>&1; else echo '### fleetfix sysfs';"
        " for d in /sys/bus/pci/devices/*; do"
        ' [ "$(cat "$d/vendor" 2>/dev/null)" = 0x10de ] &&'
        ' printf \'%s %s %s\\n\' "${d##*/}" "$(cat "$d/class")" "$(cat "$d/device")";'
        " done; true; fi"
    )


def parse(text: str) -> PciGpusFacts:
    source = "paste"
    gpus: list[PciGpu] = []
    for line in clean_lines(text):
        content = line.text.strip()
        if not content:
            continue
        mark = _MARK.match(content)
        if mark:
            source = mark["source"]
            continue
        try:
            gpu = _sysfs_gpu(content) if source == "sysfs" else _lspci_gpu(content)
        except ValueError:
            raise ProbeParseError(NAME, f"not {source} output", text, line=line.number) from None
        if gpu is not None:
            gpus.append(gpu)
    return PciGpusFacts(count=len(gpus), gpus=tuple(gpus), source=source)


def _lspci_gpu(content: str) -> PciGpu | None:
    """The GPU on this lspci line, None for another function; ValueError for no lspci line."""
    match = _LSPCI.match(content)
    if match is None:
        raise ValueError(content)
    cls = match["cls"].strip()
    numeric = _CLASS_CODE.search(cls)
    code = numeric["code"].lower() if numeric else _CLASS_NAMES.get(cls.lower(), "")
    nvidia = "[10de:" in match["rest"].lower() or "NVIDIA" in match["rest"]
    if code not in GPU_CLASSES or not nvidia:  # a pasted whole-bus listing has other vendors
        return None
    ids = _DEVICE_ID.search(match["rest"])
    device = (ids["device"] or ids["plain"]).lower() if ids else None
    slot = match["slot"].lower()
    return PciGpu(slot if slot.count(":") == 2 else f"0000:{slot}", device, "(rev ff)" in content)


def _sysfs_gpu(content: str) -> PciGpu | None:
    match = _SYSFS.match(content)
    if match is None:
        raise ValueError(content)
    if match["cls"][:4].lower() not in GPU_CLASSES:
        return None
    return PciGpu(match["slot"].lower(), match["device"].lower(), lost=False)


PROBE = Probe(
    name=NAME,
    summary="NVIDIA GPUs on the PCI bus (lspci, else sysfs), those the driver failed included",
    command=command,
    parse=parse,
)
