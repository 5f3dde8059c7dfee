"""The JSON report: a stable, versioned shape (schema `fleetfix.report/v2`) for tools and trends.

Compact by default: per host its verdict, recap, domains, and a digest of each command's output
(sha256 and length), not the output; the run's actions without their command text. At 1,000
hosts that is a few KB per host. `steps=True` (`--report-steps`) adds every step record with its
commands and output excerpts, the actions' commands and the timeline: the detail the journal
keeps, for a post-mortem.

The JSON Schema is `schema/report-v2.json` beside this module; docs/report.md states the
version policy (additive changes keep v2; renames, removals and type changes make v3).
"""

from __future__ import annotations

import hashlib
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

SCHEMA_ID = "fleetfix.report/v2"


def schema_path() -> Path:
    """Where the JSON Schema of this report version lives."""
    return Path(__file__).with_name("schema") / "report-v2.json"


def render_json(report: Report, *, steps: bool = False) -> str:
    """The report as JSON text (ends with a newline); `steps`: with every step's detail.

    One host (one finding, action, ...) per line: readable with `less` and `grep`, without
    the indentation that would be a third of a 1,000-host file.
    """
    data = report_to_dict(report, steps=steps)
    lines = []
    for key, value in data.items():
        text = _dump(key)
        if isinstance(value, list) and value:
            items = ",\n    ".join(_dump(item) for item in value)
            lines.append(f"  {text}: [\n    {items}\n  ]")
        else:
            lines.append(f"  {text}: {_dump(value)}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def _dump(value: Any) -> str:
    return json.dumps(value, allow_nan=False, ensure_ascii=False, separators=(",", ":"))


def report_to_dict(report: Report, *, steps: bool = False) -> dict[str, Any]:
    """The report as plain JSON data, keys in a fixed order; `steps`: with every step's
    detail (the step records, the actions' commands, the timeline)."""
    data = {
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
        "detail": "steps" if steps else "compact",
        "plays": list(report.plays),
        "safety_stops": list(report.safety_stops),
        "summary": {
            "hosts": len(report.hosts),
            "by_verdict": report.status_counts(),
            "recap": report.recap_totals(),
        },
        "hosts": [_host(h, steps=steps) for h in report.hosts],
        "findings": [finding_to_dict(f) for f in report.findings],
        "topology": {"spines": [_spine(s) for s in report.tree]},
        "actions": [_action(a, commands=steps) for a in report.actions],
        "busbw": report.busbw,
    }
    if steps:
        data["timeline"] = [_timeline(s, report.started) for s in report.timeline]
    return data


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


def _host(host: HostReport, *, steps: bool) -> dict[str, Any]:
    data = {
        "name": host.name,
        "verdict": verdict_data(host.verdict),
        "recap": dict(host.recap),
        "domains": dict(host.domains),
        "busbw": host.busbw,
        "left": {"kind": host.left[0], "reason": host.left[1]} if host.left else None,
        "evidence": [_digest(s, c) for s in host.steps for c in s.commands],
    }
    if steps:
        data["steps"] = [_step(s) for s in host.steps]
    return data


def _digest(step: StepRecord, command: CommandRecord) -> dict[str, Any]:
    """A command's output as evidence without the text: the step, its exit, and the sha256
    and UTF-8 length of its stdout and stderr as the detail report keeps them."""
    return {
        "step": step.step,
        "rc": command.rc,
        "stdout": output_digest(command.stdout),
        "stderr": output_digest(command.stderr),
    }


def output_digest(text: str) -> dict[str, Any]:
    """{"sha256": hex digest, "bytes": length} of `text` as UTF-8."""
    data = text.encode("utf-8")
    return {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}


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


def _action(action: ActionRecord, *, commands: bool) -> dict[str, Any]:
    data: dict[str, Any] = {
        "host": action.host,
        "step": action.step,
        "action": action.action,
        "failed": action.failed,
        "planned": action.planned,
        "outcome": action.outcome,
        "at": iso_time(action.at),
    }
    if commands:
        data["commands"] = list(action.commands)
    return data


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
    "output_digest",
    "render_json",
    "report_to_dict",
    "schema_path",
]
