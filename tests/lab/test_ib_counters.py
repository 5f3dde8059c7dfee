"""The lab's InfiniBand port counters over real SSH: the ib_counters probe's own command reads
each node's sysfs tree, a planted `ib_symbol_errors` port rises between two reads and no other
port does, `perfquery` agrees, and a node without InfiniBand has no counters."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from fleetfix.errors import LabError
from fleetfix.lab import ib_counters, sandbox
from fleetfix.lab.cli import fault_text
from fleetfix.lab.control import LabHandle
from fleetfix.lab.sandbox import SandboxMode
from fleetfix.lab.scenario_file import load_scenario
from fleetfix.lab.state import FleetState, NodePaths
from fleetfix.probes.base import verdict
from fleetfix.probes.ib_counters import PROBE, IbCountersFacts, deltas
from tests.lab.support import call, faults, offline_fleet, run, running_lab

SCENARIO = """\
name: ib-errors
fleet: {spines: 1, leaves: 1, racks: 1, nodes_per_rack: 3, node_name: "ib{:02d}"}
ssh: {port: 0}
nodes:
  ib01:
    ib_symbol_errors: {port: 3, per_read: 50}
  ib03:
    without: [ib]
"""


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LabHandle]:
    scenario = tmp_path_factory.mktemp("scenario") / "ib-errors.yml"
    scenario.write_text(SCENARIO, encoding="utf-8")
    with running_lab(str(scenario), tmp_path_factory.mktemp("state")) as handle:
        yield handle


async def _read(lab: LabHandle, node: str) -> IbCountersFacts:
    done = await run(lab, node, PROBE.command({}))
    assert done.rc == 0, done
    facts = verdict(PROBE, done.stdout).facts
    assert isinstance(facts, IbCountersFacts), done.stdout[-2000:]
    return facts


async def test_the_planted_port_rises_between_two_reads_and_no_other(lab: LabHandle) -> None:
    first = await _read(lab, "ib01")
    second = await _read(lab, "ib01")
    assert [p.ca for p in second.ports] == [f"mlx5_{n}" for n in range(8)]
    assert len(second.ports[0].counters) == 21 and second.complete
    planted = first.port("mlx5_3", 1)
    assert planted is not None and planted.counters["symbol_error"] > 0
    changed = deltas(first, second)
    rising = {(p.ca, c.counter): c.rise for p in changed.ports for c in p.risen()}
    errors = {key: rise for key, rise in rising.items() if "data" not in key[1]}
    errors = {key: rise for key, rise in errors.items() if "packets" not in key[1]}
    assert errors == {("mlx5_3", "symbol_error"): 50}
    assert not any(p.reset for p in changed.ports)


async def test_a_healthy_node_has_clean_counters(lab: LabHandle) -> None:
    facts = await _read(lab, "ib02")
    assert {p.counters["symbol_error"] for p in facts.ports} == {0}
    assert {p.counters["link_downed"] for p in facts.ports} == {0}


async def test_perfquery_reads_the_same_counters(lab: LabHandle) -> None:
    done = await run(lab, "ib01", "perfquery -x -C mlx5_3 -P 1; perfquery -C mlx5_3 -P 1")
    assert done.rc == 0, done
    assert done.stdout.startswith("# Port extended counters: Lid ")
    facts = PROBE.read(done.stdout)
    (port,) = facts.ports
    assert port.counters["symbol_error"] > 0 and port.counters["symbol_error"] % 50 == 0
    assert port.other == {"QP1Dropped": 0}
    assert port.saturated == () and facts.complete


async def test_a_node_without_infiniband_has_no_counters(lab: LabHandle) -> None:
    done = await run(lab, "ib03", PROBE.command({}))
    assert (done.rc, done.stdout) == (0, "### fleetfix not-installed perfquery\n")
    assert verdict(PROBE, done.stdout).absent == "perfquery"


async def test_truth_names_the_planted_port(lab: LabHandle) -> None:
    truth = lab.truth()
    assert faults(truth, "ib01", "ib_symbol_errors") == [
        {"kind": "ib_symbol_errors", "recovery": "never", "value": 3}
    ]
    assert faults(truth, "ib02", "ib_symbol_errors") == []
    assert fault_text(faults(truth, "ib01", "ib_symbol_errors")[0]) == "ib_symbol_errors mlx5_3"


def test_a_bad_port_in_the_scenario_is_refused(tmp_path_factory: pytest.TempPathFactory) -> None:
    path = tmp_path_factory.mktemp("bad") / "bad.yml"
    path.write_text(SCENARIO.replace("port: 3", "port: mlx5_9"), encoding="utf-8")
    with pytest.raises(LabError, match=r"ib_symbol_errors: expected mlx5_0\.\.mlx5_7"):
        load_scenario(str(path))


def test_perfquery_refuses_a_port_the_node_lacks(tmp_path_factory: pytest.TempPathFactory) -> None:
    fleet: FleetState = offline_fleet("xid79", tmp_path_factory.mktemp("offline"))
    reply = call(fleet, "gpu001", "perfquery", "-x", "-C", "mlx5_9", "-P", "1")
    assert reply.rc == 255 and "Failed to open 'mlx5_9' port '1'" in reply.stderr


@pytest.mark.parametrize("machine_has_ib", [True, False])
def test_the_node_tree_replaces_the_machines(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    machine_has_ib: bool,
) -> None:
    """Namespace mode mounts the node's tree over a real /sys/class/infiniband, or rewrites the
    path where the machine has none; fallback mode always rewrites; other commands untouched."""
    monkeypatch.setattr(sandbox, "_machine_has_infiniband", lambda: machine_has_ib)
    paths = NodePaths(tmp_path_factory.mktemp("node"))
    tree = str(ib_counters.directory(paths))
    command = "cd /sys/class/infiniband && ls"
    started = sandbox.launch(SandboxMode.NAMESPACE, paths, "ib01", command)
    if machine_has_ib:
        assert (tree, "/sys/class/infiniband") in started.mounts
        assert started.argv[2] == command
    else:
        assert all(target != "/sys/class/infiniband" for _, target in started.mounts)
        assert started.argv[2] == f"cd {tree} && ls"
    fallback = sandbox.launch(SandboxMode.FALLBACK, paths, "ib01", command)
    assert fallback.argv[2] == f"cd {tree} && ls"
    plain = sandbox.launch(SandboxMode.NAMESPACE, paths, "ib01", "ibstat")
    assert all(target != "/sys/class/infiniband" for _, target in plain.mounts)
