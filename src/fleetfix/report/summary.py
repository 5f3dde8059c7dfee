"""The end of a run as an on-call engineer reads it: the verdicts grouped, worst first, then
what to do next for each failing group (a command, a file, a person).

    for line in summary_lines(result.verdicts.values(), where):
        console.print(line)

It reads the engine's verdicts only (fleetfix/verdicts.py): nothing here re-derives a status
from counters. Long host lists are compressed to ranges (`gpu[001-004,006]`) and capped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rich.text import Text

from fleetfix.report.terminal import STATUS_STYLES as STYLES
from fleetfix.verdicts import Verdict, VerdictKind, by_kind

HOSTLIST_CHARS = 120
"""A group's host list is cut to about this many characters ("... and 40 more")."""
DETAIL_UP_TO = 3
"""Failing groups of at most this many hosts show each host's reason (the job, the owner);
bigger ones, and the groups that need nothing done, only the hosts."""
NAMES_UP_TO = 4
"""Groups of at most this many hosts name each one (`gpu003, gpu011`), bigger ones ranges."""
DETAIL_CHARS = 100
"""Each host's reason in a group line is cut to this (the report has it whole)."""
RETRY_KINDS = frozenset(
    {
        VerdictKind.UNREACHABLE,
        VerdictKind.NEEDS_HUMAN,
        VerdictKind.HELD,
        VerdictKind.UNHEALTHY,
        VerdictKind.FAILED,
        VerdictKind.DEFERRED,
    }
)
"""Failing groups whose next step is running the playbook again on the retry file."""
_NUMBERED = re.compile(r"^(?P<prefix>.*?)(?P<number>\d+)(?P<suffix>\D*)$")


@dataclass(frozen=True, slots=True)
class RunPlace:
    """Where this run's next steps point: its id, the playbook and inventory as given, the
    retry file it wrote and the JSON report (the RMA ticket's payload), when there is one."""

    run_id: str
    playbook: str
    inventory: tuple[str, ...] = ()
    retry_file: str | None = None
    json_report: str | None = None
    exit_code: int | None = None


def hostlist(hosts: Iterable[str], limit: int = HOSTLIST_CHARS) -> str:
    """Hosts as ranges, Slurm's way: `gpu[001-004,006],login1`; cut near `limit` characters
    with "... and N more" (N counts hosts, not ranges)."""
    families = _families(sorted(set(hosts), key=_natural))
    total = sum(len(numbers) for _, numbers in families)
    terms: list[str] = []
    shown = length = 0
    for family, numbers in families:
        spans: list[str] = []
        for span, count in _spans(family, numbers):
            if (terms or spans) and length + len(span) > limit:
                terms.append(_term(family, spans))
                return ",".join(t for t in terms if t) + f" ... and {total - shown} more"
            spans.append(span)
            length += len(span) + 1
            shown += count
        terms.append(_term(family, spans))
    return ",".join(terms)


def _natural(host: str) -> tuple[str, int, str, str]:
    found = _NUMBERED.match(host)
    if found is None:
        return (host, -1, "", host)
    return (found["prefix"], int(found["number"]), found["suffix"], host)


_Family = tuple[str, int, str] | str
"""(prefix, digits, suffix) of numbered names, or a name without a number."""


def _families(hosts: Sequence[str]) -> list[tuple[_Family, list[int]]]:
    """Consecutive hosts that share a prefix, a number width and a suffix, with their
    numbers; a name without a number is a family of its own."""
    families: list[tuple[_Family, list[int]]] = []
    for host in hosts:
        found = _NUMBERED.match(host)
        if found is None:
            families.append((host, []))
            continue
        key = (found["prefix"], len(found["number"]), found["suffix"])
        if not families or families[-1][0] != key:
            families.append((key, []))
        families[-1][1].append(int(found["number"]))
    return families


def _spans(family: _Family, numbers: list[int]) -> list[tuple[str, int]]:
    """("001-004", 4), ("006", 1): runs of consecutive numbers, padded to the width."""
    if isinstance(family, str):
        return [(family, 1)]
    width = family[1]
    spans: list[tuple[str, int]] = []
    start = numbers[0]
    for index, number in enumerate(numbers):
        last = index + 1 == len(numbers)
        if last or numbers[index + 1] != number + 1:
            first, end = f"{start:0{width}d}", f"{number:0{width}d}"
            spans.append((first if start == number else f"{first}-{end}", number - start + 1))
            if not last:
                start = numbers[index + 1]
    return spans


def _term(family: _Family, spans: list[str]) -> str:
    if isinstance(family, str) or not spans:
        return spans[0] if spans else ""
    prefix, _, suffix = family
    if len(spans) == 1 and "-" not in spans[0]:
        return f"{prefix}{spans[0]}{suffix}"
    return f"{prefix}[{','.join(spans)}]{suffix}"


def detail(verdict: Verdict, run_id: str = "") -> str:
    """A verdict's reason as a summary line shows it: without the label it starts with
    ("deferred: ..."), fleetfix's own drain-reason tag and this run's id, which the line
    around it already says."""
    text = verdict.reason
    for prefix in (f"{verdict.kind.label}: ", "fleetfix: "):
        text = text.removeprefix(prefix)
    if run_id:
        text = text.removesuffix(f" (run {run_id})")
    return text.strip()


