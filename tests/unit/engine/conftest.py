"""Run YAML playbooks through the real loader, inventory and engine over the fake transport."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from fleetfix.actions import action_registry
from fleetfix.actions.base import Action
from fleetfix.engine import Engine, RunOptions
from fleetfix.events import Event, EventBus, EventSink
from fleetfix.inventory import load_inventory
from fleetfix.playbook.conditions import Templar
from fleetfix.playbook.loader import StepCatalog, load_playbook
from fleetfix.probes import probe_registry
from fleetfix.probes.base import Probe
from fleetfix.results import RunResult
from fleetfix.secrets import Redactor
from fleetfix.transport.base import ConnectionSpec
from fleetfix.transport.fake import FakeTransport


@dataclass
class Run:
    result: RunResult
    events: list[Event] = field(default_factory=list)

    def recap(self, host: str) -> dict[str, int]:
        return self.result.stats[host].as_dict()

    def statuses(self, host: str) -> list[tuple[str, str]]:
        return [(r.step, r.status.value) for r in self.result.results if r.host == host]


Runner = Callable[..., Coroutine[Any, Any, Run]]


@pytest.fixture
def fake() -> FakeTransport:
    return FakeTransport()


@pytest.fixture
def run_playbook(tmp_path: Path, fake: FakeTransport) -> Runner:
    """run_playbook(yaml, hosts=[...] or inventory=INI, probes=(), actions=(), subscribe=sink,
    secrets=(values the run masks), **options)."""

    async def run(
        playbook: str,
        *,
        hosts: list[str] | None = None,
        inventory: str | None = None,
        probes: tuple[Probe[Any], ...] = (),
        actions: tuple[Action, ...] = (),
        subscribe: EventSink | None = None,
        secrets: tuple[str, ...] = (),
        **options: Any,
    ) -> Run:
        book = tmp_path / "playbook.yml"
        book.write_text(textwrap.dedent(playbook))
        inv = tmp_path / "hosts.ini"
        inv.write_text(
            textwrap.dedent(inventory) if inventory else "[gpu]\n" + "\n".join(hosts or []) + "\n"
        )
        probe_reg = probe_registry(probes)
        action_reg = action_registry(actions)
        catalog = StepCatalog(
            probes={p.name: frozenset(p.params) for p in probe_reg},
            actions={a.name: frozenset(a.params) for a in action_reg},
        )
        loaded = load_playbook(book, catalog)
        inventory_obj = load_inventory([inv])
        events: list[Event] = []
        bus = EventBus(Redactor(secrets))
        if subscribe is not None:
            bus.subscribe(subscribe)  # e.g. a journal: it sees each event first
        bus.subscribe(events.append)
        engine = Engine(
            inventory=inventory_obj,
            transport=fake,
            templar=Templar(bus.redactor),
            spec_factory=lambda name, _vars: ConnectionSpec(name=name, address=name),
            probes=probe_reg,
            actions=action_reg,
            bus=bus,
            # No node leases over the fake unless a test asks (tests/unit/engine/test_node_lease.py)
            options=RunOptions(**{"reconnect_poll": 0.0, "node_lease_seconds": None, **options}),
        )
        result = await engine.run(loaded, inventory_obj.select)
        return Run(result, events)

    return run
