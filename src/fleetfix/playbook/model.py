"""The playbook as frozen values, each carrying the source position it came from.

The loader (loader.py) builds these from YAML and validates everything; the engine only
reads them. Templated strings stay strings here: they are rendered per host at run time.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from fleetfix.errors import SourcePosition

if TYPE_CHECKING:
    from fleetfix.playbook.yamlpos import Node

NO_POSITION = SourcePosition("<none>", 0, 0)


class StepKind(enum.StrEnum):
    """What a step does. Probe and debug/assert/set_fact/fail are read-only."""

    PROBE = "probe"  # read-only tool + parser; always runs, also in --check
    ACTION = "action"  # mutating GPU-ops action; planned, not run, in --check
    SHELL = "shell"  # raw shell command (mutating unless check_mode: false says otherwise)
    COMMAND = "command"  # raw command, no shell features (argv quoted for the remote shell)
    BLOCK = "block"  # block/rescue/always
    DEBUG = "debug"  # print msg or var
    SET_FACT = "set_fact"  # set host variables
    ASSERT = "assert"  # fail unless every `that` condition holds
    FAIL = "fail"  # fail with msg
    META = "meta"  # flush_handlers, end_host, end_batch, end_play, noop
    ADD_HOST = "add_host"  # add a host (and its groups) to the run's inventory; runs once
    GROUP_BY = "group_by"  # put each host in a group named by a template
    MODULE = "module"  # an ansible.builtin module run natively (fleetfix/modules/)
    INCLUDE_TASKS = "include_tasks"  # a task file, included per host at run time
    INCLUDE_ROLE = "include_role"  # a role's tasks, included per host at run time


@dataclass(frozen=True, slots=True)
class Duration:
    """A time span given as seconds or '15m' / '90s' / '2h'."""

    seconds: float


@dataclass(frozen=True, slots=True)
class LoopControl:
    """`loop_control:`: the names an item is seen under, its label, the pause between items."""

    loop_var: str = "item"
    index_var: str | None = None
    label: str | None = None  # a template, rendered per item; None shows the item itself
    pause: float = 0.0
    extended: bool = False  # ansible_loop: index, first, last, length, previtem, ...
    extended_allitems: bool = True  # ansible_loop.allitems too
    break_when: tuple[str, ...] = ()  # conditions (all must hold) that end the loop after an item


@dataclass(frozen=True, slots=True)
class RoleInfo:
    """The role a step comes from: its name (the banner's `role : step`), its directory (its
    files/ and templates/ come first for copy, template and lookup('file')) and its defaults,
    the lowest-precedence variables, rendered per host where nothing else sets them."""

    name: str
    path: str
    defaults: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Step:
    """One task. `args` holds the kind's own arguments (e.g. shell: {'cmd': ...},
    probe: {'name': 'nvidia_smi', 'params': {...}}, action: {'name': ..., 'params': ...})."""

    kind: StepKind
    name: str
    args: Mapping[str, Any] = field(default_factory=dict)
    position: SourcePosition = NO_POSITION
    when: tuple[str, ...] = ()
    register: str | None = None
    until: tuple[str, ...] = ()
    retries: int | None = None  # None: Ansible's default (3) applies when `until` is set
    delay: float = 5.0
    changed_when: tuple[str, ...] | None = None  # None: the kind decides; () never happens
    failed_when: tuple[str, ...] | None = None
    ignore_errors: bool = False
    ignore_unreachable: bool = False
    any_errors_fatal: bool | None = None  # None: the block's, else the play's
    diff: bool | None = None  # accepted; fleetfix prints no per-step diffs (decisions.md)
    timeout: float | None = None  # None: the run's default command timeout
    tags: frozenset[str] = frozenset()
    check_mode: bool | None = None  # True: always dry; False: run even in --check
    notify: tuple[str, ...] = ()
    run_once: bool | str = False  # a str: a template, rendered for the turn's first host
    delegate_to: str | None = None
    become: bool | None = None
    become_user: str | None = None
    environment: Mapping[str, str] = field(default_factory=dict)
    no_log: bool = False
    vars: Mapping[str, Any] = field(default_factory=dict)
    listen: tuple[str, ...] = ()  # handlers only
    # block/rescue/always (kind BLOCK only)
    block: tuple[Step, ...] = ()
    rescue: tuple[Step, ...] = ()
    always: tuple[Step, ...] = ()
    # fleetfix keywords
    verify: tuple[Step, ...] = ()  # probes/asserts re-checked after an action
    escalate: tuple[Step, ...] = ()  # ladder of actions tried in order until verify passes
    expect_unreachable: Duration | None = None
    cooldown: Duration | None = None
    max_attempts: int | None = None
    # loop / with_items / with_list: a list, or a template rendering to one (per host)
    loop: Any = None  # None: the step runs once
    loop_flatten: bool = False  # with_items flattens nested lists one level
    loop_control: LoopControl = LoopControl()
    item_key: str = ""  # set by the engine on the copy of a step that runs one loop item
    via: str = ""  # the import_tasks it came through: "site.yml:9:7>" (outermost first)
    role: RoleInfo | None = None  # the role it comes from (roles:, import_role)

    @property
    def key(self) -> str:
        """Where the step stands (file:line:col, after the imports it came through), plus its
        loop item: the journal's key for a host-step, stable across runs, so a resumed run
        finds each item's verdict and intent; a file imported twice has two sets of keys."""
        place = f"{self.via}{self.position}"
        return f"{place}[{self.item_key}]" if self.item_key else place


