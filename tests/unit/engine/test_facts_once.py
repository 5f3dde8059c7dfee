"""A probe's facts are kept once, typed, on the host: `register:` and templates read them as
data, the journal's event carries the data, the run's results do not keep a second copy
(`fleetfix probe`, which prints them all at the end, asks to: keep_facts)."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetfix.events import HostStepFinished
from fleetfix.probes import probe_registry
from fleetfix.probes.base import to_data
from fleetfix.transport.fake import FakeTransport, Reply

from .conftest import Runner

SAMPLE = (
    Path(__file__).parents[2]
    / "fixtures/samples/nvidia-smi-xml/lab-healthy-1000-8xh100-550.90.07.xml"
)
PLAYBOOK = """
- hosts: gpu
  gather_facts: false
  tasks:
    - name: read the GPUs
      probe: {name: nvidia_smi}
      register: smi
    - assert:
        that:
          - smi.facts.gpu_count == 8
          - smi.facts.gpus[0].uuid is string
"""


@pytest.mark.parametrize("keep_facts", [False, True])
async def test_facts_are_kept_once_and_read_as_data(
    run_playbook: Runner, fake: FakeTransport, keep_facts: bool
) -> None:
    text = SAMPLE.read_text()
    fake.host("gpu001").on("nvidia-smi", Reply(stdout=text))
    expected = to_data(probe_registry().get("nvidia_smi").read(text, {}))

    run = await run_playbook(PLAYBOOK, hosts=["gpu001"], keep_facts=keep_facts)

    assert run.recap("gpu001")["failed"] == 0, run.statuses("gpu001")
    emitted = [
        e.result
        for e in run.events
        if isinstance(e, HostStepFinished) and e.result.step == "read the GPUs"
    ]
    assert [r.data["facts"] for r in emitted] == [expected], "the journal's event lost the facts"
    kept = next(r for r in run.result.results if r.step == "read the GPUs")
    assert ("facts" in kept.data) == keep_facts
    if keep_facts:
        assert kept.data["facts"] == expected
