"""The rows of commands, steps and events: each fact set and each output stored once.

A command's output is kept once, in its `commands` row, as an excerpt (codec.EXCERPT per
stream; PARSED_EXCERPT for output a probe read into facts) with its full length. A step's
registered data is kept once, in its `steps` row; when its `cmd`, `stdout` and `stderr` are
the step's last command's, the row refers to that command's row (`command_id`) instead of
repeating them. Data longer than COMPRESS_ABOVE (a
parsed nvidia-smi: 17 KB of JSON for eight GPUs) is stored zlib-compressed (1.8 KB), the rest
as JSON text. Event rows of `CommandRan` and
`HostStepFinished` refer to their row (`ref`) instead of repeating it (see codec.ROW_FIELDS).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping
from typing import Any

from fleetfix.events import CommandRan, HostStepFinished, LoopItemFinished
from fleetfix.journal.batch import Write
from fleetfix.journal.codec import EXCERPT, excerpt
from fleetfix.journal.db import Database
from fleetfix.results import CommandResult, kept_of, registered_output

REGISTERED_OUTPUT = 65536
"""Characters of a registered stdout/stderr a step row keeps when it cannot refer to its
command's excerpt (a shell step's long output: a resumed run replays it as `register:`)."""
COMPRESS_ABOVE = 1024
"""Characters of a step's JSON data above which the row keeps it zlib-compressed (a BLOB)."""
_SHARED = ("cmd", "stdout", "stderr")

_INSERT_COMMAND = (
    "INSERT INTO commands (run_id, host, step, command, rc, timed_out, planned, duration,"
    " stdout, stderr, stdout_size, stderr_size, at) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)"
)
_INSERT_STEP = (
    "INSERT INTO steps (run_id, host, step, step_key, status, changed, message, attempts,"
    " duration, data, at, command_id) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)"
)


def event_write(run_id: str, kind: str, body: str, *, refers: bool = False) -> Write:
    """The event's row; with `refers`, pointing at the row the write before it made."""

    def write(db: Database, made: int | None) -> int | None:
        ref = made if refers else None
        db.execute(
            "INSERT INTO events (run_id, type, body, ref) VALUES (?,?,?,?)",
            (run_id, kind, body, ref),
        )
        return None

    return write


def command_write(run_id: str, event: CommandRan) -> Write:
    kept = kept_of(event.read_into_facts)
    params = _command_params(
        run_id, event.host, event.step, event.result, event.planned_only, kept=kept
    )
    params += (event.at,)

    def write(db: Database, made: int | None) -> int | None:
        return db.insert(_INSERT_COMMAND, params)

    return write


def _command_params(
    run_id: str, host: str, step: str, result: CommandResult, planned: bool, *, kept: int = EXCERPT
) -> tuple[Any, ...]:
    return (
        run_id,
        host,
        step,
        result.command,
        result.rc,
        int(result.timed_out),
        int(planned),
        result.duration,
        excerpt(result.stdout, kept),
        excerpt(result.stderr),
        len(result.stdout),
        len(result.stderr),
    )


def step_write(run_id: str, event: HostStepFinished | LoopItemFinished) -> Write:
    """The step's row, its data stored once; its last command's row found (or, should its
    CommandRan be missing, made) when the data refers to it."""
    result = event.result
    last = result.commands[-1] if result.commands else None
    shared = last is not None and refers_to_command(result.data, last)
    data = {k: v for k, v in result.data.items() if not (shared and k in _SHARED)}
    params = (
        run_id,
        result.host,
        result.step,
        result.key,
        result.status.value,
        int(result.changed),
        result.message,
        result.attempts,
        result.duration,
        _stored(_bounded(data)),
        event.at,
    )
    fallback = None
    if shared and last is not None:
        fallback = (*_command_params(run_id, result.host, result.step, last, False), event.at)

    def write(db: Database, made: int | None) -> int | None:
        command_id = _command_row(db, fallback) if fallback is not None else None
        return db.insert(_INSERT_STEP, (*params, command_id))

    return write


