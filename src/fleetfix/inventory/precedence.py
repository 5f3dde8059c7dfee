"""Merge a host's (or group's) variables in Ansible's precedence order.

For a host, later layers win (ansible.vars.manager.VariableManager.get_vars with the default
VARIABLE_PRECEDENCE and hash_behaviour=replace, so dicts are replaced, never deep-merged):

1. vars of group `all` from the inventory sources,
2. vars of the host's other groups from the sources, ordered by (depth, priority, name),
3. group_vars/all files, source by source,
4. group_vars/<group> files, source by source and within a source in the order of step 2,
5. the host's own vars from the sources,
6. host_vars/<host> files, source by source.

Note what this order implies (and Ansible does): a group_vars/all.yml file beats a `[rack:vars]`
section. Names Ansible sets itself (inventory_hostname, group_names, ...) are left out, as
`ansible-inventory` leaves them out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from fleetfix.inventory.model import Group, Host, Inventory

# ansible.constants.INTERNAL_STATIC_VARS: magic names ansible-inventory never shows.
INTERNAL_VARS = frozenset(
    {
        "ansible_async_path",
        "ansible_collection_name",
        "ansible_config_file",
        "ansible_dependent_role_names",
        "ansible_diff_mode",
        "ansible_facts",
        "ansible_forks",
        "ansible_inventory_sources",
        "ansible_limit",
        "ansible_play_batch",
        "ansible_play_hosts",
        "ansible_play_hosts_all",
        "ansible_play_role_names",
        "ansible_playbook_python",
        "ansible_role_name",
        "ansible_role_names",
        "ansible_run_tags",
        "ansible_skip_tags",
        "ansible_verbosity",
        "ansible_version",
        "group_names",
        "groups",
        "hostvars",
        "inventory_dir",
        "inventory_file",
        "inventory_hostname",
        "inventory_hostname_short",
        "play_hosts",
        "playbook_dir",
        "role_name",
        "role_names",
        "role_path",
        "role_uuid",
    }
)


def merge_order(inventory: Inventory, host: Host) -> list[Group]:
    """The host's groups other than `all`, lowest precedence first."""
    groups = [inventory.groups[name] for name in host.groups if name != "all"]
    return sorted(groups, key=lambda group: (group.depth, group.priority, group.name))


def host_vars(inventory: Inventory, host: Host) -> dict[str, Any]:
    """Every variable of `host`, merged (see the module docstring for the order)."""
    merged = dict(inventory.groups_vars_of(host))
    merged.update(host.vars)
    for directory in inventory.vars_dirs:
        merged.update(directory.host_vars.get(host.name, {}))
    return _without_internal(merged)


def groups_vars(inventory: Inventory, host: Host) -> dict[str, Any]:
    """Layers 1 to 4 for `host`: what its groups give it (the same for every host of the
    same groups)."""
    groups = merge_order(inventory, host)
    merged: dict[str, Any] = dict(inventory.groups["all"].vars)
    for group in groups:
        merged.update(group.vars)
    for directory in inventory.vars_dirs:
        merged.update(directory.group_vars.get("all", {}))
    for directory in inventory.vars_dirs:
        for group in groups:
            merged.update(directory.group_vars.get(group.name, {}))
    return merged


def group_vars(inventory: Inventory, group: Group) -> dict[str, Any]:
    """The group's source vars, then its group_vars files; priority shown when not default."""
    merged: dict[str, Any] = dict(group.vars)
    for directory in inventory.vars_dirs:
        merged.update(directory.group_vars.get(group.name, {}))
    if group.priority != 1:
        merged["ansible_group_priority"] = group.priority
    return _without_internal(merged)


def _without_internal(merged: dict[str, Any]) -> dict[str, Any]:
    for name in INTERNAL_VARS.intersection(merged):
        del merged[name]
    return merged
