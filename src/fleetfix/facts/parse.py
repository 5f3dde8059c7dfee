"""The facts command's output (script.py) -> Ansible's facts: names without `ansible_`, Ansible's
shapes (strings where Ansible has strings, `processor_vcpus` an int, `mounts` a list of dicts).

Pure and cheap: no I/O, one pass over the text, so every captured output is a test case
(tests/fixtures/facts) and ten thousand hosts parse in seconds. A section that printed nothing
(its tool is missing on the node) leaves its facts out, never a guess.
"""

from __future__ import annotations

import configparser
import csv
import ipaddress
import json
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from fleetfix.facts.script import MARKER
from fleetfix.probes.gpu_facts import normalize_bus_id

Facts = dict[str, Any]

_DISTRIBUTIONS: Mapping[str, str] = {
    "debian": "Debian",
    "ubuntu": "Ubuntu",
    "rhel": "RedHat",
    "centos": "CentOS",
    "rocky": "Rocky",
    "almalinux": "AlmaLinux",
    "fedora": "Fedora",
    "ol": "OracleLinux",
    "amzn": "Amazon",
    "sles": "SLES",
    "sles_sap": "SLES_SAP",
    "opensuse-leap": "openSUSE Leap",
    "opensuse-tumbleweed": "openSUSE Tumbleweed",
    "arch": "Archlinux",
    "alpine": "Alpine",
    "linuxmint": "Linux Mint",
    "pop": "Pop!_OS",
    "kali": "Kali",
}
"""os-release ID -> Ansible's `distribution` (module_utils/facts/system/distribution.py)."""

_FAMILIES: Mapping[str, str] = {
    **dict.fromkeys(("Debian", "Ubuntu", "Linux Mint", "Pop!_OS", "Kali"), "Debian"),
    **dict.fromkeys(("RedHat", "CentOS", "Rocky", "AlmaLinux", "Fedora"), "RedHat"),
    **dict.fromkeys(("OracleLinux", "Amazon"), "RedHat"),
    **dict.fromkeys(("SLES", "SLES_SAP", "openSUSE Leap", "openSUSE Tumbleweed"), "Suse"),
    "Archlinux": "Archlinux",
    "Alpine": "Alpine",
}

_PKG_MGRS: Mapping[str, str] = {
    "apt-get": "apt",
    "dnf5": "dnf5",
    "dnf": "dnf",
    "yum": "yum",
    "zypper": "zypper",
    "apk": "apk",
    "pacman": "pacman",
    "pkg_info": "openbsd_pkg",
    "emerge": "portage",
    "opkg": "opkg",
    "xbps-install": "xbps",
    "rpm-ostree": "atomic_container",
}
"""A package manager's program -> Ansible's `pkg_mgr` name; the script lists them in
Ansible's order of preference (dnf5, dnf, yum on the RedHat family)."""

_PROC_1_NAMES: Mapping[str, str] = {
    "procd": "openwrt_init",
    "runit-init": "runit",
    "svscan": "svc",
    "openrc-init": "openrc",
}
_MOUNT_FSTYPES_IGNORED = frozenset({"none"})
_GPU_COLUMNS: Mapping[str, str] = {
    "index": "index",
    "name": "name",
    "uuid": "uuid",
    "pci.bus_id": "pci_bus_id",
    "memory.total": "memory_total_mb",
    "driver_version": "driver_version",
}
_UNIT = re.compile(r"\s*\[[^\]]*\]$")


def parse_facts(text: str) -> Facts:
    """Every fact the output holds, by Ansible's name without the `ansible_` prefix."""
    sections = split_sections(text)
    facts: Facts = {}
    for name, reader in _READERS.items():
        body = sections.get(name)
        if body is not None:
            reader(body, facts)
    if "local" in sections:
        facts["local"] = local_facts(sections)
    _platform_names(facts)
    return facts


