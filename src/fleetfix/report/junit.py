"""The JUnit XML report for CI and schedulers: one testcase per host, named by its verdict.

Suite `fleetfix.<playbook>` holds a case per host, `gpu007: needs RMA`: a failing verdict
(fleetfix/verdicts.py: needs RMA, needs a human, held, unhealthy, failed, deferred, left alone)
is a <failure>, unreachable an <error>, each with the reason, the evidence and the next step in
its body; fixed, healthy, changed and drained pass; not run, left out and interrupted are
<skipped/>. A case's <system-out> lists the host's steps (with `steps=True`, their commands and
output excerpts too). Every finding is a failing case of its own (suite "findings"): the
straggler node, or the suspect switch; findings also go in each suite's <properties>.

The file is valid against Jenkins' junit-10.xsd (the Ant JUnit format; tests/fixtures/junit):
no `skipped` on <testsuites>, nothing but skipped/error/failure/system-out/system-err in a case.
A suite's time is the run's wall time, as is the whole file's (not the sum of host-steps).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterable
from pathlib import PurePath

from fleetfix.report.json import iso_time
from fleetfix.report.model import CommandRecord, HostReport, Report, StepRecord
from fleetfix.report.text import clean
from fleetfix.topology.findings import Finding, FindingCategory
from fleetfix.verdicts import VerdictKind

SKIPPED = frozenset({VerdictKind.NOT_RUN, VerdictKind.LEFT_OUT, VerdictKind.INTERRUPTED})
"""Verdicts reported as <skipped/>: nothing was judged on the host in this run."""


def render_junit(report: Report, *, steps: bool = False) -> str:
    """The report as a JUnit XML document (UTF-8 text with an XML declaration); `steps`:
    each case's <system-out> carries its steps' commands and output excerpts."""
    root = ET.Element("testsuites", name=_text(f"fleetfix {report.run_id}"))
    root.append(_hosts_suite(report, steps=steps))
    if report.findings:
        root.append(_findings_suite(report))
    _count(root, root.findall("testsuite"), _run_seconds(report))
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, "unicode") + "\n"


def suite_name(report: Report) -> str:
    """`fleetfix.<playbook>`: the playbook's file name without its suffix (a dot would
    split Jenkins' package from its class)."""
    stem = PurePath(report.playbook).stem.replace(".", "_") if report.playbook else "run"
    return _text(f"fleetfix.{stem}")


def _hosts_suite(report: Report, *, steps: bool) -> ET.Element:
    name = suite_name(report)
    suite = ET.Element("testsuite", name=name)
    stamp = iso_time(report.started)
    if stamp:
        suite.set("timestamp", stamp.removesuffix("Z"))
    _properties(suite, report)
    explained = _explained(report)
    for host in report.hosts:
        suite.append(_case(name, host, explained.get(host.name), steps=steps))
    _count(suite, suite.findall("testcase"), _run_seconds(report))
    return suite


def _explained(report: Report) -> dict[str, Finding]:
    """Failed hosts a correlated-failure finding explains -> that finding."""
    return {
        host: finding
        for finding in report.findings_of(FindingCategory.CORRELATED_FAILURE)
        for host in finding.failed
    }


def _case(classname: str, host: HostReport, finding: Finding | None, *, steps: bool) -> ET.Element:
    verdict = host.verdict
    case = ET.Element(
        "testcase",
        classname=classname,
        name=_text(f"{host.name}: {verdict.kind.label}"),
        time=f"{_span(list(host.steps)):.3f}",
    )
    message = _text(verdict.reason) or verdict.kind.meaning
    if verdict.kind is VerdictKind.UNREACHABLE:
        ET.SubElement(case, "error", message=message, type=verdict.kind.value).text = _body(
            host, finding
        )
    elif verdict.failing:
        ET.SubElement(case, "failure", message=message, type=verdict.kind.value).text = _body(
            host, finding
        )
    elif verdict.kind in SKIPPED:
        ET.SubElement(case, "skipped", message=_text(f"{verdict.kind.label}: {message}"))
    out = _steps_text(host.steps, commands=steps)
    if out:
        ET.SubElement(case, "system-out").text = out
    return case


def _body(host: HostReport, finding: Finding | None) -> str:
    """What an on-call engineer needs in the failure: why, the evidence, what to do next."""
    verdict = host.verdict
    lines = [f"{host.name}: {verdict.kind.label}: {verdict.reason or verdict.kind.meaning}"]
    lines += [f"evidence: {line}" for line in verdict.evidence]
    if finding is not None:
        lines.append(f"finding: {finding.message}")
    if verdict.actions:
        lines.append("actions done: " + ", ".join(verdict.actions))
    if verdict.next_step:
        lines.append(f"next step: {verdict.next_step}")
    return _text("\n".join(lines))


def _steps_text(steps: Iterable[StepRecord], *, commands: bool) -> str:
    """One line per step (`status  step: message`); with `commands`, each command and its
    output excerpts under its step."""
    lines: list[str] = []
    for step in steps:
        line = f"{step.status:<11} {step.step}"
        lines.append(f"{line}: {step.message}" if step.message else line)
        if commands:
            lines.extend(_command_text(c) for c in step.commands)
    return _text("\n".join(lines))


def _command_text(command: CommandRecord) -> str:
    verdict = "timed out" if command.timed_out else f"rc={command.rc}"
    lines = [f"  $ {command.command}  ({verdict}, {command.duration:.2f}s)"]
    for label, text in (("stdout", command.stdout), ("stderr", command.stderr)):
        if text.strip():
            lines.append(f"  --- {label}\n{text.rstrip()}")
    return "\n".join(lines)


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


def _run_seconds(report: Report) -> float:
    """The run's wall time; the span of its steps when it has no finish (interrupted)."""
    if report.started is not None and report.finished is not None:
        return max(0.0, report.finished - report.started)
    return _span([s for h in report.hosts for s in h.steps])


def _span(steps: list[StepRecord]) -> float:
    """Wall time from the first step's start to the last one's finish (hosts run at once)."""
    starts = [s.started for s in steps if s.started is not None]
    ends = [s.finished for s in steps if s.finished is not None]
    return max(0.0, max(ends) - min(starts)) if starts and ends else 0.0


def _count(element: ET.Element, children: Iterable[ET.Element], seconds: float) -> None:
    """tests/failures/errors (and, on a suite, skipped) totals and the wall time. The schema
    has no `skipped` on <testsuites>."""
    totals = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    for child in children:
        if child.tag == "testcase":
            totals["tests"] += 1
            for tag, key in (("failure", "failures"), ("error", "errors"), ("skipped", "skipped")):
                totals[key] += len(child.findall(tag))
        else:
            for key in totals:
                totals[key] += int(child.get(key, "0"))
    if element.tag == "testsuites":
        del totals["skipped"]
    for key, value in totals.items():
        element.set(key, str(value))
    element.set("time", f"{seconds:.3f}")


def _properties(suite: ET.Element, report: Report) -> None:
    props = ET.Element("properties")
    values = [("run_id", report.run_id), ("playbook", report.playbook)]
    values += [("outcome", report.outcome), ("check", str(report.check).lower())]
    values += [(f"hosts.{kind}", str(n)) for kind, n in report.status_counts().items() if n]
    values += [("finding", f.message) for f in report.findings]
    values += [("safety_stop", reason) for reason in report.safety_stops]
    for name, value in values:
        ET.SubElement(props, "property", name=name, value=_text(value))
    suite.append(props)


def _text(value: str) -> str:
    """Characters XML 1.0 can hold (remote output can hold anything)."""
    return clean(value)


__all__ = ["render_junit", "suite_name"]
