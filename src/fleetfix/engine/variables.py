"""Layering a host's variables in Ansible's precedence, plus the magic variables."""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, overload

from fleetfix.engine.context import HostState, RunContext
from fleetfix.playbook.conditions import OMIT, is_template
from fleetfix.playbook.model import Play, Step, StepKind
from fleetfix.playbook.roles import RoleRun
from fleetfix.results import Status, StepResult

_RAN = frozenset({Status.OK, Status.CHANGED, Status.FAILED, Status.IGNORED})


class HostVars(Mapping[str, Mapping[str, Any]]):
    """`hostvars[name]`: another host's inventory vars and registered facts, read lazily."""

    def __init__(self, ctx: RunContext) -> None:
        self._ctx = ctx

    def __getitem__(self, name: str) -> Mapping[str, Any]:
        state = self._ctx.hosts.get(name)
        if state is None:
            return self._ctx.inventory.host_vars(name)
        return {**state.base_vars, **state.gathered, **state.included_vars, **state.facts}

    def __iter__(self) -> Iterator[str]:
        return iter(self._ctx.hosts)

    def __len__(self) -> int:
        return len(self._ctx.hosts)


class ActiveHosts(Sequence[str]):
    """`ansible_play_hosts` and `ansible_play_batch`: the play's (batch's) hosts that have not
    failed, worked out only when a template reads it. Building the list for every step of
    every host was quadratic in the fleet size (6 million lookups at 1,000 hosts). A value a
    step renders is a plain list (engine.hoststep `plain_hosts`), as Ansible's is."""

    def __init__(self, ctx: RunContext, hosts: tuple[str, ...]) -> None:
        self._ctx = ctx
        self._hosts = hosts

    def _active(self) -> list[str]:
        return [h for h in self._hosts if self._ctx.host_state(h).active]

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...

    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        return self._active()[index]

    def __len__(self) -> int:
        return len(self._active())

    def __iter__(self) -> Iterator[str]:
        return iter(self._active())

    def __add__(self, other: Sequence[str]) -> list[str]:
        return [*self._active(), *other]

    def __radd__(self, other: Sequence[str]) -> list[str]:
        return [*other, *self._active()]

    def __eq__(self, other: object) -> bool:
        return list(self) == list(other) if isinstance(other, Sequence) else NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(self._active())


@dataclass(slots=True)
class RoleRuns:
    """Per host, the uses of roles it ran and ended in this play: ansible-core's
    Role._had_task_run and _completed (a host that ran a step of a role skips an equal use
    that does not allow duplicates) and meta: end_role (the host skips the rest of that use)."""

    _ran: dict[str, dict[str, set[object]]] = field(default_factory=dict)
    """host -> role identity -> the uses (RoleRun.use) in which a step ran on it."""
    _ended: dict[str, set[object]] = field(default_factory=dict)

    def ran(self, host: str, step: Step, result: StepResult) -> None:
        """A step's result on the host: a step of a role ran when it was ok, changed or
        failed (not skipped, not unreachable, not a meta step), as ansible-core's role_ran."""
        role = step.role
        if not isinstance(role, RoleRun) or step.kind is StepKind.META:
            return
        if result.status in _RAN and not result.data.get("unreachable"):
            self._ran.setdefault(host, {}).setdefault(role.identity, set()).add(role.use)

    def end(self, host: str, step: Step) -> bool:
        """meta: end_role on the host: the rest of the step's use of its role is skipped;
        False where the step is in no role."""
        role = step.role
        if not isinstance(role, RoleRun):
            return False
        self._ended.setdefault(host, set()).add(role.use)
        return True

    def again(self, host: str) -> None:
        """The host includes a role: a use it ended runs again when included again."""
        self._ended.pop(host, None)

    def passes(self, host: str, step: Step) -> bool:
        """Whether the host skips the step, without a word: its role's use was ended, or it
        ran an equal use before and this one does not allow duplicates."""
        role = step.role
        if not isinstance(role, RoleRun):
            return False
        if role.use in self._ended.get(host, ()):
            return True
        if not role.dedupe:
            return False
        uses = self._ran.get(host, {}).get(role.identity, set())
        return any(use is not role.use for use in uses)


