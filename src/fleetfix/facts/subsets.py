"""`gather_subset` and `filter`: which collectors run, and which facts are kept.

Ansible's rules (module_utils/facts/collector.py get_collector_names): the minimal collectors
always run unless `!min`; `all` adds every collector, `!all` removes all but the minimal ones,
`!NAME` removes one, `NAME` adds one (and survives a `!`); an unknown name to add is an error
in Ansible's words, an unknown name to remove is ignored. Names Ansible knows but fleetfix does
not collect (apparmor, dns, virtual, ...) are accepted and gather nothing. `gpus` is
fleetfix's own collector (nvidia-smi), part of `hardware`.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from typing import Any

MINIMAL: frozenset[str] = frozenset(
    {"platform", "distribution", "env", "date_time", "local", "pkg_mgr", "python"}
    | {"service_mgr", "user"}
)
"""The collectors fleetfix runs for Ansible's minimal subset (`min`)."""

COLLECTORS: frozenset[str] = MINIMAL | {"hardware", "network", "gpus"}

_ALIASES: Mapping[str, str] = {
    **dict.fromkeys(("architecture", "kernel", "kernel_version", "machine", "system"), "platform"),
    **dict.fromkeys(
        ("os_family", "distribution_version", "distribution_major_version"), "distribution"
    ),
    "distribution_release": "distribution",
    "python_version": "python",
    **dict.fromkeys(("user_dir", "user_gecos", "user_gid", "user_id"), "user"),
    **dict.fromkeys(("user_shell", "user_uid", "effective_user_id", "real_user_id"), "user"),
    **dict.fromkeys(("processor", "processor_cores", "processor_count", "mounts"), "hardware"),
    **dict.fromkeys(("default_ipv4", "default_ipv6", "interfaces"), "network"),
    **dict.fromkeys(("all_ipv4_addresses", "all_ipv6_addresses"), "network"),
}
"""Ansible's fact ids that select one of fleetfix's collectors."""

_UNCOLLECTED: frozenset[str] = frozenset(
    {"apparmor", "caps", "chroot", "cmdline", "devices", "dns", "effective_group_ids"}
    | {"facter", "fibre_channel_wwn", "fips", "is_chroot", "iscsi", "loadavg", "lsb"}
    | {"machine_id", "nvme", "ohai", "selinux", "ssh_host_key_dsa_public"}
    | {"ssh_host_key_ecdsa_public", "ssh_host_key_ed25519_public", "ssh_host_key_rsa_public"}
    | {"ssh_host_pub_keys", "ssh_pub_keys", "system_capabilities"}
    | {"system_capabilities_enforced", "systemd", "virtual", "virtualization_role"}
    | {"virtualization_tech_guest", "virtualization_tech_host", "virtualization_type"}
)
"""Subsets Ansible accepts that fleetfix does not collect: accepted, nothing gathered."""

VALID: frozenset[str] = COLLECTORS | _ALIASES.keys() | _UNCOLLECTED


class SubsetError(ValueError):
    """A gather_subset names something Ansible does not know (Ansible's message)."""


def selected(gather_subset: Iterable[str] | str | None) -> frozenset[str]:
    """The collectors `gather_subset` selects (None or empty: all).

    Raises:
        SubsetError: a name to add that Ansible does not know.
    """
    if isinstance(gather_subset, str):
        gather_subset = [part.strip() for part in gather_subset.split(",") if part.strip()]
    wanted = list(gather_subset or ["all"])
    added: set[str] = set(MINIMAL)
    removed: set[str] = set()
    explicit: set[str] = set()
    for subset in wanted:
        name = str(subset).strip()
        if name in ("all", "min"):
            added |= COLLECTORS if name == "all" else MINIMAL
        elif name == "!min":
            removed |= MINIMAL
        elif name == "!all":
            removed |= COLLECTORS - MINIMAL
        elif name.startswith("!"):
            removed |= _expand(name[1:])
        elif name not in VALID:
            allowed = ", ".join(sorted(VALID))
            raise SubsetError(
                f"Bad subset '{name}' given to Ansible. gather_subset options allowed: all, "
                f"{allowed}"
            )
        else:
            explicit |= _expand(name)
            added |= _expand(name)
    return frozenset(added - (removed - explicit))


def _expand(name: str) -> set[str]:
    if name == "hardware":
        return {"hardware", "gpus"}
    collector = _ALIASES.get(name, name)
    return {collector} if collector in COLLECTORS else set()


def filtered(facts: Mapping[str, Any], patterns: Iterable[str] | str | None) -> dict[str, Any]:
    """The facts whose `ansible_`-prefixed name matches one of `patterns` (fnmatch, as
    Ansible's `filter`); all of them when there is no pattern."""
    if isinstance(patterns, str):
        patterns = [part.strip() for part in patterns.split(",") if part.strip()]
    wanted = [str(p) for p in patterns or () if str(p) and str(p) != "*"]
    if not wanted:
        return dict(facts)
    return {
        name: value
        for name, value in facts.items()
        if any(fnmatch.fnmatchcase(f"ansible_{name}", p) for p in wanted)
    }
