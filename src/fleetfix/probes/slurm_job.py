"""The `slurm_job` probe: one Slurm job's state, exit code, nodes and times.

Reads `scontrol show job JOB` (the multi-line form and `-o`'s one line) and, for a job that has
left slurmctld's memory (MinJobAge), `sacct -P` rows: without a header they are read in this
probe's own column order (SACCT_FIELDS), or in the order a pasted `sacct ... -o/--format/
--fields/-b` command line names; with a header (no `-n`) by the header's titles. The probe's
command runs scontrol and, when it fails, sacct, so that its output is one of those, after
scontrol's own error line.

Slurm prints times in the controller's local time without a zone (`2023-05-17T11:21:33`):
`start` and `end` are naive datetimes in that zone, never converted. `Unknown`, `None` and
`N/A` are None; a pending job's `end` is the scheduler's estimate. `nodes` is `node_list`
expanded (slurm_node_records.expand_hostlist).

A job neither tool knows (`slurm_load_jobs error: Invalid job id specified` and no sacct row)
is JobNotFound; other text is a ProbeParseError naming the line it could not read.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

from fleetfix.errors import JobNotFound, PlaybookError, ProbeParseError, ToolNotInstalled
from fleetfix.probes.base import Probe
from fleetfix.probes.not_installed import missing_tool, unless_installed
from fleetfix.probes.slurm_node_records import expand_hostlist

__all__ = [
    "NAME",
    "PROBE",
    "SACCT_FIELDS",
    "JobFacts",
    "Source",
    "command",
    "parse",
    "parse_job",
    "valid_job_id",
]

NAME = "slurm_job"
SACCT_FIELDS = ("JobID", "JobName", "User", "State", "ExitCode", "Start", "End", "NodeList")
"""The columns the probe's sacct prints, in this order (`-o`), without a header (`-n`)."""
_JOB_ID = re.compile(r"^\d+(?:_\d+|\+\d+)?$")
_BRIEF_FIELDS = ("JobID", "State", "ExitCode")
_NOT_FOUND = "Invalid job id specified"
_PROMPT = re.compile(r"^(?:.{0,80}?[$#>%]\s*)?(?:sudo\s+)?(?:\S*/)?(?:scontrol|sacct)\b")
_KEY = re.compile(r"^([A-Za-z][\w/:]*)=(.*)$")
_WHOLE_LINE_KEYS = ("Command=", "WorkDir=", "StdErr=", "StdIn=", "StdOut=", "Comment=")
_NONE_WORDS = frozenset({"", "none", "(null)", "n/a", "unknown", "none assigned"})
_EXIT = re.compile(r"^(\d+):(\d+)$")
_CANCELLED_BY = re.compile(r"^CANCELLED by (\S+)$")
_SLURM_ERROR = re.compile(r"^(?:slurm_load_jobs|scontrol|sacct)(?::| error:) ?(?:error|fatal)?")


class Source(StrEnum):
    """Which Slurm command printed the parsed text."""

    SCONTROL = "scontrol"
    SACCT = "sacct"


@dataclass(frozen=True, slots=True)
class JobFacts:
    """One Slurm job as scontrol or sacct printed it."""

    source: Source
    job_id: str
    name: str | None
    user: str | None
    """The user name (scontrol's `UserId=alice(1000)` -> `alice`)."""
    state: str
    """The state word: RUNNING, PENDING, COMPLETED, FAILED, TIMEOUT, CANCELLED, NODE_FAIL, ..."""
    reason: str | None
    exit_code: tuple[int, int] | None
    """(exit status, signal) from Slurm's `N:S`."""
    node_list: str | None
    """The hostlist as printed (`gpu[001-004]`); None when no node was allocated."""
    nodes: tuple[str, ...]
    batch_host: str | None
    start: datetime | None
    """Naive: Slurm's local time, no zone."""
    end: datetime | None
    num_nodes: int | None
    """NumNodes/NNodes; from sacct without that column, the count of `nodes` (None if none)."""
    cancelled_by: str | None = None
    """The uid sacct names in `CANCELLED by UID`."""


