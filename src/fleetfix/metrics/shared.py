"""One `--metrics-file` for several runs: each run's families merged by metric name under a
file lock, so two runs on one controller never lose each other's figures.

Every write takes an exclusive `fcntl.flock` on `PATH.lock`, reads what each run last wrote
(`PATH.runs.json`: its families, its pid, when it started and last wrote), puts this run's in
place, and writes both files atomically (tmp + rename). The text is the merge:

- counters and histograms: summed, series by series, over the runs the file keeps;
- `fleetfix_run_in_progress`: summed too (the runs going on now);
- other gauges: the family of the run that wrote last among those that have it (a run's
  outcome stays until a later run has one).

A run leaves the file once a later run of the same playbook started after it had ended (the
next night's sweep replaces last night's, as before), never while it goes on: two runs that
overlap are both in it until a later run follows them.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fleetfix.metrics.exposition import Family, Sample

SUMMED_GAUGES = frozenset({"fleetfix_run_in_progress"})
Write = Callable[[Path, str], None]


@dataclass(frozen=True, slots=True)
class RunShare:
    """What one run last wrote to the shared file."""

    run_id: str
    playbook: str
    pid: int
    started: float
    updated: float
    finished: bool
    families: tuple[Family, ...]


def write_shared(
    path: Path, mine: RunShare, write: Write, render: Callable[[Iterable[Family]], str]
) -> None:
    """Merge `mine` into the file at `path` under its lock (see the module).

    Raises:
        OSError: the lock, the state or the file could not be read or written.
    """
    state = path.with_name(path.name + ".runs.json")
    with _locked(path.with_name(path.name + ".lock")):
        runs = {run.run_id: run for run in _load(state) if run.run_id != mine.run_id}
        kept = [run for run in runs.values() if not _over(run, [*runs.values(), mine])]
        kept.append(mine)
        write(state, json.dumps([_to_json(run) for run in kept]))
        write(path, render(merged(kept)))


def merged(runs: list[RunShare]) -> list[Family]:
    """The runs' families by metric name, in the order they first appear."""
    by_name: dict[str, list[tuple[RunShare, Family]]] = {}
    for run in sorted(runs, key=lambda r: r.updated):
        for family in run.families:
            by_name.setdefault(family.name, []).append((run, family))
    return [_merge(found) for found in by_name.values()]


def _merge(found: list[tuple[RunShare, Family]]) -> Family:
    last = found[-1][1]
    if last.type == "gauge" and last.name not in SUMMED_GAUGES:
        return last
    sums: dict[tuple[str, tuple[tuple[str, str], ...]], float] = {}
    for _, family in found:
        for sample in family.samples:
            key = (sample.suffix, sample.labels)
            sums[key] = sums.get(key, 0.0) + sample.value
    samples = tuple(Sample(labels, value, suffix) for (suffix, labels), value in sums.items())
    return Family(last.name, last.type, last.help, samples)


def _over(run: RunShare, others: list[RunShare]) -> bool:
    """The run ended (or its process is gone) before a later run of its playbook started."""
    if not run.finished and _alive(run.pid):
        return False
    return any(o.playbook == run.playbook and o.started > run.updated for o in others)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # closing releases the lock


def _load(state: Path) -> list[RunShare]:
    try:
        data = json.loads(state.read_text(encoding="utf-8"))
        return [_from_json(item) for item in data]
    except FileNotFoundError:
        return []
    except (ValueError, KeyError, TypeError):  # damaged: start again from this run
        return []


def _to_json(run: RunShare) -> dict[str, Any]:
    return {
        "run_id": run.run_id,
        "playbook": run.playbook,
        "pid": run.pid,
        "started": run.started,
        "updated": run.updated,
        "finished": run.finished,
        "families": [
            {
                "name": f.name,
                "type": f.type,
                "help": f.help,
                "samples": [[list(map(list, s.labels)), s.value, s.suffix] for s in f.samples],
            }
            for f in run.families
        ],
    }


def _from_json(item: dict[str, Any]) -> RunShare:
    families = tuple(
        Family(
            f["name"],
            f["type"],
            f["help"],
            tuple(
                Sample(tuple((str(k), str(v)) for k, v in labels), float(value), str(suffix))
                for labels, value, suffix in f["samples"]
            ),
        )
        for f in item["families"]
    )
    return RunShare(
        str(item["run_id"]),
        str(item["playbook"]),
        int(item["pid"]),
        float(item["started"]),
        float(item["updated"]),
        bool(item["finished"]),
        families,
    )