def refers_to_command(data: Mapping[str, Any], last: CommandResult) -> bool:
    """May a step row refer to its last command's row for `cmd`, `stdout` and `stderr`?
    When they are that command's, and either the step parsed them into facts (the facts are
    what a resumed run replays; the output is evidence) or they fit in the excerpt whole."""
    if (data.get("cmd"), data.get("stdout"), data.get("stderr")) != (
        last.command,
        registered_output(last.stdout),
        registered_output(last.stderr),
    ):
        return False
    fits = len(last.stdout) <= EXCERPT and len(last.stderr) <= EXCERPT
    return fits or data.get("facts") is not None


def _command_row(db: Database, params: tuple[Any, ...]) -> int | None:
    """The id of the host-step's latest row for this command (its CommandRan's)."""
    run_id, host, step, command = params[:4]
    row = db.execute(
        "SELECT max(id) FROM commands WHERE run_id=? AND host=? AND step=? AND command=?",
        (run_id, host, step, command),
    ).fetchone()
    if row is not None and row[0] is not None:
        return int(row[0])
    return db.insert(_INSERT_COMMAND, params)


def _bounded(data: dict[str, Any]) -> dict[str, Any]:
    """Registered data with long output cut, so a resumed run can restore it cheaply (a
    loop's items too: each item's own row has its output as well)."""
    for key in ("stdout", "stderr"):
        if isinstance(data.get(key), str):
            data[key] = excerpt(data[key], REGISTERED_OUTPUT)
    data.pop("stdout_lines", None)
    data.pop("stderr_lines", None)
    if isinstance(data.get("results"), list):
        data["results"] = [
            _bounded(dict(item)) if isinstance(item, dict) else item for item in data["results"]
        ]
    return data


def _stored(data: Mapping[str, Any]) -> bytes:
    """Compact JSON as bytes, compressed when long (level 1: 0.07 ms for a parsed nvidia-smi).
    Plain JSON starts with `{`; a zlib stream never does (its first byte is 0x78)."""
    text = json.dumps(data, separators=(",", ":"), default=str).encode()
    return zlib.compress(text, 1) if len(text) > COMPRESS_ABOVE else text


def step_data(
    data: str | bytes | memoryview, command: str | None, stdout: str | None, stderr: str | None
) -> dict[str, Any]:
    """A step row's registered data, with `cmd`, `stdout` and `stderr` back from the command
    row it refers to (None: the row keeps its own, or refers to none)."""
    if isinstance(data, memoryview):
        data = bytes(data)
    if isinstance(data, bytes) and not data.startswith(b"{"):
        data = zlib.decompress(data)
    value: dict[str, Any] = json.loads(data)
    if command is not None:
        value.update(
            cmd=command,
            stdout=registered_output(stdout or ""),
            stderr=registered_output(stderr or ""),
        )
    return value


def attached(
    kind: str,
    ref: int | None,
    data: str | bytes | None,
    command: tuple[str | None, str | None, str | None],
) -> dict[str, Any] | None:
    """What an event row's `ref` row holds of its result (codec.ROW_FIELDS), for decode;
    None for an event that holds all of itself (any other type, or an older journal)."""
    if ref is None:
        return None
    if kind == "CommandRan":
        text, stdout, stderr = command
        return {"command": text or "", "stdout": stdout or "", "stderr": stderr or ""}
    if kind in ("HostStepFinished", "LoopItemFinished") and data is not None:
        return {"data": step_data(data, *command)}
    return None


EVENTS_QUERY = (
    "SELECT e.type, e.body, e.ref, s.data, c.command, c.stdout, c.stderr FROM events e"
    " LEFT JOIN steps s ON e.type IN ('HostStepFinished', 'LoopItemFinished') AND s.id = e.ref"
    " LEFT JOIN commands c ON c.id ="
    " (CASE e.type WHEN 'CommandRan' THEN e.ref ELSE s.command_id END)"
    " WHERE e.run_id=? ORDER BY e.id"
)
"""A run's events in order, each with what its row holds (see `attached`)."""
STEPS_QUERY = (
    "SELECT s.host, s.step, s.step_key, s.status, s.changed, s.message, s.attempts,"
    " s.duration, s.data, s.at, c.command, c.stdout, c.stderr FROM steps s"
    " LEFT JOIN commands c ON c.id = s.command_id WHERE s.run_id=? ORDER BY s.id"
)
"""A run's step rows in order, each with the command row its data refers to."""
