"""Select hosts with Ansible host patterns (a play's `hosts:` and --limit), plus host ranges.

Semantics are those of ansible.inventory.manager.InventoryManager: a pattern is split into terms
on `,` (or on `:` when it is not itself one address); terms are applied in a fixed order, all
unions first, then `&` intersections, then `!` exclusions (only exclusions means "all but");
a term is a host name, `all`, a group name (its hosts recursively), a glob, or `~regex`, with an
optional subscript on a group: `g[0]`, `g[-1]`, `g[1:3]` (inclusive), `g[2:]`.

One deliberate difference: a term written as a host range, like `gpu[001:016]` or
`rack1-gpu[01:08:2]`, where no group matches the part before the brackets, selects the hosts
that range expands to (Ansible would read `[001:016]` as a subscript of a group `gpu` and select
nothing). A term matching nothing selects nothing; only malformed terms raise PatternError,
and, in a --limit (or a line of its @file), a plain name that is no host nor group of the
inventory: `--limit gpu999` is a typo to stop at, not a pattern that happens to match nothing.
"""

from __future__ import annotations

import difflib
import fnmatch
import os
import re
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from fleetfix.errors import PatternError
from fleetfix.inventory.addresses import AddressError, parse_address
from fleetfix.inventory.ranges import HostRangeError, expand_host_range

if TYPE_CHECKING:
    from fleetfix.inventory.model import Inventory

Subscript = tuple[int, int | None]

_SUBSCRIPT = re.compile(r"^(.+)\[(?:(-?[0-9]+)|([0-9]+)([:-])([0-9]*))\]$")
_COLON_TERMS = re.compile(r"(?:[^\s:\[\]]|\[[^\]]*\])+")
_RANGE_BRACKET = r"\[(?:[0-9]*:[0-9]+|[A-Za-z]:[A-Za-z])(?::[0-9]+)?\]"
# A host range term: name characters and range brackets only, no glob characters.
_HOST_RANGE = re.compile(rf"(?:[^\[\]*?]|{_RANGE_BRACKET})+")
_HAS_RANGE = re.compile(_RANGE_BRACKET)
_GLOB_CHARS = ("*", "?", "[")
# Ansible also looks at host names, not only group names, when a term holds one of these.
_HOST_HINT_CHARS = (".", "?", "*", "[")
LOCALHOST_NAMES: tuple[str, ...] = ("localhost", "127.0.0.1")
"""The names Ansible answers with an implicit localhost (its `::1` cannot be a pattern term)."""
_SUGGEST_AMONG = 10_000
"""Close-match suggestions for an unknown --limit name are looked for up to this many hosts."""


def split_pattern(pattern: str) -> list[str]:
    """The terms of a pattern: `a,b[1], c` -> ['a', 'b[1]', 'c']; `a:&b:!c` -> ['a', '&b', '!c']."""
    if "," in pattern:
        parts = pattern.split(",")
    else:
        try:
            parse_address(pattern, allow_ranges=True)
            parts = [pattern]
        except AddressError:
            parts = _COLON_TERMS.findall(pattern)
    return [part.strip() for part in parts if part.strip()]


def checked_terms(pattern: str, what: str = "host pattern") -> list[str]:
    """The terms of `pattern`, refusing what a typo makes: unbalanced brackets, a bare or doubled
    `!` or `&`. A malformed --limit must never fall back to "all hosts"."""
    terms = split_pattern(pattern)
    if not terms:
        raise PatternError(f"empty {what}: {pattern!r}")
    if _unbalanced(pattern, terms):
        raise PatternError(f"unbalanced brackets in {what} {pattern!r}")
    for term in terms:
        body = term[1:] if term[0] in "&!" else term
        if not body or body[0] in "&!":  # `!!gpu` would exclude nothing: everyone
            raise PatternError(f"malformed term {term!r} in {what} {pattern!r}")
    return terms


def _unbalanced(pattern: str, terms: list[str]) -> bool:
    """A bracket the `:` split leaves out of every term (Ansible's split drops a lone one), or
    a term, other than a regex, whose brackets do not pair."""
    if "," not in pattern:
        left_over = _COLON_TERMS.sub("", pattern)
        if "[" in left_over or "]" in left_over:
            return True
    plain = (term.lstrip("&!") for term in terms)
    return any(not term.startswith("~") and term.count("[") != term.count("]") for term in plain)


