"""The `dcgm_diag` probe: per-test, per-GPU verdicts of `dcgmi diag` (and `dcgmi health`).

Formats, detected from the text:

* JSON (`dcgmi diag -r N -j`): DCGM 2.x/3.x `{"DCGM GPU Diagnostic": {"test_categories": ...}}`
  with `gpu_ids`/`gpu_id` results and string or object warnings, and DCGM 3.3+/4.x
  `{"DCGM Diagnostic": ...}` with `entity_group`/`entity_id` results, `test_summary`,
  `metadata` and `entity_groups`. A `runtime_error` means the diagnostic did not run.
* The human table: `| Diagnostic | Result |`, `-----  Deployment  ---` section rows, results
  `Pass`, `Skip - All`, `Pass - GPUs: 1, 2`, `Fail - GPU: 0` (3.x) or `GPU0: Pass` rows (4.x),
  and `Error`/`Warning`/`Info` rows whose text dcgmi wraps every 45 characters (mid-word:
  the pieces are joined back exactly). A table printed twice is read once.
* The `dcgmi health -c` table (`Overall Health`, `-> 0`, `-> NVLINK system`, message rows).
* A bare `Error: ...` line (DCGM paused, no host engine, unsupported GPU): overall `error`.
* No dcgmi on the node (no DCGM there): ToolNotInstalled, from the command's marker or a shell's
  "command not found"; not a fault of the node.

`overall` is what a runbook gates on: `fail` when any test failed or an Error row was printed,
`error` when the diagnostic did not run, `incomplete` when a table stops before its closing
border (a cut-off paste) without any failure seen so far, then `warn`, else `pass`.
Skipped tests do not fail the run; they are listed in `skipped_tests`.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from fleetfix.errors import ProbeParseError, ToolNotInstalled
from fleetfix.probes.base import Probe
from fleetfix.probes.not_installed import missing_tool, unless_installed
from fleetfix.probes.text import clean_lines

NAME = "dcgm_diag"
TOOL = "dcgmi"
CHUNK = 45
"""dcgmi cuts long Error/Warning/Info texts into pieces of this many characters."""


class Status(StrEnum):
    """One test's verdict (for one GPU, or for the node)."""

    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"
    NOT_RUN = "not_run"


class Overall(StrEnum):
    """The whole run's verdict."""

    PASS = "pass"
    WARN = "warn"
    FAIL = "fail"
    ERROR = "error"
    INCOMPLETE = "incomplete"


class Source(StrEnum):
    """Which output form was parsed."""

    JSON = "json"
    TABLE = "table"
    HEALTH = "health"
    ERROR = "error"


class MessageKind(StrEnum):
    """The label dcgmi put on a text: Error, Warning (also failure details) or Info."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True, slots=True)
class DiagMessage:
    """An Error/Warning/Info text; `gpu` is the GPU it names, when it names one."""

    kind: MessageKind
    text: str
    gpu: int | None = None
    error_id: int | None = None


@dataclass(frozen=True, slots=True)
class DiagResult:
    """A verdict for one GPU (or CPU); both None means "all GPUs" / the node as a whole."""

    status: Status
    gpu: int | None = None
    cpu: int | None = None


@dataclass(frozen=True, slots=True)
class DiagTest:
    """One diagnostic test (or one health subsystem) with its results and messages."""

    name: str
    category: str | None
    status: Status
    results: tuple[DiagResult, ...] = ()
    messages: tuple[DiagMessage, ...] = ()


@dataclass(frozen=True, slots=True)
class DcgmDiagFacts:
    """The run's verdicts plus the summaries runbooks gate on."""

    source: Source
    overall: Overall
    tests: tuple[DiagTest, ...]
    messages: tuple[DiagMessage, ...]
    """Texts printed outside any test (e.g. a lone Error row in a cut-off table)."""
    failed_tests: tuple[str, ...]
    warned_tests: tuple[str, ...]
    skipped_tests: tuple[str, ...]
    failed_gpus: tuple[int, ...]
    """GPUs named by a failed result or by an Error text."""
    runtime_error: str | None
    dcgm_version: str | None
    driver_version: str | None
    device_ids: tuple[str, ...]
    complete: bool


PASSIVE_LEVELS = frozenset({"1", "short", "software"})
"""`dcgmi diag -r` values that only check the deployment (no CUDA workload on the GPUs)."""