def valid_job_id(job: object) -> str:
    """The `job` parameter as a job id: digits, with an optional `_N` array index or `+N` het
    component.

    Raises:
        PlaybookError: it is anything else (it reaches a shell command).
    """
    text = str(job).strip() if job is not None else ""
    if not _JOB_ID.match(text):
        raise PlaybookError(
            f"{NAME}: job must be a Slurm job id (digits, optionally _N or +N), not {job!r}"
        )
    return text


def command(params: Mapping[str, Any]) -> str:
    """`scontrol show job JOB`, and when it fails (the job left slurmctld's memory, or the
    controller does not answer) `sacct` for the same job, after scontrol's own error line."""
    job = shlex.quote(valid_job_id(params.get("job")))
    fields = ",".join(SACCT_FIELDS)
    return (
        f"{unless_installed(('scontrol',))}scontrol show job {job} 2>&1 ||"
        f" {{ command -v sacct >/dev/null 2>&1 && sacct -j {job} -X -P -n -o {fields} 2>&1; }}"
    )


def parse(text: str) -> JobFacts:
    """The job `text` describes (the first record, when it holds several).

    Raises:
        JobNotFound: neither scontrol nor sacct knows the job.
        ToolNotInstalled: the node has no scontrol.
        ProbeParseError: the text is not scontrol or sacct output about a job.
    """
    return parse_job(text)


def parse_with(text: str, params: Mapping[str, Any]) -> JobFacts:
    """`parse_job` for the job the step named (its record when the output holds several)."""
    job = params.get("job")
    return parse_job(text, job=None if job is None else valid_job_id(job))


def parse_job(text: str, job: str | None = None) -> JobFacts:
    """The facts of `job` (or of the one job the output is about) in scontrol or sacct output.

    Raises:
        JobNotFound: neither scontrol nor sacct knows the job.
        ToolNotInstalled: the node has no scontrol.
        ProbeParseError: the text is not scontrol or sacct output about a job; the message
            names the line.
    """
    lines = [(number, raw.strip()) for number, raw in enumerate(text.splitlines(), 1)]
    content = [(number, line) for number, line in lines if line]
    if not content:
        raise ProbeParseError(NAME, "empty output", text)
    if any(line.startswith("JobId=") for _, line in content):
        return _from_scontrol(_records(content, text), job, text)
    rows = [(number, line) for number, line in content if "|" in line and not _PROMPT.match(line)]
    if rows:
        return _from_sacct(rows, content, job, text)
    tool = missing_tool(text, ("scontrol", "sacct"))
    if tool is not None:
        raise ToolNotInstalled(NAME, "slurm", text)
    said = next(((n, line) for n, line in content if _NOT_FOUND in line), None)
    if said is not None:
        raise JobNotFound(NAME, job, said[1], text, line=said[0])
    failed = next(((n, line) for n, line in content if _SLURM_ERROR.search(line)), None)
    if failed is not None:
        raise ProbeParseError(NAME, f"Slurm did not answer: {failed[1]}", text, line=failed[0])
    number, _ = next(((n, line) for n, line in content if not _PROMPT.match(line)), content[0])
    raise ProbeParseError(
        NAME, "neither `scontrol show job` nor `sacct -P` output", text, line=number
    )


# --- scontrol show job -----------------------------------------------------------------------

_Pairs = dict[str, tuple[int, str]]


def _records(content: list[tuple[int, str]], text: str) -> list[_Pairs]:
    """Each job record's `Key=value` pairs, each with the line it came from."""
    records: list[_Pairs] = []
    for number, line in content:
        if line.startswith("JobId="):
            records.append({})
        elif not records:
            if _PROMPT.match(line) or "slurm_load_jobs error" in line:
                continue
            raise ProbeParseError(NAME, "unexpected text before the job record", text, line=number)
        _read_line(records[-1], number, line, text)
    return records


def _read_line(pairs: _Pairs, number: int, line: str, text: str) -> None:
    if line.startswith(_WHOLE_LINE_KEYS):
        key, value = line.split("=", 1)
        pairs[key] = (number, value.strip())
        return
    last: str | None = None
    for token in line.split():
        if (match := _KEY.match(token)) is not None:
            last = match.group(1)
            pairs.setdefault(last, (number, match.group(2)))
        elif last is not None:
            start, value = pairs[last]  # a value with spaces in the one-line form
            pairs[last] = (start, f"{value} {token}")
        elif not (pairs and ":" in token):  # Slurm 21.08 prints `NtasksPerTRES:0` alone
            raise ProbeParseError(NAME, f"not Key=value: {token!r}", text, line=number)