def order_terms(terms: Iterable[str]) -> list[str]:
    """Unions first, then intersections (`&`), then exclusions (`!`); none of the first: `all`."""
    unions = [term for term in terms if term and term[0] not in "&!"]
    intersections = [term for term in terms if term and term[0] == "&"]
    exclusions = [term for term in terms if term and term[0] == "!"]
    return (unions or ["all"]) + intersections + exclusions


def select(inventory: Inventory, pattern: str) -> list[str]:
    """The hosts `pattern` selects, in the order Ansible lists them.

    Raises:
        PatternError: the pattern is empty or malformed.
    """
    return _in_context(inventory, checked_terms(pattern), f"host pattern {pattern!r}")


def limit(inventory: Inventory, hosts: list[str], limit_text: str) -> list[str]:
    """The hosts of `hosts` that the --limit value selects, order kept.

    `@path` reads one term per line from a file (Ansible's retry files). Unlike Ansible, a limit
    made only of empty files selects nothing rather than everything.

    Raises:
        PatternError: the limit is empty or malformed, a limit file cannot be read, or a term
            names a host that is not in the inventory (every such name is listed, a file's with
            its file and line).
    """
    terms = checked_terms(limit_text, "--limit")
    placed: list[tuple[str, str | None]] = []
    for term in terms:
        if term.startswith("@"):
            placed.extend((line, f"{term[1:]}:{n}") for n, line in _limit_file_lines(term[1:]))
        else:
            placed.append((term, None))
    if not placed:
        return []
    refuse_unknown_names(inventory, placed)
    allowed = set(_in_context(inventory, [term for term, _ in placed], f"--limit {limit_text!r}"))
    return [host for host in hosts if host in allowed]


def refuse_unknown_names(inventory: Inventory, placed: list[tuple[str, str | None]]) -> None:
    """Raise PatternError naming every term (with where it was written, when from a file) that
    is a plain name no host or group of `inventory` has."""
    unknown = [(term, where) for term, where in placed if _unknown_name(inventory, term)]
    if not unknown:
        return
    shown = ", ".join(f"{term} ({where})" if where else term for term, where in unknown)
    raise PatternError(
        f"--limit names {len(unknown)} host(s) not in the inventory: {shown}",
        hint=_close_names(inventory, [term.lstrip("&!") for term, _ in unknown]),
    )


def _unknown_name(inventory: Inventory, term: str) -> bool:
    """A term written as a plain name (no glob, regex or range) that names nothing."""
    body = term[1:] if term[0] in "&!" else term
    return not (
        not body
        or body in inventory.hosts  # first: a limit file of 10,000 host names
        or body[0] == "~"
        or any(c in body for c in _GLOB_CHARS)
        or body in inventory.groups
        or body in LOCALHOST_NAMES
    )


def _close_names(inventory: Inventory, names: list[str]) -> str | None:
    if len(inventory.hosts) > _SUGGEST_AMONG:
        return None
    known = [*inventory.hosts, *inventory.groups]
    close = {n: difflib.get_close_matches(n, known, n=1) for n in names}
    found = [f"{name} -> {match[0]}" for name, match in close.items() if match]
    return f"did you mean: {', '.join(found)}?" if found else None


def _in_context(inventory: Inventory, terms: list[str], where: str) -> list[str]:
    """evaluate(), its errors saying which pattern they come from."""
    try:
        return evaluate(inventory, terms)
    except PatternError as exc:
        raise PatternError(f"{exc.message} (in {where})", hint=exc.hint) from exc


def range_terms(inventory: Inventory, pattern: str) -> list[str]:
    """The terms of `pattern` that are read as host ranges (fleetfix's deliberate difference)."""
    found: list[str] = []
    for term in split_pattern(pattern):
        body = term[1:] if term[0] in "&!" else term
        if body and _reads_as_range(inventory, body):
            found.append(term)
    return found


def evaluate(inventory: Inventory, terms: Iterable[str]) -> list[str]:
    """Apply already split terms in Ansible's order; each host once, first place kept."""
    selected: dict[str, None] = {}
    for term in order_terms(list(terms)):
        if term in inventory.hosts:
            selected.setdefault(term)
            continue
        matched = match_term(inventory, term)
        if term[0] == "!":
            for host in matched:
                selected.pop(host, None)
        elif term[0] == "&":
            keep = set(matched)
            selected = {host: None for host in selected if host in keep}
        else:
            selected.update(dict.fromkeys(host for host in matched if host not in selected))
    return list(selected)