def is_passive(level: str) -> bool:
    """Level 1 (short, software) reads; 2 and up, and every named test but `software`, load
    the GPUs: an active test, which runs only as the dcgm_diag action (actions/dcgm.py)."""
    return level.strip().lower() in PASSIVE_LEVELS


def command(params: Mapping[str, Any]) -> str:
    """`dcgmi diag -r 1 [-i GPUS] -j` (JSON unless `format: table`). An active level is not
    run by the probe: the command fails saying to use the dcgm_diag action, which the engine
    runs only on a node taken out of scheduling."""
    level = str(params.get("level", "1")).strip() or "1"
    if not is_passive(level):
        why = (
            f"dcgmi diag -r {level} is an active test: run it with the dcgm_diag action"
            " (on a drained or fleetfix-reserved node), not the dcgm_diag probe"
        )
        return f"echo {shlex.quote(why)} >&2; exit 64"
    return diag_command(params)


def diag_command(params: Mapping[str, Any]) -> str:
    """`dcgmi diag -r LEVEL [-i GPUS] -j` at any level (JSON unless `format: table`); the
    not-installed marker (exit 0) on a node without dcgmi."""
    level = str(params.get("level", "1")).strip() or "1"
    parts = ["dcgmi", "diag", "-r", shlex.quote(level)]
    gpus = str(params.get("gpus", "")).strip()
    if gpus:
        parts += ["-i", shlex.quote(gpus)]
    if str(params.get("format", "json")).strip().lower() != "table":
        parts.append("-j")
    return unless_installed([TOOL]) + " ".join(parts) + " 2>&1"


def parse(text: str) -> DcgmDiagFacts:
    """Parse `dcgmi diag` JSON or table output, or a `dcgmi health` table (auto-detected).

    Raises:
        ToolNotInstalled: the node has no dcgmi.
        ProbeParseError: not dcgmi output, malformed/truncated JSON, unknown result words.
    """
    if not text.strip():
        raise ProbeParseError(NAME, "empty output", text)
    if missing_tool(text, (TOOL,)) is not None:
        raise ToolNotInstalled(NAME, TOOL, text)
    stripped = text.lstrip()
    if stripped.startswith("{") or re.search(r'"DCGM (?:GPU )?Diagnostic"', text):
        return _parse_json(text)
    lines = _clean(text)
    if any(_cells(line) and _cells(line)[0] == "Overall Health" for _, line in lines):
        return _parse_health(lines, text)
    if any(line.startswith(("|", "+")) for _, line in lines):
        return _parse_table(lines, text)
    errors = [line for _, line in lines if line.startswith("Error")]
    if errors:
        return _error_facts(" ".join(errors))
    raise ProbeParseError(NAME, "not dcgmi diag output (no JSON, no result table)", text)


PROBE: Probe[DcgmDiagFacts] = Probe(
    name=NAME,
    summary="DCGM diagnostic verdicts per test and GPU (dcgmi diag -r N -j)",
    command=command,
    parse=parse,
    params={
        "level": "1 / short / software (default 1); 2 and up are the dcgm_diag action's",
        "gpus": "comma-separated GPU ids for -i (default: all)",
        "format": "json (default) or table",
    },
)


# --- shared helpers ------------------------------------------------------------------------

_SEVERITY = (Status.NOT_RUN, Status.SKIP, Status.PASS, Status.WARN, Status.FAIL)
_STATUS_WORDS = {
    "pass": Status.PASS,
    "passed": Status.PASS,
    "healthy": Status.PASS,
    "warn": Status.WARN,
    "warning": Status.WARN,
    "fail": Status.FAIL,
    "failed": Status.FAIL,
    "failure": Status.FAIL,
    "skip": Status.SKIP,
    "skipped": Status.SKIP,
    "not run": Status.NOT_RUN,
    "not_run": Status.NOT_RUN,
    "notrun": Status.NOT_RUN,
}
_GPU_IN_TEXT = re.compile(r"\bGPU\s*(\d+)\b")


def _status(word: str) -> Status | None:
    return _STATUS_WORDS.get(word.strip().lower())


def _worst(statuses: list[Status]) -> Status:
    return max(statuses, key=_SEVERITY.index) if statuses else Status.NOT_RUN


