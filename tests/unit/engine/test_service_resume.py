"""--resume of a systemd/service step whose intent an interrupted run journaled: a unit whose
state shows the change did not take gets it now (the service action has no probe to verify
with, so it would otherwise count as "verified, not repeated"); a restart, which the unit's
state cannot tell, is settled as any action and not repeated."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetfix.results import OpenIntent, ResumeState
from fleetfix.transport.fake import FakeTransport, Reply

from .conftest import Runner

INVENTORY = "[gpu]\ngpu001 fleetfix_slurm=false\n"
ACTIVE = "Id=nvidia-fabricmanager.service\nLoadState=loaded\nActiveState=active\nSubState=running\n"


def _book(state: str) -> str:
    return f"""
- hosts: gpu
  tasks:
    - name: the fabric manager
      ansible.builtin.systemd: {{name: nvidia-fabricmanager, state: {state}}}
"""


def _sent(fake: FakeTransport, verb: str) -> int:
    return sum(f"systemctl {verb}" in c for c in fake.commands_on("gpu001"))


@pytest.mark.parametrize(
    ("state", "verb", "sent"), [("stopped", "stop", 1), ("restarted", "restart", 0)]
)
async def test_an_interrupted_service_change(
    run_playbook: Runner, fake: FakeTransport, tmp_path: Path, state: str, verb: str, sent: int
) -> None:
    fake.host("gpu001").on(r"systemctl show", Reply(stdout=ACTIVE))
    key = ("gpu001", f"{tmp_path / 'playbook.yml'}:4:7", "service")
    intent = OpenIntent("service", at=0.0, evidence={}, record=1)
    run = await run_playbook(
        _book(state), inventory=INVENTORY, resume=ResumeState(run_id="r1", intents={key: intent})
    )
    assert _sent(fake, verb) == sent, fake.commands_on("gpu001")
    last = run.result.results[-1]
    assert last.status.value in ("changed", "ok"), last
    assert ("verified, not repeated" in last.message) is (sent == 0), last.message


async def test_without_an_interrupted_run_the_stop_is_sent_once(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    fake.host("gpu001").on(r"systemctl show", Reply(stdout=ACTIVE))
    await run_playbook(_book("stopped"), inventory=INVENTORY)
    assert _sent(fake, "stop") == 1
