"""JUnit XML: one case per host named by its verdict, failing for every failing verdict, valid
against Jenkins' junit-10.xsd whatever the hosts printed."""

from __future__ import annotations

from pathlib import Path
from xml.etree.ElementTree import Element

import defusedxml.ElementTree as SafeET
import lxml.etree  # type: ignore[import-untyped]  # no stubs shipped
import pytest

from fleetfix.report.junit import render_junit
from fleetfix.report.model import HostReport, Report
from fleetfix.verdicts import Verdict, VerdictKind
from tests.unit.report.fleetrun import HELD_WHY, SECRET, STRAGGLER, UNREACHABLE

XSD = Path(__file__).resolve().parents[2] / "fixtures" / "junit" / "junit-10.xsd"
SUITE = "fleetfix.nccl-health"


@pytest.fixture(scope="module")
def schema() -> lxml.etree.XMLSchema:
    return lxml.etree.XMLSchema(lxml.etree.parse(str(XSD)))


def parse(report: Report, *, steps: bool = False) -> Element:
    root: Element = SafeET.fromstring(render_junit(report, steps=steps).encode("utf-8"))
    return root


def assert_valid(schema: lxml.etree.XMLSchema, text: str) -> None:
    document = lxml.etree.fromstring(text.encode("utf-8"))
    assert schema.validate(document), schema.error_log


def host_cases(root: Element) -> dict[str, Element]:
    suite = root.find(f"testsuite[@name='{SUITE}']")
    assert suite is not None
    return {(c.get("name") or "").partition(":")[0]: c for c in suite.findall("testcase")}


def test_one_case_per_host_named_by_its_verdict(report: Report) -> None:
    root = parse(report)
    assert root.tag == "testsuites"
    suite, findings = root.findall("testsuite")
    assert (suite.get("name"), findings.get("name")) == (SUITE, "findings")
    cases = host_cases(root)
    assert len(cases) == len(report.hosts) == 32
    assert cases["gpu017"].get("name") == "gpu017: held"
    assert cases[STRAGGLER].get("name") == f"{STRAGGLER}: fixed"
    assert cases["gpu001"].get("name") == "gpu001: healthy"
    assert {c.get("classname") for c in cases.values()} == {SUITE}


def test_every_failing_verdict_fails_and_the_counts_agree(report: Report) -> None:
    root = parse(report)
    cases = host_cases(root)
    failing = {h.name for h in report.hosts if h.verdict.failing}
    failed = {h for h, c in cases.items() if c.find("failure") is not None}
    errored = {h for h, c in cases.items() if c.find("error") is not None}
    assert errored == {UNREACHABLE}
    assert failed == failing - {UNREACHABLE} and len(failed) == 8  # 7 held + gpu002
    suite = root.find(f"testsuite[@name='{SUITE}']")
    assert suite is not None
    counts = {k: suite.get(k) for k in ("tests", "failures", "errors", "skipped")}
    assert counts == {"tests": "32", "failures": "8", "errors": "1", "skipped": "0"}
    # Findings: the suspect leaf and two stragglers, each a failing case of its own.
    assert {k: root.get(k) for k in ("tests", "failures", "errors")} == {
        "tests": "35",
        "failures": "11",
        "errors": "1",
    }
    assert root.get("skipped") is None  # junit-10.xsd has no `skipped` on <testsuites>
    assert report.started is not None and report.finished is not None
    assert float(root.get("time") or 0) == round(report.finished - report.started, 3)


def test_the_failure_says_why_what_shows_it_and_what_to_do(report: Report) -> None:
    case = host_cases(parse(report))["gpu017"]
    failure = case.find("failure")
    assert failure is not None
    assert failure.get("type") == "held"
    assert failure.get("message") == HELD_WHY
    body = failure.text or ""
    assert "evidence: nccl all_reduce_perf: avg busbw 13.0 GB/s is below" in body
    assert "finding: 7 of 9 failures sit under leaf leaf-03" in body
    assert "next step: look at the suspect domain" in body
    error = host_cases(parse(report))[UNREACHABLE].find("error")
    assert error is not None and "Connection refused" in (error.get("message") or "")


