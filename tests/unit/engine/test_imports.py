"""import_tasks and import_playbook over the fake transport: steps in place, keys per import."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetfix.errors import PlaybookError
from fleetfix.transport.fake import FakeTransport

from .conftest import Runner


async def test_a_file_imported_twice_runs_twice_under_two_keys(
    run_playbook: Runner, fake: FakeTransport, tmp_path: Path
) -> None:
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "reset.yml").write_text(
        "- name: reset\n  shell: reset-gpu {{ gpu }}\n  tags: [reset]\n"
    )
    run = await run_playbook(
        """
        - hosts: gpu
          tasks:
            - import_tasks: tasks/reset.yml
              vars: {gpu: 0}
            - import_tasks: tasks/reset.yml
              vars: {gpu: 1}
              when: inventory_hostname == 'gpu002'
        """,
        hosts=["gpu001", "gpu002"],
    )
    assert fake.commands_on("gpu001") == ["reset-gpu 0"]
    assert fake.commands_on("gpu002") == ["reset-gpu 0", "reset-gpu 1"]
    keys = {r.key for r in run.result.results}
    imported = str(tmp_path / "tasks" / "reset.yml")
    assert keys == {
        f"{tmp_path / 'playbook.yml'}:4:7>{imported}:1:3",
        f"{tmp_path / 'playbook.yml'}:6:7>{imported}:1:3",
    }


async def test_an_error_in_an_imported_file_stops_the_run_with_its_place(
    run_playbook: Runner, fake: FakeTransport, tmp_path: Path
) -> None:
    (tmp_path / "broken.yml").write_text("- name: typo\n  shel: reboot\n")
    with pytest.raises(PlaybookError) as caught:
        await run_playbook(
            """
            - hosts: gpu
              tasks:
                - shell: echo first
                - import_tasks: broken.yml
            """,
            hosts=["gpu001"],
        )
    assert str(caught.value.position) == f"{tmp_path / 'broken.yml'}:2:3"
    assert fake.commands_on("gpu001") == []
