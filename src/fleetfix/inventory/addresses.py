"""Split an inventory host entry into name and port, accepting what Ansible accepts.

A port follows a host name or IPv4 address as `:N`, or a bracketed IPv6 address as `[::1]:N`
(the only way to give an IPv6 address a port). Ranges like `gpu[01:04]` or `10.0.[0:3].1` may
stand in for parts of a name. The regular expressions are those of ansible.parsing.utils.addresses
so that what is a port, and what is a valid name, is decided the same way.
"""

from __future__ import annotations

import re

_NUMERIC_RANGE = r"\[(?:[0-9]+:[0-9]+)(?::[0-9]+)?\]"
_HEX_RANGE = r"\[(?:[0-9a-f]+:[0-9a-f]+)(?::[0-9]+)?\]"
_ALNUM_RANGE = r"\[(?:[a-z]:[a-z]|[0-9]+:[0-9]+)(?::[0-9]+)?\]"

_IPV6_PART = rf"(?:[0-9a-f]{{1,4}}|{_HEX_RANGE})"
_IPV4_PART = rf"(?:[01]?[0-9]{{1,2}}|2[0-4][0-9]|25[0-5]|{_NUMERIC_RANGE})"
_LABEL = rf"(?:[\w]|{_ALNUM_RANGE})(?:[\w_-]|{_ALNUM_RANGE})*(?<![_-])"

_BRACKETED_HOSTPORT = re.compile(r"^\[(.+)\]:([0-9]+)$")
_HOSTPORT = re.compile(r"^((?:[^:\[\]]|\[[^\]]*\])*):([0-9]+)$")
_IPV4 = re.compile(rf"^(?:{_IPV4_PART}\.){{3}}{_IPV4_PART}$", re.I)
_IPV6 = re.compile(
    "^("
    + "|".join(
        (
            "(?:{0}:){{7}}{0}",
            "(?:{0}:){{1,6}}:",
            "(?:{0}:)(?::{0}){{1,6}}",
            "(?:{0}:){{2}}(?::{0}){{1,5}}",
            "(?:{0}:){{3}}(?::{0}){{1,4}}",
            "(?:{0}:){{4}}(?::{0}){{1,3}}",
            "(?:{0}:){{5}}(?::{0}){{1,2}}",
            "(?:{0}:){{6}}(?::{0})",
            ":(?::{0}){{1,6}}",
            "{0}?::",
            r"(?:0:){{6}}(?:{0}\.){{3}}{0}",
            r"::(?:ffff:)?(?:{0}\.){{3}}{0}",
            r"(?:0:){{5}}ffff:(?:{0}\.){{3}}{0}",
        )
    ).format(_IPV6_PART)
    + ")$",
    re.I,
)
_HOSTNAME = re.compile(rf"^{_LABEL}(?:\.{_LABEL})*$", re.I | re.UNICODE)


class AddressError(ValueError):
    """The text is not a host name, IPv4 or IPv6 address (with optional port)."""


def parse_address(address: str, *, allow_ranges: bool = True) -> tuple[str, int | None]:
    """The host and port in `address`; port is None when none is given.

    Raises:
        AddressError: not a valid host identifier, or a range where ranges are not allowed.
    """
    port: int | None = None
    # Ansible tries both port forms in turn, the second on what the first left.
    for form in (_BRACKETED_HOSTPORT, _HOSTPORT):
        match = form.match(address)
        if match:
            address, port = match.group(1), int(match.group(2))
    if not any(form.match(address) for form in (_IPV4, _IPV6, _HOSTNAME)):
        raise AddressError(f"Not a valid network hostname: {address}")
    if not allow_ranges and "[" in address:
        raise AddressError("Detected range in host but was asked to ignore ranges")
    return address, port
