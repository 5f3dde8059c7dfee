"""Which hosts a play runs on, against ansible-playbook: the implicit localhost, meta
end_batch across serial batches; and fleetfix's refusals around them (issue 12)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from fleetfix.cli.loading import builtin_catalog
from fleetfix.errors import PlaybookError
from fleetfix.playbook.loader import validate_playbook
from tests.support.parity import VENV_BIN, ansible_playbook, assert_same, copy_fixtures, fleetfix

FIXTURES = Path(__file__).parents[2] / "fixtures" / "playbooks" / "parity_hosts"
NODES = ("node-a", "node-b")


def test_implicit_localhost_agrees_with_ansible(tmp_path: Path) -> None:
    """An inventory without localhost: `hosts: localhost` runs on the implicit localhost
    (local connection, in no group); `all` and a wildcard leave it out."""
    theirs, ours = (
        copy_fixtures(FIXTURES, tmp_path, "ansible"),
        copy_fixtures(FIXTURES, tmp_path, "fleetfix"),
    )
    seen = assert_same(
        theirs / "implicit_localhost.yml", ours / "implicit_localhost.yml", hosts=NODES
    )
    assert seen.recap.startswith("ok=2 changed=1")
    assert seen.exit_code == 0


def test_end_batch_runs_the_same_steps_as_ansible(tmp_path: Path) -> None:
    """end_batch (with a when) ends node-a's batch only; node-b's batch runs the play; with
    every host in one batch it ends the play's steps, and the run goes on to the next play.
    Two display differences are left out of the comparison: ansible-playbook repeats the
    PLAY banner for each batch (fleetfix prints `batch 2/2`) and prints `skipping` for a
    host a batch-wide meta step's when does not hold for."""
    theirs = ansible_playbook(
        copy_fixtures(FIXTURES, tmp_path, "ansible") / "end_batch.yml", hosts=NODES
    )
    ours = fleetfix(copy_fixtures(FIXTURES, tmp_path, "fleetfix") / "end_batch.yml", hosts=NODES)
    where = f"\n--- ansible-playbook:\n{theirs.output}\n--- fleetfix:\n{ours.output}"
    assert ours.other_recaps == theirs.other_recaps, where
    assert [v for v in ours.verdicts if "skipping" not in v] == [
        v for v in theirs.verdicts if "skipping" not in v
    ], where
    assert list(dict.fromkeys(ours.banners)) == list(dict.fromkeys(theirs.banners)), where
    assert ours.exit_code == theirs.exit_code == 0, where


def _run(
    tmp_path: Path, playbook: str, inventory: str, *extra: str
) -> subprocess.CompletedProcess[str]:
    (tmp_path / "site.yml").write_text(playbook)
    (tmp_path / "hosts.ini").write_text(inventory)
    env = {**os.environ, "NO_COLOR": "1", "FLEETFIX_JOURNAL": str(tmp_path / "j.sqlite")}
    command = [str(VENV_BIN / "fleetfix"), "run", "-i", str(tmp_path / "hosts.ini")]
    command += ["--transport", "local", "--yes", *extra, str(tmp_path / "site.yml")]
    return subprocess.run(
        command, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False
    )


ACTION_ON_LOCALHOST = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: clean shared memory
      action: clean_shm
    - name: never reached
      debug:
        msg: no
"""


def test_an_action_on_the_implicit_localhost_is_refused(tmp_path: Path) -> None:
    """The controller is never remediated by accident: an action step on the implicit
    localhost leaves the host refused, saying why, before any gate probe runs."""
    done = _run(tmp_path, ACTION_ON_LOCALHOST, "gpu001 ansible_host=192.0.2.1\n")
    assert done.returncode != 0
    assert "implicit localhost (the controller)" in done.stdout + done.stderr
    assert "never reached" not in done.stdout


def test_an_empty_inventory_warns_as_ansible(tmp_path: Path) -> None:
    done = _run(tmp_path, ACTION_ON_LOCALHOST.replace("action: clean_shm", "command: 'true'"), "")
    assert "provided hosts list is empty, only localhost is available" in done.stderr
    assert done.returncode == 0, done.stdout + done.stderr


ADD_HOST_REDIRECT = """
- hosts: gpu001
  gather_facts: false
  tasks:
    - name: point a listed host at the controller
      add_host:
        name: gpu001
        ansible_connection: local
"""


def test_add_host_may_not_redirect_a_listed_host(tmp_path: Path) -> None:
    done = _run(tmp_path, ADD_HOST_REDIRECT, "gpu001 ansible_connection=local\n")
    assert done.returncode != 0
    assert "add_host may not change how gpu001" in done.stdout


ADDED_HOST_ACTION = """
- hosts: localhost
  gather_facts: false
  tasks:
    - add_host: name=extra ansible_connection=local groups=new
- hosts: new
  gather_facts: false
  tasks:
    - action: clean_shm
"""


def test_an_action_on_an_added_host_is_refused(tmp_path: Path) -> None:
    done = _run(tmp_path, ADDED_HOST_ACTION, "localhost ansible_connection=local\n")
    assert done.returncode != 0
    assert "extra was added by add_host, not listed in the inventory" in done.stdout


def test_templated_hosts_from_extra_vars(tmp_path: Path) -> None:
    playbook = '- hosts: "{{ target }}"\n  gather_facts: false\n  tasks:\n    - debug: msg=hi\n'
    done = _run(tmp_path, playbook, "gpu001 ansible_connection=local\n", "-e", "target=gpu001")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ok: [gpu001]" in done.stdout


def test_a_play_keyword_that_cannot_render_is_refused_at_its_place(tmp_path: Path) -> None:
    playbook = '- hosts: all\n  serial: "{{ batch }}"\n  tasks:\n    - debug: msg=hi\n'
    done = _run(tmp_path, playbook, "gpu001 ansible_connection=local\n")
    assert done.returncode != 0
    assert (
        "site.yml:2:11" in done.stderr and "play keyword 'serial' cannot be rendered" in done.stderr
    )
    assert "ok: [gpu001]" not in done.stdout


def test_end_role_outside_a_role_is_refused_at_load(tmp_path: Path) -> None:
    playbook = tmp_path / "meta.yml"
    playbook.write_text("- hosts: all\n  tasks:\n    - meta: end_role\n")
    errors = validate_playbook(playbook, builtin_catalog())
    assert [e.message for e in errors] == ["Cannot execute 'end_role' from outside of a role"]
    assert isinstance(errors[0], PlaybookError) and errors[0].position is not None
    assert (errors[0].position.line, errors[0].position.column) == (3, 7)