def _gpu_named(text: str) -> int | None:
    match = _GPU_IN_TEXT.search(text)
    return int(match.group(1)) if match else None


def _error_facts(runtime_error: str) -> DcgmDiagFacts:
    return _facts(Source.ERROR, [], [], runtime_error=runtime_error, complete=True)


@dataclass(frozen=True, slots=True)
class _Meta:
    dcgm_version: str | None = None
    driver_version: str | None = None
    device_ids: tuple[str, ...] = ()


def _facts(
    source: Source,
    tests: list[DiagTest],
    messages: list[DiagMessage],
    *,
    runtime_error: str | None = None,
    complete: bool,
    meta: _Meta | None = None,
    overall_hint: Status | None = None,
) -> DcgmDiagFacts:
    meta = meta or _Meta()
    unique = list(dict.fromkeys(tests))  # a table printed twice is the same run

    def named(status: Status) -> tuple[str, ...]:
        return tuple(dict.fromkeys(test.name for test in unique if test.status is status))

    every_message = [*messages, *(m for test in unique for m in test.messages)]
    failed_gpus = {
        result.gpu
        for test in unique
        for result in test.results
        if result.status is Status.FAIL and result.gpu is not None
    } | {m.gpu for m in every_message if m.kind is MessageKind.ERROR and m.gpu is not None}
    return DcgmDiagFacts(
        source=source,
        overall=_overall(unique, every_message, runtime_error, complete, overall_hint),
        tests=tuple(unique),
        messages=tuple(messages),
        failed_tests=named(Status.FAIL),
        warned_tests=named(Status.WARN),
        skipped_tests=named(Status.SKIP),
        failed_gpus=tuple(sorted(failed_gpus)),
        runtime_error=runtime_error,
        dcgm_version=meta.dcgm_version,
        driver_version=meta.driver_version,
        device_ids=meta.device_ids,
        complete=complete,
    )


def _overall(
    tests: list[DiagTest],
    messages: list[DiagMessage],
    runtime_error: str | None,
    complete: bool,
    hint: Status | None,
) -> Overall:
    statuses = [test.status for test in tests] + ([hint] if hint else [])
    if runtime_error is not None:
        return Overall.ERROR
    if Status.FAIL in statuses or any(m.kind is MessageKind.ERROR for m in messages):
        return Overall.FAIL
    if not complete:
        return Overall.INCOMPLETE
    if not statuses:
        return Overall.ERROR  # a closed table that judged nothing: the run did not happen
    return Overall.WARN if Status.WARN in statuses else Overall.PASS


# --- JSON ------------------------------------------------------------------------------------


def _parse_json(text: str) -> DcgmDiagFacts:
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise ProbeParseError(NAME, "JSON output is truncated (no closing brace)", text)
    try:
        data = json.loads(text[start : end + 1])
    except json.JSONDecodeError as exc:
        raise ProbeParseError(
            NAME, f"JSON output is truncated or malformed: {exc.msg}", text, line=exc.lineno
        ) from exc
    if not isinstance(data, dict):
        raise ProbeParseError(NAME, "JSON output is not an object", text)
    if "iterations" in data:
        raise ProbeParseError(NAME, "iterated runs (--iterations) are not supported", text)
    root = data.get("DCGM Diagnostic", data.get("DCGM GPU Diagnostic"))
    if not isinstance(root, dict):
        raise ProbeParseError(NAME, "JSON has no 'DCGM Diagnostic' object", text)
    errors_before = [
        ln.strip() for ln in text[:start].splitlines() if ln.strip().startswith("Error")
    ]
    runtime_error = root.get("runtime_error") or data.get("runtime_error")
    if runtime_error is None and errors_before:
        runtime_error = " ".join(errors_before)
    tests = [
        _json_test(test, category, text)
        for category, test in _json_tests(root.get("test_categories"), text)
    ]
    if not tests and runtime_error is None:
        raise ProbeParseError(NAME, "JSON names no test and no runtime_error", text)
    return _facts(
        Source.JSON,
        tests,
        [],
        runtime_error=str(runtime_error) if runtime_error is not None else None,
        complete=True,
        meta=_json_meta(data, root),
    )


