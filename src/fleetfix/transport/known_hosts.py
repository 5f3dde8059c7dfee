"""known_hosts entries read when a host is first matched, not all at start.

A fleet's known_hosts lists every node: 10,000 lines, each an ed25519 key that asyncssh turns
into a key object (with its OpenSSL half) on load. Parsing them all cost ~0.08 s before the
first command and ~10 MB for the life of the run, even for a run on 300 of those hosts.

`LazyKnownHosts` is asyncssh's `SSHKnownHosts` with the lines that name hosts exactly (no
wildcard, negation, hash or marker) kept as the file's text, indexed by the hash of each name
they list (two machine words per name, sorted: 0.3 MB for 10,000 lines, where a dict of
names was 5 MB), and loaded when `match` is asked about one of those names. Every other line
(`*.rack1`, `!gpu7`, hashed `|1|...` names, `@cert-authority`, `@revoked`) is loaded at once,
as before: such a line may match any host. So `match` finds the same keys a fully loaded
`SSHKnownHosts` would for every host: the lines it has not loaded name none of the host's
names (asyncssh looks up the host, its address and `[name]:port` for each, exactly;
tests/unit/transport/test_known_hosts.py holds the two to the same answers). A line asyncssh
could not split is refused at load, with asyncssh's own message, as before.
"""

from __future__ import annotations

import re
from array import array
from bisect import bisect_left

import asyncssh
from asyncssh.known_hosts import _KnownHostsResult

_PATTERN_SIGNS = frozenset("*?|/!")  # what makes asyncssh treat a host field as a pattern
_TEXT_SHIFT = 40  # a line's place: its text's number above this bit, its offset below
# Where str.splitlines ends a line (asyncssh's load splits with it): not only at "\n".
_LINE_END = re.compile("[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]")


class LazyKnownHosts(asyncssh.SSHKnownHosts):
    """An `SSHKnownHosts` whose exact-name lines are parsed on first use of a name."""

    def __init__(self) -> None:
        super().__init__()
        self._texts: list[str] = []
        self._hashes = array("q")  # sorted hash(name) of every waiting line's names
        self._places = array("q")  # the line of each, same order
        self._loaded: set[int] = set()

    def load_lazily(self, text: str) -> None:
        """Take `text` (known_hosts lines): exact-name lines wait, the rest are loaded now."""
        base = len(self._texts) << _TEXT_SHIFT
        self._texts.append(text)
        index = list(zip(self._hashes, self._places, strict=True))
        eager: list[str] = []
        offset = 0
        for raw in text.splitlines(keepends=True):
            place, offset = offset, offset + len(raw)
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            fields = line.split(None, 1)
            if len(fields) < 2:
                self.load(line)  # refused, in asyncssh's own words
                continue
            if line.startswith("@") or not _PATTERN_SIGNS.isdisjoint(fields[0]):
                eager.append(line)
                continue
            index.extend((hash(name), base + place) for name in fields[0].split(","))
        index.sort()
        self._hashes = array("q", (h for h, _ in index))
        self._places = array("q", (p for _, p in index))
        if eager:
            self.load("\n".join(eager))

    def match(self, host: str, addr: str, port: int | None) -> _KnownHostsResult:
        for name in _names(host, addr, port):
            key = hash(name)
            at = bisect_left(self._hashes, key)
            while at < len(self._hashes) and self._hashes[at] == key:
                self._load_place(self._places[at], name)
                at += 1
        return super().match(host, addr, port)

    def _load_place(self, place: int, name: str) -> None:
        if place in self._loaded:
            return
        text = self._texts[place >> _TEXT_SHIFT]
        start = place & ((1 << _TEXT_SHIFT) - 1)
        end = _LINE_END.search(text, start)
        line = text[start : end.start() if end else len(text)].strip()
        if name in line.split(None, 1)[0].split(","):  # not another name of the same hash
            self._loaded.add(place)
            self.load(line)


def _names(host: str, addr: str, port: int | None) -> tuple[str, ...]:
    if not port:
        return (host, addr)
    return (host, addr, f"[{host}]:{port}", f"[{addr}]:{port}")
