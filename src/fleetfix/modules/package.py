"""`package`, `apt`, `dnf` and `yum`: install, pin, upgrade or remove OS packages.

The node's package database is read first (`dpkg-query -W`, `rpm -q`), and what would change
is decided from that (`apt_plan`, `rpm_plan`: pure). Nothing to change runs nothing else, so a
second run is `ok`. Under --check (or check_mode) the plan is reported as `changed` and no
package manager command that changes the node is sent. Every command is the step's: journaled
with it, under its become, environment and timeout. `package` uses `ansible_pkg_mgr` when the
host has it, else the first of apt-get, dnf, yum the node has (one probing command).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from fleetfix.engine.disruptive import command_action, disruptive_command
from fleetfix.engine.hoststep import Outcome
from fleetfix.engine.remediate import run_command_action
from fleetfix.modules.call import ModuleCall, ModuleFailed
from fleetfix.results import CommandResult

APT_ENV = "DEBIAN_FRONTEND=noninteractive"
APT_GET = "apt-get -y -q -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold"
DPKG_QUERY = "dpkg-query -W -f='${Package}\\t${Status}\\t${Version}\\n' --"
MANAGERS = ("apt-get", "dnf", "yum")
PROBE_MANAGER = (
    "for m in apt-get dnf yum; do command -v $m >/dev/null 2>&1 && { echo $m; exit 0; }; done;"
    " exit 1"
)
_PKG_MGR = {"apt-get": "apt", "apt": "apt", "dnf": "dnf", "dnf5": "dnf", "yum": "yum"}
_STATE_WORDS = {"installed": "present", "removed": "absent"}


@dataclass(frozen=True, slots=True)
class Wanted:
    """One package as written: `nvidia-fabricmanager-550=550.90.07-1` (apt) or
    `nvidia-driver-550.90.07` (dnf/yum); `version` None when not pinned."""

    name: str
    version: str | None = None

    @property
    def spec(self) -> str:
        return self.name if self.version is None else f"{self.name}={self.version}"


@dataclass(frozen=True, slots=True)
class Plan:
    """What the module would do: install (and upgrade) these, remove those."""

    install: tuple[str, ...] = ()
    remove: tuple[str, ...] = ()

    @property
    def any(self) -> bool:
        return bool(self.install or self.remove)


def apt_wanted(names: Iterable[str]) -> list[Wanted]:
    """apt's `name=version` pins (a `*` in the version is a glob, as apt's module reads it)."""
    found: list[Wanted] = []
    for written in names:
        name, equals, version = str(written).strip().partition("=")
        found.append(Wanted(name.strip(), version.strip() if equals else None))
    return found


def parse_dpkg_query(text: str) -> dict[str, str]:
    """`dpkg-query -W -f='${Package}\\t${Status}\\t${Version}\\n'` -> installed name: version
    (a package known but not installed, `deinstall ok config-files`, is not there)."""
    installed: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and parts[1].strip().endswith(" installed"):
            installed[parts[0].split(":", 1)[0].strip()] = parts[2].strip()
    return installed


def apt_plan(state: str, wanted: Sequence[Wanted], installed: Mapping[str, str]) -> Plan:
    """What apt must do for `state` given what dpkg says is installed (pure). `latest`
    installs what is missing; whether an installed one has a newer version is apt's call
    (`apt_upgradable`)."""
    if state == "absent":
        return Plan(remove=tuple(w.name for w in wanted if w.name in installed))
    missing = []
    for want in wanted:
        have = installed.get(want.name)
        if have is None or (want.version is not None and not fnmatch.fnmatch(have, want.version)):
            missing.append(want.spec)
    return Plan(install=tuple(missing))


def parse_apt_simulation(text: str) -> tuple[str, ...]:
    """The packages `apt-get -s install` would install or upgrade (its `Inst NAME ...` lines)."""
    return tuple(line.split()[1] for line in text.splitlines() if line.startswith("Inst "))


def rpm_wanted(names: Iterable[str]) -> list[Wanted]:
    """dnf/yum names as written: `pkg`, or `pkg-1.2.3` (rpm -q and dnf take it whole)."""
    return [Wanted(str(name).strip()) for name in names]


def parse_rpm_query(specs: Sequence[str], text: str) -> dict[str, str]:
    """`rpm -q SPEC...` (one line per spec, in order) -> installed spec: package it matched."""
    installed: dict[str, str] = {}
    for spec, line in zip(specs, text.splitlines(), strict=False):
        said = line.strip()
        if said and not said.startswith("package ") and "not installed" not in said:
            installed[spec] = said
    return installed


def rpm_plan(state: str, wanted: Sequence[Wanted], installed: Mapping[str, str]) -> Plan:
    """What dnf/yum must do for `state` given what rpm says (pure; `latest` as apt_plan)."""
    if state == "absent":
        return Plan(remove=tuple(w.name for w in wanted if w.name in installed))
    return Plan(install=tuple(w.name for w in wanted if w.name not in installed))


def apt_command(verb: str, packages: Sequence[str], params: Mapping[str, Any]) -> str:
    """The apt-get command line that installs or removes `packages`."""
    words = [APT_ENV, APT_GET]
    if verb == "install":
        if params.get("allow_downgrade"):
            words.append("--allow-downgrades")
        if params.get("install_recommends") is False:
            words.append("--no-install-recommends")
        if params.get("install_recommends") is True:
            words.append("--install-recommends")
        if params.get("only_upgrade"):
            words.append("--only-upgrade")
        if params.get("default_release"):
            words.append(f"-t {shlex.quote(str(params['default_release']))}")
    if verb == "remove":
        if params.get("purge"):
            words.append("--purge")
        if params.get("autoremove"):
            words.append("--auto-remove")
    return " ".join([*words, verb, "--", *(shlex.quote(p) for p in packages)])


def rpm_command(tool: str, verb: str, packages: Sequence[str], params: Mapping[str, Any]) -> str:
    """The dnf/yum command line that installs, upgrades or removes `packages`."""
    words = [tool, "-y"]
    if params.get("disable_gpg_check"):
        words.append("--nogpgcheck")
    for repo in params.get("enablerepo") or ():
        words.append(f"--enablerepo={shlex.quote(str(repo))}")
    for repo in params.get("disablerepo") or ():
        words.append(f"--disablerepo={shlex.quote(str(repo))}")
    if verb == "install" and params.get("allow_downgrade"):
        words.append("--allowerasing" if tool == "dnf" else "--setopt=obsoletes=0")
    return " ".join([*words, verb, *(shlex.quote(p) for p in packages)])


# ---------------------------------------------------------------------- the modules


async def apt(call: ModuleCall) -> Outcome:
    params = call.params
    state = _STATE_WORDS.get(params["state"], params["state"])
    wanted = apt_wanted(params["name"] or ())
    cache_updated = False
    if params["update_cache"]:
        if not call.dry:
            await call.checked("apt-get update -q", "apt-get update failed")
        cache_updated = not call.dry
    if not wanted:
        return call.outcome(changed=cache_updated, cache_updated=cache_updated)
    names = [w.name for w in wanted]
    listed = await call.run(f"{DPKG_QUERY} {' '.join(shlex.quote(n) for n in names)}")
    if listed.rc not in (0, 1) or listed.timed_out:
        raise ModuleFailed(f"dpkg-query failed: {listed.stderr.strip()[:300]}", rc=listed.rc)
    plan = apt_plan(state, wanted, parse_dpkg_query(listed.stdout))
    if state == "latest":
        plan = await _apt_latest(call, wanted, plan, params)
    if not plan.any:
        return call.outcome(changed=cache_updated, cache_updated=cache_updated)
    verb, packages = ("remove", plan.remove) if plan.remove else ("install", plan.install)
    return await _apply(
        call, apt_command(verb, packages, params), plan, cache_updated=cache_updated
    )


async def _apt_latest(
    call: ModuleCall, wanted: Sequence[Wanted], plan: Plan, params: Mapping[str, Any]
) -> Plan:
    """`latest`: what apt would install or upgrade, asked with a simulation (`-s`)."""
    specs = [w.spec for w in wanted]
    simulated = await call.run(f"{APT_ENV} apt-get -s -q install -- {shlex.join(specs)}")
    if simulated.rc != 0:
        return Plan(install=tuple(specs))  # the real run fails with apt's own words
    upgraded = set(parse_apt_simulation(simulated.stdout))
    chosen = [w.spec for w in wanted if w.name in upgraded or w.spec in plan.install]
    return Plan(install=tuple(chosen))


async def dnf(call: ModuleCall) -> Outcome:
    return await _rpm_module(call, "dnf")


async def yum(call: ModuleCall) -> Outcome:
    return await _rpm_module(call, "yum")


async def _rpm_module(call: ModuleCall, tool: str) -> Outcome:
    params = call.params
    state = _STATE_WORDS.get(params["state"] or "present", params["state"] or "present")
    wanted = rpm_wanted(params["name"] or ())
    if params["update_cache"] and not call.dry:
        await call.checked(f"{tool} -q makecache", f"{tool} makecache failed")
    if not wanted:
        return call.outcome(changed=False, msg="", rc=0, results=[])
    specs = [w.name for w in wanted]
    listed = await call.run(f"rpm -q -- {shlex.join(specs)}")
    if listed.timed_out:
        raise ModuleFailed("rpm -q timed out")
    plan = rpm_plan(state, wanted, parse_rpm_query(specs, listed.stdout))
    commands = []
    if plan.remove:
        commands.append(rpm_command(tool, "remove", plan.remove, params))
    if plan.install:
        commands.append(rpm_command(tool, "install", plan.install, params))
    if state == "latest":
        newer = await call.run(f"{tool} -q check-update -- {shlex.join(specs)}")
        if newer.rc == 100:  # dnf/yum's "updates are available"
            plan = Plan(install=tuple(specs))
            commands.append(rpm_command(tool, "upgrade", specs, params))
    if not plan.any:
        return call.outcome(changed=False, msg="Nothing to do", rc=0, results=[])
    return await _apply(call, " && ".join(commands), plan)


async def package(call: ModuleCall) -> Outcome:
    """Ansible's generic `package`: the node's manager, with the arguments it takes."""
    manager = await _manager(call)
    state = call.params["state"]
    shared = {"name": call.params["name"], "state": _STATE_WORDS.get(state, state)}
    if manager == "apt":
        params = {**_APT_DEFAULTS, **shared}
        return await apt(dataclasses.replace(call, params=params))
    params = {**_RPM_DEFAULTS, **shared}
    return await _rpm_module(dataclasses.replace(call, params=params), manager)


_APT_DEFAULTS: Mapping[str, Any] = {
    "update_cache": False,
    "allow_downgrade": False,
    "install_recommends": None,
    "only_upgrade": False,
    "default_release": None,
    "purge": False,
    "autoremove": False,
}
_RPM_DEFAULTS: Mapping[str, Any] = {
    "update_cache": False,
    "disable_gpg_check": False,
    "enablerepo": [],
    "disablerepo": [],
    "allow_downgrade": False,
}


async def _manager(call: ModuleCall) -> str:
    """apt, dnf or yum: `use`, else the host's `ansible_pkg_mgr`, else what the node has."""
    chosen = call.params.get("use") or "auto"
    if chosen == "auto":
        chosen = str(call.hs.variables.get("ansible_pkg_mgr") or "auto")
    if chosen in _PKG_MGR:
        return _PKG_MGR[chosen]
    found = await call.run(PROBE_MANAGER)
    said = found.stdout.strip()
    if found.rc != 0 or said not in _PKG_MGR:
        raise ModuleFailed(
            "Could not find a package manager (apt-get, dnf or yum) on the node;"
            " set ansible_pkg_mgr or use: for the host"
        )
    return _PKG_MGR[said]


