"""The keywords Ansible runbooks use that fleetfix used to refuse (issue 22, part 4): how the
loader reads each into the model the engine runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from fleetfix.errors import PlaybookError
from fleetfix.playbook.catalog import StepCatalog
from fleetfix.playbook.conditions import Templar
from fleetfix.playbook.loader import load_playbook, validate_playbook
from fleetfix.playbook.lookups import LookupFailed, _indexed_items, _sequence
from fleetfix.playbook.model import Play, StepKind


def _play(tmp_path: Path, catalog: StepCatalog, text: str) -> Play:
    path = tmp_path / "play.yml"
    path.write_text(text)
    return load_playbook(path, catalog).plays[0]


def _errors(tmp_path: Path, catalog: StepCatalog, text: str) -> list[str]:
    path = tmp_path / "play.yml"
    path.write_text(text)
    return [str(e) for e in validate_playbook(path, catalog)]


def _tasks(tasks: str, play: str = "") -> str:
    return f"- hosts: all\n{play}  tasks:\n{tasks}"


def test_play_check_mode_and_force_handlers_are_read(tmp_path: Path, catalog: StepCatalog) -> None:
    play = _play(
        tmp_path,
        catalog,
        _tasks("    - meta: noop\n", "  check_mode: true\n  force_handlers: yes\n"),
    )
    assert (play.check_mode, play.force_handlers) == (True, True)
    assert _play(tmp_path, catalog, _tasks("    - meta: noop\n")).check_mode is None


def test_templated_play_check_mode_and_environment_wait_for_the_play(
    tmp_path: Path, catalog: StepCatalog
) -> None:
    play = _play(
        tmp_path,
        catalog,
        _tasks(
            "    - meta: noop\n",
            '  check_mode: "{{ dry }}"\n  environment: "{{ proxy_env }}"\n',
        ),
    )
    assert set(play.templated) == {"check_mode", "environment"}


def test_local_action_is_the_module_delegated_to_localhost(
    tmp_path: Path, catalog: StepCatalog
) -> None:
    play = _play(
        tmp_path,
        catalog,
        _tasks(
            "    - local_action: command echo hi\n"
            "    - local_action: {module: stat, path: /etc/hosts}\n"
        ),
    )
    command, stat = play.tasks
    assert (command.kind, command.args, command.delegate_to) == (
        StepKind.COMMAND,
        {"cmd": "echo hi"},
        "localhost",
    )
    assert stat.kind is StepKind.MODULE
    assert (stat.args["module"], stat.args["params"]) == ("stat", {"path": "/etc/hosts"})
    assert stat.delegate_to == "localhost"


def test_local_action_with_delegate_to_or_no_module_is_refused(
    tmp_path: Path, catalog: StepCatalog
) -> None:
    both = _errors(
        tmp_path, catalog, _tasks("    - local_action: command echo\n      delegate_to: x\n")
    )
    assert any("mutually exclusive" in e for e in both)
    none = _errors(tmp_path, catalog, _tasks("    - local_action: {path: /x}\n"))
    assert any("local_action needs a module" in e for e in none)


def test_with_sequence_is_a_loop_over_the_sequence_lookup(
    tmp_path: Path, catalog: StepCatalog
) -> None:
    play = _play(
        tmp_path,
        catalog,
        _tasks(
            "    - debug: var=item\n      with_sequence: start=0 end={{ n }}\n"
            '    - debug: var=item\n      with_indexed_items: "{{ disks }}"\n'
            "    - debug: var=item\n      with_indexed_items: [a, b]\n"
        ),
    )
    sequence, indexed, literal = play.tasks
    assert sequence.loop == "{{ query('sequence', 'start=0 end=' ~ (n)) }}"
    assert not sequence.loop_flatten
    assert indexed.loop == "{{ query('indexed_items', (disks), _loop_terms=true) }}"
    assert literal.loop == "{{ query('indexed_items', ['a', 'b'], _loop_terms=true) }}"
    rendered = Templar().render(sequence.loop, {"n": 2})
    assert rendered == ["0", "1", "2"]


@pytest.mark.parametrize(
    ("term", "expected"),
    [
        ("start=0 end=3", ["0", "1", "2", "3"]),
        ("start=3 end=0 stride=-1", ["3", "2", "1", "0"]),
        ("4", ["1", "2", "3", "4"]),
        ("2-6/2", ["2", "4", "6"]),
        ("7-8:host%02d", ["host07", "host08"]),
        ("count=3 format=gpu%d start=0", ["gpu0", "gpu1", "gpu2"]),
        ("count=0", []),
    ],
)
def test_sequences_are_ansibles(term: str, expected: list[str]) -> None:
    assert _sequence(None, (term,), {}) == expected  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("term", "message"),
    [
        ("start=0 junk=3", "unrecognized arguments to with_sequence: ['junk']"),
        ("start=1", "must specify count or end in with_sequence"),
        ("start=1 end=4 count=2", "can't specify both count and end in with_sequence"),
        ("start=4 end=1 stride=2", "to count backwards make stride negative"),
        ("start=1 end=4 stride=-2", "to count forward don't make stride negative"),
        ("start=1 end=4 format=d", "bad formatting string: d"),
        ("A-4/2", "Invalid type for"),
    ],
)
def test_a_bad_sequence_says_what_ansible_says(term: str, message: str) -> None:
    with pytest.raises(LookupFailed, match="^" + message.replace("[", r"\[").replace("]", r"\]")):
        _sequence(None, (term,), {})  # type: ignore[arg-type]


def test_indexed_items_pairs_the_terms_flattened_once() -> None:
    found: Any = _indexed_items(None, ("a", ["b", ["c"]]), {})  # type: ignore[arg-type]
    assert found == [[0, "a"], [1, "b"], [2, ["c"]]]
    # ansible-core 2.19: a mapping is one item, no longer "with_indexed_items expects a list"
    assert _indexed_items(None, ({"a": 1},), {}) == [[0, {"a": 1}]]  # type: ignore[arg-type]


def test_set_fact_keys_may_be_templates(tmp_path: Path, catalog: StepCatalog) -> None:
    play = _play(
        tmp_path,
        catalog,
        _tasks(
            "    - set_fact: \"{{ 'x' + item }}={{ item }}\"\n      loop: ['1']\n"
            '    - set_fact:\n        "{{ name }}": 5\n'
        ),
    )
    assert play.tasks[0].args == {"{{ 'x' + item }}": "{{ item }}"}
    assert play.tasks[1].args == {"{{ name }}": 5}
    bad = _errors(tmp_path, catalog, _tasks('    - set_fact:\n        "{{ name ": 5\n'))
    assert bad


def test_vars_files_alternatives_take_the_first_that_exists(
    tmp_path: Path, catalog: StepCatalog
) -> None:
    (tmp_path / "site.yml").write_text("site: b\n")
    play = _play(
        tmp_path,
        catalog,
        _tasks("    - meta: noop\n", "  vars_files:\n    - [missing.yml, site.yml]\n"),
    )
    assert play.vars_files == ("site.yml",)
    none = _errors(
        tmp_path,
        catalog,
        _tasks("    - meta: noop\n", "  vars_files:\n    - [a.yml, b.yml]\n"),
    )
    assert any("vars file [a.yml, b.yml] was not found" in e for e in none)
    templated = _errors(
        tmp_path,
        catalog,
        _tasks("    - meta: noop\n", "  vars_files:\n    - ['{{ x }}.yml', site.yml]\n"),
    )
    assert templated == []  # picked per host at run time, as Ansible (playbook/vars_files.py)


@pytest.mark.parametrize("name", ["reset_connection", "clear_host_errors"])
def test_meta_steps_runbooks_use_load(tmp_path: Path, catalog: StepCatalog, name: str) -> None:
    play = _play(tmp_path, catalog, _tasks(f"    - meta: {name}\n"))
    assert play.tasks[0].args == {"name": name}


def test_roles_named_with_name_equals(tmp_path: Path, catalog: StepCatalog) -> None:
    tasks = tmp_path / "roles" / "gpu" / "tasks"
    tasks.mkdir(parents=True)
    (tasks / "main.yml").write_text("- meta: noop\n")
    (tasks / "other.yml").write_text("- meta: end_host\n")
    play = _play(
        tmp_path,
        catalog,
        _tasks("    - include_role: name=gpu tasks_from=other\n    - import_role: name=gpu\n"),
    )
    included, imported = play.tasks
    assert included.kind is StepKind.INCLUDE_ROLE
    assert [s.args for s in included.args["steps"]] == [{"name": "end_host"}]
    assert imported.args == {"name": "noop"}
    bad = _errors(tmp_path, catalog, _tasks("    - include_role: name=gpu bogus\n"))
    assert any("include_role" in e for e in bad)


def test_what_is_still_refused_says_what_to_write(tmp_path: Path, catalog: StepCatalog) -> None:
    errors = _errors(tmp_path, catalog, _tasks("    - debug: var=item\n      with_fileglob: '*'\n"))
    assert any("dict2items" in e for e in errors), errors
    with pytest.raises(PlaybookError, match="Cannot execute 'end_role' from outside of a role"):
        _play(tmp_path, catalog, _tasks("    - meta: end_role\n"))


def test_a_failing_lookup_says_which_plugin_failed_as_ansible_does() -> None:
    # ansible-core 2.19: "The lookup plugin 'X' failed: <cause>" (a rescue's
    # ansible_failed_result.msg reads it), for a with_ loop and a template alike
    with pytest.raises(Exception, match="The lookup plugin 'together' failed: with_together"):
        Templar().render("{{ query('together', [], _loop_terms=true) }}", {})
    with pytest.raises(Exception, match="The lookup plugin 'sequence' failed: must specify"):
        Templar().render("{{ lookup('sequence', 'start=1') }}", {})
    # errors=ignore: None, or [] with wantlist (ansible-core's _invoke_lookup)
    assert Templar().render("{{ lookup('sequence', 'start=1', errors='ignore') }}", {}) is None
    ignored = "{{ lookup('sequence', 'start=1', errors='ignore', wantlist=true) }}"
    assert Templar().render(ignored, {}) == []
