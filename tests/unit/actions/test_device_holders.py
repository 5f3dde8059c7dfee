"""Holders of /dev/nvidia* found from the node (issue 18): the device_holders probe maps each PID
fuser lists to its systemd unit or Slurm job; gpu_reset and reload_driver stop every unit that
holds the devices and start it again, keep the known list as a fallback, and refuse, naming PID,
command and user, a holder that is neither a job nor a service they can stop, or a holder list
that cannot be read (NVIDIA: no other client on the GPUs for a reset or a driver reload)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from fleetfix.actions import action_registry
from fleetfix.actions.base import ActionContext, ActionPlan
from fleetfix.actions.driver import ACTIONS as DRIVER_ACTIONS
from fleetfix.actions.gpu import ACTIONS as GPU_ACTIONS
from fleetfix.engine import Engine, RunOptions
from fleetfix.engine.disruptive import disruptive_command
from fleetfix.errors import ProbeParseError
from fleetfix.events import EventBus
from fleetfix.inventory import load_inventory
from fleetfix.playbook.conditions import Templar
from fleetfix.playbook.loader import StepCatalog, load_playbook
from fleetfix.probes import device_holders, gpu_processes, kernel_modules, probe_registry, services
from fleetfix.probes.gpu_facts import NvidiaSmiFacts
from fleetfix.results import RunResult
from fleetfix.transport.base import ConnectionSpec
from fleetfix.transport.fake import FakeTransport, Reply
from tests.unit.actions.node_facts import H100, flag, node, units

H200 = Path(__file__).resolve().parents[2] / "fixtures/samples/real-nodes/h200-sxm-vm-580.159.04"
GPU_RESET = next(a for a in GPU_ACTIONS if a.name == "gpu_reset")
RELOAD = DRIVER_ACTIONS[0]
HGX = {
    "nvidia_persistenced": "active",
    "nvidia_fabricmanager": "active",
    "nvidia_dcgm": "active",
}
FUSER_TABLE = """\
### fleetfix query-compute-apps timeout=15
### fleetfix end rc=0
### fleetfix fuser timeout=15
                     USER        PID ACCESS COMMAND
/dev/nvidia0:        root       1913 F...m nvidia-persiste
                     root       2188 F...m nv-fabricmanage
                     root       2207 F...m nv-hostengine
                     root       3301 F...m dcgm-exporter
{extra}### fleetfix end rc=0
"""
"""gpu_processes' output on an idle HGX node: the persistence daemon, Fabric Manager, DCGM's
hostengine and a dcgm-exporter (`extra`: more fuser rows)."""
HOLDERS = """\
### fleetfix fuser rc=0
### fleetfix holder pid=1913
user root
comm nvidia-persistenced
cgroup 0::/system.slice/nvidia-persistenced.service
### fleetfix holder pid=2188
user root
comm nv-fabricmanager
cgroup 0::/system.slice/nvidia-fabricmanager.service
### fleetfix holder pid=2207
user root
comm nv-hostengine
cgroup 0::/system.slice/nvidia-dcgm.service
### fleetfix holder pid=3301
user root
comm dcgm-exporter
cgroup 0::/system.slice/nvidia-dcgm-exporter.service
{extra}### fleetfix end
"""
"""device_holders' output for the same node: the exporter runs as the unit NVIDIA's packages
name nvidia-dcgm-exporter, which no fixed list of fleetfix's had."""
LSMOD = """\
### lsmod
Module                  Size  Used by
nvidia_uvm           2076672  0
nvidia_drm            135168  0
nvidia_modeset       1638400  1 nvidia_drm
nvidia              11763712  3 nvidia_uvm,nvidia_modeset
### version
NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build
"""


def facts(
    *,
    fuser: str = "",
    holders: str = "",
    svc: services.ServicesFacts | None = None,
    smi: NvidiaSmiFacts | None = None,
) -> dict[str, Any]:
    return {
        "nvidia_smi": smi or flag(node(H100), 3, recovery_action="reset"),
        "gpu_processes": gpu_processes.parse(FUSER_TABLE.format(extra=fuser)),
        "device_holders": device_holders.parse(HOLDERS.format(extra=holders)),
        "services": svc or units(**HGX),
        "kernel_modules": kernel_modules.parse(LSMOD),
    }


