"""The lab's emulated dpkg-query and apt-get (lab/tools/packages.py), called as the tools are:
the package database a node starts with, dpkg's format escapes, version pins from the node's
driver branch, apt's refusals (an unknown package, a version not offered, a silent downgrade)
and -s changing nothing."""

from __future__ import annotations

from pathlib import Path

from tests.lab.support import call, offline_fleet

FORMAT = "-f=${Package}\\t${Status}\\t${Version}\\n"
FM = "nvidia-fabricmanager-550"


def test_a_node_starts_with_its_driver_versions(tmp_path: Path) -> None:
    fleet = offline_fleet("traps", tmp_path)
    reply = call(fleet, "gpu10", "dpkg-query", "-W", FORMAT, "--", FM, "htop")
    assert reply.stdout == f"{FM}\tinstall ok installed\t550.90.07-1\n"
    assert reply.stderr == "dpkg-query: no packages found matching htop\n"
    assert reply.rc == 1


def test_pins_downgrades_and_refusals(tmp_path: Path) -> None:
    fleet = offline_fleet("traps", tmp_path)
    older = call(fleet, "gpu10", "apt-get", "-y", "install", "--", f"{FM}=550.54.15-1")
    assert older.rc == 100 and "--allow-downgrades" in older.stderr
    simulated = call(
        fleet, "gpu10", "apt-get", "-s", "--allow-downgrades", "install", f"{FM}=550.54.15-1"
    )
    assert simulated.stdout.startswith(f"Inst {FM} [550.90.07-1] (550.54.15-1 ")
    assert call(fleet, "gpu10", "dpkg-query", "-W", "-f=${Version}", FM).stdout == "550.90.07-1"
    done = call(
        fleet, "gpu10", "apt-get", "-y", "--allow-downgrades", "install", f"{FM}=550.54.15-1"
    )
    assert done.rc == 0, done.stderr
    assert call(fleet, "gpu10", "dpkg-query", "-W", "-f=${Version}", FM).stdout == "550.54.15-1"
    other_branch = call(fleet, "gpu10", "apt-get", "-y", "install", f"{FM}=535.183.01-1")
    assert other_branch.rc == 100 and "Version '535.183.01-1'" in other_branch.stderr
    unknown = call(fleet, "gpu10", "apt-get", "-y", "install", "htop")
    assert (unknown.rc, unknown.stderr) == (100, "E: Unable to locate package htop\n")
    assert fleet.nodes["gpu11"].packages is None  # another node's database: untouched