def _json_tests(categories: Any, text: str) -> list[tuple[str | None, dict[str, Any]]]:
    """(category, test) pairs; the null entries real dcgmi output contains are skipped."""
    if categories is None:
        return []
    if not isinstance(categories, list):
        raise ProbeParseError(NAME, "test_categories is not a list", text)
    pairs = []
    for category in categories:
        if not isinstance(category, dict):
            continue
        name = category.get("category")
        for test in category.get("tests") or []:
            if isinstance(test, dict):
                pairs.append((str(name) if name is not None else None, test))
    return pairs


def _json_status(raw: Any, text: str) -> Status:
    status = _status(str(raw)) if isinstance(raw, str) else None
    if status is None:
        raise ProbeParseError(NAME, f"unknown result status {raw!r}", text)
    return status


def _json_test(test: dict[str, Any], category: str | None, text: str) -> DiagTest:
    name = test.get("name")
    if not isinstance(name, str):
        raise ProbeParseError(NAME, "a test without a name", text)
    results: list[DiagResult] = []
    messages: list[DiagMessage] = []
    for entry in test.get("results") or []:
        if isinstance(entry, dict):
            found = _json_results(entry, text)
            results.extend(found)
            messages.extend(_json_messages(entry, found[0].gpu if len(found) == 1 else None))
    summary = test.get("test_summary")
    if isinstance(summary, dict) and "status" in summary:
        status = _json_status(summary["status"], text)
    else:
        status = _worst([result.status for result in results])
    return DiagTest(name, category, status, tuple(results), tuple(messages))


def _json_results(entry: dict[str, Any], text: str) -> list[DiagResult]:
    """One JSON result: `gpu_id`, `gpu_ids` ("0,1,2" or 3), or `entity_group`+`entity_id`."""
    status = _json_status(entry.get("status"), text)
    if entry.get("entity_group") == "CPU" or "cpu_id" in entry:
        cpu = entry.get("entity_id", entry.get("cpu_id"))
        return [DiagResult(status, cpu=int(cpu) if cpu is not None else None)]
    raw = entry.get("entity_id", entry.get("gpu_id", entry.get("gpu_ids")))
    ids = [part.strip() for part in str(raw).split(",") if part.strip()] if raw is not None else []
    if not ids or not all(part.isdigit() for part in ids):
        return [DiagResult(status)]
    return [DiagResult(status, gpu=int(part)) for part in ids]


def _json_messages(entry: dict[str, Any], gpu: int | None) -> list[DiagMessage]:
    messages = []
    for kind, key in ((MessageKind.WARNING, "warnings"), (MessageKind.INFO, "info")):
        raw = entry.get(key) or []
        for item in raw if isinstance(raw, list) else [raw]:
            if isinstance(item, dict):
                words = item.get("warning", item.get("warnings", item.get("message", "")))
                error_id = item.get("error_id")
            else:
                words, error_id = item, None
            if str(words).strip():
                said = str(words).strip()
                named = _gpu_named(said)
                messages.append(
                    DiagMessage(
                        kind,
                        said,
                        named if named is not None else gpu,
                        int(error_id) if isinstance(error_id, int) else None,
                    )
                )
    return messages


def _json_meta(data: dict[str, Any], root: dict[str, Any]) -> _Meta:
    raw_metadata = data.get("metadata")
    metadata: dict[str, Any] = raw_metadata if isinstance(raw_metadata, dict) else {}
    version = root.get("version") or metadata.get("version") or metadata.get("DCGM Version")
    driver = root.get("Driver Version Detected") or metadata.get("Driver Version Detected")
    ids = root.get("GPU Device IDs") or [
        entity.get("device_id")
        for group in data.get("entity_groups") or []
        if isinstance(group, dict) and group.get("entity_group") == "GPU"
        for entity in group.get("entities") or []
        if isinstance(entity, dict)
    ]
    return _Meta(
        dcgm_version=str(version) if version else None,
        driver_version=str(driver) if driver else None,
        device_ids=tuple(str(i) for i in ids if i) if isinstance(ids, list) else (),
    )


# --- tables ----------------------------------------------------------------------------------

