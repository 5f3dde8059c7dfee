"""package, apt, dnf and yum: what they read, what they plan, the commands they send, and a
localhost run against a fake package manager put first on PATH (never the real one)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from fleetfix.engine.disruptive import disruptive_command
from fleetfix.modules.package import (
    Plan,
    Wanted,
    apt_command,
    apt_plan,
    apt_wanted,
    parse_apt_simulation,
    parse_dpkg_query,
    parse_rpm_query,
    rpm_command,
    rpm_plan,
    rpm_wanted,
)
from fleetfix.modules.spec import problems, resolve
from fleetfix.modules.specs import MODULE_SPECS
from fleetfix.playbook.conditions import is_template

DPKG = (
    "nvidia-fabricmanager-550\tinstall ok installed\t550.90.07-1\n"
    "datacenter-gpu-manager\tdeinstall ok config-files\t1:3.3.6\n"
    "libc6:amd64\tinstall ok installed\t2.36-9\n"
)


def test_dpkg_query_reads_only_installed_packages() -> None:
    assert parse_dpkg_query(DPKG) == {"nvidia-fabricmanager-550": "550.90.07-1", "libc6": "2.36-9"}


def test_apt_pins_are_name_equals_version() -> None:
    assert apt_wanted(["nvidia-fabricmanager-550=550.90.07-1", "dcgm"]) == [
        Wanted("nvidia-fabricmanager-550", "550.90.07-1"),
        Wanted("dcgm"),
    ]


@pytest.mark.parametrize(
    ("state", "names", "plan"),
    [
        ("present", ["nvidia-fabricmanager-550=550.90.07-1"], Plan()),
        ("present", ["nvidia-fabricmanager-550=550.90.07-*"], Plan()),
        (
            "present",
            ["nvidia-fabricmanager-550=550.127.05-1"],
            Plan(install=("nvidia-fabricmanager-550=550.127.05-1",)),
        ),
        ("present", ["datacenter-gpu-manager"], Plan(install=("datacenter-gpu-manager",))),
        (
            "absent",
            ["nvidia-fabricmanager-550", "datacenter-gpu-manager"],
            Plan(remove=("nvidia-fabricmanager-550",)),
        ),
        ("absent", ["datacenter-gpu-manager"], Plan()),
    ],
)
def test_apt_plans_only_what_differs(state: str, names: list[str], plan: Plan) -> None:
    assert apt_plan(state, apt_wanted(names), parse_dpkg_query(DPKG)) == plan


def test_apt_commands_are_noninteractive_and_quoted() -> None:
    params = {"allow_downgrade": True, "install_recommends": False, "purge": True}
    install = apt_command("install", ["nvidia-fabricmanager-550=550.90.07-1"], params)
    assert install.startswith("DEBIAN_FRONTEND=noninteractive apt-get -y -q")
    assert "--allow-downgrades --no-install-recommends install -- " in install
    assert install.endswith("nvidia-fabricmanager-550=550.90.07-1")
    assert apt_command("remove", ["a b"], params).endswith("--purge remove -- 'a b'")


def test_apt_simulation_names_what_would_be_installed() -> None:
    text = "Reading package lists...\nInst dcgm [3.3.5] (3.3.6 repo [amd64])\nConf dcgm\n"
    assert parse_apt_simulation(text) == ("dcgm",)


def test_rpm_query_is_read_per_spec_in_order() -> None:
    specs = ["nvidia-driver-550.90.07", "datacenter-gpu-manager"]
    text = "nvidia-driver-550.90.07-1.el9.x86_64\npackage datacenter-gpu-manager is not installed\n"
    installed = parse_rpm_query(specs, text)
    assert installed == {"nvidia-driver-550.90.07": "nvidia-driver-550.90.07-1.el9.x86_64"}
    wanted = rpm_wanted(specs)
    assert rpm_plan("present", wanted, installed) == Plan(install=("datacenter-gpu-manager",))
    assert rpm_plan("absent", wanted, installed) == Plan(remove=("nvidia-driver-550.90.07",))


def test_rpm_commands() -> None:
    params = {"disable_gpg_check": True, "enablerepo": ["cuda"], "disablerepo": []}
    assert rpm_command("dnf", "install", ["a"], params) == (
        "dnf -y --nogpgcheck --enablerepo=cuda install a"
    )


def test_specs_take_ansibles_arguments_and_refuse_the_rest() -> None:
    apt = MODULE_SPECS["apt"]
    assert (
        problems(apt, {"name": "x", "state": "present", "update_cache": "yes"}, is_template) == []
    )
    assert problems(apt, {"pkg": ["x"], "state": "latest"}, is_template) == []
    said = problems(apt, {"name": "x", "deb": "/tmp/x.deb"}, is_template)
    assert said and "deb is not supported" in said[0][1]
    assert problems(MODULE_SPECS["package"], {"name": "x"}, is_template)  # state is required
    resolved = resolve(MODULE_SPECS["dnf"], {"name": "a,b", "state": "installed"})
    assert resolved["name"] == ["a", "b"]


FAKE_TOOL = """#!/bin/sh
echo "$(basename "$0") $*" >> "$FAKE_LOG"
case "$(basename "$0")" in
  dpkg-query)
    for p in "$@"; do
      v=$(awk -v n="$p" '$1==n {print $2}' "$FAKE_DB")
      [ -n "$v" ] && printf '%s\\tinstall ok installed\\t%s\\n' "$p" "$v"
    done
    exit 0;;
  apt-get)
    case "$*" in *" install -- "*)
      for p in "$@"; do case "$p" in *=*) echo "${p%%=*} ${p#*=}" >> "$FAKE_DB";; esac; done;;
    esac
    exit 0;;