async def _apply(call: ModuleCall, command: str, plan: Plan, **values: Any) -> Outcome:
    """Run the package manager for the plan (only its plan under --check). A change of the
    GPU stack (a driver, the fabric manager, DCGM, CUDA, NCCL) breaks what runs on the node:
    it goes through the engine's gates for a disruptive command (busy refused, the owner's
    drain respected, caps and budget, the intent journaled before it is sent)."""
    changes = {"installed": list(plan.install), "removed": list(plan.remove)}
    if call.dry:
        return call.outcome(changed=True, msg=f"would run: {command}", packages=changes, **values)
    what = disruptive_command(command)  # the GPU stack: engine/disruptive.py's table
    if what is None:
        return _finish(call, await call.run(command), command, changes, values)
    gated = await run_command_action(call.hs, command_action(command, what), call.handlers)
    if gated.left is not None or (gated.failed and not gated.commands):
        outcome = call.outcome(message=gated.message, packages=changes, **values)
        outcome.failed, outcome.left = gated.failed, gated.left
        outcome.data.update(gated.data)
        return outcome
    call.commands.extend(gated.commands)
    return _finish(call, gated.commands[-1], command, changes, values)


def _finish(
    call: ModuleCall,
    done: CommandResult,
    command: str,
    changes: dict[str, list[str]],
    values: dict[str, Any],
) -> Outcome:
    """The module's result from the package manager's run."""
    if done.timed_out or done.rc != 0:
        said = (done.stderr.strip() or done.stdout.strip())[:500]
        raise ModuleFailed(
            f"'{command}' failed: {said or f'exit status {done.rc}'}",
            rc=done.rc,
            stdout=done.stdout,
            stderr=done.stderr,
            **values,
        )
    return call.outcome(
        changed=True,
        stdout=done.stdout,
        stderr=done.stderr,
        rc=done.rc,
        stdout_lines=done.stdout.splitlines(),
        packages=changes,
        **values,
    )