def split_sections(text: str) -> dict[str, list[str]]:
    """Section name (the marker's rest) -> its lines. A facts.d file's rc follows its output
    as `rc N` and is kept under `rc PATH`."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    last_exec = ""
    for line in text.splitlines():
        if line.startswith(MARKER):
            name = line[len(MARKER) :].strip()
            if name.startswith("local exec "):
                last_exec = name.removeprefix("local exec ")
            elif name.startswith("rc ") and last_exec:
                name = f"rc {last_exec}\t{name[3:]}"
            current = sections.setdefault(name, [])
        elif current is not None:
            current.append(line)
    return sections


def _uname(lines: list[str], facts: Facts) -> None:
    fields = ("system", "kernel", "kernel_version", "machine", "nodename")
    for name, value in zip(fields, lines, strict=False):
        facts[name] = value.strip()
    machine = facts.get("machine")
    if machine is not None:
        facts["architecture"] = {"i686": "i386", "i586": "i386"}.get(machine, machine)
        facts["userspace_bits"] = "64" if machine.endswith("64") else "32"


def _platform_names(facts: Facts) -> None:
    """hostname, fqdn and domain from the node's name and Python's socket.getfqdn()."""
    nodename = facts.get("nodename")
    if nodename is None:
        return
    facts["hostname"] = nodename.split(".")[0]
    fqdn = facts.get("fqdn") or nodename
    facts["fqdn"] = fqdn
    facts["domain"] = ".".join(fqdn.split(".")[1:])


def _os_release(lines: list[str], facts: Facts) -> None:
    release: dict[str, str] = {}
    for line in lines:
        key, sep, value = line.partition("=")
        if sep:
            release[key.strip()] = value.strip().strip("\"'")
    os_id = release.get("ID", "").lower()
    name = _DISTRIBUTIONS.get(os_id) or release.get("NAME", "").split(" ")[0] or "NA"
    version = release.get("VERSION_ID", "NA")
    codename = release.get("VERSION_CODENAME") or release.get("UBUNTU_CODENAME") or ""
    if not codename:
        found = re.search(r"\(([^)]*)\)", release.get("VERSION", ""))
        codename = found[1] if found else ""
    facts.update(
        distribution=name,
        distribution_version=version,
        distribution_major_version=version.split(".")[0],
        distribution_release=codename or "NA",
        os_family=_FAMILIES.get(name, name),
    )


def _debian_version(lines: list[str], facts: Facts) -> None:
    """Debian's point release (12.11) is in /etc/debian_version, as Ansible reads it."""
    text = lines[0].strip() if lines else ""
    if facts.get("distribution") == "Debian" and re.fullmatch(r"\d+(\.\d+)*", text):
        facts["distribution_version"] = text
        facts["distribution_major_version"] = text.split(".")[0]
        if "." in text:
            facts["distribution_minor_version"] = text.split(".")[1]


def _env(lines: list[str], facts: Facts) -> None:
    env: dict[str, str] = {}
    last = ""
    for line in lines:
        key, sep, value = line.partition("=")
        if sep and key and " " not in key:
            env[key] = value
            last = key
        elif last:  # a value that holds a newline goes on on the next line
            env[last] += "\n" + line
    facts["env"] = env


def _date(lines: list[str], facts: Facts) -> None:
    words = lines[0].split() if lines else []
    if len(words) != 13:
        return
    year, month, day, hour, minute, second, tz, offset, weekday, wday, week, epoch, nanos = words
    try:
        moment = datetime.fromtimestamp(int(epoch), UTC)
    except (ValueError, OverflowError):
        return
    micro = nanos[:6] if nanos.isdigit() else "000000"
    utc = moment.strftime("%Y-%m-%dT%H:%M:%S")
    facts["date_time"] = {
        "year": year,
        "month": month,
        "day": day,
        "hour": hour,
        "minute": minute,
        "second": second,
        "date": f"{year}-{month}-{day}",
        "time": f"{hour}:{minute}:{second}",
        "tz": tz,
        "tz_dst": tz,
        "tz_offset": offset,
        "weekday": weekday,
        "weekday_number": wday,
        "weeknumber": week,
        "epoch": epoch,
        "epoch_int": epoch,
        "iso8601": f"{utc}Z",
        "iso8601_micro": f"{utc}.{micro}Z",
        "iso8601_basic": f"{year}{month}{day}T{hour}{minute}{second}{micro}",
        "iso8601_basic_short": f"{year}{month}{day}T{hour}{minute}{second}",
    }