def reset(found: dict[str, Any], **params: Any) -> ActionPlan:
    return GPU_RESET.plan(ActionContext("n1", params, found, {}))


def reload(found: dict[str, Any], **params: Any) -> ActionPlan:
    return RELOAD.plan(ActionContext("n1", params, found, {}))


def commands(done: ActionPlan) -> list[str]:
    return [
        "<wait for fabric>" if c.command.startswith("deadline=") else c.command
        for c in done.commands
    ]


# --- the probe ----------------------------------------------------------------------------


def test_the_probe_reads_each_holders_unit_or_job_from_its_cgroup() -> None:
    text = """\
### fleetfix fuser rc=0
### fleetfix holder pid=812
user root
comm slurmstepd
cgroup 12:devices:/slurm/uid_1000/job_4242/step_0
cgroup 1:name=systemd:/system.slice/slurmd.service
### fleetfix holder pid=3301
user root
comm dcgm-exporter
cgroup 0::/system.slice/nvidia-dcgm-exporter.service/payload
### fleetfix holder pid=4242
user bob
comm nvtop
cgroup 0::/user.slice/user-1000.slice/session-3.scope
### fleetfix holder pid=4300
user bob
comm python3
cgroup 0::/user.slice/user-1000.slice/user@1000.service/app.slice/jupyter.service
### fleetfix holder pid=5120
user alice
comm python3
cgroup 0::/system.slice/slurmstepd.scope/job_51234/step_0/user/task_0
### fleetfix holder pid=6000
### fleetfix end
"""
    found = device_holders.parse(text)
    summary = [(h.pid, h.user, h.command, h.unit, h.job) for h in found.holders]
    assert summary == [
        (812, "root", "slurmstepd", "slurmd", True),
        (3301, "root", "dcgm-exporter", "nvidia-dcgm-exporter", False),
        (4242, "bob", "nvtop", None, False),
        (4300, "bob", "python3", None, False),  # a user's own unit is no system service
        (5120, "alice", "python3", None, True),
        (6000, None, None, None, False),  # exited before /proc was read
    ]
    assert found.holders[2].cgroup == "/user.slice/user-1000.slice/session-3.scope"
    assert found.complete and found.errors == ()


REAL_H200_HOLDER = """\
### fleetfix fuser rc=0
### fleetfix holder pid=459
user root
comm sleep
cgroup 0::/process_api/fc7fd9328c476e3116a241d260c9f645
### fleetfix end
"""
"""The probe's command on the lent H200 VM (580.159.04, psmisc 23.6, no systemd), byte for byte,
while a shell there held /dev/nvidiactl open (`( exec 3</dev/nvidiactl; exec sleep 60 ) &`)."""


def test_a_real_stray_holder_is_read_and_refuses_a_reset() -> None:
    found = device_holders.parse(REAL_H200_HOLDER)
    assert [(h.pid, h.user, h.command, h.unit, h.job) for h in found.holders] == [
        (459, "root", "sleep", None, False)
    ]
    # gpu_processes' fuser table for it, with the PID column (psmisc writes it to stdout).
    table = FUSER_TABLE.split("/dev/nvidia0:", maxsplit=1)[0]
    table += "/dev/nvidiactl:      root        459 f.... sleep\n### fleetfix end rc=0\n"
    found_all = facts() | {"gpu_processes": gpu_processes.parse(table), "device_holders": found}
    done = reset(found_all)
    assert done.refused is not None and done.refused.startswith(
        "the GPU devices are held by pid 459 sleep (user root,"
        " /process_api/fc7fd9328c476e3116a241d260c9f645): neither a job nor a service. A GPU"
    )


