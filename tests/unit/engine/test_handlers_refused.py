"""What ansible-core refuses as a handler is refused when the playbook loads, with its place."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetfix.cli.loading import builtin_catalog
from fleetfix.playbook.loader import validate_playbook

_PLAY = """\
- hosts: all
  gather_facts: false
  tasks:
    - command: echo
      notify: handler
  handlers:
    - name: handler
{body}"""


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("      meta: flush_handlers\n", "meta: flush_handlers cannot be used as a handler"),
        ("      meta: end_role\n", "end_role"),
        ("      include_role:\n        name: x\n", "using 'include_role' as a handler"),
        (  # a top-level block is ansible-core's implicit block of handlers; one in it is not
            "      block:\n        - name: inner\n          block:\n            - debug:\n",
            "using a block as a handler is not supported",
        ),
        ("      import_role:\n        name: x\n", "import_role: is not valid in handler steps"),
    ],
)
def test_refused_as_a_handler(tmp_path: Path, body: str, message: str) -> None:
    playbook = tmp_path / "play.yml"
    playbook.write_text(_PLAY.format(body=body))
    errors = validate_playbook(str(playbook), builtin_catalog())
    assert [e for e in errors if message in str(e)], [str(e) for e in errors]
    found = next(e for e in errors if message in str(e))
    assert found.position is not None and found.position.line >= 7


def test_a_plain_handler_loads(tmp_path: Path) -> None:
    playbook = tmp_path / "play.yml"
    playbook.write_text(_PLAY.format(body="      debug:\n        msg: ran\n"))
    assert validate_playbook(str(playbook), builtin_catalog()) == []
