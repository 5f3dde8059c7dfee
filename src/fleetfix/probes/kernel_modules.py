"""The `kernel_modules` probe: loaded modules (lsmod), the NVIDIA module set, the driver version.

The command prints `### lsmod` and `### version` sections. Module lines are read in lsmod's
format (kmod's, busybox's `Tainted:` header) or /proc/modules' (the fallback when lsmod is
missing, as on a node without kmod): `name size refcount users state address [(taints)]`,
users `-` or `a,b,` with `[permanent],`, state Live / Loading / Unloading, an address of zeros
for a non-root reader, taint flags such as `(O)`, `(OE)`, `(POE)` or none. A kernel built
without module unloading prints `-` for both refcount and users (the real H200 VM's): its
references are unknown (`used_by` None) and nothing can be unloaded (`unload_supported` False).
Command output that was cut off (a section missing, no final newline) is rejected; a pasted
excerpt without the markers parses, with `complete` False because lines may be missing from
it. `unload_order` lists `nvidia` and every module that depends on it, users before what they
use, which is the order `rmmod` needs (DESIGN: nvidia_uvm, nvidia_drm, nvidia_modeset,
nvidia_peermem, nvidia); where the kernel does not say who uses what, the NVIDIA set it has.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from fleetfix.errors import ProbeParseError
from fleetfix.probes.base import Probe
from fleetfix.probes.text import Line, clean_lines

NAME = "kernel_modules"
NVIDIA_MODULES = ("nvidia_uvm", "nvidia_drm", "nvidia_modeset", "nvidia_peermem", "nvidia")
"""The NVIDIA module set, in the order it is unloaded."""
_LSMOD_MARK = "### lsmod"
_VERSION_MARK = "### version"
_HEADER = re.compile(r"^Module\s+Size\s+Used by(?:\s+(?:Tainted: \S+|Not tainted))?\s*$")
_LSMOD_LINE = re.compile(
    r"^(?P<name>[\w-]+)\s+(?P<size>\d+)\s+(?P<count>-?\d+)(?:\s+(?P<users>.*))?$"
)
_PROC_LINE = re.compile(
    r"^(?P<name>[\w-]+) (?P<size>\d+) (?P<count>-?\d+|-) (?P<users>\S+) "
    r"(?P<state>Live|Loading|Unloading) 0x[0-9a-fA-F]+(?: \((?P<taints>[A-Z+-]*)\))?$"
)
_PERMANENT = "[permanent]"
_SETTLED = "Live"
_NVRM_VERSION = re.compile(
    r"^NVRM version: (?P<build>.*?Kernel Module.*?)\s+(?P<version>\d+\.\d+(?:\.\d+)*)\b"
)
_GCC_VERSION = re.compile(r"^GCC version:\s+(?P<gcc>.*\S)")


@dataclass(frozen=True, slots=True)
class KernelModule:
    """One loaded module."""

    name: str
    size: int
    used_by: int | None
    """The reference count lsmod prints (dependent modules plus open handles); None when the
    kernel does not count them (built without module unloading: `-`)."""
    users: tuple[str, ...]
    """Modules that depend on this one (none known when used_by is None)."""
    open_refs: int | None
    """References not explained by dependent modules (open device files, in-kernel users);
    rmmod fails while this is above zero. None when the kernel does not count them."""
    permanent: bool
    state: str | None = None
    """/proc/modules' Live, Loading or Unloading; None from lsmod (which shows live ones)."""
    taints: str | None = None
    """/proc/modules' taint flags (`O` out of tree, `E` unsigned, `P` proprietary); None when
    the module taints nothing or lsmod was read."""


@dataclass(frozen=True, slots=True)
class KernelModulesFacts:
    """What lsmod and /proc/driver/nvidia/version say."""

    modules: tuple[KernelModule, ...]
    loaded: tuple[str, ...]
    """Module names, including those only named as users of another module."""
    nvidia_loaded: bool
    """The core `nvidia` module is loaded."""
    nvidia_modules: tuple[str, ...]
    """Members of the NVIDIA module set that are loaded, in unload order."""
    missing_nvidia_modules: tuple[str, ...]
    in_use_modules: tuple[str, ...]
    """NVIDIA-set modules with open references (a driver reload would fail)."""
    unload_order: tuple[str, ...]
    unload_supported: bool
    """False when the kernel cannot unload modules (it counts no references: `-`); then no
    driver reload can work on the node and in_use_modules says nothing."""
    unsettled_modules: tuple[str, ...]
    """NVIDIA-set modules still Loading or Unloading (a stuck rmmod, a load in progress)."""
    driver_version: str | None
    open_kernel_module: bool | None
    """True for NVIDIA's open GPU kernel modules, False for the proprietary ones."""
    gcc_version: str | None
    complete: bool
    """True for the probe's own output; False for a pasted excerpt (modules may be missing)."""


