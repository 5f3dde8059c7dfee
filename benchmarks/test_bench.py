"""Tests of the benchmark's own parts: figures read right, workloads equal, a tiny run completes.

.venv/bin/pytest benchmarks/test_bench.py -q
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from bench_inventory import inventory_text, time_parse
from contenders import venv_bin
from measure import parse_time_report, recap_outcome
from workload import (
    PROBE_NAMES,
    ansible_playbook,
    first_hosts,
    fleetfix_playbook,
    lab_inventory,
    probe_commands,
)

from fleetfix.inventory import load_inventory
from fleetfix.lab.control import LabHandle, start_lab

HERE = Path(__file__).parent
GNU_TIME = """\
\tCommand being timed: "fleetfix run pb.yml"
\tUser time (seconds): 8.33
\tSystem time (seconds): 0.34
\tPercent of CPU this job got: 38%
\tElapsed (wall clock) time (h:mm:ss or m:ss): 1:02:22.74
\tMaximum resident set size (kbytes): 137232
\tExit status: 2
"""


def test_gnu_time_report_is_read() -> None:
    report = parse_time_report(GNU_TIME)
    assert report.wall_s == pytest.approx(3600 + 2 * 60 + 22.74)
    assert (report.user_s, report.system_s) == (8.33, 0.34)
    assert (report.max_rss_kb, report.exit_status) == (137232, 2)


def test_gnu_time_report_without_rss_is_refused() -> None:
    with pytest.raises(ValueError, match="Maximum resident"):
        parse_time_report(GNU_TIME.replace("Maximum", "Minimum"))


def _recap(failed: int) -> str:
    return (
        "PLAY RECAP\n"
        "gpu0001 : ok=5 changed=0 unreachable=0 failed=0 skipped=0 rescued=0 ignored=0\n"
        f"gpu0002 : ok={5 - failed} changed=5 unreachable=0 failed={failed} skipped=0\n"
    )


def test_recap_counts_every_host() -> None:
    assert recap_outcome(_recap(0), hosts=2, tasks=5).startswith("ok: 10/10 tasks ok")
    assert recap_outcome(_recap(1), hosts=2, tasks=5).startswith("CHECK: 9/10 tasks ok, 1 failed")
    assert recap_outcome(_recap(0), hosts=3, tasks=5).startswith("CHECK")


def test_generated_inventory_has_every_host_and_its_topology(tmp_path: Path) -> None:
    path = tmp_path / "big.ini"
    path.write_text(inventory_text(10_000), encoding="utf-8")
    timing = time_parse(path, repeats=1)
    assert (timing.hosts, len(timing.seconds)) == (10_000, 1)
    inventory = load_inventory([path])
    assert inventory.host_vars("gpu05000")["rack"] == "rack-200"
    assert inventory.host_vars("gpu05000")["leaf"] == "leaf-100"
    assert inventory.host_vars("gpu10000")["spine"] == "spine-020"
    assert sorted(inventory.groups_of("gpu00001")) == [
        "gpu_nodes",
        "leaf_001",
        "rack_001",
        "spine_001",
    ]


def test_generated_inventory_reads_the_same_in_ansible(tmp_path: Path) -> None:
    path = tmp_path / "small.ini"
    path.write_text(inventory_text(120), encoding="utf-8")
    done = subprocess.run(
        [str(venv_bin() / "ansible-inventory"), "-i", str(path), "--host", "gpu00077"],
        capture_output=True,
        text=True,
        check=True,
        env={"ANSIBLE_HOME": str(tmp_path / "ansible"), "PATH": "/usr/bin:/bin"},
    )
    assert json.loads(done.stdout) == load_inventory([path]).host_vars("gpu00077")


def test_both_playbooks_carry_the_same_five_commands(tmp_path: Path) -> None:
    commands = probe_commands()
    assert [c.probe for c in commands] == list(PROBE_NAMES)
    raw = yaml.safe_load(ansible_playbook(commands))[0]["tasks"]
    assert [t["raw"] for t in raw] == [c.command for c in commands]
    probes = yaml.safe_load(fleetfix_playbook())[0]["tasks"]
    assert [t["probe"] for t in probes] == list(PROBE_NAMES)
    path = tmp_path / "five.yml"
    path.write_text(fleetfix_playbook(), encoding="utf-8")
    done = subprocess.run(
        [str(venv_bin() / "fleetfix"), "validate", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture
def small_lab(tmp_path: Path) -> Iterator[LabHandle]:
    lab = start_lab("healthy-1000", tmp_path / "lab", port=0, nodes=4)
    try:
        yield lab
    finally:
        lab.stop()


def test_lab_inventory_drops_the_scenario_and_names_the_keys(small_lab: LabHandle) -> None:
    text = lab_inventory(small_lab)
    assert not [line for line in text.splitlines() if "fleetfix_lab_scenario" in line]
    path = small_lab.state_dir / "bench.ini"
    path.write_text(text, encoding="utf-8")
    found = load_inventory([path]).host_vars("gpu0003")
    assert found["ansible_host"] == small_lab.hosts["gpu0003"]
    assert found["ansible_port"] == small_lab.port
    assert found["ansible_ssh_private_key_file"] == str(small_lab.client_key)
    assert found["fleetfix_known_hosts"] == str(small_lab.known_hosts)
    assert list(first_hosts(small_lab, 2)) == ["gpu0001", "gpu0002"]


def test_bare_fan_out_runs_every_command(small_lab: LabHandle, tmp_path: Path) -> None:
    spec = {
        "addresses": list(small_lab.hosts.values()),
        "port": small_lab.port,
        "user": small_lab.user,
        "client_key": str(small_lab.client_key),
        "known_hosts": str(small_lab.known_hosts),
        "commands": ["hostname", "false", "nvidia-smi -L"],
    }
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(HERE / "bare_fanout.py"), str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    summary = json.loads(done.stdout)
    assert (summary["hosts"], summary["hosts_ok"], summary["commands_ok"]) == (4, 0, 8)
    assert done.returncode == 2


@pytest.mark.slow
def test_tiny_run_prints_a_row_per_contender() -> None:
    counts = ("--hosts", "3", "--ansible-hosts", "2", "--inventory-hosts", "100")
    done = subprocess.run(
        [sys.executable, str(HERE / "run.py"), *counts],
        capture_output=True,
        check=False,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    for line in ("bare asyncssh: ok: 15/15", "fleetfix: ok: 15/15", "ansible-playbook: ok: 10/10"):
        assert line in done.stdout
    assert "fleetfix/ansible wall per host" in done.stdout
