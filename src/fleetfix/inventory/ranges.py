"""Expand host ranges like `gpu[001:128]`, `node-[a:f]` and `rack[1:9:2]` the way Ansible does.

Rules (ansible.plugins.inventory.expand_hostname_range): the first bracket of a name is expanded
and the result expanded again, so several ranges give their product in order. Bounds are
`begin:end` or `begin:end:step`; an empty begin means 0; a begin with a leading zero sets a
zero-padded width that end must share; single letters range over a-z then A-Z. A numeric range
whose begin is above its end is empty (Ansible does not complain), a reversed letter range is an
error.
"""

from __future__ import annotations

import string

_LETTERS = string.ascii_letters
# A typo like gpu[0:10000000] would otherwise eat the controller's memory; no fleet is this big.
MAX_RANGE_SIZE = 1_000_000


class HostRangeError(ValueError):
    """A range expression is malformed; the message says why, in Ansible's words."""


def has_range(name: str) -> bool:
    """True when `name` holds a bracket that Ansible would try to expand."""
    return "[" in name


def expand_host_range(name: str) -> list[str]:
    """Every host name that `name` stands for, in order.

    Raises:
        HostRangeError: the range is malformed (bad bounds, widths, step or brackets).
    """
    if not has_range(name):
        return [name]
    head, bounds, tail = _split_first_range(name)
    names: list[str] = []
    for item in _range_items(bounds):
        expanded = f"{head}{item}{tail}"
        if has_range(expanded):
            names.extend(expand_host_range(expanded))
        else:
            names.append(expanded)
    return names


def _split_first_range(name: str) -> tuple[str, str, str]:
    # Ansible swaps the first '[' and the first ']' for '|' and splits on '|'; a name holding
    # another '|' or missing its ']' fails that unpacking, which we report instead of crashing.
    parts = name.replace("[", "|", 1).replace("]", "|", 1).split("|")
    if len(parts) != 3:
        raise HostRangeError(f"cannot read the host range in {name!r}")
    return parts[0], parts[1], parts[2]


def _range_items(bounds_text: str) -> list[str]:
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
        values = _letter_range(begin, end, step_text)
    else:
        values = [str(number) for number in _number_range(begin, end, step_text)]
    return [value.zfill(width) for value in values]


def _pad_width(begin: str, end: str) -> int:
    if begin[0] == "0" and len(begin) > 1:
        if len(begin) != len(end):
            raise HostRangeError("host range must specify equal-length begin and end formats")
        return len(begin)
    return 0


def _letter_range(begin: str, end: str, step_text: str) -> list[str]:
    first, last = _LETTERS.index(begin), _LETTERS.index(end)
    if first > last:
        raise HostRangeError("host range must have begin <= end")
    step = _to_int(step_text)
    if step == 0:
        raise HostRangeError("host range step must not be zero")
    return list(_LETTERS[first : last + 1 : step])


def _number_range(begin: str, end: str, step_text: str) -> range:
    step = _to_int(step_text)
    if step == 0:
        raise HostRangeError("host range step must not be zero")
    numbers = range(_to_int(begin), _to_int(end) + 1, step)
    if len(numbers) > MAX_RANGE_SIZE:
        raise HostRangeError(f"host range has {len(numbers)} names, more than {MAX_RANGE_SIZE}")
    return numbers


def _to_int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise HostRangeError(f"host range bound {text!r} is not a number or a letter") from None
