"""The JSON report: a stable, versioned shape (schema `fleetfix.report/v1`) for tools and trends.

The JSON Schema is `schema/report-v1.json` beside this module; docs/report.md states the
version policy (additive changes keep v1; renames, removals and type changes make v2).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fleetfix.report.model import (
    ActionRecord,
    CommandRecord,
    HostReport,
    Report,
    SpineNode,
    StepRecord,
)
from fleetfix.topology.findings import Finding
from fleetfix.verdicts import Verdict

SCHEMA_ID = "fleetfix.report/v1"


def schema_path() -> Path:
    """Where the JSON Schema of this report version lives."""
    return Path(__file__).with_name("schema") / "report-v1.json"


def render_json(report: Report) -> str:
    """The report as indented JSON text (ends with a newline)."""
    return json.dumps(report_to_dict(report), indent=2, allow_nan=False, ensure_ascii=False) + "\n"


def report_to_dict(report: Report) -> dict[str, Any]:
    """The report as plain JSON data, keys in a fixed order."""
    return {
        "schema": SCHEMA_ID,
        "run_id": report.run_id,
        "playbook": report.playbook,
        "started": iso_time(report.started),
        "finished": iso_time(report.finished),
        "duration": _duration(report.started, report.finished),
        "check": report.check,
        "outcome": report.outcome,
        "exit_code": report.exit_code,
        "interrupted": report.interrupted,
        "plays": list(report.plays),
        "safety_stops": list(report.safety_stops),
        "summary": {
            "hosts": len(report.hosts),
            "by_status": report.status_counts(),
            "recap": report.recap_totals(),
        },
        "hosts": [_host(h) for h in report.hosts],
        "findings": [finding_to_dict(f) for f in report.findings],
        "topology": {"spines": [_spine(s) for s in report.tree]},
        "actions": [_action(a) for a in report.actions],
        "busbw": report.busbw,
        "timeline": [_timeline(s, report.started) for s in report.timeline],
    }


def iso_time(at: float | None) -> str | None:
    """Epoch seconds as ISO 8601 UTC with milliseconds, e.g. 2024-05-01T03:00:00.250Z."""
    if at is None:
        return None
    whole = math.floor(at)
    millis = min(999, round((at - whole) * 1000))
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{millis:03d}Z"


def finding_to_dict(finding: Finding) -> dict[str, Any]:
    return {
        "category": finding.category.value,
        "kind": finding.kind,
        "domain": finding.domain,
        "message": finding.message,
        "failed": list(finding.failed),
        "members": list(finding.members),
        "p_value": finding.p_value,
        "hold_disruptive": finding.hold_disruptive,
        "also": list(finding.also),
        "evidence": _plain(finding.evidence),
    }


def _duration(start: float | None, end: float | None) -> float | None:
    return round(end - start, 3) if start is not None and end is not None else None


def _host(host: HostReport) -> dict[str, Any]:
    return {
        "name": host.name,
        "verdict": verdict_data(host.verdict),
        "status": host.status.value,
        "held": host.held,
        "recap": dict(host.recap),
        "domains": dict(host.domains),
        "busbw": host.busbw,
        "left": {"kind": host.left[0], "reason": host.left[1]} if host.left else None,
        "steps": [_step(s) for s in host.steps],
    }


def verdict_data(verdict: Verdict) -> dict[str, Any]:
    """A verdict as the JSON report (and the webhook's run summary) writes it."""
    return {
        "kind": verdict.kind.value,
        "label": verdict.kind.label,
        "failing": verdict.failing,
        "reason": verdict.reason,
        "evidence": list(verdict.evidence),
        "next_step": verdict.next_step,
        "actions": list(verdict.actions),
    }


def _step(step: StepRecord) -> dict[str, Any]:
    return {
        "play": step.play,
        "step": step.step,
        "status": step.status,
        "changed": step.changed,
        "message": step.message,
        "attempts": step.attempts,
        "duration": round(step.duration, 3),
        "started": iso_time(step.started),
        "finished": iso_time(step.finished),
        "commands": [_command(c) for c in step.commands],
    }


def _command(command: CommandRecord) -> dict[str, Any]:
    return {
        "command": command.command,
        "rc": command.rc,
        "duration": round(command.duration, 3),
        "timed_out": command.timed_out,
        "planned_only": command.planned_only,
        "stdout": command.stdout,
        "stderr": command.stderr,
        "at": iso_time(command.at),
    }


def _spine(spine: SpineNode) -> dict[str, Any]:
    return {
        "name": spine.name,
        "leaves": [
            {"name": leaf.name, "uplinks": list(leaf.spines), "hosts": list(leaf.hosts)}
            for leaf in spine.leaves
        ],
    }


def _action(action: ActionRecord) -> dict[str, Any]:
    return {
        "host": action.host,
        "step": action.step,
        "action": action.action,
        "failed": action.failed,
        "planned": action.planned,
        "outcome": action.outcome,
        "commands": list(action.commands),
        "at": iso_time(action.at),
    }


def _timeline(step: StepRecord, run_start: float | None) -> dict[str, Any]:
    origin = run_start if run_start is not None else step.started
    start = step.started if step.started is not None else 0.0
    return {
        "host": step.host,
        "play": step.play,
        "step": step.step,
        "status": step.status,
        "started": iso_time(step.started),
        "finished": iso_time(step.finished),
        "offset": round(start - (origin or start), 3),
        "duration": round(step.duration, 3),
    }


def _plain(value: Any) -> Any:
    """Evidence as JSON data: mappings, lists, finite numbers, strings."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return str(value)


__all__ = [
    "SCHEMA_ID",
    "finding_to_dict",
    "iso_time",
    "render_json",
    "report_to_dict",
    "schema_path",
]
