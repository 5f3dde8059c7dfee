"""LazyKnownHosts finds the keys a fully loaded asyncssh SSHKnownHosts finds, for every host."""

from __future__ import annotations

import base64
import hashlib
import hmac
import itertools
from typing import Any

import asyncssh
import pytest

from fleetfix.transport.known_hosts import LazyKnownHosts


def _key_text() -> str:
    key = asyncssh.generate_private_key("ssh-ed25519")
    algorithm, data = key.export_public_key("openssh").decode("ascii").split()[:2]
    return f"{algorithm} {data}"


def _hashed(name: str) -> str:
    salt = bytes(range(20))
    digest = hmac.new(salt, name.encode(), hashlib.sha1).digest()
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"


def _known_hosts_text(newline: str = "\n") -> str:
    lines = [
        "# a comment, then a blank line",
        "",
        f"gpu001 {_key_text()}",
        f"gpu001,10.0.0.1 {_key_text()}",  # the host on two lines, one shared with its address
        f"gpu002,gpu003 {_key_text()}",
        f"[gpu004]:2222 {_key_text()}",
        f"[10.0.0.4]:2222,gpu004 {_key_text()}",
        f"10.0.0.5 {_key_text()}",
        f"*.rack1 {_key_text()}",
        f"gpu00?,!gpu009 {_key_text()}",
        f"{_hashed('gpu006')} {_key_text()}",
        f"@cert-authority *.fleet {_key_text()}",
        f"@revoked gpu002 {_key_text()}",
        f"   gpu007   {_key_text()}   ",
        f"gpu008 {_key_text()}",
        f"gpu003 {_key_text()}",
    ]
    return newline.join(lines) + newline


def _keys(result: Any) -> list[set[bytes]]:
    return [{key.public_data for key in field if hasattr(key, "public_data")} for field in result]


NAMES = [
    "gpu001",
    "gpu002",
    "gpu003",
    "gpu004",
    "gpu006",
    "gpu007",
    "gpu008",
    "gpu009",
    "a.rack1",
    "b.fleet",
    "gpu010",
    "other",
]
ADDRS = ["10.0.0.1", "10.0.0.4", "10.0.0.5", "10.0.0.9", ""]
PORTS = [None, 22, 2222, 2200]


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_every_host_finds_the_keys_a_full_load_finds(newline: str) -> None:
    text = _known_hosts_text(newline)
    full = asyncssh.SSHKnownHosts(text)
    lazy = LazyKnownHosts()
    lazy.load_lazily(text)
    queries = list(itertools.product(NAMES, ADDRS, PORTS))
    found = 0
    for host, addr, port in queries + queries:  # twice: a second match loads nothing new
        want = _keys(full.match(host, addr, port))
        assert _keys(lazy.match(host, addr, port)) == want, (host, addr, port)
        found += any(want)
    assert found > len(queries)  # the queries do find keys: the comparison is not of empties


@pytest.mark.parametrize("newline", ["\n", "\r\n", "\r"])
def test_a_host_loads_only_its_own_lines(newline: str) -> None:
    lines = [f"gpu{n:05d},10.1.{n // 250}.{n % 250} {_key_text()}" for n in range(200)]
    lazy = LazyKnownHosts()
    lazy.load_lazily(newline.join(lines))
    assert lazy.match("gpu00007", "10.1.0.7", None)[0]
    parsed = {name for name, entries in lazy._exact_entries.items() if entries}
    assert parsed == {"gpu00007", "10.1.0.7"}


@pytest.mark.parametrize("line", ["gpu001", "@revoked gpu001", "@bogus gpu001 ssh-ed25519 AAAA"])
def test_a_broken_line_is_refused_at_load_as_asyncssh_refuses_it(line: str) -> None:
    with pytest.raises(ValueError) as full:
        asyncssh.SSHKnownHosts(line)
    with pytest.raises(ValueError) as lazy:
        LazyKnownHosts().load_lazily(line)
    assert str(lazy.value) == str(full.value)
