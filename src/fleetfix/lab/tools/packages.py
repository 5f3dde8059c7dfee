"""Emulated `dpkg-query` and `apt-get` for a lab node's NVIDIA packages.

A node starts with the driver, utilities, DCGM and (where it runs the fabric manager) fabric
manager packages of its driver version installed, as a DGX/HGX node built by NVIDIA's CUDA
repository has them. The lab's repository offers every version of the node's driver branch
(`550.*` for a 550 node) for the branch packages, and two DCGM versions; any other package is
not in it (`E: Unable to locate package`, exit 100, as apt). `apt-get install NAME=VERSION`
installs that version (a downgrade needs `--allow-downgrades`, as apt), `remove`/`purge`
removes, `-s` prints apt's `Inst`/`Remv` lines and changes nothing, `update` succeeds.
Installing changes the package database only: the loaded driver stays what it is until a
reboot in real life too, and the lab keeps the scenario's driver version.

Without these shims a lab node (real bash on the lab machine) would run the machine's own
apt-get: the lab never lets a runbook touch the machine it runs on.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence

from fleetfix.lab.state import NodeState
from fleetfix.lab.tools.base import ToolContext, ToolReply, fail

_BRANCH_PACKAGE = re.compile(
    r"^(?:nvidia-(?:driver|utils|compute-utils|fabricmanager|kernel-common)|libnvidia-nscq)-(\d+)$"
)
_DCGM = "datacenter-gpu-manager"
_DCGM_VERSIONS = ("1:3.3.7", "1:3.3.9")
_OPTIONS_WITH_VALUE = frozenset({"-o", "-t", "--option", "--target-release", "-c"})
_NOT_FOUND = 100


def installed(node: NodeState) -> dict[str, str]:
    """The node's package database (name: version), made on first use."""
    if node.packages is None:
        branch = node.driver.split(".", 1)[0]
        node.packages = {
            f"nvidia-driver-{branch}": f"{node.driver}-0ubuntu1",
            f"nvidia-utils-{branch}": f"{node.driver}-0ubuntu1",
            _DCGM: _DCGM_VERSIONS[0],
        }
        if "nvidia-fabricmanager" in node.services:
            node.packages[f"nvidia-fabricmanager-{branch}"] = f"{node.driver}-1"
            node.packages[f"libnvidia-nscq-{branch}"] = f"{node.driver}-1"
    return node.packages


def _offered(node: NodeState, name: str, version: str | None) -> str | None:
    """The version the lab's repository gives for `name` (`version`: apt's pin, a glob), or
    None when it has none."""
    match = _BRANCH_PACKAGE.match(name)
    if match is not None:
        if version is None:
            return installed(node).get(name) or f"{node.driver}-1"
        branch = match.group(1)
        ok = version.startswith(f"{branch}.") and "*" not in version
        return version if ok else None
    if name == _DCGM:
        if version is None:
            return _DCGM_VERSIONS[-1]
        return next((v for v in _DCGM_VERSIONS if fnmatch.fnmatch(v, version)), None)
    return None


def dpkg_query(ctx: ToolContext, argv: Sequence[str]) -> ToolReply:
    """`dpkg-query -W [-f FORMAT] [--] NAME...`: FORMAT's ${Package} ${Status} ${Version}."""
    form = "${Package}\t${Version}\n"
    names: list[str] = []
    args = list(argv)
    index = 0
    while index < len(args):
        arg = args[index]
        if arg in ("-f", "--showformat") and index + 1 < len(args):
            form = args[index + 1]
            index += 2
            continue
        if arg.startswith("--showformat="):
            form = arg.split("=", 1)[1]
        elif arg.startswith("-f") and len(arg) > 2:
            form = arg[2:].removeprefix("=")
        elif not arg.startswith("-"):
            names.append(arg)
        index += 1
    if "-W" not in args and "--show" not in args:
        return fail("dpkg-query: only -W (--show) is emulated in the lab")
    packages = installed(ctx.node)
    out, err = [], []
    for name in names:
        version = packages.get(name)
        if version is None:
            err.append(f"dpkg-query: no packages found matching {name}")
            continue
        text = form.replace("${Package}", name).replace("${Version}", version)
        text = text.replace("${Status}", "install ok installed")
        out.append(text.replace("\\t", "\t").replace("\\n", "\n"))  # dpkg's escapes
    stderr = "".join(f"{line}\n" for line in err)
    return ToolReply(stdout="".join(out), stderr=stderr, rc=1 if err else 0)


def apt_get(ctx: ToolContext, argv: Sequence[str]) -> ToolReply:
    words: list[str] = []
    flags: set[str] = set()
    args = list(argv)
    index = 0
    while index < len(args):
        arg = args[index]
        if arg in _OPTIONS_WITH_VALUE:
            index += 2
            continue
        if arg == "--":
            words.extend(args[index + 1 :])
            break
        if arg.startswith("-"):
            flags.add(arg)
        else:
            words.append(arg)
        index += 1
    if not words:
        return fail("E: Invalid operation", rc=_NOT_FOUND)
    verb, names = words[0], words[1:]
    simulate = bool(flags & {"-s", "--simulate", "--dry-run", "--just-print", "--no-act"})
    if verb == "update":
        return ToolReply(stdout="Reading package lists... Done\n")
    if verb in ("install", "reinstall"):
        return _install(ctx.node, names, flags, simulate)
    if verb in ("remove", "purge", "autoremove"):
        return _remove(ctx.node, names, simulate)
    return fail(f"E: Invalid operation {verb}", rc=_NOT_FOUND)


def _install(node: NodeState, specs: Sequence[str], flags: set[str], simulate: bool) -> ToolReply:
    packages = installed(node)
    changes: list[tuple[str, str | None, str]] = []
    for spec in specs:
        name, equals, pin = spec.partition("=")
        version = _offered(node, name, pin if equals else None)
        if version is None:
            if _offered(node, name, None) is None:
                return fail(f"E: Unable to locate package {name}", rc=_NOT_FOUND)
            return fail(f"E: Version '{pin}' for '{name}' was not found", rc=_NOT_FOUND)
        have = packages.get(name)
        if have == version:
            continue
        if have is not None and _older(version, have) and "--allow-downgrades" not in flags:
            return fail(
                "E: Packages were downgraded and -y was used without --allow-downgrades.",
                rc=_NOT_FOUND,
            )
        changes.append((name, have, version))
    lines = [
        f"Inst {name} [{have}] ({version} lab-repo)"
        if have
        else f"Inst {name} ({version} lab-repo)"
        for name, have, version in changes
    ]
    if not simulate:
        for name, _have, version in changes:
            packages[name] = version
    summary = f"{len(changes)} upgraded or newly installed.\n"
    return ToolReply(stdout="".join(f"{line}\n" for line in lines) + summary)


def _remove(node: NodeState, names: Sequence[str], simulate: bool) -> ToolReply:
    packages = installed(node)
    gone = [name for name in names if name in packages]
    lines = "".join(f"Remv {name} [{packages[name]}]\n" for name in gone)
    if not simulate:
        for name in gone:
            del packages[name]
    return ToolReply(stdout=lines + f"{len(gone)} to remove.\n")


def _older(version: str, than: str) -> bool:
    """Debian's order for the versions the lab offers: their numbers, compared in turn."""
    return _numbers(version) < _numbers(than)


def _numbers(version: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", version))
