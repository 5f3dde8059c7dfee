"""What every Slurm emulator shares: hostlist expressions, Slurm's time stamps, node sizes."""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import UTC, datetime

CPUS = 224
"""CPUs (hardware threads) of every lab node: 2 sockets x 56 cores x 2 threads."""
CORES = CPUS // 2
MEMORY_MB = 2063000


def expand_hostlist(text: str) -> list[str]:
    """`gpu[001-003,007],gpu010` -> gpu001 gpu002 gpu003 gpu007 gpu010."""
    names: list[str] = []
    for item in _split_top(text):
        match = re.fullmatch(r"([^\[]*)\[([^\]]+)\](.*)", item)
        if match is None:
            names.append(item)
            continue
        head, body, tail = match.groups()
        for part in body.split(","):
            first, _, last = part.partition("-")
            width = len(first)
            for number in range(int(first), int(last or first) + 1):
                names.extend(expand_hostlist(f"{head}{number:0{width}d}{tail}"))
    return names


def _split_top(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in text:
        depth += char == "["
        depth -= char == "]"
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    return [p for p in [*parts, current] if p]


def compress_hostlist(names: Sequence[str]) -> str:
    """The inverse: gpu001 gpu002 gpu003 gpu007 -> gpu[001-003,007]."""
    groups: dict[tuple[str, int], list[int]] = {}
    plain: list[str] = []
    for name in names:
        match = re.fullmatch(r"(.*?)(\d+)", name)
        if match is None:
            plain.append(name)
            continue
        groups.setdefault((match.group(1), len(match.group(2))), []).append(int(match.group(2)))
    out = [_compress_group(prefix, width, sorted(nums)) for (prefix, width), nums in groups.items()]
    return ",".join(out + plain)


def _compress_group(prefix: str, width: int, numbers: list[int]) -> str:
    if len(numbers) == 1:
        return f"{prefix}{numbers[0]:0{width}d}"
    ranges: list[str] = []
    start = prev = numbers[0]
    for number in [*numbers[1:], None]:
        if number is not None and number == prev + 1:
            prev = number
            continue
        ranges.append(f"{start:0{width}d}" + (f"-{prev:0{width}d}" if prev != start else ""))
        if number is not None:
            start = prev = number
    return f"{prefix}[{','.join(ranges)}]"


def stamp(seconds: float | None) -> str:
    """Slurm's time format (slurm_make_time_str): 2026-01-02T10:00:00, or Unknown."""
    if seconds is None:
        return "Unknown"
    return datetime.fromtimestamp(seconds, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S")
