"""Render the benchmark's figures as a plain-text table with verdicts against the targets of
issues 10 and 21.

Only prints; never asserts. Each verdict line says what it compares, with the host counts it
used, and ends in "meets target" or "MISSES target ... by Nx".
"""

from __future__ import annotations

from collections.abc import Sequence

from bench_inventory import ParseTiming
from measure import Measurement

HEADERS = (
    "tool",
    "hosts",
    "wall s",
    "wall/bare",
    "ctl CPU s",
    "ctl ms/host",
    "tree RSS MB",
    "RSS/host KB",
    "PSS MB",
    "journal KB/host",
    "1st cmd s",
    "lab CPU s",
    "other CPU s",
    "busy %",
)
TARGET_CPU_MS_PER_HOST = 20.0  # fleetfix controller CPU, 5 probes, 1,000 hosts
TARGET_VS_BARE = 1.2  # fleetfix wall / bare asyncssh wall, same hosts
TARGET_CPU_VS_ANSIBLE = 0.1  # fleetfix / ansible-playbook -f 50 controller CPU per host
TARGET_CPU_GROWTH = 1.2  # CPU per host at 10,000 hosts / at 1,000
TARGET_CPU_VS_BARE = 2.0  # fleetfix / bare asyncssh controller CPU per host, same hosts
TARGET_RSS_PER_HOST_KB = 300.0
TARGET_JOURNAL_PER_HOST_KB = 20.0
TARGET_PARSE_S = 0.3  # 10,000-host inventory
TARGET_FIRST_COMMAND_S = 1.0


def _bare_for(m: Measurement, rows: Sequence[Measurement]) -> Measurement | None:
    return next((r for r in rows if r.tool == "bare asyncssh" and r.hosts == m.hosts), None)


