"""Render the benchmark's figures as a plain-text table with ratios against DESIGN 13's targets.

Only prints; never asserts. A ratio's meaning is stated next to it, with the host counts it used.
"""

from __future__ import annotations

from collections.abc import Sequence

from bench_inventory import ParseTiming
from measure import Measurement

HEADERS = (
    "tool",
    "hosts",
    "wall s",
    "s/100 hosts",
    "max RSS MB",
    "RSS/host KB",
    "ctl CPU s",
    "lab CPU s",
    "other CPU s",
    "busy %",
)
TARGET_VS_ANSIBLE = 0.1  # at least 10x faster per host
TARGET_VS_BARE = 1.5
TARGET_RSS_PER_HOST_KB = 1536
TARGET_PARSE_S = 1.0


def _row(m: Measurement) -> tuple[str, ...]:
    return (
        m.tool,
        str(m.hosts),
        f"{m.time.wall_s:.1f}",
        f"{m.per_100_hosts_s:.2f}",
        f"{m.time.max_rss_kb / 1024:.0f}",
        f"{m.rss_per_host_kb:.0f}",
        f"{m.cpu_s:.1f}",
        f"{m.lab_cpu.total:.1f}",
        f"{m.other_cpu_s:.1f}",
        f"{m.busy_percent:.0f}",
    )


def measurement_table(rows: Sequence[Measurement]) -> str:
    """Aligned columns, one row per contender, then each contender's outcome."""
    cells = [HEADERS, *(_row(m) for m in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(HEADERS))]
    lines = [
        "  ".join(
            c.rjust(w) if i else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines += ["", *(f"{m.tool}: {m.outcome} (exit {m.time.exit_status})" for m in rows)]
    return "\n".join(lines)


def _verdict(value: float, target: float) -> str:
    if value <= target:
        return f"meets target <= {target:g}"
    return f"MISSES target <= {target:g} by {value / target:.1f}x"


def ratio_lines(fleetfix: Measurement, others: dict[str, Measurement]) -> list[str]:
    """fleetfix vs ansible per host, fleetfix vs bare on the same hosts, memory per host."""
    lines: list[str] = []
    ansible = others.get("ansible")
    if ansible is not None:
        ratio = fleetfix.per_100_hosts_s / ansible.per_100_hosts_s
        cpu = (fleetfix.cpu_s / fleetfix.hosts) / (ansible.cpu_s / ansible.hosts)
        lines.append(
            f"fleetfix/ansible wall per host: {ratio:.3f} ({1 / ratio:.1f}x faster; "
            f"fleetfix {fleetfix.hosts} hosts, ansible {ansible.hosts}): "
            + _verdict(ratio, TARGET_VS_ANSIBLE)
        )
        lines.append(f"fleetfix/ansible controller CPU per host: {cpu:.3f} ({1 / cpu:.1f}x less)")
    bare = others.get("bare")
    if bare is not None:
        ratio = fleetfix.time.wall_s / bare.time.wall_s
        lines.append(
            f"fleetfix/bare wall (same {bare.hosts} hosts): {ratio:.2f}: "
            + _verdict(ratio, TARGET_VS_BARE)
        )
        lines.append(
            f"fleetfix/bare controller CPU: {fleetfix.cpu_s / bare.cpu_s:.1f}x "
            f"({fleetfix.cpu_s * 1000 / fleetfix.hosts:.0f} vs "
            f"{bare.cpu_s * 1000 / bare.hosts:.0f} ms per host)"
        )
    lines += _quiet_lines(fleetfix, others)
    rss = fleetfix.rss_per_host_kb
    lines.append(
        f"fleetfix max RSS per host: {rss:.0f} KB at {fleetfix.hosts} hosts: "
        + _verdict(rss, TARGET_RSS_PER_HOST_KB)
    )
    return lines


def _quiet_lines(fleetfix: Measurement, others: dict[str, Measurement]) -> list[str]:
    """The same ratios from CPU use alone, which other processes on the machine do not skew."""
    quiet = fleetfix.quiet_wall_s
    parts = []
    if "ansible" in others:
        ansible = others["ansible"]
        ratio = (quiet / fleetfix.hosts) / (ansible.quiet_wall_s / ansible.hosts)
        parts.append(f"fleetfix/ansible per host {ratio:.3f}")
    if "bare" in others:
        parts.append(f"fleetfix/bare {quiet / others['bare'].quiet_wall_s:.2f}")
    if not parts:
        return []
    return ["estimate without interference, wall ~ (ctl + lab CPU) / CPUs: " + ", ".join(parts)]


def parse_lines(timing: ParseTiming, with_vars_s: float) -> list[str]:
    runs = ", ".join(f"{s:.3f}" for s in timing.seconds)
    return [
        f"inventory parse: {timing.hosts} hosts, {timing.groups} groups: "
        f"min {timing.best:.3f} s, median {timing.median:.3f} s of {len(timing.seconds)} "
        f"({runs}): " + _verdict(timing.median, TARGET_PARSE_S),
        f"inventory parse + merged vars of every host: {with_vars_s:.3f} s",
    ]