def match_term(inventory: Inventory, term: str) -> list[str]:
    """The hosts one term matches, ignoring its `&`/`!` prefix (duplicates possible)."""
    body = term[1:] if term[0] in "&!" else term
    if not body:
        raise PatternError(f"host pattern term {term!r} names nothing after {term[0]!r}")
    if body[0] == "~":
        return _enumerate(inventory, body)
    if _reads_as_range(inventory, body):
        return _expand_range(inventory, body)
    expression, subscript = split_subscript(body)
    return _apply_subscript(_enumerate(inventory, expression), subscript, body)


def split_subscript(term: str) -> tuple[str, Subscript | None]:
    """`g[1:3]` -> ('g', (1, 3)); `g[2:]` -> ('g', (2, -1)); `g[-1]` -> ('g', (-1, None))."""
    match = _SUBSCRIPT.match(term)
    if not match:
        return term, None
    expression, index, start, _, end = match.groups()
    if index:
        return expression, (int(index), None)
    return expression, (int(start), int(end) if end else -1)


def read_limit_file(path: str) -> list[str]:
    """The non-empty, stripped lines of a limit file, each one term.

    Raises:
        PatternError: the file does not exist, is a directory or cannot be read.
    """
    return [line for _, line in _limit_file_lines(path)]


def _limit_file_lines(path: str) -> list[tuple[int, str]]:
    """read_limit_file's terms, each with its line number."""
    if not os.path.exists(path):
        raise PatternError(f"Unable to find limit file {path}")
    if not os.path.isfile(path):
        raise PatternError(f'Limit starting with "@" must be a file, not a directory: {path}')
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise PatternError(f"cannot read limit file {path}: {exc}") from exc
    lines = enumerate(text.split("\n"), 1)
    return [(number, line.strip()) for number, line in lines if line.strip()]


def _apply_subscript(hosts: list[str], subscript: Subscript | None, term: str) -> list[str]:
    # Ansible's rules, quirks included: an end of 0 means "just start", -1 means "to the end".
    if not hosts or subscript is None:
        return hosts
    start, end = subscript
    if end:
        end = len(hosts) - 1 if end == -1 else end
        return hosts[start : end + 1]
    try:
        return [hosts[start]]
    except IndexError:
        raise PatternError(f"No hosts matched the subscripted pattern '{term}'") from None


def _enumerate(inventory: Inventory, expression: str) -> list[str]:
    """Hosts of the groups `expression` matches, then hosts it matches by name."""
    matches = _matcher(expression)
    groups = [name for name in _candidates(inventory.groups, expression) if matches(name)]
    found: list[str] = []
    for group in groups:
        found.extend(inventory.hosts_in(group))
    if not groups or expression[0] == "~" or any(c in expression for c in _HOST_HINT_CHARS):
        found.extend(name for name in _candidates(inventory.hosts, expression) if matches(name))
    return found


def _candidates(names: Iterable[str], expression: str) -> Iterable[str]:
    # A term without glob characters can only match itself; skip the scan.
    if expression[0] != "~" and not any(c in expression for c in _GLOB_CHARS):
        return [expression] if expression in names else []
    return names


def _matcher(expression: str) -> Callable[[str], bool]:
    try:
        if expression[0] == "~":
            compiled = re.compile(expression[1:])
        else:
            compiled = re.compile(fnmatch.translate(expression))
    except re.error as exc:
        raise PatternError(f"Invalid host list pattern: {expression} ({exc})") from exc
    return lambda name: compiled.match(name) is not None


def _reads_as_range(inventory: Inventory, body: str) -> bool:
    """True for `gpu[01:16]`-like terms where no group matches the name before the range."""
    if body[0] == "~" or not _HOST_RANGE.fullmatch(body) or not _HAS_RANGE.search(body):
        return False
    expression, subscript = split_subscript(body)
    if subscript is None:
        return True
    matches = _matcher(expression)
    return not any(matches(name) for name in _candidates(inventory.groups, expression))


def _expand_range(inventory: Inventory, body: str) -> list[str]:
    try:
        names = expand_host_range(body)
    except HostRangeError as exc:
        raise PatternError(f"bad host range {body!r}: {exc}") from exc
    return [name for name in dict.fromkeys(names) if name in inventory.hosts]
