"""The journal of a real run costs what it must: the benchmark's five probes on 20 lab nodes
(healthy-1000), each fact set and each output stored once, at most 40 KB per host on disk, and
`fleetfix report` and `fleetfix history` still show every step from it."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

import pytest

from fleetfix.journal import Journal
from fleetfix.journal.codec import EXCERPT
from fleetfix.results import PARSED_EXCERPT
from tests.e2e.labrun import Run, fleetfix_run, run_env, write_inventory
from tests.lab.support import running_lab

HOSTS = 20
PROBES = ("nvidia_smi", "xid", "gpu_processes", "shm", "services")
MAX_BYTES_PER_HOST = 40 * 1024
FIVE_PROBES = "\n".join(
    [
        "- name: five probes (the benchmark workload)",
        "  hosts: all",
        "  gather_facts: false",
        "  tasks:",
        *(f"    - {{name: probe {name}, probe: {name}}}" for name in PROBES),
    ]
)


@dataclass(frozen=True, slots=True)
class JournaledRun:
    run: Run
    run_id: str
    journal: Path
    hosts: list[str]
    workdir: Path


@pytest.fixture(scope="module")
def journaled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[JournaledRun]:
    base = tmp_path_factory.mktemp("journal-size")
    with running_lab("healthy-1000", base / "lab") as lab:
        inventory = write_inventory(lab, base / "lab.ini")
        playbook = base / "five-probes.yml"
        playbook.write_text(FIVE_PROBES + "\n")
        hosts = sorted(lab.hosts)[:HOSTS]
        run = fleetfix_run(playbook, inventory, base, "--limit", ",".join(hosts))
    assert run.returncode == 0, run.output
    journal = base / "j.sqlite"
    with closing(sqlite3.connect(journal)) as db:
        (run_id,) = db.execute("SELECT run_id FROM runs").fetchone()
    yield JournaledRun(run, str(run_id), journal, hosts, base)


def query(path: Path, sql: str) -> list[tuple[object, ...]]:
    with closing(sqlite3.connect(path)) as db:
        return db.execute(sql).fetchall()


def test_the_journal_costs_at_most_40_kb_per_host(journaled: JournaledRun) -> None:
    path = journaled.journal
    with closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    wal = path.with_name(path.name + "-wal")
    size = path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)
    per_host = size / HOSTS
    assert per_host <= MAX_BYTES_PER_HOST, f"{per_host / 1024:.1f} KB per host"


def test_facts_are_stored_once(journaled: JournaledRun) -> None:
    path = journaled.journal
    # Five step rows and five command rows per host, one of each per probe.
    assert query(path, "SELECT count(*) FROM steps") == [(HOSTS * len(PROBES),)]
    assert query(path, "SELECT count(*) FROM commands") == [(HOSTS * len(PROBES),)]
    # No event repeats a fact set or an output: they refer to their row.
    repeated = query(
        path,
        "SELECT type FROM events WHERE instr(body, '\"facts\"') OR instr(body, 'nvidia_smi_log')"
        " OR instr(body, '\"stdout\"')",
    )
    assert repeated == []
    # nvidia-smi's output once, as a bounded excerpt that knows how long the output was.
    longest = query(path, "SELECT max(length(stdout)), max(stdout_size) FROM commands")
    assert longest[0][0] is not None and int(str(longest[0][0])) <= EXCERPT
    assert int(str(longest[0][1])) > EXCERPT  # nvidia-smi -q -x is longer: it was cut
    # Read into facts, it keeps the shorter excerpt: the facts are the evidence.
    smi = query(path, "SELECT max(length(stdout)) FROM commands WHERE command LIKE '%-q -x%'")
    assert smi[0][0] is not None and int(str(smi[0][0])) <= PARSED_EXCERPT
    journal = Journal(path)
    try:
        steps = journal.step_rows(journaled.run_id)
    finally:
        journal.close()
    facts = {(row["host"], row["step"]): json.loads(row["data"])["facts"] for row in steps}
    smi = facts[(journaled.hosts[0], "probe nvidia_smi")]
    assert smi["gpus"] and len(smi["gpus"]) == 8


def test_report_and_history_read_every_step_from_the_journal(journaled: JournaledRun) -> None:
    report = journaled.workdir / "again.json"
    argv = [sys.executable, "-m", "fleetfix"]
    journal = ["--journal", str(journaled.journal)]
    done = subprocess.run(
        [*argv, "report", journaled.run_id, *journal, "--report", str(report), "--report-steps"],
        capture_output=True,
        text=True,
        env=run_env(),
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    hosts = {host["name"]: host for host in json.loads(report.read_text())["hosts"]}
    assert sorted(hosts) == journaled.hosts
    for name, host in hosts.items():
        steps = [(step["step"], step["status"]) for step in host["steps"]]
        assert steps == [(f"probe {probe}", "ok") for probe in PROBES], name
        smi = host["steps"][0]["commands"][0]
        assert "nvidia-smi" in smi["command"] and "</nvidia_smi_log>" in smi["stdout"]
    listed = subprocess.run(
        [*argv, "history", *journal],
        capture_output=True,
        text=True,
        env=run_env(),
        check=False,
        timeout=60,
    )
    assert listed.returncode == 0, listed.stderr
    (line,) = [row for row in listed.stdout.splitlines() if row.startswith(journaled.run_id)]
    assert line.split()[3:5] == ["0", str(HOSTS)]  # exit 0, 20 hosts
