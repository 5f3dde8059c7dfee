"""The lab server process: builds the fleet, serves SSH on every node address, answers tools.

One asyncio process holds all node state. It listens on each node's loopback address (same
port for all) itself, or through SSH front processes when the nodes would not fit its
descriptor limit (lab/shards.py); runs the control port the tool shims and `fleetfix lab` talk
to, starts real placeholder processes for GPU processes, and performs reboots (drop
connections and listener, wait the reboot time, come back with a new boot id). Started by
`python -m fleetfix.lab serve`.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import resource
import secrets
import signal
import socket
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import asyncssh

from fleetfix.errors import LabError
from fleetfix.lab import ib_counters, transitions
from fleetfix.lab.audit import is_disruptive
from fleetfix.lab.bmc import BmcAnswer, BmcRequest, answer
from fleetfix.lab.build import build_fleet
from fleetfix.lab.changes import ChangeResult, apply_change
from fleetfix.lab.hosting import NodeHosting
from fleetfix.lab.info import LabInfo, remove_info, write_info
from fleetfix.lab.inventory import Connection, render_inventory
from fleetfix.lab.ipmitool import write_tool
from fleetfix.lab.keys import LabKeys, ensure_keys, write_known_hosts
from fleetfix.lab.sandbox import Launch, SandboxMode, detect_sandbox, launch
from fleetfix.lab.scenario import NodeChange, Scenario
from fleetfix.lab.scenario_file import parse_change_request
from fleetfix.lab.shards import ShardSet, nodes_per_process, slices
from fleetfix.lab.sshserver import CommandPlan, server_options
from fleetfix.lab.state import AuditEntry, FleetState, GpuProcess, NodeState
from fleetfix.lab.tools.base import Handler, ToolContext, ToolReply, fail
from fleetfix.lab.tools.slurm import end_job
from fleetfix.lab.tools.slurm_reboot import slurmd_registered
from fleetfix.lab.tools.table import FALLBACK_ONLY_TOOLS, tool_table
from fleetfix.lab.toolserver import client_handler
from fleetfix.lab.userland import node_path, write_tool_dirs

LOG = logging.getLogger("fleetfix.lab")
REBOOT_GRACE = 0.3
"""Seconds between a `reboot` command answering and the node going down (like systemd)."""
EMPTY_DIR = "empty"
"""An empty directory the sandbox mounts over the lab processes' /proc/PID/fd."""
BASH_ENV_FILE = "bash_env"
"""Sourced by every non-interactive bash on a node: `kill` goes through its shim (audit)."""