def _pkg_mgr(lines: list[str], facts: Facts) -> None:
    for line in lines:
        program = line.strip().rsplit("/", 1)[-1]
        if program in _PKG_MGRS:
            facts["pkg_mgr"] = _PKG_MGRS[program]
            return
    facts["pkg_mgr"] = "unknown"


def _service_mgr(lines: list[str], facts: Facts) -> None:
    """Ansible's service_mgr collector: pid 1's name unless it is `init` or a shell, else what
    the node's paths say (systemd, upstart, openrc, sysvinit, dinit), else `service`."""
    proc_1 = lines[0].strip() if lines else ""
    seen = {line.strip() for line in lines[1:]}
    link = next((s.removeprefix("link ") for s in seen if s.startswith("link ")), "")
    if not proc_1 and link:
        proc_1 = link.rsplit("/", 1)[-1]
    if proc_1 and proc_1 != "init" and not proc_1.endswith("sh"):
        facts["service_mgr"] = _PROC_1_NAMES.get(proc_1, proc_1)
    elif seen & {"/run/systemd/system", "/dev/.run/systemd", "/dev/.systemd"}:
        facts["service_mgr"] = "systemd"
    elif "initctl" in seen and "/etc/init" in seen:
        facts["service_mgr"] = "upstart"
    elif "/sbin/openrc" in seen:
        facts["service_mgr"] = "openrc"
    elif link.rsplit("/", 1)[-1] == "systemd":
        facts["service_mgr"] = "systemd"
    elif "/etc/init.d" in seen:
        facts["service_mgr"] = "sysvinit"
    elif "/etc/dinit.d" in seen:
        facts["service_mgr"] = "dinit"
    else:
        facts["service_mgr"] = "service"


def _user(lines: list[str], facts: Facts) -> None:
    if len(lines) < 3:
        return
    name, uid, gid = (line.strip() for line in lines[:3])
    facts["user_id"] = name
    if uid.isdigit() and gid.isdigit():
        facts.update(user_uid=int(uid), user_gid=int(gid))
        facts.update(real_user_id=int(uid), effective_user_id=int(uid), real_group_id=int(gid))
    if len(lines) > 3:
        facts["user_dir"] = lines[3].strip()
    if len(lines) > 4:
        facts["user_shell"] = lines[4].strip()


def _cpuinfo(lines: list[str], facts: Facts) -> None:
    """Ansible's x86 count: sockets by `physical id`, cores per socket from `cpu cores`,
    threads per core from `siblings`; without them (ARM, VMs) every processor is a core."""
    processors = 0
    sockets: dict[str, int] = {}
    siblings: dict[str, int] = {}
    physical = core = "0"
    models: list[str] = []
    for line in lines:
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key == "processor":
            processors += 1
        elif key == "model name":
            models.append(value)
        elif key == "physical id":
            physical = value
            sockets.setdefault(physical, 1)
        elif key == "core id":
            core = value
        elif key == "cpu cores" and value.isdigit():
            sockets[physical] = int(value)
        elif key == "siblings" and value.isdigit():
            siblings[core] = int(value)
    if not sockets:
        facts.update(processor_count=processors, processor_cores=1)
        facts.update(processor_threads_per_core=1, processor_vcpus=processors)
    else:
        cores = next(iter(sockets.values())) or 1
        threads = round(next(iter(siblings.values()), cores) / cores) or 1
        facts.update(processor_count=len(sockets), processor_cores=cores)
        facts.update(
            processor_threads_per_core=threads, processor_vcpus=threads * cores * len(sockets)
        )
    facts["processor_nproc"] = processors
    if models:
        facts["processor_model"] = models[0]