def parse(text: str) -> KernelModulesFacts:
    """Kernel module facts from the probe's output (or a pasted lsmod excerpt)."""
    lines = clean_lines(text)
    marked = any(ln.text.strip() == _LSMOD_MARK for ln in lines)
    if marked and not text.endswith("\n"):
        # The command's output always ends with a newline; without one the last value may be cut.
        raise ProbeParseError(NAME, "output cut off (no final newline)", text)
    module_lines, version_lines = _sections(lines, text) if marked else (lines, ())
    modules = _modules(module_lines, text, header_only_ok=marked)
    version, open_module, gcc = _version(version_lines, text)
    by_name = {m.name: m for m in modules}
    # A module named as a user is loaded even when a partial paste lacks its own line.
    loaded = set(by_name).union(*(m.users for m in modules))
    nvidia = tuple(n for n in NVIDIA_MODULES if n in loaded)
    counted = all(m.used_by is not None for m in modules)
    return KernelModulesFacts(
        modules=modules,
        loaded=tuple(sorted(loaded)),
        nvidia_loaded="nvidia" in loaded,
        nvidia_modules=nvidia,
        missing_nvidia_modules=tuple(n for n in NVIDIA_MODULES if n not in loaded),
        in_use_modules=tuple(n for n in nvidia if n in by_name and (by_name[n].open_refs or 0)),
        # Who uses what is unknown without counts: the NVIDIA set in its own unload order.
        unload_order=unload_order(by_name) if counted else (nvidia if "nvidia" in nvidia else ()),
        unload_supported=counted,
        unsettled_modules=tuple(
            n for n in nvidia if n in by_name and by_name[n].state not in (None, _SETTLED)
        ),
        driver_version=version,
        open_kernel_module=open_module,
        gcc_version=gcc,
        complete=marked,
    )


def unload_order(modules: Mapping[str, KernelModule], root: str = "nvidia") -> tuple[str, ...]:
    """`root` and everything that depends on it, each module after all of its users.

    Users named in `root`'s lists but absent as lines (a partial paste) are still included.
    Empty when `root` is not loaded.
    """
    if root not in modules:
        return ()
    order: list[str] = []
    visiting: set[str] = set()

    def visit(name: str) -> None:
        if name in order or name in visiting:
            return  # already placed, or a dependency cycle lsmod cannot really show
        visiting.add(name)
        users = modules[name].users if name in modules else ()
        for user in sorted(users, key=_unload_rank):
            visit(user)
        order.append(name)

    visit(root)
    return tuple(order)


def _unload_rank(name: str) -> tuple[int, str]:
    known = NVIDIA_MODULES.index(name) if name in NVIDIA_MODULES else len(NVIDIA_MODULES)
    return known, name


def _command(params: Mapping[str, Any]) -> str:
    return (
        f"echo '{_LSMOD_MARK}'; lsmod 2>/dev/null || cat /proc/modules; "
        f"echo '{_VERSION_MARK}'; cat /proc/driver/nvidia/version 2>/dev/null || true"
    )


def _sections(lines: tuple[Line, ...], text: str) -> tuple[tuple[Line, ...], tuple[Line, ...]]:
    marks = [i for i, ln in enumerate(lines) if ln.text.strip() in (_LSMOD_MARK, _VERSION_MARK)]
    names = [lines[i].text.strip() for i in marks]
    if names != [_LSMOD_MARK, _VERSION_MARK]:
        raise ProbeParseError(NAME, "expected '### lsmod' then '### version' sections", text)
    start, middle = marks
    return lines[start + 1 : middle], lines[middle + 1 :]


def _modules(
    lines: tuple[Line, ...], text: str, *, header_only_ok: bool
) -> tuple[KernelModule, ...]:
    content = [ln for ln in lines if ln.text.strip()]
    if not content:
        raise ProbeParseError(NAME, "lsmod printed nothing (not even its header)", text)
    modules = []
    for ln in content:
        if _HEADER.match(ln.text.strip()):
            continue
        module = _module(ln.text.strip())
        if module is None:
            raise ProbeParseError(NAME, "not an lsmod or /proc/modules line", text, line=ln.number)
        modules.append(module)
    if not modules and not header_only_ok:
        raise ProbeParseError(NAME, "no module lines", text)
    return tuple(modules)


def _module(line: str) -> KernelModule | None:
    proc = _PROC_LINE.match(line)
    match = proc or _LSMOD_LINE.match(line)
    if match is None:
        return None
    users_text = (match["users"] or "").strip()
    names = () if users_text == "-" else _split_users(users_text)
    if names is None:
        return None
    users = tuple(n for n in names if n != _PERMANENT)
    # `-` in /proc/modules, a negative errno from kmod's lsmod: the kernel keeps no count.
    count = int(match["count"]) if match["count"] != "-" else None
    if count is not None and count < 0:
        count = None
    return KernelModule(
        name=match["name"],
        size=int(match["size"]),
        used_by=count,
        users=users,
        open_refs=max(count - len(users), 0) if count is not None else None,
        permanent=_PERMANENT in names,
        state=proc["state"] if proc else None,
        # Older kernels mark the state in the flags too: `(OE+)` loading, `(OE-)` unloading.
        taints=(proc["taints"] or "").strip("+-") or None if proc else None,
    )


def _split_users(text: str) -> tuple[str, ...] | None:
    names = tuple(n for n in text.split(",") if n)
    if not all(n == _PERMANENT or re.fullmatch(r"[\w-]+", n) for n in names):
        return None
    return names


def _version(lines: tuple[Line, ...], text: str) -> tuple[str | None, bool | None, str | None]:
    content = [ln for ln in lines if ln.text.strip()]
    if not content:
        return None, None, None  # driver not loaded: /proc/driver/nvidia/version is absent
    version = open_module = gcc = None
    for ln in content:
        nvrm = _NVRM_VERSION.match(ln.text.strip())
        gcc_match = _GCC_VERSION.match(ln.text.strip())
        if nvrm:
            version = nvrm["version"]
            open_module = "Open Kernel Module" in nvrm["build"]
        elif gcc_match:
            gcc = gcc_match["gcc"]
        else:
            raise ProbeParseError(NAME, "unexpected line in driver version", text, line=ln.number)
    if version is None:
        raise ProbeParseError(NAME, "driver version file has no 'NVRM version:' line", text)
    return version, open_module, gcc


PROBE: Probe[KernelModulesFacts] = Probe(
    name=NAME,
    summary="Loaded kernel modules, the NVIDIA module set and the driver version",
    command=_command,
    parse=parse,
    params={},
)
