"""The facts command's output, captured on real machines, read into Ansible's facts."""

from __future__ import annotations

from pathlib import Path

from fleetfix.facts.parse import parse_facts, split_sections
from fleetfix.facts.script import facts_command
from fleetfix.facts.subsets import COLLECTORS

FIXTURES = Path(__file__).parents[2] / "fixtures" / "facts"


def _facts(name: str) -> dict[str, object]:
    return parse_facts((FIXTURES / name).read_text())


def test_debian_vm_reads_as_ansible_setup_read_it() -> None:
    facts = _facts("debian12-vm.txt")
    assert facts["hostname"] == facts["nodename"] == "vm"
    assert (facts["fqdn"], facts["domain"]) == ("localhost", "")
    assert facts["os_family"] == facts["distribution"] == "Debian"
    assert facts["distribution_version"] == "12.11"
    assert facts["distribution_major_version"] == "12"
    assert facts["distribution_release"] == "bookworm"
    assert (facts["system"], facts["architecture"], facts["machine"]) == ("Linux",) + (
        "x86_64",
    ) * 2
    assert facts["processor_count"] == 1
    assert facts["processor_cores"] == facts["processor_vcpus"] == facts["processor_nproc"] == 2
    assert isinstance(facts["memtotal_mb"], int) and facts["memtotal_mb"] > 0
    assert facts["pkg_mgr"] == "apt"
    assert facts["service_mgr"] == "process_api"  # pid 1's name, as Ansible reports it
    assert facts["user_id"] == "root" and facts["user_uid"] == 0
    assert facts["default_ipv4"] == {
        "address": "192.0.2.2",
        "interface": "eth0",
        "gateway": "192.0.2.1",
        "alias": "eth0",
        "prefix": "24",
        "netmask": "255.255.255.0",
        "network": "192.0.2.0",
        "broadcast": "192.0.2.255",
    }
    assert facts["default_ipv6"] == {
        "address": "fd00::2",
        "interface": "eth0",
        "gateway": "fd00::1",
        "prefix": "64",
    }
    assert facts["all_ipv4_addresses"] == ["192.0.2.2"]
    assert facts["mounts"] == [
        {
            "mount": "/",
            "device": "/dev/vda",
            "fstype": "ext4",
            "options": "rw,relatime,discard,resv_strict,resuid=65534,resgid=65534",
        }
    ]
    assert facts["local"] == {} and facts["gpus"] == []


def test_python_and_date_time_have_ansible_shapes() -> None:
    facts = _facts("debian12-vm.txt")
    python = facts["python"]
    assert isinstance(python, dict)
    assert set(python["version"]) == {"major", "minor", "micro", "releaselevel", "serial"}
    assert facts["python_version"] == "{major}.{minor}.{micro}".format(**python["version"])
    date_time = facts["date_time"]
    assert isinstance(date_time, dict)
    assert date_time["iso8601"].endswith("Z") and date_time["epoch"].isdigit()
    assert date_time["date"] == f"{date_time['year']}-{date_time['month']}-{date_time['day']}"


def test_env_keeps_a_value_that_spans_lines() -> None:
    env = _facts("debian12-vm.txt")["env"]
    assert isinstance(env, dict)
    assert env["MOTD"] == "first line\nsecond line"
    assert env["HOME"] == "/root"


def test_gpus_are_read_by_header_whatever_else_the_csv_holds() -> None:
    assert _facts("gpus-h100-allfields.txt")["gpus"] == [
        {
            "index": 0,
            "name": "NVIDIA H100 80GB HBM3",
            "uuid": "GPU-00000000-0000-0000-0000-000000000000",
            "pci_bus_id": "00000000:00:09.0",
            "memory_total_mb": 81559,
            "driver_version": "590.48.01",
        }
    ]
    p100 = _facts("gpus-p100-nounits.txt")["gpus"]
    assert p100 == [
        {"name": "Tesla P100-PCIE-16GB", "uuid": "GPU-ef1b2c9b-38d8-2090-2bd1-f567a3eb42a6"}
    ]


def test_no_nvidia_smi_is_no_gpus() -> None:
    assert parse_facts("@@ff:gpus\n")["gpus"] == []


def test_facts_d_reads_json_ini_and_scripts_as_ansible() -> None:
    local = _facts("local-facts-d.txt")["local"]
    assert local == {
        "broken": "Failure executing fact script (/etc/ansible/facts.d/broken.fact), rc: 3, err: ",
        "garbage": "error loading facts as JSON or ini - please check content:"
        " /etc/ansible/facts.d/garbage.fact",
        "owner": {"team": "hpc", "ticket": 1187},
        "rack": {"location": {"rack": "r12", "row": "B"}},
        "slurm": {"partition": "gpu"},
    }


def test_a_missing_tool_leaves_its_facts_out() -> None:
    facts = parse_facts(
        "@@ff:uname\nLinux\n6.1\n#1\naarch64\nnode7.cluster.example\n@@ff:cpuinfo\n"
    )
    assert facts["hostname"] == "node7"
    assert facts["domain"] == "cluster.example"
    assert facts["architecture"] == "aarch64"
    assert "memtotal_mb" not in facts and "distribution" not in facts


def test_arm_cpuinfo_without_sockets_counts_processors() -> None:
    text = "@@ff:cpuinfo\n" + "".join(f"processor\t: {n}\n" for n in range(4))
    facts = parse_facts(text)
    assert (facts["processor_count"], facts["processor_vcpus"]) == (4, 4)


def test_the_script_prints_only_the_selected_sections() -> None:
    command = facts_command({"platform"})
    assert "nvidia-smi" not in command and "@@ff:uname" in command
    assert set(split_sections("@@ff:a\nx\n@@ff:b\n")) == {"a", "b"}
    assert all(f"@@ff:{name}" in facts_command(COLLECTORS) for name in ("gpus", "local", "addr"))