def _nproc(lines: list[str], facts: Facts) -> None:
    text = lines[0].strip() if lines else ""
    if text.isdigit():
        facts["processor_nproc"] = int(text)


def _meminfo(lines: list[str], facts: Facts) -> None:
    names = {
        "MemTotal": "memtotal_mb",
        "MemFree": "memfree_mb",
        "SwapTotal": "swaptotal_mb",
        "SwapFree": "swapfree_mb",
    }
    for line in lines:
        key, _, value = line.partition(":")
        words = value.split()
        if key in names and words and words[0].isdigit():
            facts[names[key]] = int(words[0]) // 1024


def _mounts(lines: list[str], facts: Facts) -> None:
    """Mounts of a device (`/dev/...`) or a network path (`host:/export`), as Ansible keeps."""
    mounts: list[dict[str, Any]] = []
    for line in lines:
        fields = line.split()
        if len(fields) < 4:
            continue
        device, mount, fstype, options = (_unescape(f) for f in fields[:4])
        if fstype in _MOUNT_FSTYPES_IGNORED:
            continue
        if not device.startswith(("/", "\\")) and ":/" not in device:
            continue
        mounts.append({"mount": mount, "device": device, "fstype": fstype, "options": options})
    facts["mounts"] = mounts


def _unescape(field: str) -> str:
    """/proc/mounts writes a space in a path as `\\040` (and tab, newline, backslash)."""
    if "\\" not in field:
        return field
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), field)


def _route(version: int) -> Callable[[list[str], Facts], None]:
    def read(lines: list[str], facts: Facts) -> None:
        words = " ".join(lines).split()
        found: dict[str, Any] = {}
        for key, name in (("src", "address"), ("dev", "interface"), ("via", "gateway")):
            if key in words[:-1]:
                found[name] = words[words.index(key) + 1]
        if "address" in found and "interface" in found:
            found.setdefault("gateway", "unknown")
            if version == 4:  # Ansible names no alias for IPv6
                found["alias"] = found["interface"]
            facts[f"default_ipv{version}"] = found

    return read


def _addr(lines: list[str], facts: Facts) -> None:
    """`ip -o addr`: every address but loopback's, and the default addresses' prefixes."""
    ipv4: list[str] = []
    ipv6: list[str] = []
    prefixes: dict[str, str] = {}
    for line in lines:
        words = line.split()
        if len(words) < 4 or words[2] not in ("inet", "inet6"):
            continue
        address, _, prefix = words[3].partition("/")
        prefixes[address] = prefix
        if words[2] == "inet" and not address.startswith("127."):
            ipv4.append(address)
        elif words[2] == "inet6" and address != "::1":
            ipv6.append(address)
    facts["all_ipv4_addresses"] = ipv4
    facts["all_ipv6_addresses"] = ipv6
    _default_prefix(facts, prefixes)


def _default_prefix(facts: Facts, prefixes: Mapping[str, str]) -> None:
    for version in (4, 6):
        default = facts.get(f"default_ipv{version}")
        if not isinstance(default, dict) or not prefixes.get(default["address"]):
            continue
        prefix = prefixes[default["address"]]
        default["prefix"] = prefix
        if version == 4:
            try:
                network = ipaddress.ip_interface(f"{default['address']}/{prefix}").network
            except ValueError:
                continue
            default["netmask"] = str(network.netmask)
            default["network"] = str(network.network_address)
            default["broadcast"] = str(network.broadcast_address)


def _python(lines: list[str], facts: Facts) -> None:
    if len(lines) < 2:
        return
    parts = lines[1].split()
    if len(parts) != 5 or not all(p.isdigit() for p in (parts[0], parts[1], parts[2])):
        return
    major, minor, micro = int(parts[0]), int(parts[1]), int(parts[2])
    level, serial = parts[3], int(parts[4]) if parts[4].isdigit() else 0
    facts["python"] = {
        "executable": lines[0].strip(),
        "type": "cpython",
        "version": {
            "major": major,
            "minor": minor,
            "micro": micro,
            "releaselevel": level,
            "serial": serial,
        },
        "version_info": [major, minor, micro, level, serial],
    }
    facts["python_version"] = f"{major}.{minor}.{micro}"
    if len(lines) > 2 and lines[2].strip():
        facts["fqdn"] = lines[2].strip()
    if len(lines) > 3 and lines[3].strip().isdigit():
        facts["processor_nproc"] = int(lines[3].strip())


