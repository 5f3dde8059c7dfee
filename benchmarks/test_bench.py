"""Tests of the benchmark's own parts: figures read right, workloads equal, a tiny run completes.

.venv/bin/pytest benchmarks/test_bench.py -q
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from bare_fanout import CIPHERS, MACS
from bench_inventory import inventory_text, time_parse
from contenders import Setup, run_bare, run_pdsh, run_pssh, venv_bin
from facts_cost import gpu_node_output
from measure import (
    Invocation,
    Measurement,
    RunCost,
    TimeReport,
    parse_time_report,
    recap_outcome,
    time_to_first_command,
)
from pinning import cpu_list, pin_tree, plan_pinning, taskset_prefix
from proctree import descendants, exact_tree_cpu_s, peak_rss_kb, tree_cpu_s
from run import Options, forced_workers, parse_cost_lines, parse_options, plan_runs, rounds
from shell_tools import (
    PDSH,
    PSSH_NAMES,
    SshLogin,
    found_tool,
    hosts_file_text,
    pdsh_argv,
    pdsh_env,
    pssh_argv,
    script,
    script_outcome,
)
from ssh_masters import ControlMaster, end_ssh_masters, find_masters, listening_sockets
from table import measurement_table, ratio_lines, verdict
from watch import FirstOpen, TreeSampler
from workload import (
    PROBE_NAMES,
    ansible_playbook,
    first_hosts,
    fleetfix_playbook,
    lab_inventory,
    probe_commands,
)

from fleetfix.facts.parse import parse_facts
from fleetfix.inventory import load_inventory
from fleetfix.lab.control import LabHandle, start_lab
from fleetfix.probes import BUILTIN_PROBES
from fleetfix.transport.ssh import PREFERRED_CIPHERS, PREFERRED_MACS

HERE = Path(__file__).parent
GNU_TIME = """\
\tCommand being timed: "fleetfix run pb.yml"
\tUser time (seconds): 8.33
\tSystem time (seconds): 0.34
\tPercent of CPU this job got: 38%
\tElapsed (wall clock) time (h:mm:ss or m:ss): 1:02:22.74
\tMaximum resident set size (kbytes): 137232
\tExit status: 2
"""


def test_gnu_time_report_is_read() -> None:
    report = parse_time_report(GNU_TIME)
    assert report.wall_s == pytest.approx(3600 + 2 * 60 + 22.74)
    assert (report.user_s, report.system_s) == (8.33, 0.34)
    assert (report.max_rss_kb, report.exit_status) == (137232, 2)


def test_gnu_time_report_without_rss_is_refused() -> None:
    with pytest.raises(ValueError, match="Maximum resident"):
        parse_time_report(GNU_TIME.replace("Maximum", "Minimum"))


def _recap(failed: int) -> str:
    return (
        "PLAY RECAP\n"
        "gpu0001 : ok=5 changed=0 unreachable=0 failed=0 skipped=0 rescued=0 ignored=0\n"
        f"gpu0002 : ok={5 - failed} changed=5 unreachable=0 failed={failed} skipped=0\n"
    )


def test_recap_counts_every_host() -> None:
    assert recap_outcome(_recap(0), hosts=2, tasks=5).startswith("ok: 10/10 tasks ok")
    assert recap_outcome(_recap(1), hosts=2, tasks=5).startswith("CHECK: 9/10 tasks ok, 1 failed")
    assert recap_outcome(_recap(0), hosts=3, tasks=5).startswith("CHECK")


def test_generated_inventory_has_every_host_and_its_topology(tmp_path: Path) -> None:
    path = tmp_path / "big.ini"
    path.write_text(inventory_text(10_000), encoding="utf-8")
    timing = time_parse(path, repeats=1)
    assert (timing.hosts, len(timing.seconds)) == (10_000, 1)
    inventory = load_inventory([path])
    assert inventory.host_vars("gpu05000")["rack"] == "rack-200"
    assert inventory.host_vars("gpu05000")["leaf"] == "leaf-100"
    assert inventory.host_vars("gpu10000")["spine"] == "spine-020"
    assert sorted(inventory.groups_of("gpu00001")) == [
        "gpu_nodes",
        "leaf_001",
        "rack_001",
        "spine_001",
    ]


def test_generated_inventory_reads_the_same_in_ansible(tmp_path: Path) -> None:
    path = tmp_path / "small.ini"
    path.write_text(inventory_text(120), encoding="utf-8")
    done = subprocess.run(
        [str(venv_bin() / "ansible-inventory"), "-i", str(path), "--host", "gpu00077"],
        capture_output=True,
        text=True,
        check=True,
        env={"ANSIBLE_HOME": str(tmp_path / "ansible"), "PATH": "/usr/bin:/bin"},
    )
    assert json.loads(done.stdout) == load_inventory([path]).host_vars("gpu00077")


def test_both_playbooks_carry_the_same_five_commands(tmp_path: Path) -> None:
    commands = probe_commands()
    assert [c.probe for c in commands] == list(PROBE_NAMES)
    raw = yaml.safe_load(ansible_playbook(commands))[0]["tasks"]
    assert [t["raw"] for t in raw] == [c.command for c in commands]
    probes = yaml.safe_load(fleetfix_playbook())[0]["tasks"]
    assert [t["probe"] for t in probes] == list(PROBE_NAMES)
    path = tmp_path / "five.yml"
    path.write_text(fleetfix_playbook(), encoding="utf-8")
    done = subprocess.run(
        [str(venv_bin() / "fleetfix"), "validate", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture
def small_lab(tmp_path: Path) -> Iterator[LabHandle]:
    lab = start_lab("healthy-1000", tmp_path / "lab", port=0, nodes=4)
    try:
        yield lab
    finally:
        lab.stop()


def test_lab_inventory_drops_the_scenario_and_names_the_keys(small_lab: LabHandle) -> None:
    text = lab_inventory(small_lab)
    assert not [line for line in text.splitlines() if "fleetfix_lab_scenario" in line]
    path = small_lab.state_dir / "bench.ini"
    path.write_text(text, encoding="utf-8")
    found = load_inventory([path]).host_vars("gpu0003")
    assert found["ansible_host"] == small_lab.hosts["gpu0003"]
    assert found["ansible_port"] == small_lab.port
    assert found["ansible_ssh_private_key_file"] == str(small_lab.client_key)
    assert found["fleetfix_known_hosts"] == str(small_lab.known_hosts)
    assert list(first_hosts(small_lab, 2)) == ["gpu0001", "gpu0002"]


def test_bare_fan_out_offers_fleetfix_ciphers_first() -> None:
    assert CIPHERS[: len(PREFERRED_CIPHERS)] == list(PREFERRED_CIPHERS)
    assert "chacha20-poly1305@openssh.com" in CIPHERS[len(PREFERRED_CIPHERS) :]
    assert MACS[: len(PREFERRED_MACS)] == list(PREFERRED_MACS)


def test_bare_fan_out_runs_every_command(small_lab: LabHandle, tmp_path: Path) -> None:
    spec = {
        "addresses": list(small_lab.hosts.values()),
        "port": small_lab.port,
        "user": small_lab.user,
        "client_key": str(small_lab.client_key),
        "known_hosts": str(small_lab.known_hosts),
        "commands": ["hostname", "false", "nvidia-smi -L"],
    }
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(HERE / "bare_fanout.py"), str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    summary = json.loads(done.stdout)
    assert (summary["hosts"], summary["hosts_ok"], summary["commands_ok"]) == (4, 0, 8)
    assert done.returncode == 2


@pytest.mark.slow
def test_tiny_run_prints_a_row_per_contender() -> None:
    counts = ["--hosts", "3", "--tool-hosts", "2", "--inventory-hosts", "100"]
    counts += ["--first-command-hosts", "4"]
    done = subprocess.run(
        [sys.executable, str(HERE / "run.py"), *counts],
        capture_output=True,
        check=False,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    lines = ["bare asyncssh 3: ok: 15/15", "fleetfix 3: ok: 15/15", "ansible-playbook 2: ok: 10/10"]
    lines += ["pdsh 2: ok: 5/5" if found_tool([PDSH]) else "pdsh: not installed, skipped"]
    lines += ["pssh (parallel-ssh) 2: ok: 5/5" if found_tool(PSSH_NAMES) else "pssh: not installed"]
    lines += ["fleetfix first command sent at 4 hosts (run ended there): "]
    lines += ["== pinned ==" if len(os.sched_getaffinity(0)) > 1 else "== shared =="]
    for line in lines:
        assert line in done.stdout
    assert "fleetfix/ansible controller CPU per host" in done.stdout


# -- pinning ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("usable", "lab", "contenders"),
    [
        ({0, 1}, {1}, {0}),
        ({0, 1, 2}, {1, 2}, {0}),
        ({4, 5, 6, 7}, {6, 7}, {4, 5}),
    ],
)
def test_pinning_gives_the_lab_the_larger_half(
    usable: set[int], lab: set[int], contenders: set[int]
) -> None:
    plan = plan_pinning(usable)
    assert plan is not None
    assert (set(plan.lab), set(plan.contenders)) == (lab, contenders)
    assert plan.describe().startswith(f"pinned: lab on CPU {cpu_list(lab)}")


def test_one_cpu_cannot_be_pinned() -> None:
    assert plan_pinning({3}) is None


def test_cpu_lists_read_like_taskset() -> None:
    assert cpu_list({0, 1, 2, 5, 7, 8}) == "0-2,5,7-8"
    assert taskset_prefix(frozenset({2, 3})) == ["/usr/bin/taskset", "--cpu-list", "2-3"]
    assert taskset_prefix(None) == []


def _options(*argv: str) -> Options:
    return parse_options(list(argv))


def test_rounds_pin_when_possible_and_share_on_request() -> None:
    assert [r.label for r in rounds(_options(), {0, 1})] == ["pinned"]
    assert [r.label for r in rounds(_options("--shared-cores"), {0, 1})] == ["pinned", "shared"]
    assert [r.label for r in rounds(_options(), {0})] == ["shared"]
    assert [r.label for r in rounds(_options("--no-pin"), {0, 1})] == ["shared"]


def test_default_runs_300_and_1k_contenders_forced_workers_and_10k_extras() -> None:
    options = _options()
    workers = forced_workers(options, contender_cpus=1)
    planned = plan_runs(options, [("pdsh", run_bare)], workers)
    runs = [(key, hosts) for key, _, hosts in planned]
    assert runs == [
        ("bare", 300),
        ("fleetfix", 300),
        ("fleetfix --shards 1", 300),
        ("bare", 1000),
        ("fleetfix", 1000),
        ("fleetfix --shards 1", 1000),
        ("bare", 200),
        ("pdsh", 200),
    ]
    assert forced_workers(options, contender_cpus=8) == 7
    assert forced_workers(_options("--workers", "3"), contender_cpus=8) == 3
    assert "fleetfix --shards 0" not in {k for k, _, _ in plan_runs(options, [], 0)}
    assert (options.first_command_hosts, options.inventory_hosts) == (10_000, 10_000)
    assert (options.run_nodes, options.lab_nodes) == (1000, 10_000)
    both = _options("--hosts", "10000,1000", "--tool-hosts", "1000")
    assert both.hosts == (1000, 10_000)
    assert [h for _, _, h in plan_runs(both, [("pdsh", run_bare)], 0)] == [
        1000,
        1000,
        10_000,
        10_000,
        1000,
    ]


class _Child:
    """A python child whose own child burnt 0.2 s of CPU and was reaped, and which holds a
    grandchild; both wait on stdin until `end`. The grandchild prints its pid once started."""

    CODE = """
