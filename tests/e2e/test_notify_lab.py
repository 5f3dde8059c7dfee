"""`fleetfix run --webhook` against the lab: the xid79 scenario's RMA node (gpu007) reaches a
receiver on 127.0.0.1 as a ticket whose GPUs are the lab's, and the run's end carries the
exit code the CLI returned; a webhook that fails is a warning, never a different exit code;
a run that loses its journal (PostgreSQL's sessions ended) still sends how it ended."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from fleetfix.lab.control import LabHandle
from tests.e2e.labrun import REPO, fleetfix_run, node_shell, nodes, run_argv, write_inventory
from tests.e2e.safety_support import reboots, started_run
from tests.lab.support import offline_fleet, running_lab
from tests.support import wait_until
from tests.support.postgres import PostgresServer
from tests.support.secrets_support import holding, journal_texts
from tests.support.webhook_receiver import Receiver
from tests.unit.metrics.promtext import parse, value

SECRET = "services/T0LAB/B0LAB/XXXXlabsecretXXXX"
DRAIN_WAIT_REBOOT = REPO / "tests" / "fixtures" / "playbooks" / "team" / "drain-wait-reboot.yml"


@dataclass
class Lab:
    handle: LabHandle
    inventory: Path
    workdir: Path


@pytest.fixture
def xid79_lab(tmp_path: Path) -> Iterator[Lab]:
    with running_lab("xid79", tmp_path / "lab", reboot_time=0.5) as handle:
        yield Lab(handle, write_inventory(handle, tmp_path / "lab.ini"), tmp_path)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    with Receiver() as running:
        yield running


def test_the_rma_node_and_the_run_end_reach_the_webhooks(
    xid79_lab: Lab, receiver: Receiver, tmp_path: Path
) -> None:
    receiver.answer_path("/gone", 404)
    done = fleetfix_run(
        "xid79.yml",
        xid79_lab.inventory,
        xid79_lab.workdir,
        "--webhook",
        receiver.url(f"/json/{SECRET}?token=t"),
        "--webhook",
        "slack:" + receiver.url(f"/slack/{SECRET}"),
        "--webhook",
        "json:" + receiver.url(f"/gone/{SECRET}"),
        "-e",
        "drain_wait=3s",  # gpu005's job outlives the drain: deferred, as in make demo
        "-e",
        "power_cycle=true",  # gpu007 gets its cold cycle through the lab's BMC, as in make demo
    )
    assert done.returncode == 2, done.output  # gpu007 left an RMA candidate, as in make demo
    bodies = receiver.bodies("/json/")
    assert [b["kind"] for b in bodies] == ["rma", "run_finished"], done.output
    rma, end = bodies
    assert end["exit_code"] == done.returncode and end["outcome"] == "host_failed"
    assert rma["node"] == "gpu007" and "RMA candidate: run the field diagnostic" in rma["reason"]
    truth = nodes(xid79_lab.handle.truth())["gpu007"]
    assert truth["slurm"]["reason"].startswith(rma["reason"])

    lab = {
        g.uuid: g.serial for g in offline_fleet("xid79", tmp_path / "built").nodes["gpu007"].gpus
    }
    assert {g["uuid"]: g["serial"] for g in rma["gpus"]} == lab
    [lost] = [g for g in rma["gpus"] if g["lost"]]
    assert lost["xids"] == [79] and [x["code"] for x in rma["xids"]] == [79]
    assert [t["action"] for t in rma["tried"]] == [
        "slurm_drain",
        "collect_evidence",
        "reboot",
        "power_cycle",
        "slurm_drain",
    ]
    assert len(rma["evidence"]) <= 2000 and "Xid 79" in rma["evidence"]

    slack = receiver.bodies("/slack/")
    assert [b["text"] for b in slack] == [
        "fleetfix: gpu007 is an RMA candidate",
        "fleetfix: run finished: host_failed (exit 2)",
    ]
    warnings = [line for line in done.stderr.splitlines() if line.startswith("WARNING: webhook")]
    assert warnings == [
        f"WARNING: webhook http://127.0.0.1:{receiver.port}: {what} not delivered (HTTP 404:"
        " no_service)"
        for what in ("rma notification for gpu007", "run_finished notification")
    ]
    assert SECRET not in done.stdout + done.stderr
    stored = journal_texts(xid79_lab.workdir / "j.sqlite")
    assert holding(stored, [SECRET]) == []  # a webhook URL is a credential: not in the journal
    assert any('"json:********"' in text for text in stored)  # the stored command line


def test_a_run_that_loses_its_journal_still_sends_its_end(
    xid79_lab: Lab, receiver: Receiver, postgres_server: PostgresServer, tmp_path: Path
) -> None:
    """The database's sessions are ended while gpu003 is drained and its reboot is next (as in
    test_two_controllers.py): the run stops, exit 6, and the webhook still hears how it
    ended, with why; the metrics file says 6 too."""
    dsn = postgres_server.fresh_database()
    gate, metrics = tmp_path / "gate", tmp_path / "fleetfix.prom"
    argv = run_argv(
        DRAIN_WAIT_REBOOT,
        xid79_lab.inventory,
        tmp_path / "unused.sqlite",
        *("--journal", dsn, "--limit", "gpu003", "-e", f"gate={gate}"),
        *("--webhook", receiver.url("/json"), "--metrics-file", str(metrics)),
    )
    with started_run(argv, tmp_path, "cut") as run:
        assert wait_until(lambda: "TASK [wait for the gate]" in run.output(), 120), run.output()
        assert postgres_server.terminate_sessions() >= 1
        node_shell(xid79_lab.handle, "gpu003", f"touch {gate}")
        code = run.wait(120)
        output = run.output()
    assert code == 6, output
    assert reboots(xid79_lab.handle.audit()).get("gpu003", 0) == 0  # it started nothing more
    [end] = [body for body in receiver.bodies("/json") if body["kind"] == "run_finished"]
    assert (end["outcome"], end["exit_code"]) == ("safety_abort", 6), end
    # where, without the password, and what the database said
    assert end["journal_lost"].startswith("journal postgresql://fleetfix@/"), end
    assert end["journal_lost"].endswith("terminating connection due to administrator command")
    password = urlsplit(dsn).password
    assert password and password not in json.dumps(end)
    assert end["host_counts"]["total"] == 1 and end["host_counts"]["changed"] == 1, end
    assert value(parse(metrics.read_text()), "fleetfix_run_outcome") == 6
