"""Results under the right TASK banner when hosts take different ways through a block (one host
in the rescue while another goes on in the block), and a loop's items under their step's
banner. The linear strategy keeps hosts in lockstep as ansible-core's does: the rescue runs
once the other host finished the block's steps, so each banner is printed once, in playbook
order, and never a banner for a block itself."""

from __future__ import annotations

import io
import re

from fleetfix.events import HostStepFinished, LoopItemFinished
from fleetfix.report.console import ConsoleView
from fleetfix.transport.fake import FakeTransport, Reply
from tests.unit.engine.conftest import Runner

BANNER = re.compile(r"^(?:TASK|RUNNING HANDLER) \[(.*)\] \*+$")
HOST_LINE = re.compile(r"^(?:ok|changed|fatal|failed|skipping): \[(\w+)\]")

PLAYBOOK = """
- hosts: gpu
  tasks:
    - name: a block
      block:
        - name: check
          shell: check
        - name: second check
          shell: second
        - name: per GPU
          shell: echo {{ item }}
          loop: [0, 1]
      rescue:
        - name: rescue it
          shell: rescue_it
        - name: rescue more
          shell: rescue_more
      always:
        - name: clean up
          shell: cleanup
    - name: next
      shell: next_step
"""


async def test_each_result_under_its_own_banner(run_playbook: Runner, fake: FakeTransport) -> None:
    fake.host("gpu001").on("check", Reply(rc=2, stderr="boom"))
    out = io.StringIO()
    run = await run_playbook(
        PLAYBOOK, hosts=["gpu001", "gpu002"], subscribe=ConsoleView(out, verbosity=0)
    )
    lines = out.getvalue().splitlines()
    banners = [m.group(1) for line in lines if (m := BANNER.match(line))]
    under: list[tuple[str, str]] = []  # (banner, host) for each host line, as printed
    current = ""
    for line in lines:
        if match := BANNER.match(line):
            current = match.group(1)
        elif match := HOST_LINE.match(line):
            under.append((current, match.group(1)))
    results = [
        (e.result.step, e.result.host)
        for e in run.events
        if isinstance(e, LoopItemFinished)
        or (isinstance(e, HostStepFinished) and e.result.step != "per GPU")
    ]
    assert under == results, "\n".join(lines)
    assert "a block" not in banners
    assert ("rescue it", "gpu001") in under and ("second check", "gpu002") in under
    # gpu002 finished the block's steps before gpu001's rescue ran, as ansible-playbook shows.
    expected = ["check", "second check", "per GPU", "rescue it", "rescue more", "clean up", "next"]
    assert banners == expected, "\n".join(lines)
