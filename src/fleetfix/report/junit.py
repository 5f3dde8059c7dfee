"""The JUnit XML report for CI and schedulers: a testsuite per play, a testcase per host per step.

A failed step is a <failure>, an unreachable host an <error>, a skipped step <skipped/>; an
ignored failure passes with the message in <system-out>. Every finding is a failing testcase of
its own (suite "findings"): the straggler node, or the suspect switch. A host whose failure a
correlated-failure finding explains (the switch, not the node) has that step <skipped/> with the
finding's message: it is not the node to fix. Findings also go in each suite's <properties>.
A suite's time is its play's wall time, the whole file's the run's (not the sum of host-steps).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping

from fleetfix.report.json import iso_time
from fleetfix.report.model import CommandRecord, Report, StepRecord
from fleetfix.report.text import clean
from fleetfix.results import Status
from fleetfix.topology.findings import Finding, FindingCategory


def render_junit(report: Report) -> str:
    """The report as a JUnit XML document (UTF-8 text with an XML declaration)."""
    root = ET.Element("testsuites", name=_text(f"fleetfix {report.run_id}"))
    steps = [s for h in report.hosts for s in h.steps]
    plays = list(dict.fromkeys([*report.plays, *(s.play for s in steps)]))
    victims = _explained(report)
    for play in plays:
        mine = [s for s in steps if s.play == play]
        if mine:
            root.append(_suite(play or "(no play)", mine, report, victims))
    if report.findings:
        root.append(_findings_suite(report))
    _count(root, root.findall("testsuite"), _run_seconds(report, steps))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, "unicode") + "\n"


def _explained(report: Report) -> dict[str, Finding]:
    """Failed hosts a correlated-failure finding explains -> that finding."""
    return {
        host: finding
        for finding in report.findings_of(FindingCategory.CORRELATED_FAILURE)
        for host in finding.failed
    }


def _run_seconds(report: Report, steps: list[StepRecord]) -> float:
    """The run's wall time; the span of its steps when it has no finish (interrupted)."""
    if report.started is not None and report.finished is not None:
        return max(0.0, report.finished - report.started)
    return _span(steps)


def _span(steps: list[StepRecord]) -> float:
    """Wall time from the first step's start to the last one's finish (hosts run at once)."""
    starts = [s.started for s in steps if s.started is not None]
    ends = [s.finished for s in steps if s.finished is not None]
    return max(0.0, max(ends) - min(starts)) if starts and ends else 0.0


def _suite(
    play: str, steps: list[StepRecord], report: Report, victims: Mapping[str, Finding]
) -> ET.Element:
    suite = ET.Element("testsuite", name=_text(play))
    stamp = iso_time(report.started)
    if stamp:
        suite.set("timestamp", stamp.removesuffix("Z"))
    _properties(suite, report)
    for step in sorted(steps, key=lambda s: (s.started or 0.0, s.host)):
        suite.append(_case(step, victims.get(step.host)))
    _count(suite, suite.findall("testcase"), _span(steps))
    return suite


def _findings_suite(report: Report) -> ET.Element:
    """One failing testcase per finding: the straggler node, or the suspect domain."""
    suite = ET.Element("testsuite", name="findings")
    _properties(suite, report)
    for finding in report.findings:
        where = finding.domain if finding.kind == "host" else f"{finding.kind} {finding.domain}"
        case = ET.SubElement(
            suite, "testcase", classname=_text(where), name=finding.category.value, time="0.000"
        )
        body = f"{finding.message}\nhosts: {', '.join(finding.failed)}"
        ET.SubElement(
            case, "failure", message=_text(finding.message), type=finding.category.value
        ).text = _text(body)
    _count(suite, suite.findall("testcase"), 0.0)
    return suite


def _case(step: StepRecord, explained_by: Finding | None = None) -> ET.Element:
    case = ET.Element(
        "testcase", classname=_text(step.host), name=_text(step.step), time=f"{step.duration:.3f}"
    )
    status = Status(step.status)
    message = _text(step.message) or status.value
    if explained_by is not None and status is Status.FAILED:
        why = f"not this node: {explained_by.message}; {message}"
        ET.SubElement(case, "skipped", message=_text(why)).text = _evidence(step)
    elif status is Status.FAILED:
        ET.SubElement(case, "failure", message=message, type="failed").text = _evidence(step)
    elif status is Status.UNREACHABLE:
        ET.SubElement(case, "error", message=message, type="unreachable").text = _evidence(step)
    elif status is Status.SKIPPED:
        ET.SubElement(case, "skipped", message=message)
    elif status is Status.IGNORED:
        ET.SubElement(case, "system-out").text = f"failed, ignored: {message}\n{_evidence(step)}"
    return case


def _evidence(step: StepRecord) -> str:
    """The step's message and commands with output excerpts, for the failure body."""
    parts = [_text(step.message)]
    parts.extend(_command_text(c) for c in step.commands)
    return "\n".join(p for p in parts if p)


def _command_text(command: CommandRecord) -> str:
    verdict = "timed out" if command.timed_out else f"rc={command.rc}"
    lines = [f"$ {command.command}  ({verdict}, {command.duration:.2f}s)"]
    for label, text in (("stdout", command.stdout), ("stderr", command.stderr)):
        if text.strip():
            lines.append(f"--- {label}\n{text.rstrip()}")
    return _text("\n".join(lines))


def _count(element: ET.Element, children: Iterable[ET.Element], seconds: float) -> None:
    """tests/failures/errors/skipped totals, from cases or from suites, and the wall time."""
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for child in children:
        if child.tag == "testcase":
            totals["tests"] += 1
            for tag, key in (("failure", "failures"), ("error", "errors"), ("skipped", "skipped")):
                totals[key] += len(child.findall(tag))
        else:
            for key in totals:
                totals[key] += int(child.get(key, "0"))
    for key, value in totals.items():
        element.set(key, str(value))
    element.set("time", f"{seconds:.3f}")


def _properties(suite: ET.Element, report: Report) -> None:
    props = ET.Element("properties")
    values = [("run_id", report.run_id), ("playbook", report.playbook)]
    values += [("outcome", report.outcome), ("check", str(report.check).lower())]
    values += [("finding", f.message) for f in report.findings]
    values += [("safety_stop", reason) for reason in report.safety_stops]
    for name, value in values:
        ET.SubElement(props, "property", name=name, value=_text(value))
    suite.append(props)


def _text(value: str) -> str:
    """Characters XML 1.0 can hold (remote output can hold anything)."""
    return clean(value)


__all__ = ["render_junit"]