def _pick_record(records: list[_Pairs], job: str | None, text: str) -> _Pairs:
    if job is None:
        return records[0]
    for pairs in records:
        if job in _record_ids(pairs):
            return pairs
    shown = ", ".join(pairs["JobId"][1] for pairs in records)
    raise ProbeParseError(NAME, f"no record of job {job} (records: {shown})", text)


def _record_ids(pairs: _Pairs) -> set[str]:
    """The ids a record answers to: JobId, ArrayJobId_ArrayTaskId, HetJobId+HetJobOffset."""
    value = {key: raw for key, (_, raw) in pairs.items()}
    ids = {value["JobId"]}
    if "ArrayJobId" in value and "ArrayTaskId" in value:
        ids.add(f"{value['ArrayJobId']}_{value['ArrayTaskId']}")
    if "HetJobId" in value and "HetJobOffset" in value:
        ids.add(f"{value['HetJobId']}+{value['HetJobOffset']}")
    return ids


def _from_scontrol(records: list[_Pairs], job: str | None, text: str) -> JobFacts:
    pairs = _pick_record(records, job, text)
    if "JobState" not in pairs:
        line = pairs["JobId"][0]
        raise ProbeParseError(NAME, "scontrol job record without JobState=", text, line=line)
    field = _Fields(pairs, text)
    node_list = field.value("NodeList")
    return JobFacts(
        source=Source.SCONTROL,
        job_id=pairs["JobId"][1],
        name=field.value("JobName"),
        user=_user(field.value("UserId")),
        state=pairs["JobState"][1],
        reason=field.value("Reason"),
        exit_code=field.exit_code("ExitCode"),
        node_list=node_list,
        nodes=field.nodes("NodeList"),
        batch_host=field.value("BatchHost"),
        start=field.time("StartTime"),
        end=field.time("EndTime"),
        num_nodes=field.count("NumNodes"),
    )


def _user(raw: str | None) -> str | None:
    """`alice(1000)` -> `alice`."""
    return None if raw is None else raw.split("(", 1)[0] or None


# --- sacct -P ------------------------------------------------------------------------------


def _from_sacct(
    rows: list[tuple[int, str]], content: list[tuple[int, str]], job: str | None, text: str
) -> JobFacts:
    columns, data = _columns(rows, content)
    table = [_cells(number, line, columns, text) for number, line in data]
    pairs = _pick_row(table, job, text)
    field = _Fields(pairs, text)
    state_line, state = pairs.get("State", (0, ""))
    if not state:
        raise ProbeParseError(NAME, "sacct row without a State", text, line=state_line or None)
    cancelled = _CANCELLED_BY.match(state)
    nodes = field.nodes("NodeList")
    counted = field.count("NNodes")
    return JobFacts(
        source=Source.SACCT,
        job_id=pairs["JobID"][1],
        name=field.value("JobName"),
        user=field.value("User"),
        state="CANCELLED" if cancelled else state,
        reason=field.value("Reason"),
        exit_code=field.exit_code("ExitCode"),
        node_list=field.value("NodeList"),
        nodes=nodes,
        batch_host=None,
        start=field.time("Start"),
        end=field.time("End"),
        num_nodes=counted if counted is not None else (len(nodes) or None),
        cancelled_by=cancelled.group(1) if cancelled else None,
    )


def _columns(
    rows: list[tuple[int, str]], content: list[tuple[int, str]]
) -> tuple[tuple[str, ...], list[tuple[int, str]]]:
    """The column titles (the header row, else a pasted sacct command's, else the probe's own)
    and the data rows."""
    first = [cell.strip() for cell in rows[0][1].split("|")]
    if any(cell.lower() == "jobid" for cell in first):
        return _canonical(cell for cell in first if cell), rows[1:]
    before = [line for number, line in content if number < rows[0][0] and _PROMPT.match(line)]
    named = _command_fields(before[-1]) if before else None
    return (named or SACCT_FIELDS), rows


_FIELDS_OPTION = re.compile(r"(?:^|\s)(?:-o|--format|--fields)(?:=|\s+)(\S+)")
_BRIEF = re.compile(r"(?:^|\s)(?:-b|--brief|-[A-Za-z]*b[A-Za-z]*)(?:\s|$)")