@pytest.mark.parametrize(
    ("rc", "error"),
    [
        (127, "fuser (psmisc) is not installed (rc=127)"),
        (124, "fuser did not answer within 15s (rc=124)"),
        (2, "fuser exited 2"),
    ],
)
def test_a_fuser_that_did_not_answer_makes_the_facts_incomplete(rc: int, error: str) -> None:
    found = device_holders.parse(f"### fleetfix fuser rc={rc}\n### fleetfix end\n")
    assert (found.complete, found.errors, found.holders) == (False, (error,), ())


def test_nothing_holding_the_devices_is_complete_and_empty() -> None:
    found = device_holders.parse("### fleetfix fuser rc=1\n### fleetfix end\n")
    assert (found.complete, found.holders) == (True, ())


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("### fleetfix fuser rc=0\n### fleetfix holder pid=1\nuser root\n", "no end marker"),
        ("### fleetfix holder pid=1\n### fleetfix end\n", "a holder before fuser's status"),
        ("### fleetfix end\n", "no fuser status"),
        ("### fleetfix fuser rc=0\n### fleetfix holder pid=1\nbogus\n", "'user', 'comm'"),
    ],
)
def test_output_that_is_not_the_probes_is_refused(text: str, reason: str) -> None:
    with pytest.raises(ProbeParseError, match=reason):
        device_holders.parse(text)


def test_the_command_only_reads() -> None:
    command = device_holders.command({})
    assert "fuser /dev/nvidia*" in command and "/proc/$p/cgroup" in command
    assert disruptive_command(command) is None
    assert "fuser -k" not in command and "systemctl" not in command


# --- gpu_reset ----------------------------------------------------------------------------


def test_a_reset_stops_the_exporter_unit_found_holding_the_devices() -> None:
    done = reset(facts())
    assert commands(done) == [
        "systemctl stop nvidia-dcgm-exporter",
        "systemctl stop nvidia-dcgm",
        "nvidia-smi -r -i 3",
        "systemctl start nvidia-dcgm",
        "systemctl start nvidia-dcgm-exporter",
        "<wait for fabric>",
    ]
    assert done.before == {"services": "nvidia-dcgm-exporter,nvidia-dcgm"}


def test_the_known_list_still_stops_what_fuser_does_not_show() -> None:
    """dcgm-exporter's own unit running, its process not among fuser's rows."""
    done = reset(facts(svc=units(**HGX, dcgm_exporter="active")))
    stops = [c for c in commands(done) if "stop" in c]
    assert stops == [
        "systemctl stop nvidia-dcgm-exporter",
        "systemctl stop dcgm-exporter",
        "systemctl stop nvidia-dcgm",
    ]


def test_a_login_sessions_tool_on_the_gpus_refuses_the_reset_naming_it() -> None:
    fuser = "/dev/nvidiactl:      bob        4242 F.... nvtop\n"
    holders = (
        "### fleetfix holder pid=4242\nuser bob\ncomm nvtop\n"
        "cgroup 0::/user.slice/user-1000.slice/session-3.scope\n"
    )
    done = reset(facts(fuser=fuser, holders=holders))
    assert done.commands == ()
    assert done.refused == (
        "the GPU devices are held by pid 4242 nvtop (user bob, "
        "/user.slice/user-1000.slice/session-3.scope): neither a job nor a service. "
        "A GPU reset needs no other client on the GPUs (nvidia-smi manual, -r): "
        "stop it, then run again"
    )
    # allow_busy is about jobs: it does not make a reset possible that NVIDIA forbids.
    assert reset(facts(fuser=fuser, holders=holders), allow_busy=True).refused == done.refused


def test_a_holder_in_a_unit_fleetfix_never_stops_refuses() -> None:
    fuser = "/dev/nvidiactl:      root        700 F.... slurmd\n"
    holders = (
        "### fleetfix holder pid=700\nuser root\ncomm slurmd\n"
        "cgroup 0::/system.slice/slurmd.service\n"
    )
    done = reset(facts(fuser=fuser, holders=holders))
    assert done.refused is not None and done.refused.startswith(
        "the GPU devices are held by pid 700 slurmd (user root, /system.slice/slurmd.service):"
        " its unit slurmd is one fleetfix never stops."
    )


