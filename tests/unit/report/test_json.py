"""The JSON report: valid against its published schema, compact or with steps, stable keys,
hostile text intact."""

from __future__ import annotations

import copy
import hashlib
import json
from typing import Any

import pytest

from fleetfix.report.collect import ReportCollector
from fleetfix.report.json import SCHEMA_ID, iso_time, render_json, report_to_dict, schema_path
from fleetfix.report.model import Report
from fleetfix.topology.graph import Topology
from fleetfix.verdicts import VerdictKind
from tests.unit.report.conftest import collect
from tests.unit.report.fleetrun import HOSTILE, SECRET, FleetRun, host_vars
from tests.unit.report.schema_check import SchemaError, validate


@pytest.fixture(scope="module")
def schema() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(schema_path().read_text(encoding="utf-8"))
    return loaded


def test_report_validates_against_the_schema(report: Report, schema: dict[str, Any]) -> None:
    data = json.loads(render_json(report))
    validate(data, schema)
    assert data["schema"] == SCHEMA_ID == schema["$id"]
    detailed = json.loads(render_json(report, steps=True))
    validate(detailed, schema)
    assert (data["detail"], detailed["detail"]) == ("compact", "steps")


def test_check_and_unfinished_reports_validate(
    check_report: Report, schema: dict[str, Any]
) -> None:
    validate(json.loads(render_json(check_report)), schema)
    validate(json.loads(render_json(check_report, steps=True)), schema)
    collector = ReportCollector()
    for event in FleetRun(finish=False, safety_stop="max_fail_percentage exceeded").build():
        collector(event)
    unfinished = json.loads(render_json(collector.model(Topology.from_hosts(host_vars()))))
    validate(unfinished, schema)
    assert unfinished["outcome"] == "incomplete"
    assert unfinished["exit_code"] is None and unfinished["finished"] is None


@pytest.mark.parametrize(
    ("mutate", "complaint"),
    [
        (lambda d: d.pop("hosts"), r"missing \['hosts'\]"),
        (lambda d: d.update(surprise=1), "unexpected key 'surprise'"),
        (lambda d: d["hosts"][0]["verdict"].update(kind="fine"), "not one of"),
        (lambda d: d.update(started="yesterday"), "does not match"),
        (lambda d: d["findings"][0].update(p_value=2.0), "> 1"),
        (lambda d: d["summary"]["recap"].update(ok=-1), "< 0"),
        (lambda d: d["hosts"][0]["steps"][0]["commands"][0].update(rc="0"), "not of type"),
    ],
)
def test_the_schema_catches_drift(
    report: Report, schema: dict[str, Any], mutate: Any, complaint: str
) -> None:
    data = copy.deepcopy(report_to_dict(report, steps=True))
    mutate(data)
    with pytest.raises(SchemaError, match=complaint):
        validate(data, schema)


def test_keys_and_order_are_stable(report: Report) -> None:
    data = json.loads(render_json(report))
    assert list(data) == [
        "schema", "run_id", "playbook", "started", "finished", "duration", "check", "outcome",
        "exit_code", "interrupted", "detail", "plays", "safety_stops", "summary", "hosts",
        "findings", "topology", "actions", "busbw",
    ]  # fmt: skip
    assert list(json.loads(render_json(report, steps=True)))[-1] == "timeline"
    assert render_json(report) == render_json(report)
    assert data["started"] == "2024-05-01T03:00:00.010Z"
    assert data["summary"]["by_verdict"] == {
        kind.value: {"unreachable": 1, "held": 7, "failed": 1, "fixed": 1, "healthy": 22}.get(
            kind.value, 0
        )
        for kind in VerdictKind
    }
    host = next(h for h in data["hosts"] if h["name"] == "gpu017")
    assert host["verdict"]["kind"] == "held" and host["verdict"]["failing"] is True
    assert host["verdict"]["next_step"].startswith("look at the suspect domain")
    assert host["domains"]["leaf"] == "leaf-03"
    assert "steps" not in host
    assert [e["step"] for e in host["evidence"]] == ["probe GPUs", "nccl all_reduce_perf"]
    stdout = report.host("gpu017").steps[1].commands[0].stdout.encode()
    assert host["evidence"][1]["stdout"] == {
        "sha256": hashlib.sha256(stdout).hexdigest(),
        "bytes": len(stdout),
    }
    assert host["evidence"][1]["rc"] == 0
    assert data["findings"][0]["kind"] == "leaf"
    assert data["findings"][0]["hold_disruptive"] is True
    assert data["topology"]["spines"][1]["leaves"][0]["name"] == "leaf-03"
    assert data["busbw"]["gpu005"] == 131.5
    assert data["actions"][0]["action"] == "clean_shm"
    assert "commands" not in data["actions"][0]
    detailed = json.loads(render_json(report, steps=True))
    assert detailed["actions"][0]["commands"][0].startswith("find /dev/shm")
    steps = next(h for h in detailed["hosts"] if h["name"] == "gpu017")["steps"]
    assert steps[1]["commands"][0]["rc"] == 0
    assert detailed["timeline"][0]["offset"] >= 0


def test_hostile_text_is_data_and_secrets_stay_out(report: Report) -> None:
    text = render_json(report, steps=True)
    data = json.loads(text)
    host = next(h for h in data["hosts"] if h["name"] == "gpu017")
    stdout = host["steps"][1]["commands"][0]["stdout"]
    assert '<script>alert("pwned")</script>' in stdout
    assert "\x1b" not in stdout and "\x00" not in stdout
    assert HOSTILE[:20] in stdout
    assert SECRET not in text
    assert SECRET not in render_json(report)


def test_iso_time() -> None:
    assert iso_time(None) is None
    assert iso_time(0.0) == "1970-01-01T00:00:00.000Z"
    assert iso_time(1714532400.2504) == "2024-05-01T03:00:00.250Z"
    assert iso_time(1714532400.9999) == "2024-05-01T03:00:00.999Z"


def test_schema_file_is_valid_json_and_names_every_top_level_key(
    schema: dict[str, Any], topology: Topology
) -> None:
    data = report_to_dict(collect(topology), steps=True)
    assert set(schema["required"]) | {"timeline"} == set(data) == set(schema["properties"])
