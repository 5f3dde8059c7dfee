"""A step's own command that reboots, unloads the driver or resets a GPU gets the gates of
fleetfix's disruptive actions, for any playbook: which commands count, and the gates on the
fake transport (someone else's node, a busy node, the intent journaled before it is sent)."""

from __future__ import annotations

import pytest

from fleetfix.engine.disruptive import disruptive_command
from fleetfix.events import ActionStarted, CommandRan
from fleetfix.results import Outcome
from fleetfix.transport.fake import FakeTransport, Reply

from .conftest import Runner
from .test_safety_invariants import node

BUSY_PROCESSES = (
    "### fleetfix query-compute-apps timeout=15\n"
    "4242, python, GPU-00000000-0000-0000-0000-000000000000, 00000000:00:09.0, 1024 MiB\n"
    "### fleetfix end rc=0\n### fleetfix fuser timeout=15\n### fleetfix end rc=1\n"
)


@pytest.mark.parametrize(
    ("command", "what"),
    [
        ("reboot", "reboot"),
        ("sudo -n /sbin/reboot", "reboot"),
        ("systemctl reboot", "reboot"),
        ("systemctl --no-block poweroff", "reboot"),
        ("sync; shutdown -r now", "reboot"),
        ("nohup sh -c 'sleep 1' && /usr/sbin/reboot -f", "reboot"),
        ("scontrol reboot ASAP nextstate=RESUME gpu001", "reboot"),
        ("ipmitool -I lanplus -H bmc power cycle", "reboot"),
        ("echo b > /proc/sysrq-trigger", "reboot"),
        ("rmmod nvidia_uvm nvidia", "driver unload"),
        (
            "DEBIAN_FRONTEND=noninteractive apt-get -y install nvidia-driver-550",
            "GPU package change",
        ),
        ("sudo dnf -y remove 'cuda-drivers'", "GPU package change"),
        ("apt-get install -y datacenter-gpu-manager=1:3.3.9", "GPU package change"),
        ("FOO=1 reboot", "reboot"),
        ("modprobe -r nvidia", "driver unload"),
        ("modprobe --remove nvidia_peermem", "driver unload"),
        ("nvidia-smi -r -i 3", "GPU reset"),
        ("nvidia-smi --gpu-reset -i 0", "GPU reset"),
        ("timeout 60 nvidia-smi -i 0 -r", "GPU reset"),
        ("nvidia-smi -p 0", "ECC counter reset"),
        ("nvidia-smi -i 2 --reset-ecc-errors=1", "ECC counter reset"),
    ],
)
def test_commands_that_disrupt_a_node(command: str, what: str) -> None:
    assert disruptive_command(command) == what


@pytest.mark.parametrize(
    "command",
    [
        "echo will reboot after the window",
        "apt-get -y install ipmitool",
        "dpkg-query -W nvidia-driver-550",
        "apt-cache policy nvidia-driver-550",
        "last reboot | head",
        "journalctl --list-boots",
        "systemctl status nvidia-fabricmanager",
        "modprobe -a nvidia nvidia_uvm",
        "nvidia-smi -q -d ECC",
        "nvidia-smi -pm 1",
        "nvidia-smi -pl 300 -i 0",
        "grep -c rmmod_audit /var/log/x",
        "scontrol show node gpu001",
        "cat /proc/sys/kernel/sysrq",
        "reboot-report --since 1d",
        "/opt/site/bin/rmmod-audit",
    ],
)
def test_commands_that_do_not(command: str) -> None:
    assert disruptive_command(command) is None


USER_REBOOT = """
- hosts: gpu
  tasks:
    - name: reboot the way the wiki says
      shell: systemctl reboot
"""


def sent(fake: FakeTransport, host: str, text: str) -> bool:
    return any(text in c for c in fake.commands_on(host))


async def test_a_shell_reboot_leaves_someone_elses_node_alone(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    node(fake, "gpu001", state="IDLE+DRAIN", reason="reseat GPU 4 [bob@2026-11-25T03:00]")
    node(fake, "gpu002")
    run = await run_playbook(USER_REBOOT, hosts=["gpu001", "gpu002"])
    assert not sent(fake, "gpu001", "systemctl reboot")
    assert sent(fake, "gpu002", "systemctl reboot")
    assert run.result.left["gpu001"] == "left alone: owned by bob: reseat GPU 4"
    assert run.result.outcome() is Outcome.HOST_FAILED


async def test_a_shell_reboot_is_refused_on_a_busy_node(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    fake.host("gpu001").on(r"query-compute-apps", Reply(stdout=BUSY_PROCESSES))
    node(fake, "gpu001")  # its idle listing comes after the busy one: the first rule answers
    run = await run_playbook(USER_REBOOT, hosts=["gpu001"])
    assert not sent(fake, "gpu001", "systemctl reboot")
    (step,) = [r for r in run.result.results if r.step == "reboot the way the wiki says"]
    assert "refused" in step.message and "4242" in step.message, step.message


async def test_a_raw_rmmod_is_journaled_before_it_is_sent(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    node(fake, "gpu001")
    fake.host("gpu001").on(r"rmmod", Reply())
    run = await run_playbook(
        """
        - hosts: gpu
          tasks:
            - name: unload the driver
              raw: rmmod nvidia_uvm
        """,
        hosts=["gpu001"],
    )
    order = [
        type(e).__name__
        for e in run.events
        if isinstance(e, ActionStarted)
        or (isinstance(e, CommandRan) and "rmmod" in e.result.command)
    ]
    assert order == ["ActionStarted", "CommandRan"]
    (started,) = [e for e in run.events if isinstance(e, ActionStarted)]
    assert started.disruptive and started.action == "command (driver unload)"
    assert run.result.outcome() is Outcome.OK