def _command_fields(command_line: str) -> tuple[str, ...] | None:
    """The columns a pasted `sacct` command line asks for (-o/--format/--fields, or -b)."""
    if not re.search(r"\bsacct\b", command_line):
        return None
    option = _FIELDS_OPTION.search(command_line)
    if option:
        return _canonical(re.sub(r"%-?\d+$", "", name) for name in option.group(1).split(","))
    return _BRIEF_FIELDS if _BRIEF.search(command_line) else None


_CANONICAL = {name.lower(): name for name in (*SACCT_FIELDS, "NNodes", "Reason", "JobIDRaw")}


def _canonical(names: Any) -> tuple[str, ...]:
    """Titles in the spelling this module looks them up by (sacct takes any case)."""
    return tuple(_CANONICAL.get(str(name).lower(), str(name)) for name in names)


def _cells(number: int, line: str, columns: Sequence[str], text: str) -> dict[str, tuple[int, str]]:
    cells = line.split("|")
    if len(cells) == len(columns) + 1 and cells[-1] == "":
        cells = cells[:-1]  # -p ends each row with the delimiter; -P does not
    if len(cells) != len(columns):
        raise ProbeParseError(
            NAME, f"{len(cells)} fields where the columns are {len(columns)}", text, line=number
        )
    return {column: (number, cell.strip()) for column, cell in zip(columns, cells, strict=True)}


def _pick_row(
    table: list[dict[str, tuple[int, str]]], job: str | None, text: str
) -> dict[str, tuple[int, str]]:
    if not table or "JobID" not in table[0]:
        raise ProbeParseError(NAME, "sacct output without a JobID column", text)
    if job is not None:
        found = next((row for row in table if row["JobID"][1] == job), None)
        if found is None:
            raise JobNotFound(NAME, job, "no sacct row for it", text)
        return found
    jobs = [row for row in table if "." not in row["JobID"][1]]
    if len(jobs) != 1:
        shown = ", ".join(row["JobID"][1] for row in jobs) or "none, only steps"
        raise ProbeParseError(NAME, f"sacct printed {len(jobs)} jobs ({shown}); name one", text)
    return jobs[0]


# --- values ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Fields:
    """Typed reads of one record's values; errors name the line the value was on."""

    pairs: Mapping[str, tuple[int, str]]
    text: str

    def value(self, key: str) -> str | None:
        raw = self.pairs.get(key, (0, ""))[1].strip()
        return None if raw.lower() in _NONE_WORDS else raw

    def _fail(self, key: str, what: str) -> ProbeParseError:
        number, raw = self.pairs[key]
        return ProbeParseError(NAME, f"{key} is not {what}: {raw!r}", self.text, line=number)

    def exit_code(self, key: str) -> tuple[int, int] | None:
        raw = self.value(key)
        if raw is None:
            return None
        match = _EXIT.match(raw)
        if match is None:
            raise self._fail(key, "N:S")
        return int(match.group(1)), int(match.group(2))

    def time(self, key: str) -> datetime | None:
        raw = self.value(key)
        if raw is None:
            return None
        try:
            return datetime.fromisoformat(raw)
        except ValueError:
            raise self._fail(key, "a time like 2024-01-31T12:00:00") from None

    def count(self, key: str) -> int | None:
        """NumNodes; a pending job's range (`1-1`, `2-4`) gives its lower bound."""
        raw = self.value(key)
        if raw is None:
            return None
        match = re.match(r"^(\d+)(?:-\d+)?$", raw)
        if match is None:
            raise self._fail(key, "a number")
        return int(match.group(1))

    def nodes(self, key: str) -> tuple[str, ...]:
        raw = self.value(key)
        if raw is None:
            return ()
        try:
            return expand_hostlist(raw)
        except ValueError as exc:
            raise self._fail(key, f"a Slurm hostlist ({exc})") from exc


PROBE: Probe[JobFacts] = Probe(
    name=NAME,
    summary="One Slurm job: state, exit code, reason, nodes, start and end (scontrol, else sacct)",
    command=command,
    parse=parse,
    parse_with=parse_with,
    params={"job": "the Slurm job id: digits, with an optional _N array index or +N component"},
)