esac
"""

PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - name: pin ipmitool
      apt: name=ipmitool=1.8.19-4 state=present update_cache=yes
      register: pinned
    - name: again
      package: {name: ipmitool=1.8.19-4, state: present, use: apt}
      register: again
    - name: what changed
      assert:
        that:
          - pinned is changed
          - pinned.cache_updated
          - again is not changed
"""


GPU_STACK = """
- hosts: all
  gather_facts: false
  tasks:
    - name: pin the fabric manager
      apt: name=nvidia-fabricmanager-550=550.90.07-1 state=present
"""


def _run(
    tmp_path: Path, *extra: str, playbook: str = PLAYBOOK
) -> tuple[subprocess.CompletedProcess[str], str]:
    tools = tmp_path / "bin"
    tools.mkdir(exist_ok=True)
    for name in ("dpkg-query", "apt-get"):
        (tools / name).write_text(FAKE_TOOL)
        (tools / name).chmod(0o755)
    (tmp_path / "db").touch()
    (tmp_path / "log").write_text("")
    (tmp_path / "play.yml").write_text(playbook)
    (tmp_path / "hosts.ini").write_text("localhost\n")
    env = {
        **os.environ,
        "PATH": f"{tools}:{os.environ['PATH']}",
        "FAKE_DB": str(tmp_path / "db"),
        "FAKE_LOG": str(tmp_path / "log"),
        "FLEETFIX_JOURNAL": str(tmp_path / "journal.sqlite"),
        "NO_COLOR": "1",
    }
    command = [str(Path(sys.executable).parent / "fleetfix"), "run", "-i", "hosts.ini"]
    done = subprocess.run(
        [*command, "--transport", "local", "--yes", *extra, "play.yml"],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done, (tmp_path / "log").read_text()


def test_apt_installs_a_pin_once_on_a_fake_apt(tmp_path: Path) -> None:
    done, log = _run(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "changed=1" in done.stdout
    assert log.count("apt-get -y -q") == 1, log
    assert "apt-get update -q" in log


def test_check_mode_reads_and_changes_nothing(tmp_path: Path) -> None:
    done, log = _run(tmp_path, "--check")
    assert "changed: [localhost]" in done.stdout, done.stdout
    assert "apt-get -y" not in log and "apt-get update" not in log, log
    assert "dpkg-query" in log


def test_a_gpu_stack_change_goes_through_the_engine_gates(tmp_path: Path) -> None:
    """The fabric manager pin on a host whose GPU processes and Slurm cannot be read (this
    machine): refused before apt-get installs anything, and the host is left for a human."""
    done, log = _run(tmp_path, playbook=GPU_STACK)
    assert done.returncode != 0, done.stdout
    assert "command (GPU package change) refused: cannot evaluate its safety gates" in done.stdout
    assert "apt-get -y" not in log, log
    assert "dpkg-query" in log, log


def test_which_package_commands_are_gpu_stack_changes() -> None:
    """The package modules and a shell step share engine/disruptive.py's table."""
    what = "GPU package change"
    pinned = apt_command("install", ["nvidia-driver-550=550.90.07-0ubuntu1"], {})
    assert disruptive_command(pinned) == what
    assert disruptive_command("sudo apt-get -y install datacenter-gpu-manager") == what
    assert disruptive_command("dnf -y remove cuda-drivers") == what
    assert disruptive_command(apt_command("install", ["ipmitool", "htop"], {})) is None
    assert disruptive_command("dpkg-query -W nvidia-fabricmanager-550") is None
    assert disruptive_command("apt-get -s install nvidia-driver-550") == what  # conservative
