"""The console prints debug and assert results whole, as ansible-playbook's default callback
does (json, indent 4, sorted keys), prints nothing for a meta step and no Ansible module's
msg without -v."""

from __future__ import annotations

from fleetfix.report.console import host_line, item_line
from fleetfix.results import DEBUG_KEY, META_KEY, QUIET_KEY, VERBOSE_KEY, Status, StepResult


def _result(status: Status, data: dict[str, object], message: str = "") -> StepResult:
    return StepResult(host="h", step="s", status=status, message=message, data=data)


def test_a_debug_msg_is_printed_alone() -> None:
    data = {"changed": False, "failed": False, "msg": [1, {"b": True}], VERBOSE_KEY: True}
    line = host_line(_result(Status.OK, {**data, DEBUG_KEY: True}), 0)
    shown = '{\n    "msg": [\n        1,\n        {\n            "b": true\n        }\n    ]\n}'
    assert line == f"ok: [h] => {shown}"


def test_a_debug_var_in_a_loop_shows_its_item_not_the_hidden_keys() -> None:
    data: dict[str, object] = {"changed": False, "failed": False, "x": 5, "item": 1, "i": 0}
    data |= {"ansible_loop_var": "item", "ansible_index_var": "i", VERBOSE_KEY: True}
    line = item_line(_result(Status.OK, {**data, DEBUG_KEY: True}), "L1", 0)
    assert line == 'ok: [h] => (item=L1) => {\n    "i": 0,\n    "item": 1,\n    "x": 5\n}'


def test_an_assert_shows_changed_and_msg_and_a_failed_one_what_failed() -> None:
    passed = {"changed": False, "failed": False, "msg": "All assertions passed", VERBOSE_KEY: True}
    line = host_line(_result(Status.OK, passed), 0)
    assert line == 'ok: [h] => {\n    "changed": false,\n    "msg": "All assertions passed"\n}'
    failed = {
        "changed": False,
        "failed": True,
        "msg": "no",
        "assertion": "a",
        "evaluated_to": False,
    }
    line = host_line(_result(Status.IGNORED, {**failed, VERBOSE_KEY: True}, "no"), 0)
    assert line is not None and line.startswith('fatal: [h]: FAILED! => {\n    "assertion": "a",')
    assert line.endswith('    "msg": "no"\n}\n...ignoring')


def test_a_meta_step_prints_nothing_unless_skipped() -> None:
    assert host_line(_result(Status.OK, {META_KEY: True}, "noop"), 0) is None
    assert host_line(_result(Status.SKIPPED, {"skipped": True}), 0) == "skipping: [h]"


def test_an_ansible_modules_msg_waits_for_minus_v_a_check_mode_line_does_not() -> None:
    quiet = _result(Status.CHANGED, {QUIET_KEY: True}, "line added")
    assert host_line(quiet, 0) == "changed: [h]"
    assert host_line(quiet, 1) == "changed: [h] => line added"
    planned = _result(Status.SKIPPED, {}, "check mode: would run: reboot")
    assert host_line(planned, 0) == "skipping: [h] => check mode: would run: reboot"