def _gpus(lines: list[str], facts: Facts) -> None:
    """nvidia-smi's CSV with its header (columns by name, units dropped); [] without it."""
    rows = [row for row in csv.reader(line for line in lines if line.strip())]
    gpus: list[dict[str, Any]] = []
    if rows:
        header = [_UNIT.sub("", cell.strip()) for cell in rows[0]]
        for row in rows[1:]:
            gpus.append(_gpu(dict(zip(header, (c.strip() for c in row), strict=False))))
    facts["gpus"] = gpus


def _gpu(cells: Mapping[str, str]) -> dict[str, Any]:
    gpu: dict[str, Any] = {}
    for column, name in _GPU_COLUMNS.items():
        value = cells.get(column)
        if value is None or value.startswith("[") or value == "":
            continue
        if name in ("index", "memory_total_mb"):
            number = value.split()[0]
            gpu[name] = int(number) if number.isdigit() else value
        elif name == "pci_bus_id":
            gpu[name] = normalize_bus_id(value) or value
        else:
            gpu[name] = value
    return gpu


def local_facts(sections: Mapping[str, list[str]]) -> dict[str, Any]:
    """facts.d: each `NAME.fact` under `NAME`, read as JSON, else INI, else Ansible's error
    text; an executable that failed gives Ansible's failure text."""
    found: dict[str, Any] = {}
    for key, lines in sorted(sections.items()):
        if key.startswith("local dangling "):
            path = key[len("local dangling ") :]
            name = path.rsplit("/", 1)[-1].replace(".fact", "")
            found[name] = f"Could not stat fact ({path}): [Errno 2] No such file or directory"
            continue
        if not key.startswith(("local exec ", "local file ")):
            continue
        path = key[len("local exec ") :]
        name = path.rsplit("/", 1)[-1].replace(".fact", "")
        rc = _exec_rc(sections, path) if key.startswith("local exec ") else 0
        if rc != 0:
            found[name] = f"Failure executing fact script ({path}), rc: {rc}, err: "
            continue
        found[name] = _fact_value("\n".join(lines), path)
    return dict(sorted(found.items()))  # by file name, as Ansible reads them


def _exec_rc(sections: Mapping[str, list[str]], path: str) -> int:
    for key in sections:
        if key.startswith(f"rc {path}\t"):
            text = key.rsplit("\t", 1)[-1]
            return int(text) if text.isdigit() else 1
    return 0


def _fact_value(text: str, path: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        pass
    parser = configparser.ConfigParser()
    try:
        parser.read_string(text)
    except configparser.Error:
        return f"error loading facts as JSON or ini - please check content: {path}"
    try:
        return {section: dict(parser.items(section)) for section in parser.sections()}
    except configparser.Error as exc:
        return f"error loading facts as ini - please check content: {path} ({exc})"


_READERS: Mapping[str, Callable[[list[str], Facts], None]] = {
    "uname": _uname,
    "os_release": _os_release,
    "debian_version": _debian_version,
    "env": _env,
    "date": _date,
    "pkg_mgr": _pkg_mgr,
    "service_mgr": _service_mgr,
    "user": _user,
    "cpuinfo": _cpuinfo,
    "nproc": _nproc,
    "meminfo": _meminfo,
    "mounts": _mounts,
    "route4": _route(4),
    "route6": _route(6),
    "addr": _addr,
    "python": _python,
    "gpus": _gpus,
}
"""Each section's reader, in an order where a reader finds what it builds on (os_release
before debian_version, routes before addr, cpuinfo before nproc and python)."""