import subprocess, sys
burn = "import time\\nt = time.process_time()\\nwhile time.process_time() - t < 0.2: pass"
subprocess.run([sys.executable, "-c", burn], check=True)
ready = "import os, sys; print(os.getpid(), flush=True); sys.stdin.read()"
grandchild = subprocess.Popen([sys.executable, "-c", ready])
sys.stdin.read()
grandchild.wait()
"""

    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", self.CODE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout is not None
        self.grandchild = int(self.process.stdout.readline())

    def end(self) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.close()
        self.process.wait(timeout=30)
        self.process.stdout.close()


@pytest.fixture
def child() -> Iterator[_Child]:
    started = _Child()
    try:
        yield started
    finally:
        started.end()


def test_pin_tree_pins_a_process_and_its_children(child: _Child) -> None:
    cpu = frozenset({min(os.sched_getaffinity(0))})
    assert list(descendants(child.process.pid)) == [child.grandchild]
    assert pin_tree(child.process.pid, cpu) >= 2
    assert os.sched_getaffinity(child.process.pid) == cpu
    assert os.sched_getaffinity(child.grandchild) == cpu


def test_tree_cpu_counts_reaped_children(child: _Child) -> None:
    # The process itself used a few tens of ms; its reaped child 0.2 s (clock ticks: 0.01 s).
    assert tree_cpu_s(child.process.pid) >= 0.19
    assert exact_tree_cpu_s(child.process.pid) >= 0.19
    # Time on CPU in nanoseconds: a process that ran at all shows it, unlike utime+stime.
    assert 0 < exact_tree_cpu_s(child.grandchild) < 0.19


def test_tree_memory_sums_the_live_tree(child: _Child) -> None:
    memory = TreeSampler(child.process.pid)
    total = memory.sample()
    assert memory.processes_seen == {child.grandchild}
    assert 0 < total == memory.peak_kb == peak_rss_kb(child.grandchild)
    assert 0 < memory.peak_pss_kb <= memory.peak_kb
    assert 0 < memory.cpu_seen_s < 0.19  # the grandchild's own start-up, not the reaped burn


def test_first_open_is_noticed(tmp_path: Path) -> None:
    watched = tmp_path / "bash_env"
    watched.write_text("", encoding="ascii")
    watch = FirstOpen(watched)
    try:
        assert not watch.check()
        watched.stat()  # a lookup is not an open
        assert not watch.check()
        watched.read_text(encoding="ascii")
        assert watch.check()
        assert watch.opened_at is not None
    finally:
        watch.close()


def test_time_to_first_command_ends_the_command_at_the_open(tmp_path: Path) -> None:
    watched = tmp_path / "bash_env"
    watched.write_text("", encoding="ascii")
    code = f"import signal; open({str(watched)!r}).close(); signal.pause()"
    invocation = Invocation(
        [sys.executable, "-c", code], tmp_path / "out", timeout=60, first_open=watched
    )
    seconds = time_to_first_command(invocation)
    assert seconds is not None and 0 < seconds < 60
    never = replace(invocation, argv=[sys.executable, "-c", "pass"])
    assert time_to_first_command(never) is None


# -- ssh masters ----------------------------------------------------------------------------

_LISTENER = """
import os, socket, sys
directory, other = sys.argv[1], sys.argv[2]
# Like OpenSSH's mux master: bind under a temporary name, listen, then link the real name.
listener = socket.socket(socket.AF_UNIX)
listener.bind(os.path.join(directory, "c0ffee.W3SQ8SFtsaiKdwo5"))
listener.listen()
os.link(os.path.join(directory, "c0ffee.W3SQ8SFtsaiKdwo5"), os.path.join(directory, "c0ffee"))
os.unlink(os.path.join(directory, "c0ffee.W3SQ8SFtsaiKdwo5"))
elsewhere = socket.socket(socket.AF_UNIX)
elsewhere.bind(os.path.join(other, "not-a-master"))
elsewhere.listen()
unlistened = socket.socket(socket.AF_UNIX)
unlistened.bind(os.path.join(directory, "bound-only"))
print("ready", flush=True)
sys.stdin.read()
"""


def test_masters_are_found_by_their_listening_socket(tmp_path: Path) -> None:
    control, sibling = tmp_path / "cp", tmp_path / "cp2"
    control.mkdir()
    sibling.mkdir()
    process = subprocess.Popen(
        [sys.executable, "-c", _LISTENER, str(control), str(sibling)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None and process.stdout.readline() == "ready\n"
        found = find_masters(control)
    finally:
        assert process.stdin is not None and process.stdout is not None
        process.stdin.close()
        process.wait(timeout=30)
        process.stdout.close()
    assert found == [ControlMaster(control / "c0ffee", process.pid)]


def test_unix_table_keeps_only_listeners_under_the_dir() -> None:
    table = (
        "Num       RefCount Protocol Flags    Type St Inode Path\n"
        "0000: 00000002 00000000 00010000 0001 01 101 /tmp/w/cp/aa.XYZ\n"
        "0000: 00000003 00000000 00000000 0001 03 102 /tmp/w/cp/aa.XYZ\n"
        "0000: 00000002 00000000 00010000 0001 01 103 /tmp/w/cp2/bb\n"
        "0000: 00000002 00000000 00010000 0001 01 104\n"
    )
    assert listening_sockets(Path("/tmp/w/cp"), table) == {101: Path("/tmp/w/cp/aa.XYZ")}


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory with a short path: a Unix socket path must fit in 108 bytes."""
    path = Path(tempfile.mkdtemp(prefix="ffb-t-", dir="/tmp"))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_a_real_ssh_master_is_found_counted_and_ended(
    small_lab: LabHandle, short_dir: Path
) -> None:
    control = short_dir
    login = SshLogin(small_lab.user, small_lab.port, small_lab.client_key, small_lab.known_hosts)
    options = [f"-o{option}" for option in login.options()]
    argv = ["ssh", *options, "-oControlMaster=auto", "-oControlPersist=60"]
    argv += [f"-oControlPath={control}/%C", "-p", str(small_lab.port), "-l", login.user]
    done = subprocess.run(
        [*argv, small_lab.hosts["gpu0001"], "hostname"],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
        check=False,
    )
    assert done.stdout == "gpu0001\n", done.stderr
    masters = find_masters(control)
    try:
        assert len(masters) == 1
        check = subprocess.run(
            ["ssh", f"-oControlPath={masters[0].control_path}", "-O", "check", "x"],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        assert f"pid={masters[0].pid}" in check.stderr
        pidfd = os.pidfd_open(masters[0].pid)
        cost = end_ssh_masters(control)
        assert (cost.count, cost.cpu_s > 0, cost.rss_kb > 0) == (1, True, True)
        ended, _, _ = select.select([pidfd], [], [], 30)
        assert ended, "the master did not exit after ssh -O exit"
        os.close(pidfd)
    finally:
        for master in masters:
            with contextlib.suppress(ProcessLookupError):
                os.kill(master.pid, signal.SIGTERM)


# -- pdsh and pssh -----------------------------------------------------------------------

_RECORDER = """#!/bin/sh
count=$(ls "$RECORD_DIR" | wc -l)
for arg in "$@"; do printf '%s\\0' "$arg"; done > "$RECORD_DIR/$((count + 1))"
[ "$((count + 1))" != "$FAIL_AT" ]
"""

_LOGIN = SshLogin("root", 2222, Path("/lab/client_key"), Path("/lab/known_hosts"))


def _record(
    tmp_path: Path, argvs: list[list[str]], fail_at: int = 0
) -> tuple[list[list[str]], str]:
    """Run the generated script with a recording fake tool; the argvs it saw and the outcome."""
    records = tmp_path / "records"
    records.mkdir()
    outputs = [tmp_path / f"{n}.out" for n in range(len(argvs))]
    path = tmp_path / "run.sh"
    path.write_text(script(argvs, outputs), encoding="utf-8")
    env = {"PATH": "/usr/bin:/bin", "RECORD_DIR": str(records), "FAIL_AT": str(fail_at)}
    done = subprocess.run(
        ["/bin/sh", str(path)], capture_output=True, text=True, env=env, check=True
    )
    seen = [
        (records / str(n)).read_bytes().decode().split("\0")[:-1] for n in range(1, len(argvs) + 1)
    ]
    return seen, script_outcome(done.stdout, len(argvs), 7)


def _fake_tool(tmp_path: Path) -> str:
    tool = tmp_path / "fake-tool"
    tool.write_text(_RECORDER, encoding="ascii")
    tool.chmod(0o755)
    return str(tool)


def test_pdsh_gets_each_command_verbatim(tmp_path: Path) -> None:
    commands = [c.command for c in probe_commands()]
    tool, hosts = _fake_tool(tmp_path), tmp_path / "hosts"
    seen, outcome = _record(tmp_path, [pdsh_argv(tool, _LOGIN, hosts, c) for c in commands])
    assert [argv[-1] for argv in seen] == commands
    assert seen[0][:-1] == [
        *("-S", "-R", "ssh", "-f", "50", "-t", "60", "-l", "root", "-w", f"^{hosts}", "--")
    ]
    assert outcome == "ok: 5/5 commands ok on all 7 hosts"
    ssh_args = pdsh_env(_LOGIN)["PDSH_SSH_ARGS"]
    assert ssh_args.startswith("-x -p 2222 ") and ssh_args.endswith(" -l%u %h")
    assert "-o StrictHostKeyChecking=yes" in ssh_args
    assert "-o UserKnownHostsFile=/lab/known_hosts" in ssh_args


def test_pssh_gets_each_command_verbatim_and_a_failure_shows(tmp_path: Path) -> None:
    commands = [c.command for c in probe_commands()]
    tool, hosts, out = _fake_tool(tmp_path), tmp_path / "hosts", tmp_path / "out"
    argvs = [pssh_argv(tool, _LOGIN, hosts, out, c) for c in commands]
    seen, outcome = _record(tmp_path, argvs, fail_at=3)
    assert [argv[-1] for argv in seen] == commands
    assert seen[0][:10] == ["-h", str(hosts), "-l", "root", "-p", "50", "-t", "0", "-o", str(out)]
    assert "IdentityFile=/lab/client_key" in seen[0]
    assert outcome == "CHECK: 4/5 commands ok on all 7 hosts, nonzero exit from command 3"
    assert hosts_file_text(["127.0.0.2", "127.0.0.3"], 2222) == "127.0.0.2:2222\n127.0.0.3:2222\n"


@pytest.mark.parametrize("tool", ["pdsh", "pssh"])
def test_shell_tool_runs_the_workload_on_the_lab(
    small_lab: LabHandle, tmp_path: Path, tool: str
) -> None:
    binary = found_tool([PDSH] if tool == "pdsh" else list(PSSH_NAMES))
    if binary is None:
        pytest.skip(f"{tool} is not installed (apt-get install {tool})")
    setup = Setup(small_lab, tmp_path, tmp_path / "unused.ini", probe_commands(), venv_bin())
    measured = (run_pdsh if tool == "pdsh" else run_pssh)(setup, 2, binary)
    assert measured.outcome == "ok: 5/5 commands ok on all 2 hosts"
    assert measured.cost.first_command_s is not None


# -- the table -----------------------------------------------------------------------------


def _measured(tool: str, hosts: int, cpu_s: float, wall_s: float, rss_kb: int) -> Measurement:
    report = TimeReport(wall_s, cpu_s, 0.0, rss_kb, 0)
    return Measurement(tool, hosts, RunCost(report, 10.0, cpu_s + 10.0), "ok: all")


def test_verdicts_cover_every_target() -> None:
    rows = [
        _measured("bare asyncssh", 1000, 15.0, 100.0, 60_000),
        _measured("fleetfix", 1000, 40.0, 110.0, 200_000),
        _measured("fleetfix --shards 1", 1000, 28.0, 105.0, 400_000),
        _measured("ansible-playbook", 200, 60.0, 50.0, 160_000),
        _measured("fleetfix", 10_000, 600.0, 1000.0, 2_000_000),
    ]
    rows[1] = replace(rows[1], journal_bytes=30 * 1024 * 1000)
    rows[4] = replace(rows[4], outcome="CHECK: 49990/50000 tasks ok, 2 failed, 0 unreachable")
    text = "\n".join(ratio_lines(rows))
    assert "fleetfix at 1000 hosts: completes: meets target (ok: all)" in text
    assert "fleetfix at 10000 hosts: MISSES target: does not complete (CHECK: 49990/" in text
    assert "controller CPU at 1000 hosts: 40.0 ms/host: MISSES target <= 20 by 2.0x" in text
    assert "fleetfix/bare wall at 1000 hosts: 110.0 / 100.0 s = 1.10: meets target <= 1.2" in text
    assert "300.0 ms = 0.133 (7.5x less): MISSES target <= 0.1 by 1.3x" in text
    assert "memory at 1000 hosts: 200 KB/host (sum of peak RSS 195 MB; PSS 0 MB): meets" in text
    assert "journal at 1000 hosts: 30.0 KB/host" in text
    assert "fleetfix/bare controller CPU per host at 1000 hosts: 40.0 / 15.0 ms = 2.67: M" in text
    assert "fleetfix --shards 1/bare controller CPU per host at 1000 hosts: 28.0 / 15.0 ms" in text
    assert "fleetfix --shards 1 memory at 1000 hosts: 400 KB/host" in text
    assert "10000 vs 1000 hosts: 60.0 / 40.0 ms = 1.50: MISSES target <= 1.2 by 1.2x" in text
    table = measurement_table(rows)
    assert "wall/bare" in table and "1.10" in table


def test_parse_cost_table_has_every_builtin_probe() -> None:
    lines = parse_cost_lines(repeats=1)
    probes = {line.split()[0] for line in lines[2:] if line and not line.startswith("probe")}
    assert set(BUILTIN_PROBES) <= probes
    assert any(line.startswith("nvidia_smi fast") for line in lines)
    facts = [line for line in lines if "parse + store" in line]
    assert len(facts) == 1 and "ms/host" in facts[0] and "commands per host: 1" in facts[0]


def test_the_facts_benchmark_reads_an_eight_gpu_node() -> None:
    """The output it parses is a GPU node's: the real capture plus eight H100 rows."""
    gathered = parse_facts(gpu_node_output())
    assert [gpu["index"] for gpu in gathered["gpus"]] == list(range(8))
    assert gathered["os_family"] == "Debian"


def test_a_near_miss_shows_its_margin() -> None:
    assert verdict(20.6, 20) == "MISSES target <= 20 by 1.03x"
    assert verdict(20, 20) == "meets target <= 20"
    assert verdict(66, 20) == "MISSES target <= 20 by 3.3x"


def test_cpu_no_one_waited_for_still_counts() -> None:
    timed = _measured("fleetfix", 100, 2.0, 10.0, 50_000)
    escaped = replace(timed, cost=replace(timed.cost, tree_cpu_seen_s=3.5))
    assert (timed.cpu_s, escaped.cpu_s) == (2.0, 3.5)
    assert "1.5 CPU s of processes GNU time did not wait for" in measurement_table([escaped])
    assert "did not wait" not in measurement_table([timed])