_PROMPT = re.compile(r"^(?:.{0,120}?[$#>]\s*)?(?:sudo\s+)?(?:\S*/)?dcgmi\s")
_BORDER = re.compile(r"^\+[-=]+\+[-=]+\+$")
_SECTION = re.compile(r"^[|+]-{3,}\s+(\S.*?)\s+-+\+-+[|+]$")
_RESULT_LINE = re.compile(
    r"^(?P<word>Pass|Fail|Warn|Skip|Not Run)"
    r"(?:\s*-\s*(?:(?P<all>All)|GPUs?:?\s*(?P<ids>[\d,\s]+)))?$"
)
_GPU_RESULT = re.compile(r"^GPU\s*(?P<gpu>\d+)\s*:\s*(?P<word>Pass|Fail|Warn|Skip|Not Run)$")
_MESSAGE_LABEL = re.compile(r"^(Error|Warning|Info)\b")
_METADATA = {
    "DCGM Version": "dcgm_version",
    "Driver Version Detected": "driver_version",
    "GPU Device IDs Detected": "device_ids",
}


def _clean(text: str) -> list[tuple[int, str]]:
    """Numbered, stripped lines without paste artefacts or the shell line that ran dcgmi."""
    return [
        (line.number, line.text.strip())
        for line in clean_lines(text)
        if line.text.strip() and not _PROMPT.match(line.text.strip())
    ]


def _cells(line: str) -> list[str]:
    """The stripped cells of a `| a | b |` row ([] for anything else)."""
    if not line.startswith("|") or _SECTION.match(line):
        return []
    return [cell.strip() for cell in line.strip("|").split("|")]


def _chunk(line: str) -> str:
    """The raw second cell, as dcgmi wrote it: exactly CHUNK characters, padding included."""
    parts = line.split("|")
    cell = parts[2] if len(parts) > 2 else ""
    return cell[1 : CHUNK + 1].ljust(CHUNK)


@dataclass(slots=True)
class _TestDraft:
    name: str
    category: str | None
    status: Status
    results: list[DiagResult] = field(default_factory=list)
    messages: list[DiagMessage] = field(default_factory=list)

    def freeze(self) -> DiagTest:
        status = _worst([self.status, *(result.status for result in self.results)])
        return DiagTest(self.name, self.category, status, tuple(self.results), tuple(self.messages))


@dataclass(slots=True)
class _MessageDraft:
    kind: MessageKind
    chunks: list[str]
    label_gpu: int | None = None
    """A GPU named in the label cell (`Warning: GPU0`) rather than in the text."""

    def freeze(self) -> DiagMessage:
        said = " ".join("".join(self.chunks).split())
        named = _gpu_named(said)
        return DiagMessage(self.kind, said, named if named is not None else self.label_gpu)