def test_a_daemon_no_running_unit_owns_refuses() -> None:
    """/proc said nothing (the PID is from fuser alone): the known list names DCGM's unit,
    which is not running, so stopping it would free nothing."""
    text = HOLDERS.replace("### fleetfix holder pid=2207\nuser root\ncomm nv-hostengine\n", "")
    text = text.replace("cgroup 0::/system.slice/nvidia-dcgm.service\n", "")
    found = facts() | {"device_holders": device_holders.parse(text.format(extra=""))}
    found["services"] = units(nvidia_persistenced="active", nvidia_fabricmanager="active")
    done = reset(found)
    assert done.refused is not None
    assert done.refused.startswith(
        "the GPU devices are held by pid 2207 nv-hostengine (user root): an NVIDIA daemon"
        " whose unit nvidia-dcgm is not-found (started by hand?)."
    )


def test_a_reused_pid_is_not_read_as_the_holders_unit() -> None:
    """fuser saw dcgm-exporter as 3301; by the time /proc was read, 3301 was a login shell.
    The known list names the exporter's unit instead."""
    text = HOLDERS.replace(
        "comm dcgm-exporter\ncgroup 0::/system.slice/nvidia-dcgm-exporter.service",
        "comm bash\ncgroup 0::/user.slice/user-0.slice/session-9.scope",
    )
    found = facts(svc=units(**HGX, dcgm_exporter="active"))
    found["device_holders"] = device_holders.parse(text.format(extra=""))
    stops = [c for c in commands(reset(found)) if "stop" in c]
    assert stops == ["systemctl stop dcgm-exporter", "systemctl stop nvidia-dcgm"]


def test_a_job_is_busy_not_a_stray_holder() -> None:
    """A job's process that nvidia-smi does not list (it holds only nvidiactl) is a job by
    its cgroup: the busy gate speaks for it, and allow_busy lets the reset go on."""
    fuser = "/dev/nvidiactl:      alice      5120 F.... python3\n"
    holders = (
        "### fleetfix holder pid=5120\nuser alice\ncomm python3\n"
        "cgroup 0::/system.slice/slurmstepd.scope/job_51234/step_0/user/task_0\n"
    )
    found = facts(fuser=fuser, holders=holders)
    assert (
        reset(found).refused == "GPU processes are running (pids 5120); a GPU reset would kill them"
    )
    assert "nvidia-smi -r -i 3" in commands(reset(found, allow_busy=True))


def test_a_service_the_old_name_list_did_not_know_is_not_a_job() -> None:
    """gpu_processes counts a holder whose name is not an NVIDIA daemon as a user process; its
    cgroup says it is a service, so it is stopped and started, not refused as busy."""
    fuser = "/dev/nvidia0:        root       3400 F...m nvidia_gpu_expo\n"
    holders = (
        "### fleetfix holder pid=3400\nuser root\ncomm nvidia_gpu_expo\n"
        "cgroup 0::/system.slice/nvidia_gpu_exporter.service\n"
    )
    done = reset(facts(fuser=fuser, holders=holders))
    assert done.refused is None
    assert commands(done)[:3] == [
        "systemctl stop nvidia-dcgm-exporter",
        "systemctl stop nvidia_gpu_exporter",
        "systemctl stop nvidia-dcgm",
    ]


@pytest.mark.parametrize(
    ("fuser_section", "holders", "why"),
    [
        ("### fleetfix end rc=127\n", None, "fuser is not installed (rc=127)"),
        (None, "### fleetfix fuser rc=137\n### fleetfix end\n", "fuser did not answer within"),
    ],
)
def test_a_holder_list_that_cannot_be_read_refuses(
    fuser_section: str | None, holders: str | None, why: str
) -> None:
    found = facts()
    if fuser_section is not None:
        text = (
            FUSER_TABLE.split("### fleetfix fuser", maxsplit=1)[0]
            + "### fleetfix fuser timeout=15\n"
        )
        found["gpu_processes"] = gpu_processes.parse(text + fuser_section)
    if holders is not None:
        found["device_holders"] = device_holders.parse(holders)
    for done in (reset(found), reset(found, allow_busy=True), reload(found)):
        assert done.commands == ()
        assert done.refused is not None
        assert done.refused.startswith("cannot list what holds /dev/nvidia* (")
        assert why in done.refused


