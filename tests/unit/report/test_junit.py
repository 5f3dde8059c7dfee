"""JUnit XML: well-formed (whatever the hosts printed), one case per host per step, counts right."""

from __future__ import annotations

from xml.etree.ElementTree import Element

import defusedxml.ElementTree as SafeET

from fleetfix.report.junit import render_junit
from fleetfix.report.model import Report
from tests.unit.report.fleetrun import NOISE_FAILURE, PLAY, SECRET, STRAGGLER, UNREACHABLE


def parse(report: Report) -> Element:
    root: Element = SafeET.fromstring(render_junit(report).encode("utf-8"))
    return root


def test_one_suite_per_play_one_case_per_host_per_step(report: Report) -> None:
    root = parse(report)
    assert root.tag == "testsuites"
    suite, findings = root.findall("testsuite")
    assert (suite.get("name"), findings.get("name")) == (PLAY, "findings")
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
    # 1 nccl failure of a node's own (gpu002), 1 unreachable, 22 skipped no_log steps, and
    # leaf-03's 7 nccl failures skipped: the finding names the switch, not those nodes.
    expected = {"tests": "87", "failures": "1", "errors": "1", "skipped": "29"}
    assert {k: suite.get(k) for k in expected} == expected
    # The findings suite: the suspect leaf and the two stragglers fail.
    assert {k: root.get(k) for k in expected} == {**expected, "tests": "90", "failures": "4"}
    cases = suite.findall("testcase")
    failures = [c for c in cases if c.find("failure") is not None]
    assert [c.get("classname") for c in failures] == [NOISE_FAILURE]
    found = root.findall("testsuite[@name='findings']/testcase")
    assert {c.get("classname") for c in found} == {"leaf leaf-03", NOISE_FAILURE, STRAGGLER}
    assert all(c.find("failure") is not None for c in found)
    errors = [c for c in cases if c.find("error") is not None]
    assert [c.get("classname") for c in errors] == [UNREACHABLE]
    error = errors[0].find("error")
    assert error is not None and error.get("type") == "unreachable"
    assert "Connection refused" in (error.get("message") or "")
    # Wall times, not sums of host-steps: the run's for the file, the play's for its suite.
    assert report.started is not None and report.finished is not None
    assert float(root.get("time") or 0) == round(report.finished - report.started, 3)
    steps = [s for h in report.hosts for s in h.steps]
    span = max(s.finished or 0 for s in steps) - min(s.started or 1e12 for s in steps)
    assert float(suite.get("time") or 0) == round(span, 3)
    assert span < sum(s.duration for s in steps)


def test_failure_body_has_the_evidence_and_survives_hostile_output(report: Report) -> None:
    root = parse(report)
    case = next(
        c
        for c in root.iter("testcase")
        if c.get("classname") == "gpu017" and c.get("name") == "nccl all_reduce_perf"
    )
    # gpu017 sits under the suspect leaf: skipped, with the finding's word and the evidence.
    skipped = case.find("skipped")
    assert skipped is not None
    assert (skipped.get("message") or "").startswith("not this node: 7 of 9 failures")
    assert "avg busbw 13.0 GB/s is below the 150 GB/s floor" in (skipped.get("message") or "")
    body = skipped.text or ""
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
