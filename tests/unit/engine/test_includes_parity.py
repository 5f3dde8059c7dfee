"""Includes and imports against ansible-playbook 2.19: the keywords an include takes (args:
with apply:, run_once, listen on a handler include, a debugger that never starts), a
conditional include of a missing file, import_tasks as a mapping, and run_once includes on
several hosts; plus what ansible-core refuses at load (apply: on import_tasks), refused at
load with its place."""

from __future__ import annotations

from pathlib import Path

from fleetfix.cli.loading import builtin_catalog
from fleetfix.playbook.loader import load_playbook, validate_playbook
from tests.support.parity import assert_same, copy_fixtures, load_errors

PARITY = Path(__file__).parents[2] / "fixtures" / "playbooks" / "parity"
HOSTS = ("localhost", "node1", "node2")


def test_include_keywords_agree_with_ansible(tmp_path: Path) -> None:
    """On one host: a handler include on several hosts runs each host's include and its
    steps one host after another in fleetfix (ansible-core: the include on every host, then
    each included handler on every host), so the banners' order differs there."""
    theirs = copy_fixtures(PARITY, tmp_path, "ansible") / "includes_keywords.yml"
    ours = assert_same(
        theirs, copy_fixtures(PARITY, tmp_path, "fleetfix") / "includes_keywords.yml"
    )
    assert ours.exit_code == 0, ours.output


def test_run_once_includes_agree_with_ansible_on_several_hosts(tmp_path: Path) -> None:
    theirs = copy_fixtures(PARITY, tmp_path, "ansible") / "includes_run_once.yml"
    ours = assert_same(
        theirs, copy_fixtures(PARITY, tmp_path, "fleetfix") / "includes_run_once.yml", hosts=HOSTS
    )
    assert ours.exit_code == 0, ours.output


def _errors(tmp_path: Path, tasks: str) -> list[str]:
    (tmp_path / "checks.yml").write_text("- debug:\n    msg: checked\n")
    book = tmp_path / "site.yml"
    book.write_text(f"- hosts: localhost\n  gather_facts: false\n  tasks:\n{tasks}")
    return load_errors(book)


def test_apply_on_import_tasks_is_refused_where_it_is_written(tmp_path: Path) -> None:
    tasks = "    - import_tasks:\n        file: checks.yml\n        apply:\n          tags: [x]\n"
    assert _errors(tmp_path, tasks) == ["6:9 invalid option for import_tasks: 'apply'"]


def test_import_tasks_as_a_mapping_needs_its_file(tmp_path: Path) -> None:
    tasks = "    - import_tasks:\n        fil: checks.yml\n"
    assert _errors(tmp_path, tasks) == ["5:9 invalid option for import_tasks: 'fil'"]


def test_args_on_an_include_may_not_repeat_an_argument(tmp_path: Path) -> None:
    tasks = "    - include_tasks:\n        file: checks.yml\n      args:\n        file: other.yml\n"
    assert _errors(tmp_path, tasks) == ["7:9 argument 'file' given twice (and in args:)"]


def test_a_debugger_that_would_start_is_still_refused(tmp_path: Path) -> None:
    tasks = "    - include_tasks: checks.yml\n      debugger: on_failed\n"
    assert _errors(tmp_path, tasks) == ["5:7 unsupported step keyword 'debugger'"]


def test_a_missing_file_without_when_is_refused_at_load(tmp_path: Path) -> None:
    tasks = "    - include_tasks: nowhere.yml\n"
    assert _errors(tmp_path, tasks) == ["4:22 include_tasks file not found: nowhere.yml"]


def test_a_group_by_group_of_the_implicit_localhost_agrees_with_ansible(tmp_path: Path) -> None:
    """The inventory lists node1 only: localhost is the implicit one, in the group group_by
    made (`all` would still leave it out)."""
    theirs = copy_fixtures(PARITY, tmp_path, "ansible") / "includes_grouped_localhost.yml"
    ours = copy_fixtures(PARITY, tmp_path, "fleetfix") / "includes_grouped_localhost.yml"
    seen = assert_same(theirs, ours, hosts=("node1",))
    assert seen.recap.startswith("ok=2 "), seen.output


def test_unreadable_includes_agree_with_ansible(tmp_path: Path) -> None:
    theirs = copy_fixtures(PARITY, tmp_path, "ansible") / "includes_unreadable.yml"
    ours = copy_fixtures(PARITY, tmp_path, "fleetfix") / "includes_unreadable.yml"
    seen = assert_same(theirs, ours, hosts=HOSTS)
    assert "failed=2 " in seen.recap and "rescued=0 " in seen.recap, seen.output
    assert seen.exit_code == 0, seen.output


def _handler_file_errors(tmp_path: Path, handler_file: str, handler: str) -> list[str]:
    (tmp_path / "handlers.yml").write_text(handler_file)
    book = tmp_path / "site.yml"
    book.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        "    - command: 'true'\n"  # an import's name notifies nothing: no notify here
        f"  handlers:\n    - name: recheck\n      {handler}: handlers.yml\n"
    )
    errors = validate_playbook(book, builtin_catalog())
    return [f"{e.position.line}:{e.position.column} {e.message}" for e in errors if e.position]


NESTED = (
    "- name: outer\n  block:\n    - debug:\n        msg: fine\n"
    "    - name: inner\n      block:\n        - debug:\n            msg: refused\n"
)


def test_a_handler_file_block_holds_handlers_and_no_block(tmp_path: Path) -> None:
    """A handler file's top-level block is ansible-core's implicit one (its unnamed steps
    are fine); a block inside it is a block as a handler, refused where it is written."""
    for how in ("include_tasks", "import_tasks"):
        errors = _handler_file_errors(tmp_path, NESTED, how)
        assert errors == ["5:7 using a block as a handler is not supported"], (how, errors)


def test_unnamed_steps_a_handler_file_brings_in_are_accepted(tmp_path: Path) -> None:
    for how in ("include_tasks", "import_tasks"):
        assert _handler_file_errors(tmp_path, "- debug:\n    msg: hi\n", how) == [], how


def test_an_include_timeout_bounds_the_include_not_its_steps(tmp_path: Path) -> None:
    """ansible-core takes timeout: on an include for the include alone: the included steps
    do not inherit it (a block's timeout they do)."""
    (tmp_path / "checks.yml").write_text("- debug:\n    msg: checked\n")
    book = tmp_path / "site.yml"
    book.write_text(
        "- hosts: localhost\n  gather_facts: false\n  tasks:\n"
        "    - include_tasks: checks.yml\n      timeout: 5\n"
    )
    include = load_playbook(book, builtin_catalog()).plays[0].tasks[0]
    assert include.timeout is None
    assert [step.timeout for step in include.args["steps"]] == [None]
