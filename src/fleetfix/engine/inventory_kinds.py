"""add_host, group_by and meta: refresh_inventory: change the run's inventory."""

from __future__ import annotations

from typing import Any

from fleetfix.engine.hoststep import HostStep, Outcome
from fleetfix.engine.runhosts import add_host, group_by, refresh
from fleetfix.errors import FleetfixError
from fleetfix.inventory.model import Inventory


async def add_host_step(hs: HostStep) -> Outcome:
    """Ansible's add_host: the host (and its groups and vars) exist for the later plays.
    The play runner runs it once, on the first host, as Ansible bypasses the host loop."""
    args = hs.step.args
    name = str(hs.render(args["name"])).strip()
    groups = _names(hs.render(list(args["groups"])))
    host_vars: dict[str, Any] = hs.render(dict(args["vars"]))
    if not name:
        return Outcome(failed=True, message="add_host: the name rendered empty")
    refused = add_host(hs.ctx, name, groups, host_vars)
    if refused is not None:
        return Outcome(failed=True, message=refused)
    added = {"host_name": name, "groups": groups, "host_vars": host_vars}
    return Outcome(changed=True, data={"add_host": added}, registers_command=False)


async def group_by_step(hs: HostStep) -> Outcome:
    """Ansible's group_by: this host joins the group `key` names (spaces become dashes);
    changed, as ansible-core reports it."""
    key = str(hs.render(hs.step.args["key"])).strip().replace(" ", "-")
    parents = [p.replace(" ", "-") for p in _names(hs.render(list(hs.step.args["parents"])))]
    if not key:
        return Outcome(failed=True, message="group_by: the key rendered empty")
    refused = group_by(hs.ctx, hs.state.name, key, parents)
    if refused is not None:
        return Outcome(failed=True, message=refused)
    data = {"add_group": key, "parent_groups": parents}
    return Outcome(changed=True, data=data, registers_command=False)


def refresh_inventory(hs: HostStep, quiet: dict[str, Any]) -> Outcome:
    """Ansible's meta: refresh_inventory, run once for the batch: the inventory's sources read
    again (with the group_vars/host_vars next to the playbook), add_host's hosts and
    group_by's groups kept; a host no source lists now leaves the play (it ends there), one
    that is new joins the plays after this one."""
    loader = hs.ctx.options.inventory_loader
    if loader is None:
        return Outcome(failed=True, message="refresh_inventory: this run cannot read its inventory")
    try:
        fresh = loader()
    except FleetfixError as exc:
        return Outcome(failed=True, message=f"refresh_inventory: {exc}")
    if not isinstance(fresh, Inventory):
        return Outcome(failed=True, message="refresh_inventory: not an inventory the run can use")
    from fleetfix.engine import with_playbook_vars  # noqa: PLC0415 (engine imports the kinds)

    fresh = with_playbook_vars(fresh, hs.env.scope.playbook_dir)
    assert isinstance(fresh, Inventory)
    for name in refresh(hs.ctx, fresh):
        hs.ctx.hosts[name].ended = True  # out of the inventory: out of the play
    return Outcome(message="inventory successfully refreshed", data=quiet)


def _names(rendered: list[Any]) -> list[str]:
    """Group names from rendered values: a list, or strings of comma-separated names."""
    names: list[str] = []
    for value in rendered:
        items = value if isinstance(value, list | tuple) else str(value).split(",")
        names.extend(str(item).strip() for item in items if str(item).strip())
    return list(dict.fromkeys(names))
