"""module_defaults read at load: merged down to module steps as ansible-core merges them, and
the names fleetfix cannot apply refused at their line:col."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetfix.errors import PlaybookError
from fleetfix.playbook.loader import load_playbook, validate_playbook
from fleetfix.playbook.model import Step
from fleetfix.playbook.module_defaults import DEFAULTS_KEY, defaults_for, with_defaults

from .conftest import make_catalog


def _load(tmp_path: Path, text: str) -> tuple[Step, ...]:
    path = tmp_path / "play.yml"
    path.write_text(text, encoding="utf-8")
    return load_playbook(path, make_catalog()).plays[0].tasks


def test_a_play_block_and_step_merge_with_the_inner_mapping_replacing_a_modules(
    tmp_path: Path,
) -> None:
    tasks = _load(
        tmp_path,
        """
- hosts: all
  module_defaults:
    file: {mode: "0644", owner: root}
    stat: {follow: true}
  tasks:
    - block:
        - file: {path: /tmp/a}
          module_defaults:
            ansible.builtin.file: {state: touch}
        - stat: {path: /tmp/a}
      module_defaults:
        - ansible.legacy.file: {owner: nobody}
""",
    )
    touched, stat = tasks[0].block
    # the step's mapping for file replaces the block's, which replaced the play's
    assert touched.args[DEFAULTS_KEY] == {"state": "touch"}
    assert stat.args[DEFAULTS_KEY] == {"follow": True}


def test_a_required_argument_may_come_from_the_defaults(tmp_path: Path) -> None:
    tasks = _load(
        tmp_path,
        """
- hosts: all
  module_defaults: {stat: {path: /etc/hostname}}
  tasks:
    - stat:
""",
    )
    assert tasks[0].args[DEFAULTS_KEY] == {"path": "/etc/hostname"}


def test_play_ignore_errors_unreachable_and_run_once_reach_the_steps(tmp_path: Path) -> None:
    tasks = _load(
        tmp_path,
        """
- hosts: all
  ignore_errors: yes
  ignore_unreachable: true
  run_once: true
  tasks:
    - block:
        - ping:
    - ping:
      ignore_unreachable: false
""",
    )
    block, own = tasks
    # ignore_errors reaches a block's steps from the block when it runs (engine/play.py)
    assert block.ignore_errors and block.block[0].ignore_unreachable
    assert block.block[0].run_once is True and block.run_once is False
    assert own.ignore_errors and own.run_once is True


@pytest.mark.parametrize(
    ("defaults", "message", "hint"),
    [
        ("{group/aws: {region: x}}", "action groups are not supported", "name each module"),
        ("{flie: {mode: '0644'}}", "no such module", "did you mean 'file'?"),
        ("{file: 3}", "must be a mapping of arguments", "module_defaults is a mapping"),
        ("[3]", "module_defaults entry is 3", "module_defaults is a mapping"),
    ],
)
def test_what_cannot_be_applied_is_refused_where_it_is_written(
    tmp_path: Path, defaults: str, message: str, hint: str
) -> None:
    path = tmp_path / "play.yml"
    path.write_text(
        f"- hosts: all\n  tasks:\n    - ping:\n      module_defaults: {defaults}\n",
        encoding="utf-8",
    )
    errors = validate_playbook(path, make_catalog())
    assert len(errors) == 1
    error = errors[0]
    assert isinstance(error, PlaybookError)
    assert message in str(error)
    assert error.position is not None and error.position.line == 4
    assert error.hint is not None and hint in error.hint


def test_another_collections_module_is_left_out(tmp_path: Path) -> None:
    tasks = _load(
        tmp_path,
        "- hosts: all\n  module_defaults: {cisco.ios.ios_facts: {gather_subset: min}}\n"
        "  tasks:\n    - ping:\n",
    )
    assert DEFAULTS_KEY not in tasks[0].args


def test_gather_facts_takes_setups_defaults_under_its_own() -> None:
    chain = [
        {
            "setup": {"gather_subset": "!all", "filter": "x"},
            "gather_facts": {"gather_subset": "min"},
        }
    ]
    assert defaults_for("gather_facts", chain) == {"gather_subset": "min", "filter": "x"}
    assert defaults_for("setup", chain) == {"gather_subset": "!all", "filter": "x"}


def test_the_steps_own_arguments_win() -> None:
    assert with_defaults({"mode": "0600"}, {"mode": "0644", "owner": "root"}) == {
        "owner": "root",
        "mode": "0600",
    }