class _TableReader:
    """Reads `| name | result |` rows of one or more dcgmi diag tables."""

    def __init__(self, text: str, last_line: int) -> None:
        self.text = text
        self.last_line = last_line
        self.category: str | None = None
        self.tests: list[_TestDraft] = []
        self.test: _TestDraft | None = None
        self.message: _MessageDraft | None = None
        self.loose: list[_MessageDraft] = []
        self.meta: dict[str, Any] = {}
        self.closed = False
        self.cut = False
        self.rows = 0

    def feed(self, number: int, line: str) -> None:
        if _BORDER.match(line):
            self._close_message()
            self.test, self.closed = None, self.rows > 0
        elif section := _SECTION.match(line):
            self._close_message()
            self.category, self.test, self.closed = section.group(1), None, False
        elif line.startswith("|") and line.endswith("|") and len(line) > 1:
            self.closed = False
            self._row(number, line)
        elif line.startswith("|") and number == self.last_line:
            self.cut = True  # the paste stops inside this row
        elif line.startswith(("|", "+")):
            raise ProbeParseError(NAME, "malformed table line", self.text, line=number)

    def _row(self, number: int, line: str) -> None:
        cells = _cells(line)
        if len(cells) != 2:
            raise ProbeParseError(NAME, "table row without two cells", self.text, line=number)
        name, value = cells
        if name == "Diagnostic" and value == "Result":
            return
        self.rows += 1
        if label := _MESSAGE_LABEL.match(name):
            self._close_message()
            kind = MessageKind(label.group(1).lower())
            self.message = _MessageDraft(kind, [_chunk(line)], _gpu_named(name))
        elif name and self.category == "Metadata":
            self.meta[name] = value
        elif name:
            self._close_message()
            self.test = _TestDraft(name, self.category, Status.NOT_RUN)
            self.tests.append(self.test)
            self._result(number, value)
        elif self.message is not None:
            self.message.chunks.append(_chunk(line))
        elif self.test is not None and value:
            self._result(number, value)
        elif value:
            raise ProbeParseError(NAME, "result row outside any test", self.text, line=number)

    def _result(self, number: int, value: str) -> None:
        assert self.test is not None
        if match := _GPU_RESULT.match(value):
            word = _status(match.group("word")) or Status.NOT_RUN
            self.test.results.append(DiagResult(word, gpu=int(match.group("gpu"))))
            return
        match = _RESULT_LINE.match(value)
        if match is None:
            raise ProbeParseError(NAME, f"unknown result {value!r}", self.text, line=number)
        word = _status(match.group("word")) or Status.NOT_RUN
        ids = match.group("ids")
        if ids:
            gpus = [int(part) for part in re.split(r"[,\s]+", ids.strip()) if part]
            self.test.results.extend(DiagResult(word, gpu=gpu) for gpu in gpus)
        elif self.test.status is Status.NOT_RUN and not self.test.results:
            self.test.status = word  # the test's own verdict (`Pass`, `Skip - All`)
        else:
            self.test.results.append(DiagResult(word))

    def _close_message(self) -> None:
        if self.message is None:
            return
        if self.test is not None:
            self.test.messages.append(self.message.freeze())
        else:
            self.loose.append(self.message)
        self.message = None

    def facts(self) -> DcgmDiagFacts:
        self._close_message()
        if not self.rows:
            raise ProbeParseError(NAME, "table without any result row", self.text)
        ids = self.meta.get("GPU Device IDs Detected", "")
        meta = _Meta(
            dcgm_version=self.meta.get("DCGM Version") or None,
            driver_version=self.meta.get("Driver Version Detected") or None,
            device_ids=tuple(part.strip() for part in ids.split(",") if part.strip()),
        )
        return _facts(
            Source.TABLE,
            [test.freeze() for test in self.tests],
            [message.freeze() for message in self.loose],
            complete=self.closed and not self.cut,
            meta=meta,
        )


def _parse_table(lines: list[tuple[int, str]], text: str) -> DcgmDiagFacts:
    reader = _TableReader(text, last_line=lines[-1][0])
    for number, line in lines:
        if line.startswith(("|", "+")):
            reader.feed(number, line)
        elif line.startswith("Error"):
            return _error_facts(line)
    return reader.facts()


# --- dcgmi health ----------------------------------------------------------------------------

_HEALTH_GPU = re.compile(r"^(?:->\s*|GPU(?: ID)?:?\s*)(\d+)$")
_HEALTH_SYSTEM = re.compile(r"^->\s*(.+?)(?:\s+system)?$")


def _parse_health(lines: list[tuple[int, str]], text: str) -> DcgmDiagFacts:
    """`dcgmi health -c`: Overall Health, then per GPU (`-> 0`) per subsystem verdicts."""
    overall: Status | None = None
    gpu: int | None = None
    tests: list[_TestDraft] = []
    closed = False
    for number, line in lines:
        closed = bool(_BORDER.match(line)) and bool(tests or overall)
        cells = _cells(line)
        if len(cells) != 2:
            continue
        name, value = cells
        verdict = _status(value)
        if name == "Overall Health":
            overall = verdict
        elif match := _HEALTH_GPU.match(name):
            gpu = int(match.group(1))
        elif (match := _HEALTH_SYSTEM.match(name)) and verdict is not None:
            result = DiagResult(verdict, gpu=gpu)
            tests.append(_TestDraft(match.group(1), "health", verdict, [result]))
        elif not name and tests and value and not value.startswith("..."):
            kind = MessageKind.ERROR if tests[-1].status is Status.FAIL else MessageKind.WARNING
            named = _gpu_named(value)
            tests[-1].messages.append(DiagMessage(kind, value, named if named is not None else gpu))
        elif name and verdict is None and value:
            raise ProbeParseError(NAME, f"unknown health verdict {value!r}", text, line=number)
    return _facts(
        Source.HEALTH,
        [test.freeze() for test in tests],
        [],
        complete=closed,
        overall_hint=overall,
    )
