"""Issue 18 in the engine: a node short of a GPU is unhealthy wherever it is found, with no
`gpus=` in the inventory (Slurm's Gres, the PCI bus or the journal say how many it has); a tool
the node does not have is a skipped probe, not a fault, and still refuses a gate that needs it.
Real captures: one H200 (tests/fixtures/samples/real-nodes), Slurm's scontrol."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from fleetfix.topology.caps import DomainCap
from fleetfix.transport.fake import FakeTransport, Reply

from .conftest import Runner

H200 = Path(__file__).parents[2] / "fixtures" / "samples" / "real-nodes" / "h200-sxm-vm-580.159.04"
SCONTROL_IDLE_2GPU = """NodeName=gpu001 Arch=x86_64 CoresPerSocket=56
   Gres=gpu:h200:2
   State=IDLE ThreadsPerCore=2 TmpDisk=0 Weight=1
   Partitions=gpu
"""
TWO_ON_THE_BUS = (
    "### fleetfix lspci\n"
    "0000:00:06.0 3D controller [0302]: NVIDIA Corporation GH100 [H200 SXM] [10de:2335] (rev a1)\n"
    "0000:00:07.0 3D controller [0302]: NVIDIA Corporation GH100 [H200 SXM] [10de:2335] (rev a1)\n"
)
SWEEP = """
- hosts: gpu
  tasks:
    - probe: slurm_node
      ignore_errors: true
    - probe: pci_gpus
      ignore_errors: true
    - probe: nvidia_smi
      register: smi
      ignore_errors: true
"""


def _one_h200(fake: FakeTransport, host: str = "gpu001") -> None:
    xml = (H200 / "probe-nvidia_smi.txt").read_text(encoding="utf-8")
    fake.host(host).on(r"nvidia-smi -q -x", Reply(stdout=xml))


async def test_a_node_short_of_a_gres_gpu_is_left_unhealthy(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    _one_h200(fake)
    fake.host("gpu001").on(r"scontrol show node", Reply(stdout=SCONTROL_IDLE_2GPU))
    fake.host("gpu001").on(r"lspci", Reply(stdout="### fleetfix sysfs\n"))
    run = await run_playbook(SWEEP, hosts=["gpu001"])
    assert run.recap("gpu001")["failed"] == 0
    assert "1 of 2 GPUs visible (Slurm's Gres)" in run.result.left["gpu001"]
    assert int(run.result.outcome()) == 2


async def test_the_pci_bus_alone_says_a_gpu_is_missing(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    _one_h200(fake)
    fake.host("gpu001").on(
        r"scontrol show node", Reply(stdout="bash: scontrol: command not found\n", rc=127)
    )
    fake.host("gpu001").on(r"lspci", Reply(stdout=TWO_ON_THE_BUS))
    run = await run_playbook(SWEEP, hosts=["gpu001"])
    assert "1 of 2 GPUs visible (NVIDIA GPUs on the PCI bus)" in run.result.left["gpu001"]


async def test_nvidia_smi_is_held_to_the_expected_count_without_gpus_in_the_inventory(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    _one_h200(fake)
    fake.host("gpu001").on(r"scontrol show node", Reply(stdout=SCONTROL_IDLE_2GPU))
    fake.host("gpu001").on(r"lspci", Reply(stdout="### fleetfix sysfs\n"))
    run = await run_playbook(
        SWEEP
        + """
    - assert:
        that:
          - smi.facts.expected_gpus == 2
          - smi.facts.count_ok == false
          - (smi.facts | fleetfix_remedy).remedy == 'reboot'
