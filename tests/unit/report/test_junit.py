"""JUnit XML: well-formed (whatever the hosts printed), one case per host per step, counts right."""

from __future__ import annotations

from xml.etree.ElementTree import Element

import defusedxml.ElementTree as SafeET

from fleetfix.report.junit import render_junit
from fleetfix.report.model import Report
from tests.unit.report.fleetrun import PLAY, SECRET, UNREACHABLE


def parse(report: Report) -> Element:
    root: Element = SafeET.fromstring(render_junit(report).encode("utf-8"))
    return root


def test_one_suite_per_play_one_case_per_host_per_step(report: Report) -> None:
    root = parse(report)
    assert root.tag == "testsuites"
    (suite,) = root.findall("testsuite")
    assert suite.get("name") == PLAY
    cases = suite.findall("testcase")
    steps = sum(len(h.steps) for h in report.hosts)
    assert len(cases) == steps == 32 + 31 + 23 + 1
    names = {(c.get("classname"), c.get("name")) for c in cases}
    assert ("gpu017", "nccl all_reduce_perf") in names
    assert ("gpu005", "clean stale /dev/shm") in names


def test_counts_failures_errors_skipped(report: Report) -> None:
    root = parse(report)
    suite = root.find("testsuite")
    assert suite is not None
    # 8 nccl failures (leaf-03's 7 and gpu002), 1 unreachable, 22 skipped no_log steps.
    expected = {"tests": "87", "failures": "8", "errors": "1", "skipped": "22"}
    for element in (root, suite):
        assert {k: element.get(k) for k in expected} == expected
    cases = suite.findall("testcase")
    failures = [c for c in cases if c.find("failure") is not None]
    assert len(failures) == 8
    errors = [c for c in cases if c.find("error") is not None]
    assert [c.get("classname") for c in errors] == [UNREACHABLE]
    error = errors[0].find("error")
    assert error is not None and error.get("type") == "unreachable"
    assert "Connection refused" in (error.get("message") or "")
    assert float(suite.get("time") or 0) > 0


def test_failure_body_has_the_evidence_and_survives_hostile_output(report: Report) -> None:
    root = parse(report)
    case = next(
        c
        for c in root.iter("testcase")
        if c.get("classname") == "gpu017" and c.get("name") == "nccl all_reduce_perf"
    )
    failure = case.find("failure")
    assert failure is not None
    assert failure.get("message") == "avg busbw 13.0 GB/s is below the 150 GB/s floor"
    body = failure.text or ""
    assert "$ all_reduce_perf -b 8 -e 8G -f 2 -g 8" in body
    assert '<script>alert("pwned")</script>' in body  # as text: the XML is still well-formed
    assert "]]>" in body
    assert "\x00" not in body


def test_properties_carry_findings_and_no_secret(report: Report) -> None:
    root = parse(report)
    props = {(p.get("name"), p.get("value")) for p in root.iter("property")}
    assert ("outcome", "unreachable") in props
    assert any(name == "finding" and "leaf-03" in (value or "") for name, value in props)
    assert SECRET not in render_junit(report)


def test_check_mode_changes_are_passing_cases(check_report: Report) -> None:
    root = parse(check_report)
    case = next(c for c in root.iter("testcase") if c.get("name") == "clean stale /dev/shm")
    assert list(case) == []