def _optional(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _row(m: Measurement, rows: Sequence[Measurement]) -> tuple[str, ...]:
    bare = _bare_for(m, rows)
    return (
        m.tool,
        str(m.hosts),
        f"{m.time.wall_s:.1f}",
        _optional(m.time.wall_s / bare.time.wall_s if bare else None, ".2f"),
        f"{m.cpu_s:.1f}",
        f"{m.cpu_ms_per_host:.1f}",
        f"{m.tree_rss_kb / 1024:.0f}",
        f"{m.rss_per_host_kb:.0f}",
        f"{m.tree_pss_kb / 1024:.0f}",
        _optional(m.journal_per_host_kb, ".1f"),
        _optional(m.cost.first_command_s, ".3f"),
        f"{m.lab_cpu_s:.1f}",
        f"{m.other_cpu_s:.1f}",
        f"{m.busy_percent:.0f}",
    )


def measurement_table(rows: Sequence[Measurement]) -> str:
    """Aligned columns, one row per contender and host count, then each run's outcome."""
    cells = [HEADERS, *(_row(m, rows) for m in rows)]
    widths = [max(len(row[i]) for row in cells) for i in range(len(HEADERS))]
    lines = [
        "  ".join(
            c.rjust(w) if i else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        )
        for row in cells
    ]
    lines.insert(1, "  ".join("-" * w for w in widths))
    lines.append("")
    lines += [_outcome_line(m) for m in rows]
    return "\n".join(lines)


def _outcome_line(m: Measurement) -> str:
    unseen = ""
    if m.unseen_by_time_s >= 0.05:
        unseen = f"; {m.unseen_by_time_s:.1f} CPU s of processes GNU time did not wait for, counted"
    return f"{m.tool} {m.hosts}: {m.outcome}{unseen} (exit {m.time.exit_status})"


def verdict(value: float, target: float) -> str:
    if value <= target:
        return f"meets target <= {target:g}"
    factor = value / target
    digits = 2 if factor < 1.1 else 1  # a near miss keeps its margin: 1.03x, not 1.0x
    return f"MISSES target <= {target:g} by {factor:.{digits}f}x"


def _fleetfix_runs(rows: Sequence[Measurement], tool: str = "fleetfix") -> list[Measurement]:
    return sorted((m for m in rows if m.tool == tool), key=lambda m: m.hosts)


def ratio_lines(rows: Sequence[Measurement]) -> list[str]:
    """Every target the runs can speak to: CPU, CPU and wall vs bare, vs Ansible, growth,
    memory, journal; for fleetfix as it runs by default, then with forced shard workers."""
    lines: list[str] = []
    for fleetfix in _fleetfix_runs(rows):
        lines += _per_run_lines(fleetfix, rows)
    lines += _growth_lines(_fleetfix_runs(rows))
    forced = sorted({m.tool for m in rows if m.tool.startswith("fleetfix --shards")})
    for tool in forced:
        for fleetfix in _fleetfix_runs(rows, tool):
            lines += _per_run_lines(fleetfix, rows)
    return lines


def _per_run_lines(fleetfix: Measurement, rows: Sequence[Measurement]) -> list[str]:
    at = f"at {fleetfix.hosts} hosts"
    name = fleetfix.tool
    lines = [
        _completes_line(fleetfix),
        f"{name} controller CPU {at}: {fleetfix.cpu_ms_per_host:.1f} ms/host: "
        + verdict(fleetfix.cpu_ms_per_host, TARGET_CPU_MS_PER_HOST),
    ]
    bare = _bare_for(fleetfix, rows)
    if bare is not None:
        cpu_ratio = fleetfix.cpu_ms_per_host / bare.cpu_ms_per_host
        lines.append(
            f"{name}/bare controller CPU per host {at}: {fleetfix.cpu_ms_per_host:.1f} / "
            f"{bare.cpu_ms_per_host:.1f} ms = {cpu_ratio:.2f}: "
            + verdict(cpu_ratio, TARGET_CPU_VS_BARE)
        )
        ratio = fleetfix.time.wall_s / bare.time.wall_s
        lines.append(
            f"{name}/bare wall {at}: {fleetfix.time.wall_s:.1f} / {bare.time.wall_s:.1f} s "
            f"= {ratio:.2f}: " + verdict(ratio, TARGET_VS_BARE)
        )
    ansible = next((m for m in rows if m.tool == "ansible-playbook"), None)
    if ansible is not None and name == "fleetfix":
        ratio = fleetfix.cpu_ms_per_host / ansible.cpu_ms_per_host
        lines.append(
            f"fleetfix/ansible controller CPU per host (fleetfix {fleetfix.hosts} hosts, ansible "
            f"{ansible.hosts}): {fleetfix.cpu_ms_per_host:.1f} / {ansible.cpu_ms_per_host:.1f} "
            f"ms = {ratio:.3f} ({1 / ratio:.1f}x less): " + verdict(ratio, TARGET_CPU_VS_ANSIBLE)
        )
    lines.append(
        f"{name} memory {at}: {fleetfix.rss_per_host_kb:.0f} KB/host (sum of peak RSS "
        f"{fleetfix.tree_rss_kb / 1024:.0f} MB; PSS {fleetfix.tree_pss_kb / 1024:.0f} MB): "
        + verdict(fleetfix.rss_per_host_kb, TARGET_RSS_PER_HOST_KB)
    )
    if fleetfix.journal_per_host_kb is not None:
        lines.append(
            f"{name} journal {at}: {fleetfix.journal_per_host_kb:.1f} KB/host (db + wal "
            f"{(fleetfix.journal_bytes or 0) / 1e6:.1f} MB): "
            + verdict(fleetfix.journal_per_host_kb, TARGET_JOURNAL_PER_HOST_KB)
        )
    if fleetfix.cost.first_command_s is not None:
        lines.append(first_command_line(fleetfix.hosts, fleetfix.cost.first_command_s, tool=name))
    return lines


def _completes_line(fleetfix: Measurement) -> str:
    """Did every host run every step (and fleetfix exit 0)?"""
    done = fleetfix.outcome.startswith("ok") and fleetfix.time.exit_status == 0
    verdict_text = "completes: meets target" if done else "MISSES target: does not complete"
    return f"{fleetfix.tool} at {fleetfix.hosts} hosts: {verdict_text} ({fleetfix.outcome})"


def _growth_lines(runs: Sequence[Measurement]) -> list[str]:
    if len(runs) < 2:
        return []
    small, large = runs[0], runs[-1]
    growth = large.cpu_ms_per_host / small.cpu_ms_per_host
    return [
        f"fleetfix controller CPU per host, {large.hosts} vs {small.hosts} hosts: "
        f"{large.cpu_ms_per_host:.1f} / {small.cpu_ms_per_host:.1f} ms = {growth:.2f}: "
        + verdict(growth, TARGET_CPU_GROWTH)
    ]


def first_command_line(
    hosts: int, seconds: float | None, note: str = "", tool: str = "fleetfix"
) -> str:
    """Start of `fleetfix run` to the first exec request the lab served."""
    head = f"{tool} first command sent at {hosts} hosts{note}: "
    if seconds is None:
        return head + "none seen (see the run's output)"
    return head + f"{seconds:.3f} s after start: " + verdict(seconds, TARGET_FIRST_COMMAND_S)


def parse_lines(timing: ParseTiming, with_vars_s: float) -> list[str]:
    runs = ", ".join(f"{s:.3f}" for s in timing.seconds)
    return [
        f"inventory parse: {timing.hosts} hosts, {timing.groups} groups: "
        f"min {timing.best:.3f} s, median {timing.median:.3f} s of {len(timing.seconds)} "
        f"({runs}): " + verdict(timing.median, TARGET_PARSE_S),
        f"inventory parse + merged vars of every host: {with_vars_s:.3f} s",
    ]