def test_steps_in_system_out_and_hostile_output_in_detail(report: Report) -> None:
    compact = host_cases(parse(report))["gpu017"].find("system-out")
    assert compact is not None
    assert "failed      nccl all_reduce_perf: avg busbw 13.0 GB/s" in (compact.text or "")
    assert "$ all_reduce_perf" not in (compact.text or "")
    detailed = host_cases(parse(report, steps=True))["gpu017"].find("system-out")
    assert detailed is not None
    text = detailed.text or ""
    assert "$ all_reduce_perf -b 8 -e 8G -f 2 -g 8" in text
    assert '<script>alert("pwned")</script>' in text  # as text: the XML is still well-formed
    assert "]]>" in text and "\x00" not in text


def test_properties_carry_the_verdicts_findings_and_no_secret(report: Report) -> None:
    root = parse(report)
    props = {(p.get("name"), p.get("value")) for p in root.iter("property")}
    assert ("outcome", "unreachable") in props
    assert ("hosts.held", "7") in props
    assert any(name == "finding" and "leaf-03" in (value or "") for name, value in props)
    assert SECRET not in render_junit(report, steps=True)


def test_check_mode_changes_are_passing_cases(check_report: Report) -> None:
    case = host_cases(parse(check_report))[STRAGGLER]
    assert case.get("name") == f"{STRAGGLER}: changed"
    assert [child.tag for child in case] == ["system-out"]


def test_valid_against_jenkins_schema(
    report: Report, check_report: Report, schema: lxml.etree.XMLSchema
) -> None:
    for each in (report, check_report):
        assert_valid(schema, render_junit(each))
        assert_valid(schema, render_junit(each, steps=True))


def test_every_verdict_kind_renders_valid_and_as_promised(
    report: Report, schema: lxml.etree.XMLSchema
) -> None:
    template = report.hosts[0]
    hosts = tuple(
        HostReport(
            name=f"n{index:02d}",
            verdict=Verdict(f"n{index:02d}", kind, f"why {kind.value}", ("seen",), "do it"),
            recap=template.recap,
        )
        for index, kind in enumerate(VerdictKind)
    )
    every = Report(
        run_id="r", playbook="playbooks/xid79.yml", started=1.0, finished=2.5, check=False,
        outcome="host_failed", exit_code=2, hosts=hosts,
    )  # fmt: skip
    text = render_junit(every)
    assert_valid(schema, text)
    root: Element = SafeET.fromstring(text.encode("utf-8"))
    suite = root.find("testsuite[@name='fleetfix.xid79']")
    assert suite is not None
    kinds = {h.name: h.status for h in hosts}
    outcome = {
        kinds[(c.get("name") or "").partition(":")[0]]: c[0].tag if len(c) else "passed"
        for c in suite.findall("testcase")
    }
    assert suite.findall("testcase")[0].get("name") == "n00: unreachable"
    for kind in VerdictKind:
        if kind is VerdictKind.UNREACHABLE:
            assert outcome[kind] == "error"
        elif kind.failing:
            assert outcome[kind] == "failure", kind
        elif kind in (VerdictKind.NOT_RUN, VerdictKind.LEFT_OUT, VerdictKind.INTERRUPTED):
            assert outcome[kind] == "skipped", kind
        else:
            assert outcome[kind] == "passed", kind


def test_the_old_report_shape_fails_the_schema(
    report: Report, schema: lxml.etree.XMLSchema
) -> None:
    """The schema is not a rubber stamp: `skipped` on <testsuites> (the old file's) fails."""
    document = lxml.etree.fromstring(render_junit(report).encode("utf-8"))
    document.set("skipped", "0")
    assert not schema.validate(document)
