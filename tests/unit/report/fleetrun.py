"""A fabricated, faithful event stream: a 32-node, 2-spine/4-leaf fleet whose leaf-03 fails NCCL.

Built event by event the way the engine emits them (steps.py, commands.py, remediate.py):
HostStepStarted, CommandRan (redacted for no_log), ActionTaken, HostStepFinished (whose
StepResult keeps the unredacted commands, as the engine's does), RunFinished with the
verdicts the engine's rules give (engine/verdict.py): leaf-03's failed nodes held by the
suspect leaf, gpu002 failed, gpu032 unreachable, gpu005 fixed by clean_shm (changed in check
mode, where nothing ran), the rest healthy. RunStarted carries the topology, as the engine's.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from fleetfix.engine.verdict import NEXT_STEPS
from fleetfix.errors import SourcePosition
from fleetfix.events import (
    ActionTaken,
    BatchStarted,
    CommandRan,
    Event,
    HostStepFinished,
    HostStepStarted,
    PlayFinished,
    PlayStarted,
    RunFinished,
    RunStarted,
    SafetyStop,
    TaskStarted,
)
from fleetfix.results import CommandResult, HostStats, RunResult, Status, StepResult
from fleetfix.topology.graph import Topology
from fleetfix.topology.snapshot import host_places
from fleetfix.verdicts import Verdict, VerdictKind

T0 = 1_714_532_400.0  # 2024-05-01 03:00:00 UTC
PLAYBOOK = "playbooks/nccl-health.yml"
PLAY = "nccl health sweep"
BAD_LEAF = "leaf-03"
NOISE_FAILURE = "gpu002"
UNREACHABLE = "gpu032"
STRAGGLER = "gpu005"
SURVIVOR = "gpu024"  # the one leaf-03 node whose nccl-tests pass
SECRET = "hunter2-SECRET-TOKEN"
NO_LOG_TEXT = "the output has been hidden due to the fact that 'no_log: true' was specified"
HELD_WHY = "held: leaf leaf-03 is a suspect (7 of 9 nccl failures sit under it)"
HOSTILE = (
    '<script>alert("pwned")</script><img src="http://evil.example/p.png"> '
    "\x1b[31mRED\x1b[0m \x00nul ]]> {{ lookup('pipe', 'id') }} & <b>bold</b>"
)


def host_vars() -> dict[str, dict[str, Any]]:
    """gpu001..gpu032: 8 per leaf, 4 per rack; leaf-01/02 under spine-01, leaf-03/04 spine-02."""
    hosts: dict[str, dict[str, Any]] = {}
    for index in range(1, 33):
        leaf = (index - 1) // 8 + 1
        hosts[f"gpu{index:03d}"] = {
            "ansible_host": f"127.10.{leaf}.{index}",
            "rack": f"r{(index - 1) // 4 + 1:02d}",
            "leaf": f"leaf-{leaf:02d}",
            "spine": "spine-01" if leaf <= 2 else "spine-02",
            "gpus": 8,
            "gpu_model": "H100-SXM5-80GB",
        }
    return hosts


def busbw_of(host: str) -> float:
    index = int(host[3:])
    leaf = f"leaf-{(index - 1) // 8 + 1:02d}"
    if leaf == BAD_LEAF and host != SURVIVOR:
        return 11.0 + index % 3
    if host == NOISE_FAILURE:
        return 40.0
    if host == STRAGGLER:
        return 131.5
    return 188.0 + (index * 7) % 9


@dataclass
class FleetRun:
    """Builds the event list; `clock` advances so every event has a distinct, ordered time."""

    check: bool = False
    safety_stop: str | None = None
    finish: bool = True
    places: bool = True
    events: list[Event] = field(default_factory=list)
    results: list[StepResult] = field(default_factory=list)
    clock: float = T0

    def tick(self, seconds: float = 0.01) -> float:
        self.clock += seconds
        return self.clock

    def emit(self, event: Event) -> None:
        self.events.append(event)

    def build(self) -> list[Event]:
        hosts = tuple(host_vars())
        topology = host_places(Topology.from_hosts(host_vars()), hosts) if self.places else {}
        self.emit(
            RunStarted(
                playbook=PLAYBOOK, hosts=hosts, check=self.check, topology=topology, at=self.tick()
            )
        )
        position = SourcePosition(PLAYBOOK, 2, 3)
        self.emit(PlayStarted(name=PLAY, hosts=hosts, position=position, at=self.tick()))
        self.emit(BatchStarted(index=1, count=1, hosts=hosts, at=self.tick()))
        active = list(hosts)
        active = self.probe_gpus(active)
        active = self.nccl(active)
        self.no_log_step(active)
        self.clean_shm(active)
        if self.safety_stop:
            self.emit(SafetyStop(reason=self.safety_stop, at=self.tick()))
        self.emit(PlayFinished(name=PLAY, at=self.tick()))
        if self.finish:
            self.emit(RunFinished(result=self.run_result(), at=self.tick()))
        return self.events

    def run_result(self) -> RunResult:
        stats: dict[str, HostStats] = {}
        for result in self.results:
            stats.setdefault(result.host, HostStats()).count(result)
        return RunResult(
            stats=stats,
            results=list(self.results),
            aborted_by_safety=self.safety_stop,
            verdicts={host: self.verdict(host) for host in host_vars()},
        )

    def verdict(self, host: str) -> Verdict:
        """The engine's rules (engine/verdict.py) on what this run did to `host`."""
        judged = self._judge(host)
        return replace(judged, next_step=NEXT_STEPS.get(judged.kind, ""))

    def _judge(self, host: str) -> Verdict:
        failures = [r for r in self.results if r.host == host and r.status is Status.FAILED]
        if host == UNREACHABLE:
            message = next(r.message for r in self.results if r.host == host)
            return Verdict(host, VerdictKind.UNREACHABLE, f"probe GPUs: {message}")
        if failures and busbw_of(host) < 100.0 and host != NOISE_FAILURE:
            why = f"nccl all_reduce_perf: {failures[0].message}"
            return Verdict(host, VerdictKind.HELD, HELD_WHY, (why,))
        if failures:
            why = f"nccl all_reduce_perf: {failures[0].message}"
            return Verdict(host, VerdictKind.FAILED, why)
        if host == STRAGGLER and self.check:
            return Verdict(host, VerdictKind.CHANGED, "changed, no fault found")
        if host == STRAGGLER:
            return Verdict(host, VerdictKind.FIXED, "repaired by clean_shm", actions=("clean_shm",))
        return Verdict(host, VerdictKind.HEALTHY, "every step ok")

    # -- one step across the batch, the way the engine runs it ----------------------------

    def task(self, name: str, line: int) -> None:
        self.emit(
            TaskStarted(name=name, position=SourcePosition(PLAYBOOK, line, 7), at=self.tick())
        )

    def finish_step(self, result: StepResult) -> None:
        self.results.append(result)
        self.emit(HostStepFinished(result=result, at=self.tick(0.05)))

    def probe_gpus(self, active: list[str]) -> list[str]:
        step = "probe GPUs"
        self.task(step, 8)
        for host in active:
            self.emit(HostStepStarted(host=host, step=step, at=self.tick()))
        for host in active:
            if host == UNREACHABLE:
                message = "ssh: connect to host 127.10.4.32 port 22: Connection refused"
                data = {"unreachable": True, "failed": True, "msg": message}
                self.finish_step(
                    StepResult(host, step, Status.UNREACHABLE, message=message, data=data)
                )
                continue
            command = CommandResult(
                "nvidia-smi --query-gpu=index,name,ecc.errors.uncorrected.volatile.total "
                "--format=csv,noheader",
                0,
                "\n".join(f"{i}, NVIDIA H100 80GB HBM3, 0" for i in range(8)) + "\n",
                "",
                0.41,
            )
            self.emit(CommandRan(host=host, step=step, result=command, at=self.tick()))
            data = {"rc": 0, "stdout": command.stdout, "facts": {"count": 8, "dbe_gpus": []}}
            self.finish_step(
                StepResult(host, step, Status.OK, commands=(command,), data=data, duration=0.45)
            )
        return [h for h in active if h != UNREACHABLE]

    def nccl(self, active: list[str]) -> list[str]:
        step = "nccl all_reduce_perf"
        self.task(step, 12)
        for host in active:
            self.emit(HostStepStarted(host=host, step=step, at=self.tick()))
        failed = []
        for host in active:
            busbw = busbw_of(host)
            extra = HOSTILE if host == "gpu017" else ""
            stdout = (
                "# nThread 1 nGpus 8 minBytes 8 maxBytes 8589934592 step: 2(factor)\n"
                f"#  Rank  0 Group  0 Pid  4242 on {host} device  0 [0x18] NVIDIA H100 80GB HBM3\n"
                f"  8589934592  2147483648  float  sum  -1  41234  208.3  {busbw:.2f}  0\n"
                f"# Out of bounds values : 0 OK\n# Avg bus bandwidth    : {busbw:.3f}\n{extra}"
            )
            ok = busbw >= 100.0
            command = CommandResult(
                "all_reduce_perf -b 8 -e 8G -f 2 -g 8",
                0,
                stdout,
                "" if ok else "NCCL WARN net",
                61.2,
            )
            self.emit(CommandRan(host=host, step=step, result=command, at=self.tick()))
            data = {"rc": 0, "facts": {"avg_busbw": busbw, "failed": not ok}}
            status = Status.OK if ok else Status.FAILED
            message = "" if ok else f"avg busbw {busbw:.1f} GB/s is below the 150 GB/s floor"
            self.finish_step(
                StepResult(
                    host,
                    step,
                    status,
                    message=message,
                    commands=(command,),
                    data=data,
                    duration=61.3,
                )
            )
            if not ok:
                failed.append(host)
        return [h for h in active if h not in failed]

    def no_log_step(self, active: list[str]) -> None:
        """Runs on gpu001 only (`when:`); its command carries a secret and no_log hides it."""
        step = "store ticket token"
        self.task(step, 20)
        for host in active:
            self.emit(HostStepStarted(host=host, step=step, at=self.tick()))
        for host in active:
            if host != "gpu001":
                message = "conditional result was False"
                self.finish_step(StepResult(host, step, Status.SKIPPED, message=message))
                continue
            real = CommandResult(f"echo {SECRET} > /etc/fleetfix/token", 0, SECRET, "", 0.02)
            shown = CommandResult(NO_LOG_TEXT, 0, "", "", 0.02)
            self.emit(CommandRan(host=host, step=step, result=shown, at=self.tick()))
            data = {"rc": 0, "stdout": NO_LOG_TEXT, "msg": ""}
            # The engine keeps the real command in StepResult.commands: the report must not.
            self.finish_step(StepResult(host, step, Status.OK, commands=(real,), data=data))

    def clean_shm(self, active: list[str]) -> None:
        step = "clean stale /dev/shm"
        self.task(step, 26)
        host = STRAGGLER
        self.emit(HostStepStarted(host=host, step=step, at=self.tick()))
        command = "find /dev/shm -maxdepth 1 -name 'nccl-*' -mmin +60 -delete"
        if self.check:
            planned = CommandResult(command, None, "", "")
            self.emit(
                CommandRan(host=host, step=step, result=planned, planned_only=True, at=self.tick())
            )
            message = "check mode: clean_shm would run 1 command(s)"
            self.finish_step(StepResult(host, step, Status.CHANGED, changed=True, message=message))
            return
        ran = CommandResult(command, 0, "", "", 0.12)
        self.emit(CommandRan(host=host, step=step, result=ran, at=self.tick()))
        self.emit(
            ActionTaken(host=host, step=step, action="clean_shm", failed=False, at=self.tick())
        )
        self.finish_step(
            StepResult(host, step, Status.CHANGED, changed=True, commands=(ran,), duration=0.2)
        )


def fleet_events(**options: Any) -> list[Event]:
    return FleetRun(**options).build()