""",
        hosts=["gpu001"],
    )
    assert run.recap("gpu001")["failed"] == 0, run.statuses("gpu001")


async def test_a_whole_node_is_healthy(run_playbook: Runner, fake: FakeTransport) -> None:
    _one_h200(fake)
    fake.host("gpu001").on(
        r"scontrol show node", Reply(stdout=SCONTROL_IDLE_2GPU.replace(":2", ":1"))
    )
    fake.host("gpu001").on(
        r"lspci", Reply(stdout="### fleetfix sysfs\n0000:00:06.0 0x030200 0x2335\n")
    )
    run = await run_playbook(SWEEP, hosts=["gpu001"])
    assert run.result.left == {}
    assert int(run.result.outcome()) == 0


async def test_a_tool_the_node_lacks_is_skipped_not_failed(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    fake.host("gpu001").on(r"ibstat", Reply(stdout=(H200 / "probe-ib.txt").read_text()))
    run = await run_playbook(
        """
        - hosts: gpu
          tasks:
            - probe: ib
              register: ib
            - assert:
                that:
                  - ib.skipped
                  - ib.absent is defined
        """,
        hosts=["gpu001"],
    )
    assert run.recap("gpu001")["failed"] == 0, run.statuses("gpu001")
    assert ("probe ib", "skipped") in run.statuses("gpu001")
    assert run.result.left == {} and int(run.result.outcome()) == 0


async def test_a_gate_fed_by_a_missing_tool_refuses(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    slurm = (H200 / "probe-slurm_node.txt").read_text()
    fake.host("gpu001").on(r"scontrol|sinfo", Reply(stdout=slurm))
    run = await run_playbook(
        """
        - hosts: gpu
          tasks:
            - action:
                name: slurm_drain
                reason: "fleetfix: test"
        """,
        hosts=["gpu001"],
    )
    assert "cannot evaluate its safety gates" in run.result.left["gpu001"]
    assert "not installed" in run.result.left["gpu001"]
    assert not any("scontrol update" in c for c in fake.commands_on("gpu001"))


async def test_check_mode_names_a_health_probe_it_could_not_read(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    """The nightly sweep in --check on the real H200 printed 'ok' and exited 0 over a topo -m it
    could not read (ignore_errors): a probe nobody can read is no plan's to fix."""
    _one_h200(fake)
    fake.host("gpu001").on(r"topo -m", Reply(stdout="NVIDIA-SMI has failed\n", rc=9))
    run = await run_playbook(
        """
        - hosts: gpu
          tasks:
            - probe: nvidia_smi
              ignore_errors: true
            - probe: topology
              ignore_errors: true
        """,
        hosts=["gpu001"],
        check=True,
    )
    assert "topology:" in run.result.left["gpu001"]
    assert int(run.result.outcome()) == 2


async def test_check_mode_leaves_a_readable_fault_to_the_plan(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    """A fault still showing in --check may be one the real run fixes: not named."""
    _one_h200(fake)
    fake.host("gpu001").on(r"scontrol show node", Reply(stdout=SCONTROL_IDLE_2GPU))
    fake.host("gpu001").on(r"lspci", Reply(stdout="### fleetfix sysfs\n"))
    run = await run_playbook(SWEEP, hosts=["gpu001"], check=True)
    assert run.result.left == {}


class _Journal:
    """A journal that remembers 2 GPUs for every host and counts how often it is asked."""

    def __init__(self) -> None:
        self.asked = 0

    def gpus_seen(self, host: str) -> int | None:
        self.asked += 1
        return 2

    def action_times(self, host: str, action: str, since: float) -> list[float]:
        return []

    def take_out(
        self, host: str, action: str, limit: int | None, domains: Sequence[DomainCap] = ()
    ) -> str | None:
        return None

    def mark_undelivered(self, record: int) -> None:
        return None

    def stranded(self, hosts: Sequence[str]) -> dict[str, str]:
        return {}

    def abandoned(self, run_id: str) -> bool:
        return False

    def settled(self, host: str) -> None:
        return None


async def test_the_journal_s_most_seen_is_read_once_per_host_and_holds_nvidia_smi(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    _one_h200(fake)
    journal = _Journal()
    run = await run_playbook(
        """
        - hosts: gpu
          tasks:
            - probe: nvidia_smi
              register: smi
              loop: [1, 2, 3]
              ignore_errors: true
            - assert:
                that: smi.results | map(attribute='facts.count_ok') | list == [false, false, false]
        """,
        hosts=["gpu001"],
        memory=journal,
    )
    assert run.recap("gpu001")["failed"] == 0, run.statuses("gpu001")
    assert journal.asked == 1
    assert "1 of 2 GPUs visible" in run.result.left["gpu001"]