@dataclass(frozen=True, slots=True)
class Play:
    """One play: which hosts, how to batch them, what steps to run."""

    name: str
    hosts: str
    position: SourcePosition = NO_POSITION
    vars: Mapping[str, Any] = field(default_factory=dict)
    vars_files: tuple[str | tuple[str, ...], ...] = ()  # a tuple: alternatives, first found
    serial: tuple[int | str, ...] = ()  # () means all hosts in one batch
    max_fail_percentage: float | None = None
    any_errors_fatal: bool = False
    order: str = "inventory"  # inventory, reverse_inventory, sorted, reverse_sorted, shuffle
    strategy: str = "linear"  # linear, free
    gather_facts: bool | None = None
    """None: not written (Ansible's DEFAULT_GATHERING decides: facts/step.py)."""
    gather_subset: tuple[str, ...] = ()  # () gathers Ansible's default, all
    gather_timeout: float | None = None  # None: the run's command timeout
    become: bool = False
    become_user: str | None = None
    tags: frozenset[str] = frozenset()
    pre_tasks: tuple[Step, ...] = ()
    tasks: tuple[Step, ...] = ()
    post_tasks: tuple[Step, ...] = ()
    handlers: tuple[Step, ...] = ()
    max_unavailable_per: Mapping[str, int] = field(default_factory=dict)
    environment: Mapping[str, str] = field(default_factory=dict)
    timeout: float | None = None
    check_mode: bool | None = None
    """True: every step runs as under --check; False: as without it (a step's own wins)."""
    force_handlers: bool | None = None
    """Notified handlers run on hosts that failed too (None: the run's --force-handlers)."""
    role_defaults: Mapping[str, Any] = field(default_factory=dict)
    role_vars: Mapping[str, Any] = field(default_factory=dict)
    """The public roles' defaults and vars (`roles:`, import_role): every step's (roles.py)."""
    templated: Mapping[str, Node] = field(default_factory=dict)
    """Keywords written as templates (hosts, serial, ...): their nodes, rendered before the
    play runs (playbook/playkeywords.py); the field keeps its default (hosts: the template)."""


@dataclass(frozen=True, slots=True)
class Playbook:
    """A whole playbook file: its plays in order."""

    path: str
    plays: tuple[Play, ...]


def handler_search_order(handlers: tuple[Step, ...] | list[Step]) -> list[int]:
    """The places of `handlers` in the order ansible-core 2.19's search_handlers_by_notification
    looks at them: its handler blocks last to first, each block's handlers first to last. A
    block is a run of handlers from one source (the play's handlers:, one role's handlers/),
    so within one source the first handler of a name wins, and across sources the last."""
    runs: list[list[int]] = []
    source: object = object()
    for index, handler in enumerate(handlers):
        own = None if handler.role is None else (handler.role.name, handler.role.path)
        if not runs or own != source:
            runs.append([])
            source = own
        runs[-1].append(index)
    return [index for run in reversed(runs) for index in run]