@dataclass(frozen=True, slots=True)
class PlayScope:
    """Per-play facts shared by every host's variables."""

    play_vars: Mapping[str, Any]
    play_hosts: tuple[str, ...]
    batch: tuple[str, ...]
    groups: Mapping[str, list[str]]
    playbook_dir: str
    _templated: dict[str, frozenset[str]] = field(default_factory=dict, compare=False)
    _public: dict[str, tuple[dict[str, Any], dict[str, Any]]] = field(
        default_factory=dict, compare=False
    )
    """Per host: the defaults and vars of the roles it included with `public: true`."""
    roles: RoleRuns = field(default_factory=RoleRuns, compare=False)
    """The uses of roles each host ran or ended (deduplication and end_role)."""

    def expose(self, host: str, layers: tuple[Mapping[str, Any], Mapping[str, Any]]) -> None:
        """A public include_role ran on the host: its role's defaults and vars are the host's
        play variables from now on (ansible-core adds the role to the play's roles)."""
        defaults, role_vars = self._public.get(host, ({}, {}))
        self._public[host] = ({**defaults, **layers[0]}, {**role_vars, **layers[1]})

    def public_roles(self, play: Play, host: str) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
        """The public roles' defaults and vars the host sees: the play's (`roles:`,
        import_role, known at load) then the include_roles with `public: true` it ran.
        Defaults go below every other variable; vars above play vars and vars_files, below
        a step's own role's (engine/steps.py `_variables`)."""
        included = self._public.get(host)
        if included is None:
            return play.role_defaults, play.role_vars
        return {**play.role_defaults, **included[0]}, {**play.role_vars, **included[1]}

    def templated_play_vars(self, host: str) -> frozenset[str]:
        """The names of the host's play vars that are still templates (the play's start could
        not render them: they read facts gathered since), found once per host and batch."""
        found = self._templated.get(host)
        if found is None:
            values = self.play_vars.get(host, {})
            found = frozenset(name for name, value in values.items() if is_template(value))
            self._templated[host] = found
        return found


def compose(
    ctx: RunContext,
    state: HostState,
    scope: PlayScope,
    step_vars: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """inventory < gathered facts < play vars/vars_files < block and step vars <
    registered/set_fact < extra vars: Ansible's precedence, where a set_fact or register
    outranks a task's `vars` (a set_fact in a loop sees the value it set for the item before,
    not the task's again) and a play's vars outrank gathered facts (Ansible's fact cache)."""
    # Ansible's defaults: ansible_host the host's name, ansible_facts empty until gathered
    variables: dict[str, Any] = {"ansible_host": state.name, "ansible_facts": {}}
    variables.update(state.base_vars)
    variables.update(state.gathered)  # gathered facts: above inventory, below play vars
    variables.update(scope.play_vars.get(state.name, {}))
    if step_vars:
        variables.update(step_vars)
    variables.update(state.included_vars)  # include_vars: above step vars, below set_fact
    variables.update(state.facts)
    variables.update(ctx.options.extra_vars)
    variables.update(_magic(ctx, state, scope))
    variables["vars"] = dict(variables)  # Ansible's (deprecated) `vars`: every variable by name
    return variables


def under_defaults(variables: dict[str, Any], defaults: Mapping[str, Any]) -> dict[str, Any]:
    """`variables` (compose's) with role defaults below them, in `vars` too."""
    if not defaults:
        return variables
    merged = {**defaults, **variables}
    everything = variables.get("vars")
    if isinstance(everything, dict):
        merged["vars"] = {**defaults, **everything}
    return merged


def _magic(ctx: RunContext, state: HostState, scope: PlayScope) -> dict[str, Any]:
    options = ctx.options
    batch = ActiveHosts(ctx, scope.batch)
    magic = {
        "inventory_hostname": state.name,
        "inventory_hostname_short": state.name.split(".", 1)[0],
        "group_names": ctx.inventory.groups_of(state.name),
        "groups": scope.groups,
        "hostvars": HostVars(ctx),
        "ansible_check_mode": options.check,
        "ansible_diff_mode": options.diff,
        "ansible_forks": options.forks,
        "ansible_verbosity": options.verbosity,
        # Ansible's are the --tags/--skip-tags given, ['all'] and [] by default (in a set's
        # order: sorted here, so a run prints them the same way every time).
        "ansible_run_tags": sorted(options.tags) or ["all"],
        "ansible_skip_tags": sorted(options.skip_tags),
        "ansible_play_hosts": ActiveHosts(ctx, scope.play_hosts),
        "ansible_play_hosts_all": scope.play_hosts,  # a list once rendered (plain_hosts)
        "ansible_play_batch": batch,
        "play_hosts": batch,  # Ansible's deprecated name for ansible_play_batch
        "playbook_dir": scope.playbook_dir,
        "ansible_playbook_python": sys.executable,  # the controller's Python, as Ansible's
        "omit": OMIT,  # a module argument rendered to it is left out (modules/registry.py)
    }
    if options.limit:
        magic["ansible_limit"] = options.limit
    return magic