def test_mps_run_by_a_sites_own_unit_stops_with_that_unit() -> None:
    fuser = "/dev/nvidiactl:      root       3500 F.... nvidia-cuda-mps\n"
    holders = (
        "### fleetfix holder pid=3500\nuser root\ncomm nvidia-cuda-mps\n"
        "cgroup 0::/system.slice/nvidia-mps.service\n"
    )
    svc = units(**HGX, nvidia_cuda_mps_control="active")
    done = reset(facts(fuser=fuser, holders=holders, svc=svc))
    assert "systemctl stop nvidia-mps" in commands(done)
    assert not any("nvidia-cuda-mps-control" in c for c in commands(done))


def test_a_resumed_reset_starts_a_found_unit_the_node_no_longer_shows() -> None:
    """Killed after the stops: nothing holds the devices now, the journaled `before` names
    the exporter's unit, which the services probe does not know."""
    found = facts()
    found["gpu_processes"] = gpu_processes.parse(FUSER_TABLE.format(extra=""))
    done = GPU_RESET.plan(
        ActionContext("n1", {}, found, {}, interrupted={"services": "nvidia-dcgm-exporter"})
    )
    assert "systemctl start nvidia-dcgm-exporter" in commands(done)
    check = ActionContext(
        "n1",
        {},
        {"nvidia_smi": node(H100), "services": units(**HGX)},
        {},
        plan=done,
        interrupted={"services": "nvidia-dcgm-exporter"},
    )
    assert GPU_RESET.check is not None and GPU_RESET.check(check) is None


# --- reload_driver ------------------------------------------------------------------------


def test_a_reload_stops_every_holder_and_starts_the_found_unit_last() -> None:
    svc = units(**HGX)
    smi = node(H100)
    done = reload(facts(svc=svc, smi=smi) | {"slurm_node": None})
    assert [c for c in commands(done) if "systemctl" in c] == [
        "systemctl stop nvidia-dcgm-exporter",
        "systemctl stop nvidia-dcgm",
        "systemctl stop nvidia-fabricmanager",
        "systemctl stop nvidia-persistenced",
        "systemctl start nvidia-persistenced",
        "systemctl start nvidia-fabricmanager",
        "systemctl start nvidia-dcgm",
        "systemctl start nvidia-dcgm-exporter",
    ]
    assert done.before["services"] == (
        "nvidia-dcgm-exporter,nvidia-dcgm,nvidia-fabricmanager,nvidia-persistenced"
    )


def test_a_stray_holder_refuses_the_reload_naming_it() -> None:
    fuser = "/dev/nvidia-uvm:     carol      7001 F.... Xorg\n"
    holders = (
        "### fleetfix holder pid=7001\nuser carol\ncomm Xorg\n"
        "cgroup 0::/user.slice/user-1001.slice/session-c2.scope\n"
    )
    done = reload(facts(fuser=fuser, holders=holders))
    assert done.commands == ()
    assert done.refused == (
        "the GPU devices are held by pid 7001 Xorg (user carol, "
        "/user.slice/user-1001.slice/session-c2.scope): neither a job nor a service. "
        'A driver reload needs no process holding /dev/nvidia* (rmmod: "Module nvidia is in '
        'use"): stop it, then run again'
    )


# --- through the engine: what is sent ------------------------------------------------------


