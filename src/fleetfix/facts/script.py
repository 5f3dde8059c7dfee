"""The one shell command that gathers a host's facts: sections of raw text, read by parse.py.

Ansible's setup module ships Python to the node and runs dozens of collectors; fleetfix sends
one POSIX shell script (one round trip) that prints what it reads, each part under a marker
line `@@ff:SECTION`, and parses the text on the controller. A section whose tool is missing
prints nothing (and its facts are left out); only the sections of the selected collectors
(subsets.py) are in the script, so `gather_subset: ['!all']` does not run nvidia-smi.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping

MARKER = "@@ff:"
"""Starts the line that opens a section: `@@ff:NAME` (a facts.d file: `@@ff:local PATH`)."""

DEFAULT_FACT_PATH = "/etc/ansible/facts.d"

GPU_QUERY = "index,name,uuid,pci.bus_id,memory.total,driver_version"
"""What `gpus` asks nvidia-smi for (CSV with its header, no units: parse.py reads it)."""

_PYTHON = (
    "import sys,os,socket\n"
    "print(sys.executable)\n"
    "print(*sys.version_info)\n"
    "print(socket.getfqdn())\n"
    "print(len(os.sched_getaffinity(0)) if hasattr(os,'sched_getaffinity') else '')"
)

_SERVICE_MGR = (
    "cat /proc/1/comm 2>/dev/null || echo; "
    "for p in /run/systemd/system /dev/.run/systemd /dev/.systemd /etc/init /sbin/openrc"
    " /etc/init.d /etc/dinit.d; do [ -e $p ] && echo $p; done; "
    "command -v initctl >/dev/null 2>&1 && echo initctl; "
    "[ -L /sbin/init ] && echo link $(readlink /sbin/init)"
)

_PKG_MGRS = "apt-get dnf5 dnf yum zypper apk pacman pkg_info emerge opkg xbps-install rpm-ostree"

_SECTIONS: Mapping[str, str] = {
    "uname": "uname -s; uname -r; uname -v; uname -m; uname -n",
    "os_release": "cat /etc/os-release 2>/dev/null || cat /usr/lib/os-release 2>/dev/null",
    "debian_version": "cat /etc/debian_version 2>/dev/null",
    "env": "env",
    "date": "date '+%Y %m %d %H %M %S %Z %z %A %w %W %s %N'",
    "pkg_mgr": f"for c in {_PKG_MGRS}; do command -v $c 2>/dev/null; done",
    "service_mgr": _SERVICE_MGR,
    "user": 'id -un; id -u; id -g; echo "$HOME"; echo "$SHELL"',
    "cpuinfo": "grep -E '^(processor|physical id|core id|cpu cores|siblings|model name)' "
    "/proc/cpuinfo 2>/dev/null",
    "nproc": "nproc 2>/dev/null",
    "meminfo": "grep -E '^(MemTotal|MemFree|SwapTotal|SwapFree):' /proc/meminfo 2>/dev/null",
    "mounts": "cat /proc/mounts 2>/dev/null",
    "route4": "ip -4 route get 8.8.8.8 2>/dev/null",
    "route6": "ip -6 route get 2404:6800:400a:800::1012 2>/dev/null",
    "addr": "ip -o addr show 2>/dev/null",
    "gpus": "command -v nvidia-smi >/dev/null 2>&1 && "
    f"nvidia-smi --query-gpu={GPU_QUERY} --format=csv,nounits 2>/dev/null",
}

COLLECTOR_SECTIONS: Mapping[str, tuple[str, ...]] = {
    "platform": ("uname",),
    "distribution": ("os_release", "debian_version"),
    "env": ("env",),
    "date_time": ("date",),
    "local": (),  # built from the fact path (facts_d_section)
    "pkg_mgr": ("pkg_mgr",),
    "python": ("python",),
    "service_mgr": ("service_mgr",),
    "user": ("user",),
    "hardware": ("cpuinfo", "nproc", "meminfo", "mounts"),
    "network": ("route4", "route6", "addr"),
    "gpus": ("gpus",),
}
"""The sections each collector (subsets.py) reads."""


def facts_command(
    collectors: Iterable[str],
    *,
    fact_path: str = DEFAULT_FACT_PATH,
    python: str = "python3",
) -> str:
    """The shell script that prints the sections of `collectors` (in a fixed order).

    `python` is the node's interpreter (the host's ansible_python_interpreter, or python3): it
    reports its own version and executable, the fqdn (socket.getfqdn(), as Ansible) and the
    CPUs this process may use (nproc).
    """
    chosen = set(collectors)
    parts: list[str] = []
    for collector, sections in COLLECTOR_SECTIONS.items():
        if collector not in chosen:
            continue
        if collector == "local":
            parts.append(facts_d_section(fact_path))
        for section in sections:
            body = _python_section(python) if section == "python" else _SECTIONS[section]
            parts.append(f"echo '{MARKER}{section}'; {body}")
    return "; ".join(parts) + "; true" if parts else "true"


def facts_d_section(fact_path: str) -> str:
    """Each `*.fact` file of `fact_path`: run when executable (its stdout and exit status),
    else read, each under `@@ff:local exec|file PATH`."""
    directory = shlex.quote(fact_path.rstrip("/") or "/")
    return (
        f"echo '{MARKER}local'; for f in {directory}/*.fact; do "
        f'if [ -L "$f" ] && [ ! -e "$f" ]; then echo "{MARKER}local dangling $f"; continue; fi; '
        f'[ -f "$f" ] || continue; '
        f'if [ -x "$f" ]; then echo "{MARKER}local exec $f"; "$f" 2>/dev/null; r=$?; '
        f'echo; printf \'{MARKER}rc %s\\t%s\\n\' "$f" "$r"; '
        f'else echo "{MARKER}local file $f"; cat "$f" 2>/dev/null; echo; fi; done'
    )


def _python_section(python: str) -> str:
    interpreter = shlex.quote(python)
    return f"{interpreter} -c {shlex.quote(_PYTHON)} 2>/dev/null"
