"""A probe step's parameters reach its parser through the engine (issue 18): nvidia_smi's
`expected_gpus` is counted from the step, not echoed through the node's shell."""

from __future__ import annotations

from pathlib import Path

from fleetfix.transport.fake import FakeTransport, Reply

from .conftest import Runner

H200 = Path(__file__).parents[2] / "fixtures" / "samples" / "real-nodes" / "h200-sxm-vm-580.159.04"


async def test_expected_gpus_reaches_the_parser(run_playbook: Runner, fake: FakeTransport) -> None:
    xml = (H200 / "probe-nvidia_smi.txt").read_text(encoding="utf-8")  # one H200
    for host in ("gpu001", "gpu002"):
        fake.host(host).on(r"nvidia-smi -q -x", Reply(stdout=xml))
    run = await run_playbook(
        """
        - hosts: gpu
          tasks:
            - probe:
                name: nvidia_smi
                expected_gpus: "{{ want }}"
              register: smi
              ignore_errors: true
            - assert:
                that:
                  - smi.facts.expected_gpus == want
                  - smi.facts.count_ok == (want == 1)
        """,
        inventory="[gpu]\ngpu001 want=1\ngpu002 want=2\n",
    )
    assert run.recap("gpu001")["failed"] == 0
    assert run.recap("gpu002")["failed"] == 0  # the probe read count_ok false, as asserted
    for host in ("gpu001", "gpu002"):
        (command,) = fake.commands_on(host)
        assert "echo" not in command and "expected_gpus" not in command
