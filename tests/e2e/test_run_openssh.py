"""`fleetfix run` as an operator runs it: the CLI in a subprocess, real OpenSSH sshd on loopback."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support import process_alive, wait_until
from tests.support.sshd import OpenSSHServer

RECAP = re.compile(
    r"^(?P<host>\S+)\s+: ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)"
    r"\s+unreachable=(?P<unreachable>\d+)"
    r"\s+failed=(?P<failed>\d+)\s+skipped=(?P<skipped>\d+)\s+rescued=(?P<rescued>\d+)"
    r"\s+ignored=(?P<ignored>\d+)\s*$",
    re.M,
)


@dataclass
class Fleet:
    server: OpenSSHServer
    root: Path

    def inventory(self, hosts: list[str], extra: str = "") -> Path:
        lines = ["[gpu]"]
        lines += [f"{h} ansible_host=127.0.0.1 ansible_port={self.server.port}" for h in hosts]
        path = self.root / "hosts.ini"
        path.write_text("\n".join(lines) + "\n" + textwrap.dedent(extra))
        return path

    def playbook(self, text: str, name: str = "playbook.yml") -> Path:
        path = self.root / name
        path.write_text(textwrap.dedent(text))
        return path

    def argv(self, playbook: Path, inventory: Path, *extra: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "fleetfix",
            "run",
            str(playbook),
            "-i",
            str(inventory),
            "-u",
            self.server.user,
            "--private-key",
            str(self.server.client_key_path),
            "--known-hosts",
            str(self.server.known_hosts_path),
            "--journal",
            str(self.root / "journal.sqlite"),
            "--yes",
            *extra,
        ]

    def run(self, playbook: Path, inventory: Path, *extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            self.argv(playbook, inventory, *extra),
            check=False,
            capture_output=True,
            text=True,
            timeout=180,
            env=_env(),
        )


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("FLEETFIX_DEBUG", None)
    env["NO_COLOR"] = "1"
    return env


def recap(stdout: str) -> dict[str, dict[str, int]]:
    return {
        m["host"]: {k: int(v) for k, v in m.groupdict().items() if k != "host"}
        for m in RECAP.finditer(stdout)
    }


@pytest.fixture
def fleet(openssh_server: OpenSSHServer, tmp_path: Path) -> Iterator[Fleet]:
    yield Fleet(openssh_server, tmp_path)


def test_gated_playbook_runs_with_ansible_recap(fleet: Fleet) -> None:
    marks = fleet.root / "marks"
    marks.mkdir()
    mark = f"{marks}/{{{{ inventory_hostname }}}}"
    book = fleet.playbook(
        f"""
        - name: gated remediation
          hosts: gpu
          serial: 2
          max_fail_percentage: 50
          tasks:
            - name: count GPUs
              shell: echo 8
              register: gpus
              changed_when: false
            - name: fix only short nodes
              shell: echo fixing
              when: gpus.stdout | int < 8
            - name: wait for a counter
              shell: "echo x >> {mark}; wc -l < {mark}"
              register: tries
              until: tries.stdout | int >= 2
              retries: 3
              delay: 0
            - block:
                - name: flaky step
                  shell: "exit 3"
              rescue:
                - name: recover
                  shell: "echo recovered"
            - name: judge output
              shell: echo "Xid 79"
              register: dmesg
              failed_when: "'Xid 13' in dmesg.stdout"
        """
    )
    inv = fleet.inventory(["gpu001", "gpu002", "gpu003", "gpu004"])
    done = fleet.run(book, inv)
    assert done.returncode == 0, done.stdout + done.stderr
    table = recap(done.stdout)
    assert sorted(table) == ["gpu001", "gpu002", "gpu003", "gpu004"]
    for row in table.values():
        assert row == {
            "ok": 4,
            "changed": 3,
            "unreachable": 0,
            "failed": 0,
            "skipped": 1,
            "rescued": 1,
            "ignored": 0,
        }
    assert "PLAY RECAP ****" in done.stdout
    assert (marks / "gpu003").read_text() == "x\nx\n"


def test_exit_codes_failed_unreachable_and_safety(fleet: Fleet) -> None:
    book = fleet.playbook(
        """
        - hosts: gpu
          tasks:
            - shell: "test {{ inventory_hostname }} != gpu002"
        """
    )
    failed = fleet.run(book, fleet.inventory(["gpu001", "gpu002"]))
    assert failed.returncode == 2
    assert recap(failed.stdout)["gpu002"]["failed"] == 1
    assert "fatal: [gpu002]: FAILED!" in failed.stdout

    inv = fleet.inventory(["gpu001"], "[gpu]\nghost ansible_host=127.0.0.1 ansible_port=1\n")
    unreachable = fleet.run(book, inv)
    assert unreachable.returncode == 4, unreachable.stdout
    assert recap(unreachable.stdout)["ghost"]["unreachable"] == 1
    assert recap(unreachable.stdout)["gpu001"]["ok"] == 1

    gated = fleet.playbook(
        """
        - hosts: gpu
          serial: 2
          max_fail_percentage: 10
          tasks:
            - shell: "test {{ inventory_hostname }} != gpu001"
        """,
        "gated.yml",
    )
    stopped = fleet.run(gated, fleet.inventory(["gpu001", "gpu002", "gpu003", "gpu004"]))
    assert stopped.returncode == 6, stopped.stdout
    assert "SAFETY STOP" in stopped.stdout
    assert "gpu003" not in recap(stopped.stdout)  # the second batch never started


def test_hung_command_is_killed_at_its_timeout(fleet: Fleet) -> None:
    pidfile = fleet.root / "hung.pid"
    book = fleet.playbook(
        f"""
        - hosts: gpu
          tasks:
            - name: hung nvidia-smi
              shell: "echo $$ > {pidfile}; exec sleep 600"
              timeout: 2
        """
    )
    started = time.monotonic()
    done = fleet.run(book, fleet.inventory(["gpu001"]))
    assert done.returncode == 2
    assert "timed out" in done.stdout
    assert time.monotonic() - started < 60
    pid = int(pidfile.read_text())
    assert wait_until(lambda: not process_alive(pid), timeout=15), "remote process survived"


def test_check_mode_probes_but_changes_nothing(fleet: Fleet) -> None:
    marker = fleet.root / "changed"
    book = fleet.playbook(
        f"""
        - hosts: gpu
          tasks:
            - name: read the kernel version
              command: uname -r
              check_mode: false
              changed_when: false
              register: kernel
            - name: mutate
              shell: "touch {marker}"
        """
    )
    done = fleet.run(book, fleet.inventory(["gpu001", "gpu002"]), "--check")
    assert done.returncode == 0, done.stdout
    assert not marker.exists()
    assert f"would run: touch {marker}" in done.stdout
    assert recap(done.stdout)["gpu001"]["ok"] == 1


def test_unknown_keyword_refused_with_position(fleet: Fleet) -> None:
    book = fleet.playbook(
        """
        - hosts: gpu
          tasks:
            - shell: echo hi
              retires: 3
        """
    )
    done = fleet.run(book, fleet.inventory(["gpu001"]))
    assert done.returncode == 1
    assert f"{book}:5:7: unknown step keyword 'retires'" in done.stderr
    assert "did you mean 'retries'?" in done.stderr
    assert "Traceback" not in done.stderr


def interruptible_run(fleet: Fleet) -> tuple[Path, Path, Path, Path]:
    """A playbook whose middle step waits for a file: (playbook, inventory, log, release)."""
    log = fleet.root / "steps.log"
    release = fleet.root / "release"
    book = fleet.playbook(
        f"""
        - hosts: gpu
          tasks:
            - name: first
              shell: "echo first-{{{{ inventory_hostname }}}} >> {log}"
            - name: long
              shell: "while [ ! -e {release} ]; do sleep 0.1; done"
            - name: last
              shell: "echo last-{{{{ inventory_hostname }}}} >> {log}"
        """
    )
    return book, fleet.inventory(["gpu001", "gpu002"]), log, release


def test_ctrl_c_exits_99_and_resume_finishes(fleet: Fleet) -> None:
    book, inv, log, release = interruptible_run(fleet)
    proc = subprocess.Popen(fleet.argv(book, inv), stdout=subprocess.PIPE, text=True, env=_env())
    assert proc.stdout is not None
    seen: list[str] = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("TASK [long]"):
            break
    proc.send_signal(signal.SIGINT)
    rest, _ = proc.communicate(timeout=60)
    output = "".join(seen) + rest
    assert proc.returncode == 99, output
    run_id = re.search(r"run id: (\S+)", output)
    assert run_id is not None
    assert log.read_text().count("first-") == 2

    release.touch()
    resumed = fleet.run(book, inv, "--resume", run_id[1])
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    lines = log.read_text().splitlines()
    assert sorted(lines) == ["first-gpu001", "first-gpu002", "last-gpu001", "last-gpu002"]
    with sqlite3.connect(fleet.root / "journal.sqlite") as db:
        (outcome,) = db.execute("SELECT outcome FROM runs WHERE run_id=?", (run_id[1],)).fetchone()
    assert outcome == 0


def test_two_hundred_hosts_at_once(fleet: Fleet) -> None:
    hosts = [f"node{i:03d}" for i in range(1, 201)]
    book = fleet.playbook(
        """
        - hosts: gpu
          tasks:
            - command: hostname
              changed_when: false
            - shell: "echo {{ inventory_hostname }}"
              changed_when: false
        """
    )
    done = fleet.run(book, fleet.inventory(hosts), "--forks", "200", "--max-handshakes", "8")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr
    table = recap(done.stdout)
    assert len(table) == 200
    assert all(row["ok"] == 2 and row["unreachable"] == 0 for row in table.values())


def test_kill_9_loses_nothing_and_resume_finishes(fleet: Fleet) -> None:
    book, inv, log, release = interruptible_run(fleet)
    run_id = ""
    with subprocess.Popen(
        fleet.argv(book, inv), stdout=subprocess.PIPE, text=True, env=_env()
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("run id: "):
                run_id = line.split()[2]
            if line.startswith("TASK [long]"):
                break
        proc.kill()  # SIGKILL: no cleanup at all, leases stay behind
        proc.wait(timeout=30)
    assert run_id
    release.touch()
    resumed = fleet.run(book, inv, "--resume", run_id)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert sorted(log.read_text().splitlines()) == [
        "first-gpu001",
        "first-gpu002",
        "last-gpu001",
        "last-gpu002",
    ]


def test_no_log_output_never_reaches_the_journal(fleet: Fleet) -> None:
    secret = "s3cr3t-BMC-password-4711"
    book = fleet.playbook(
        f"""
        - hosts: gpu
          tasks:
            - name: set the BMC password
              shell: "echo {secret}; echo {secret} >&2; exit 1"
              no_log: true
              register: bmc
              ignore_errors: true
        """
    )
    done = fleet.run(book, fleet.inventory(["gpu001"]), "-vv")
    assert done.returncode == 0, done.stdout
    assert secret not in done.stdout + done.stderr
    dump = "\n".join(sqlite3.connect(fleet.root / "journal.sqlite").iterdump())
    assert secret not in dump
    assert "no_log: true" in dump  # the step is recorded, its output is not
