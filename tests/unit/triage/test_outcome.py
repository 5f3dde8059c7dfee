"""`fleetfix triage`'s exit code and JSON from a triage's findings (cli/triage_cmd.py)."""

from __future__ import annotations

import json

from fleetfix.cli.triage_cmd import as_json, outcome
from fleetfix.results import Outcome
from fleetfix.triage.run import Triage
from fleetfix.triage.suspects import NodeReading, rank

JOB = {"job_id": "48213", "state": "RUNNING", "nodes": ["gpu001", "gpu002"]}


def _triage(readings: dict[str, NodeReading]) -> Triage:
    return Triage(
        job=JOB,
        slurm_host="gpu001",
        hosts=tuple(readings),
        missing=(),
        readings=readings,
        suspects=tuple(rank(readings)),
    )


def test_no_suspect_exits_0_an_unreachable_node_4() -> None:
    calm = {"gpu001": NodeReading({}, {}), "gpu002": NodeReading({}, {})}
    assert outcome(_triage(calm)) is Outcome.OK
    down = {**calm, "gpu002": NodeReading({}, {}, unreachable="connection refused")}
    found = _triage(down)
    assert outcome(found) is Outcome.UNREACHABLE
    data = json.loads(json.dumps(as_json(found, "lab.ini"), default=str))
    (suspect,) = data["suspects"]
    assert (suspect["kind"], suspect["target"], suspect["score"]) == ("node", "gpu002", 90)
    assert data["remediation"] == ["fleetfix run playbooks/recover.yml -i lab.ini --limit gpu002"]