def raise_open_file_limit() -> int:
    """1,000 listeners plus their connections need more than the default 1,024 descriptors."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        return hard
    return soft


class LabRuntime:
    """The running lab: fleet state plus every listener, connection, session and process."""

    def __init__(
        self,
        scenario: Scenario,
        state_dir: Path,
        port: int | None = None,
        launch_id: str = "",
        per_process: int | None = None,
    ) -> None:
        self.launch_id = launch_id
        self.per_process = per_process
        self.scenario = scenario
        self.state_dir = state_dir
        self.port = scenario.ssh_port if port is None else port
        self.token = secrets.token_hex(16)
        self.mode = SandboxMode.FALLBACK
        self.fleet: FleetState | None = None
        self.keys: LabKeys | None = None
        self.client_key: asyncssh.SSHKey
        self._tools: dict[str, Handler] = tool_table()
        self._hosting: NodeHosting | None = None
        self._shards: ShardSet | None = None
        self._holders: dict[int, asyncio.subprocess.Process] = {}
        self._signalled_by_lab: set[int] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._control_server: asyncio.Server | None = None
        self._control_clients: set[asyncio.StreamWriter] = set()
        self._stopped = asyncio.Event()
        self.control_port = 0

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> LabInfo:
        fd_limit = raise_open_file_limit()
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.mode = detect_sandbox()
        self.keys = ensure_keys(self.state_dir)
        self.client_key = self.keys.client_public
        self.fleet = build_fleet(self.scenario, self.state_dir, time.time())
        self._control_server = await asyncio.start_server(
            client_handler(self, self._control_clients), "127.0.0.1", 0, limit=1 << 20
        )
        self.control_port = self._control_server.sockets[0].getsockname()[1]
        fallback = self.mode is SandboxMode.FALLBACK
        names = [t for t in self._tools if fallback or t not in FALLBACK_ONLY_TOOLS]
        nodes = [(node.spec, node.env.absent) for node in self.fleet.nodes.values()]
        write_tool_dirs(self.state_dir, self.control_port, self.token, names, nodes)
        write_tool(self.state_dir)
        (self.state_dir / BASH_ENV_FILE).write_text("enable -n kill\n", encoding="ascii")
        (self.state_dir / EMPTY_DIR).mkdir(exist_ok=True)
        for node in self.fleet.nodes.values():
            await self._spawn_holders(node, node.processes)
        await self._open_listeners(nodes_per_process(fd_limit, self.per_process))
        return self._publish()

    def _publish(self) -> LabInfo:
        assert self.fleet is not None and self.keys is not None
        hosts = {name: node.spec.address for name, node in self.fleet.nodes.items()}
        write_known_hosts(self.keys, hosts, self.port)
        inventory = self.state_dir / "inventory.ini"
        connection = Connection(
            self.port,
            "root",
            str(self.keys.client_key_path),
            str(self.keys.known_hosts_path),
            str(self.state_dir),
        )
        inventory.write_text(render_inventory(self.scenario, connection), encoding="utf-8")
        info = LabInfo(
            pid=os.getpid(),
            scenario=self.scenario.name,
            scenario_path=self.scenario.source,
            state_dir=str(self.state_dir),
            ssh_port=self.port,
            control_port=self.control_port,
            token=self.token,
            client_key=str(self.keys.client_key_path),
            known_hosts=str(self.keys.known_hosts_path),
            inventory=str(inventory),
            sandbox=self.mode.value,
            user="root",
            started=self.fleet.started,
            hosts=hosts,
            nodes=self.scenario.fleet.nodes,
            launch_id=self.launch_id,
            shards=self._shards.describe() if self._shards else [],
        )
        write_info(self.state_dir, info)
        return info

    async def serve(self) -> None:
        """Start, then run until SIGTERM/SIGINT or a `stop` control request."""
        loop = asyncio.get_running_loop()
        for number in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            loop.add_signal_handler(number, self._stopped.set)
        try:
            info = await self.start()
            LOG.info(
                "lab %s up: %d nodes, port %d, sandbox %s",
                info.scenario,
                len(info.hosts),
                info.ssh_port,
                info.sandbox,
            )
            await self._stopped.wait()
        finally:
            await self.shutdown()

    def request_stop(self) -> None:
        self._stopped.set()

    async def shutdown(self) -> None:
        if self._hosting is not None:
            self._hosting.close()
        if self._shards is not None:
            await self._shards.aclose()
        for pid in list(self._holders):
            self._signal_holder(pid, signal.SIGKILL)
        for task in list(self._tasks):
            task.cancel()
        if self._control_server is not None:
            self._control_server.close()
        for writer in list(self._control_clients):
            writer.close()  # a hung tool call's handler sees EOF and returns
        await asyncio.sleep(0.05)
        remove_info(self.state_dir, os.getpid())

    # -- listeners -------------------------------------------------------------------------

    async def _open_listeners(self, per_process: int) -> None:
        """Listen on every node that is up: here, or in SSH fronts for a big lab."""
        assert self.fleet is not None and self.keys is not None
        names = list(self.fleet.nodes)
        listening = {n for n, node in self.fleet.nodes.items() if node.status == "up"}
        if self.port == 0:
            first = next((self.fleet.nodes[n].spec.address for n in names if n in listening), None)
            self.port = _free_port(first or "127.0.0.1")
        parts = slices(names, per_process)
        if len(parts) > 1:
            addresses = {n: node.spec.address for n, node in self.fleet.nodes.items()}
            self._shards = ShardSet(self.state_dir, self.port, parts, addresses, self.plan_command)
            await self._shards.start(listening)
            LOG.info("%d SSH front processes: %s", len(parts), self._shards.pids)
            return
        self._hosting = NodeHosting(
            self.client_key, server_options(self.keys.host_key), self.port, self.plan_command
        )
        self._hosting.start_reaping()
        up = {n: self.fleet.nodes[n].spec.address for n in names if n in listening}
        failures = await self._hosting.listen_all(up)
        if failures:
            raise LabError(
                f"cannot listen on port {self.port} for {len(failures)} lab nodes: {failures[0]}",
                hint="is another lab running? stop it with `fleetfix lab down`, or choose another"
                " port: `fleetfix lab up --port PORT`, `fleetfix run --lab-port PORT`",
            )

    async def _listen(self, node: NodeState) -> None:
        if self._shards is not None:
            await self._shards.listen(node.name, node.spec.address)
        elif self._hosting is not None:
            await self._hosting.listen(node.name, node.spec.address)

    def _drop(self, node: NodeState) -> None:
        if self._shards is not None:
            self._shards.drop(node.name)
        elif self._hosting is not None:
            self._hosting.drop(node.name)

    # -- commands (asked by NodeHosting, here or in a front) ------------------------------

    async def plan_command(self, name: str, command: str, user: str) -> CommandPlan:
        """Count an exec request on node `name`, fire its due events, say how to run it."""
        assert self.fleet is not None
        node = self.fleet.nodes.get(name)
        if node is None or node.status != "up":
            return CommandPlan(abort=True)
        await self.before_command(node)
        if ib_counters.mentions(command):
            ib_counters.refresh(node)  # one read of the node's InfiniBand counters
        limits = [int(f.value or 0) for f in node.faults_of("flaky_ssh")]
        delay = sum(f.value or 0.0 for f in node.faults_of("slow_ssh")) / 1000.0
        started = self.launch(node, command)
        env = {**self.base_env(node, user), **started.env}
        return CommandPlan(
            launch=dataclasses.replace(started, env=env),
            flaky_limit=min(limits) if limits else None,
            delay=delay,
        )

    def launch(self, node: NodeState, command: str) -> Launch:
        hidden = [f"/proc/{pid}/fd" for pid in self.lab_pids()]
        empty = str(self.state_dir / EMPTY_DIR)
        return launch(self.mode, node.paths, node.name, command, hidden=hidden, empty=empty)

    def lab_pids(self) -> list[int]:
        """This process and the SSH fronts."""
        return [os.getpid(), *(self._shards.pids if self._shards else [])]

    def base_env(self, node: NodeState, user: str) -> dict[str, str]:
        return {
            "PATH": node_path(self.state_dir, node.spec),
            "HOME": str(node.paths.home),
            "USER": user,
            "LOGNAME": user,
            "SHELL": "/bin/bash",
            "LANG": "C.UTF-8",
            "TZ": "UTC",
            "FLEETFIX_LAB_NODE": node.name,
            "BASH_ENV": str(self.state_dir / BASH_ENV_FILE),
        }

    # -- ToolHost --------------------------------------------------------------------------

    def run_tool(self, node_name: str, user: str, tool: str, argv: list[str]) -> ToolReply:
        assert self.fleet is not None
        node = self.fleet.nodes.get(node_name)
        handler = self._tools.get(tool)
        if node is None or handler is None:
            return fail(f"{tool}: not emulated on this lab node", rc=127)
        context = ToolContext(
            node=node, fleet=self.fleet, hooks=self, now=time.time(), user=user or "root"
        )
        try:
            reply = handler(context, argv)
        except Exception:  # one broken emulator must not take the lab down
            LOG.exception("tool %s %s failed on %s", tool, argv, node_name)
            reply = fail(
                f"{tool}: internal error in the fleetfix lab emulator (see server.log)", rc=70
            )
        if is_disruptive(tool, argv, self._holders.keys()):
            rc = None if reply.hang else reply.rc
            node.audit.append(
                AuditEntry(tool, tuple(argv), context.user, context.now, node.boot_number, rc)
            )
        return reply

    def reboot(self, node: NodeState) -> None:
        """LabHooks: reboot `node` once the tool that asked has answered."""
        asyncio.get_running_loop().call_later(REBOOT_GRACE, self._begin_reboot, node)

    def after_reply(self, node_name: str, reply: ToolReply) -> None:
        if reply.effect == "reboot" and self.fleet is not None:
            node = self.fleet.nodes[node_name]
            asyncio.get_running_loop().call_later(REBOOT_GRACE, self._begin_reboot, node)

    async def control(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.fleet is not None
        op = request.get("op")
        if op == "ping":
            return {"ok": True, "pid": os.getpid(), "scenario": self.scenario.name}
        if op == "truth":
            return {"ok": True, "truth": self.fleet.truth(time.time())}
        if op == "status":
            return {"ok": True, "status": self.status()}
        if op == "stop":
            asyncio.get_running_loop().call_soon(self._stopped.set)
            return {"ok": True}
        if op == "audit":
            nodes = self.fleet.nodes.values()
            return {"ok": True, "audit": {n.name: [e.to_data() for e in n.audit] for n in nodes}}
        if op == "inject":
            return await self._inject(request)
        if op == "bmc":
            return self._bmc(request)
        return {"ok": False, "error": f"unknown op {op!r}"}

    def _bmc(self, request: dict[str, Any]) -> dict[str, Any]:
        """An ipmitool call from the controller (lab/ipmitool.py) to a node's BMC."""
        assert self.fleet is not None
        try:
            asked = BmcRequest(
                address=str(request["address"]),
                interface=str(request["interface"]),
                user=str(request["user"]),
                password=str(request["password"]),
                command=tuple(str(word) for word in request["command"]),
                argv=tuple(str(word) for word in request["argv"]),
            )
        except (KeyError, TypeError) as exc:
            return {"ok": False, "error": f"malformed bmc request: {exc}"}
        said = answer(self.fleet, asked)
        self._record_bmc(asked, said)
        if said.node is not None and said.power is not None:
            LOG.info("%s: BMC power %s", said.node.name, said.power)
            asyncio.get_running_loop().call_soon(self._power, said.node, said.power)
        return {"ok": True, "stdout": said.stdout, "stderr": said.stderr, "rc": said.rc}

    def _record_bmc(self, asked: BmcRequest, said: BmcAnswer) -> None:
        node = said.node
        if node is not None and said.audited:
            entry = AuditEntry(
                "ipmitool", asked.argv, asked.user, time.time(), node.boot_number, said.rc
            )
            node.audit.append(entry)

    async def _inject(self, request: dict[str, Any]) -> dict[str, Any]:
        assert self.fleet is not None
        node = self.fleet.node(str(request.get("node", "")))
        if node is None:
            return {"ok": False, "error": f"no lab node {request.get('node')!r}"}
        try:
            change = parse_change_request(request.get("change"), self.scenario.fleet)
        except LabError as exc:
            return {"ok": False, "error": exc.render()}
        result = await self._apply(node, change)
        return {"ok": True, "applied": result.applied, "outcome": result.outcome}

    async def _apply(self, node: NodeState, change: NodeChange) -> ChangeResult:
        assert self.fleet is not None
        result = apply_change(self.fleet, node, change, time.time())
        LOG.info("%s: %s", node.name, result.outcome)
        await self._spawn_holders(node, list(result.new_processes))
        return result

    async def before_command(self, node: NodeState) -> None:
        """Count the node's exec request and apply the scenario events now due."""
        node.commands += 1
        due = [
            e for e in node.events if e.fired_at is None and node.commands > e.event.after_commands
        ]
        for state in due:
            state.fired_at = node.commands
        for state in due:
            state.outcome = (await self._apply(node, state.event.change)).outcome

    def status(self) -> dict[str, Any]:
        assert self.fleet is not None
        nodes: dict[str, dict[str, Any]] = {
            name: {"status": node.status, "address": node.spec.address, "boots": node.boot_number}
            for name, node in self.fleet.nodes.items()
        }
        counts: dict[str, int] = {}
        for entry in nodes.values():
            counts[entry["status"]] = counts.get(entry["status"], 0) + 1
        return {
            "scenario": self.scenario.name,
            "pid": os.getpid(),
            "port": self.port,
            "sandbox": self.mode.value,
            "processes": self._processes(),
            "counts": counts,
            "nodes": nodes,
        }

    def _processes(self) -> list[dict[str, Any]]:
        """The processes serving SSH: this one, or each front with how many nodes it serves."""
        assert self.fleet is not None
        if self._shards is None:
            return [{"pid": os.getpid(), "nodes": len(self.fleet.nodes)}]
        return [{"pid": f["pid"], "nodes": len(f["nodes"])} for f in self._shards.describe()]

    # -- LabHooks: GPU processes -----------------------------------------------------------

    async def _spawn_holders(self, node: NodeState, processes: list[GpuProcess]) -> None:
        for process in processes:
            holder = await asyncio.create_subprocess_exec(
                "/bin/bash",
                "-c",
                # An ignored signal stays ignored across exec: only SIGKILL ends this one.
                ("trap '' TERM; " if process.ignores_term else "") + 'exec -a "$0" sleep infinity',
                process.name,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
                start_new_session=True,
            )
            process.pid = holder.pid
            process.started = time.time()
            self._holders[holder.pid] = holder
            self._background(self._watch_holder(node, process, holder))

    async def _watch_holder(
        self, node: NodeState, process: GpuProcess, holder: asyncio.subprocess.Process
    ) -> None:
        returncode = await holder.wait()
        self._holders.pop(holder.pid, None)
        self._note_outside_kill(node, holder.pid, returncode)
        if process not in node.processes:
            return
        node.processes.remove(process)
        job = process.job_id
        assert self.fleet is not None
        if job in self.fleet.slurm.jobs and not any(p.job_id == job for p in node.processes):
            end_job(ToolContext(node, self.fleet, self, time.time(), "root"), job)

    def kill_process(self, node: NodeState, pid: int, signal_number: int) -> bool:
        if pid not in self._holders or not any(p.pid == pid for p in node.processes):
            return False
        self._signal_holder(pid, signal_number)
        return True

    def _signal_holder(self, pid: int, signal_number: int) -> None:
        self._signalled_by_lab.add(pid)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal_number)

    def _note_outside_kill(self, node: NodeState, pid: int, returncode: int) -> None:
        """A GPU process killed by neither the lab nor an audited `kill` (e.g. `pkill`, or
        dash's own kill) still goes in the audit, as `kill -SIGNAL PID` by an unknown user."""
        if pid in self._signalled_by_lab or returncode >= 0:
            self._signalled_by_lab.discard(pid)
            return
        seen = (e for n in self.fleet.nodes.values() for e in n.audit) if self.fleet else ()
        if any(e.tool == "kill" and str(pid) in e.argv for e in seen):
            return
        entry = AuditEntry(
            "kill",
            (_signal_option(-returncode), str(pid)),
            "unknown",
            time.time(),
            node.boot_number,
            None,
        )
        node.audit.append(entry)

    # -- reboots ---------------------------------------------------------------------------

    def _begin_reboot(self, node: NodeState, level: str = "reboot") -> None:
        """Take an up node down and bring it back after its reboot time; `level` is what the
        boot clears (`power_cycle` when the power was removed)."""
        if node.status != "up" or self.fleet is None:
            return
        self._go_down(node)
        self._boot(node, level)

    def _go_down(self, node: NodeState) -> None:
        """The node stops: its processes die, its jobs end, its connections and listener go."""
        assert self.fleet is not None
        for process in node.processes:
            self._signal_holder(process.pid, signal.SIGKILL)
        transitions.slurm_node_rebooted(self.fleet.slurm, node.name)
        self._drop(node)

    def _boot(self, node: NodeState, level: str) -> None:
        reboot_time = node.injected.reboot_time or self.scenario.reboot_time
        transitions.begin_reboot(node, time.time(), reboot_time, level)
        due = node.reboot_due
        LOG.info("%s rebooting for %.1fs (%s)", node.name, reboot_time, level)
        asyncio.get_running_loop().call_later(
            reboot_time, lambda: self._background(self._finish_reboot(node, due))
        )

    def _power(self, node: NodeState, change: str) -> None:
        """What the node's BMC was told (lab/bmc.py): `cycle` (off, then on: a cold boot),
        `reset` (a warm restart), `off`, or `on` (a cold boot)."""
        if change in ("cycle", "reset") and node.status == "up":
            self._begin_reboot(node, "power_cycle" if change == "cycle" else "reboot")
        elif change == "cycle" and node.status == "rebooting":
            node.boot_level = "power_cycle"  # the power went during the boot under way
        elif change == "off" and node.status in ("up", "rebooting"):
            if node.status == "up":
                self._go_down(node)
            transitions.power_off(node)
            LOG.info("%s powered off", node.name)
        elif change == "on" and node.status == "off":
            self._boot(node, "power_cycle")

    async def _finish_reboot(self, node: NodeState, due: float | None) -> None:
        if node.status != "rebooting" or node.reboot_due != due:
            return  # powered off (and maybe on again) meanwhile: that boot is another's
        transitions.finish_reboot(node, time.time())
        if self.fleet is not None:
            slurmd_registered(self.fleet.slurm.nodes[node.name])
        try:
            await self._listen(node)
        except LabError as exc:
            node.status = "unreachable"
            LOG.error("%s did not come back: %s", node.name, exc)
            return
        LOG.info("%s is back (boot %d)", node.name, node.boot_number)

    def _background(self, coroutine: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


def _signal_option(number: int) -> str:
    """`-TERM`, or `-34` for a signal without a name (real-time signals)."""
    try:
        return "-" + signal.Signals(number).name.removeprefix("SIG")
    except ValueError:
        return f"-{number}"


def _free_port(address: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((address, 0))
        port: int = probe.getsockname()[1]
        return port
