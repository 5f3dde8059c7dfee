"""torchrun's ChildFailedError report: which ranks failed, where, how, and which came first.

    torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
    ============================================================
    train.py FAILED
    ------------------------------------------------------------
    Failures:
    [1]:
      time      : 2023-05-19_16:39:58
      host      : n136-117-136.byted.org
      rank      : 1 (local_rank: 1)
      exitcode  : -6 (pid: 78971)
      error_file: <N/A>
      traceback : Signal 6 (SIGABRT) received by PID 78971
    ------------------------------------------------------------
    Root Cause (first observed failure):
    [0]:
      ...
    ============================================================

`Failures:` may hold `<NO_OTHER_FAILURES>`. An entry counts when it names a rank or an exit
code in torchrun's words (`1 (local_rank: 1)`, `-6 (pid: 78971)`), so that other `host : x`
lines in a log are not read as failures.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fleetfix.joblogs.model import ChildFailure

_PREFIX = r"^\s*(?:\d+: )?"
"""`0: ` (srun -l) before a report's line."""
_FIELD = re.compile(
    _PREFIX + r"\s*(?P<key>time|host|rank|exitcode|error_file|traceback)\s*:\s?"
    r"(?P<value>.*?)\s*$"
)
_ENTRY = re.compile(_PREFIX + r"\s*\[\d+\]:\s*$")
_RANK = re.compile(r"^(?P<rank>\d+) \(local_rank: (?P<local>\d+)\)")
_EXIT = re.compile(r"^(?P<code>-?\d+) \(pid: (?P<pid>\d+)\)")
_NONE = frozenset({"", "<N/A>", "N/A"})


_STARTS = ("time", "host", "rank", "exitcode", "error_file", "traceback")
_SRUN = re.compile(r"^\s*\d+: ")


def maybe_report(line: str) -> bool:
    """Cheap test before the regexes: the line may belong to a ChildFailedError report."""
    stripped = line.lstrip()
    if stripped[:1].isdigit():
        stripped = _SRUN.sub("", stripped, count=1).lstrip()
    return (
        stripped.startswith(_STARTS)
        or (stripped.startswith("[") and stripped[1:2].isdigit())
        or "=====" in line
        or "Failures:" in line
        or "Root Cause" in line
    )


@dataclass(slots=True)
class _Entry:
    line: int
    root_cause: bool
    values: dict[str, str] = field(default_factory=dict)


@dataclass(slots=True)
class ReportReader:
    """Reads one file's reports line by line (feed), then hands back its failures (finish)."""

    file: str
    failures: list[ChildFailure] = field(default_factory=list)
    _root: bool = False
    _entry: _Entry | None = None

    def feed(self, number: int, line: str) -> None:
        if "Root Cause (first observed failure)" in line:
            self._close()
            self._root = True
        elif "Failures:" in line or "=====" in line:
            self._close()
            self._root = False
        elif _ENTRY.match(line):
            self._close()
            self._entry = _Entry(number, self._root)
        elif (match := _FIELD.match(line)) is not None:
            if self._entry is None or match.group("key") in self._entry.values:
                self._close()
                self._entry = _Entry(number, self._root)
            self._entry.values[match.group("key")] = match.group("value")

    def finish(self) -> list[ChildFailure]:
        self._close()
        return self.failures

    def _close(self) -> None:
        entry, self._entry = self._entry, None
        if entry is None:
            return
        failure = _failure(self.file, entry)
        if failure is not None:
            self.failures.append(failure)


def _failure(file: str, entry: _Entry) -> ChildFailure | None:
    values = entry.values
    rank = _RANK.match(values.get("rank", ""))
    exit_code = _EXIT.match(values.get("exitcode", ""))
    if rank is None and exit_code is None:
        return None
    return ChildFailure(
        file=file,
        line=entry.line,
        host=_value(values.get("host")),
        rank=int(rank.group("rank")) if rank else None,
        local_rank=int(rank.group("local")) if rank else None,
        exit_code=int(exit_code.group("code")) if exit_code else None,
        pid=int(exit_code.group("pid")) if exit_code else None,
        time=_value(values.get("time")),
        error_file=_value(values.get("error_file")),
        traceback=_value(values.get("traceback")),
        root_cause=entry.root_cause,
    )


def _value(raw: str | None) -> str | None:
    return None if raw is None or raw.strip() in _NONE else raw.strip()