def _cut(text: str, limit: int = DETAIL_CHARS) -> str:
    """`text`, or its words that fit in `limit` characters and "...": never cut mid-word."""
    if len(text) <= limit:
        return text
    return text[: limit - 3].rsplit(" ", 1)[0].rstrip(" ,;:") + "..."


def group_lines(verdicts: Iterable[Verdict], run_id: str = "") -> list[Text]:
    """One line per verdict kind, worst first: `deferred 1: gpu005 (job(s) 48213 ...)`."""
    lines = []
    for kind, group in by_kind(verdicts).items():
        line = Text("  ")
        line.append(f"{kind.label} {len(group)}", STYLES[kind])
        line.append(": ")
        if len(group) <= DETAIL_UP_TO and kind.failing:
            shown = [_with_detail(v, run_id) for v in sorted(group, key=lambda v: _natural(v.host))]
            line.append(", ".join(shown))
        elif len(group) <= NAMES_UP_TO:
            line.append(", ".join(sorted((v.host for v in group), key=_natural)))
        else:
            line.append(hostlist(v.host for v in group))
        lines.append(line)
    return lines


def _with_detail(verdict: Verdict, run_id: str) -> str:
    why = detail(verdict, run_id)
    return f"{verdict.host} ({_cut(why)})" if why else verdict.host


def left_lines(verdicts: Iterable[Verdict], run_id: str = "") -> list[Text]:
    """Each failing host on its own line, `  gpu005: deferred: why`, by host name."""
    failing = sorted((v for v in verdicts if v.failing), key=lambda v: _natural(v.host))
    lines = []
    for verdict in failing:
        line = Text(f"  {verdict.host}: ")
        line.append(verdict.kind.label, STYLES[verdict.kind])
        why = detail(verdict, run_id)
        line.append(f": {why}" if why else "")
        lines.append(line)
    return lines


def next_step_lines(verdicts: Iterable[Verdict], place: RunPlace) -> list[Text]:
    """For each failing group: the command, the file or the person that finishes it."""
    lines = []
    for kind, group in by_kind(verdicts).items():
        if not kind.failing and kind is not VerdictKind.INTERRUPTED:
            continue
        hosts = hostlist((v.host for v in group), limit=60)
        line = Text("  ")
        line.append(f"{kind.label} {hosts}", STYLES[kind])
        line.append(f": {_next_step(kind, group, place)}")
        lines.append(line)
    return lines


def _next_step(kind: VerdictKind, group: Sequence[Verdict], place: RunPlace) -> str:
    if kind in RETRY_KINDS:
        hosts = f"@{place.retry_file}" if place.retry_file else _hosts_term(group)
        return rerun_command(place, hosts)
    if kind is VerdictKind.NEEDS_RMA:
        return f"open the RMA ticket with the evidence in {_rma_payload(place)}"
    if kind is VerdictKind.LEFT_ALONE:
        return "ask the owner named above; fleetfix leaves the node until they resume it"
    if kind is VerdictKind.INTERRUPTED:
        return f"fleetfix run {place.playbook} --resume {place.run_id}"
    return group[0].next_step or kind.meaning


def _hosts_term(group: Sequence[Verdict]) -> str:
    """The group's hosts as one --limit term (a comma list: ranges are not patterns)."""
    return ",".join(sorted((v.host for v in group), key=_natural))


def _rma_payload(place: RunPlace) -> str:
    if place.json_report:
        return place.json_report
    return f"`fleetfix report {place.run_id} --report rma.json`"


def rerun_command(place: RunPlace, limit: str) -> str:
    """`fleetfix run PLAYBOOK -i INVENTORY --limit LIMIT`, with this run's paths."""
    inventories = "".join(f" -i {source}" for source in place.inventory)
    return f"fleetfix run {place.playbook}{inventories} --limit {limit}"


def summary_lines(verdicts: Iterable[Verdict], place: RunPlace) -> list[Text]:
    """The whole end of the run: the grouped verdicts, then the next steps (when any host
    needs one), then where the retry file is."""
    judged = list(verdicts)
    if not judged:
        return []
    exit_note = f", exit {place.exit_code}" if place.exit_code is not None else ""
    title = f"SUMMARY (run {place.run_id}: {len(judged)} hosts{exit_note})"
    lines = [Text(""), Text(title, style="bold"), *group_lines(judged, place.run_id)]
    steps = next_step_lines(judged, place)
    if steps:
        lines += [Text("NEXT STEPS", style="bold"), *steps]
    if place.retry_file:
        count = sum(1 for v in judged if v.failing)
        lines.append(Text(f"  retry file: {place.retry_file} (the {count} failing hosts)"))
    return lines


__all__ = [
    "RunPlace",
    "detail",
    "group_lines",
    "hostlist",
    "left_lines",
    "next_step_lines",
    "rerun_command",
    "summary_lines",
]
