"""Expand host ranges like `gpu[001:128]`, `node-[a:f]` and `rack[1:9:2]` the way Ansible does.

Rules (ansible.plugins.inventory.expand_hostname_range): the first bracket of a name is expanded
and the result expanded again, so several ranges give their product in order. Bounds are
`begin:end` or `begin:end:step`; an empty begin means 0; a begin with a leading zero sets a
zero-padded width that end must share; single letters range over a-z then A-Z. A numeric range
whose begin is above its end is empty (Ansible does not complain), a reversed letter range is an
error.

One deliberate difference: a name standing for more than MAX_HOSTS_PER_PATTERN (1,000,000) hosts,
counting every range in it (`gpu[0:9999][0:9999]` is 100,000,000), is refused before anything is
expanded; Ansible would try to build the list and run out of memory.
"""

from __future__ import annotations

import string

_LETTERS = string.ascii_letters
MAX_HOSTS_PER_PATTERN = 1_000_000
"""The most hosts one inventory line or one pattern term may stand for (about 700 MB and several
seconds of work for the inventory); a typo like gpu[0:10000000] is refused, no fleet is this big."""
MAX_RANGE_SIZE = MAX_HOSTS_PER_PATTERN
MAX_RANGES_PER_NAME = 32
"""More brackets than this in one name is refused (each one is a level of expansion)."""


class HostRangeError(ValueError):
    """A range expression is malformed; the message says why, in Ansible's words."""


def has_range(name: str) -> bool:
    """True when `name` holds a bracket that Ansible would try to expand."""
    return "[" in name


def expand_host_range(name: str) -> list[str]:
    """Every host name that `name` stands for, in order.

    Raises:
        HostRangeError: the range is malformed (bad bounds, widths, step or brackets), or it
            stands for more than MAX_HOSTS_PER_PATTERN hosts (checked before expanding).
    """
    check_range_size(name)
    return _expand(name)


def check_range_size(name: str) -> None:
    """Raise HostRangeError when `name` is malformed or stands for too many hosts; expands
    nothing."""
    size = range_size(name)
    if size > MAX_HOSTS_PER_PATTERN:
        raise HostRangeError(
            f"host range stands for {size:,} hosts, more than the limit of"
            f" {MAX_HOSTS_PER_PATTERN:,} hosts per pattern"
        )


def range_size(name: str) -> int:
    """How many names `name` stands for, counted without expanding it.

    Raises:
        HostRangeError: the range is malformed, as expand_host_range would say.
    """
    if name.count("[") > MAX_RANGES_PER_NAME:
        raise HostRangeError(
            f"host name has {name.count('[')} ranges, more than {MAX_RANGES_PER_NAME}"
        )
    size = 1
    while has_range(name):
        _, bounds, tail = _split_first_range(name)
        count = _range_count(bounds)
        if count == 0:
            return 0  # nothing to expand, so the rest is never read (as in Ansible)
        size *= count
        # Text before a range holds no bracket, nor does an item: only the tail matters.
        name = tail
    return size


def _expand(name: str) -> list[str]:
    if not has_range(name):
        return [name]
    head, bounds, tail = _split_first_range(name)
    names: list[str] = []
    for item in _range_items(bounds):
        names.extend(_expand(f"{head}{item}{tail}"))
    return names


def _split_first_range(name: str) -> tuple[str, str, str]:
    # Ansible swaps the first '[' and the first ']' for '|' and splits on '|'; a name holding
    # another '|' or missing its ']' fails that unpacking, which we report instead of crashing.
    parts = name.replace("[", "|", 1).replace("]", "|", 1).split("|")
    if len(parts) != 3:
        raise HostRangeError(f"cannot read the host range in {name!r}")
    return parts[0], parts[1], parts[2]


def _range_items(bounds_text: str) -> list[str]:
    width, values = _range_values(bounds_text)
    return [str(value).zfill(width) for value in values]


def _range_count(bounds_text: str) -> int:
    """How many items a range has (a numeric range may be too long for len())."""
    _, values = _range_values(bounds_text)
    if isinstance(values, str):
        return len(values)
    start, stop, step = values.start, values.stop, values.step
    if step > 0:
        return max(0, (stop - start + step - 1) // step)
    return max(0, (start - stop - step - 1) // -step)


def _range_values(bounds_text: str) -> tuple[int, str | range]:
    """The pad width and the values (letters as a string, numbers as a lazy range)."""
    bounds = bounds_text.split(":")
    if len(bounds) not in (2, 3):
        raise HostRangeError("host range must be begin:end or begin:end:step")
    begin = bounds[0] or "0"
    end = bounds[1]
    step_text = bounds[2] if len(bounds) == 3 else "1"
    if not end:
        raise HostRangeError("host range must specify end value")
    width = _pad_width(begin, end)
    if begin in _LETTERS and end in _LETTERS:
        return width, _letter_range(begin, end, step_text)
    return width, _number_range(begin, end, step_text)


def _pad_width(begin: str, end: str) -> int:
    if begin[0] == "0" and len(begin) > 1:
        if len(begin) != len(end):
            raise HostRangeError("host range must specify equal-length begin and end formats")
        return len(begin)
    return 0


def _letter_range(begin: str, end: str, step_text: str) -> str:
    first, last = _LETTERS.index(begin), _LETTERS.index(end)
    if first > last:
        raise HostRangeError("host range must have begin <= end")
    step = _to_int(step_text)
    if step == 0:
        raise HostRangeError("host range step must not be zero")
    return _LETTERS[first : last + 1 : step]


def _number_range(begin: str, end: str, step_text: str) -> range:
    step = _to_int(step_text)
    if step == 0:
        raise HostRangeError("host range step must not be zero")
    return range(_to_int(begin), _to_int(end) + 1, step)


def _to_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise HostRangeError(f"host range bound {text!r} is not a number or a letter") from None