async def run_book(tmp_path: Path, fake: FakeTransport, book: Path, inventory: str) -> RunResult:
    """The playbook through the real loader, inventory and engine over `fake`."""
    inv = tmp_path / "hosts.ini"
    inv.write_text(textwrap.dedent(inventory))
    probes, actions = probe_registry(), action_registry()
    catalog = StepCatalog(
        probes={p.name: frozenset(p.params) for p in probes},
        actions={a.name: frozenset(a.params) for a in actions},
    )
    loaded = load_playbook(book, catalog)
    hosts = load_inventory([inv])
    engine = Engine(
        inventory=hosts,
        transport=fake,
        templar=Templar(),
        spec_factory=lambda name, _vars: ConnectionSpec(name=name, address=name),
        probes=probes,
        actions=actions,
        bus=EventBus(),
        options=RunOptions(reconnect_poll=0.0, node_lease_seconds=None),  # no node leases
    )
    return await engine.run(loaded, hosts.select)


SERVICES = """\
nvidia-persistenced loaded active
nvidia-fabricmanager loaded active
nvidia-dcgm loaded active
dcgm not-found inactive
nvidia-imex not-found inactive
dcgm-exporter not-found inactive
nvsm not-found inactive
nvidia-cuda-mps-control inactive
"""
RELOAD_BOOK = """\
- hosts: gpu
  tasks:
    - name: reload the driver
      action: reload_driver
"""


def gpu_node(fake: FakeTransport, *, fuser: str = "", holders: str = "") -> None:
    """A drained-out-of-Slurm node (fleetfix_slurm=false) with one H200 (real nvidia-smi)."""
    host = fake.host("gpu001")
    host.on(r"fleetfix holder", Reply(stdout=HOLDERS.format(extra=holders)))
    host.on(r"query-compute-apps", Reply(stdout=FUSER_TABLE.format(extra=fuser)))
    host.on(r"systemctl show -p LoadState", Reply(stdout=SERVICES))
    host.on(r"### lsmod", Reply(stdout=LSMOD))
    host.on(r"nvidia-smi -q -x", Reply(stdout=(H200 / "probe-nvidia_smi.txt").read_text()))


async def test_the_engine_sends_the_found_units_stop_and_start_around_the_reload(
    tmp_path: Path,
) -> None:
    fake = FakeTransport()
    gpu_node(fake)
    book = tmp_path / "reload.yml"
    book.write_text(RELOAD_BOOK)
    result = await run_book(tmp_path, fake, book, "[gpu]\ngpu001 gpus=1 fleetfix_slurm=false\n")
    sent = [
        c for c in fake.commands_on("gpu001") if c.startswith(("systemctl st", "rmmod", "modprobe"))
    ]
    assert sent[:5] == [
        "systemctl stop nvidia-dcgm-exporter",
        "systemctl stop nvidia-dcgm",
        "systemctl stop nvidia-fabricmanager",
        "systemctl stop nvidia-persistenced",
        "rmmod nvidia_uvm",
    ]
    assert sent[-1] == "systemctl start nvidia-dcgm-exporter"
    assert any("/proc/$p/cgroup" in c for c in fake.commands_on("gpu001"))  # the probe ran
    assert result.stats["gpu001"].as_dict()["failed"] == 0


async def test_the_engine_sends_nothing_that_changes_the_node_when_a_stray_holder_refuses(
    tmp_path: Path,
) -> None:
    fake = FakeTransport()
    gpu_node(
        fake,
        fuser="/dev/nvidiactl:      bob        4242 F.... nvtop\n",
        holders="### fleetfix holder pid=4242\nuser bob\ncomm nvtop\n"
        "cgroup 0::/user.slice/user-1000.slice/session-3.scope\n",
    )
    book = tmp_path / "reload.yml"
    book.write_text(RELOAD_BOOK)
    result = await run_book(tmp_path, fake, book, "[gpu]\ngpu001 gpus=1 fleetfix_slurm=false\n")
    assert not any(
        c.startswith(("systemctl st", "rmmod", "modprobe")) for c in fake.commands_on("gpu001")
    )
    (step,) = [r for r in result.results if r.step == "reload the driver"]
    assert step.message.startswith(
        "reload_driver refused: the GPU devices are held by pid 4242 nvtop (user bob,"
        " /user.slice/user-1000.slice/session-3.scope): neither a job nor a service."
    )
