"""The nvidia_smi probe: per-GPU health facts from nvidia-smi, whichever form it printed.

The command asks for `nvidia-smi -q -x` and falls back to `--query-gpu` CSV (first a full
field list, then a basic one old drivers accept). `parse` auto-detects XML, `-q` text,
`--query-gpu` CSV (with or without header/units) and the default table, and also reads the
tool's own failure messages (driver not loaded, no devices, a GPU whose handle cannot be
opened) into `errors` / `lost_gpus` instead of treating them as garbage.

The step's `expected_gpus` reaches the parser as a parameter (`parse_with`, through
`Probe.read`) and becomes `expected_gpus` / `count_ok`; nothing is echoed through the remote
shell. A saved output with the marker line older fleetfix commands printed first
(`### fleetfix nvidia_smi expected_gpus=8`) still reads, the marker standing in for a
parameter that was not given.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from fleetfix.errors import PlaybookError, ProbeParseError
from fleetfix.probes.base import Probe
from fleetfix.probes.gpu_facts import (
    Format,
    LostGpu,
    NvidiaSmiFacts,
    Reading,
    normalize_bus_id,
    summarize,
)
from fleetfix.probes.nvidia_smi_csv import BASIC_FIELDS, FULL_FIELDS, looks_like_csv, read_csv
from fleetfix.probes.nvidia_smi_fast import read_clean_xml
from fleetfix.probes.nvidia_smi_table import looks_like_table, read_table
from fleetfix.probes.nvidia_smi_text import (
    TOOL_ERROR,
    Line,
    Marker,
    Paste,
    clean_paste,
    read_text,
)
from fleetfix.probes.nvidia_smi_xml import read_xml

NAME = "nvidia_smi"

_LOST = re.compile(
    r"^Unable to determine the device handle for (?:GPU\s*)?(?P<bus>[0-9A-Fa-f:.]+)\s*:\s*"
    r"(?P<reason>.*)$",
    re.IGNORECASE,
)
_TEXT_SIGNS = re.compile(r"^(?:=+\s*NVSMI LOG\s*=+|GPU [0-9A-Fa-f]{4,8}:\S+|\s*\S.*?\s+: .*)$")


def command(params: Mapping[str, Any]) -> str:
    """`nvidia-smi -q -x`, else the CSV query; each form's output only if it succeeded."""
    _expected_param(params)  # refused here, before anything runs
    full, basic = ",".join(FULL_FIELDS), ",".join(BASIC_FIELDS)
    return (
        "{ out=$(nvidia-smi -q -x 2>/dev/null) && printf '%s\\n' \"$out\"; } || "
        f"{{ out=$(nvidia-smi --query-gpu={full} --format=csv 2>/dev/null)"
        " && printf '%s\\n' \"$out\"; } || "
        f"nvidia-smi --query-gpu={basic} --format=csv 2>&1"
    )


def _expected_param(params: Mapping[str, Any]) -> int | None:
    """The step's `expected_gpus`; PlaybookError when it is not a whole number."""
    expected = params.get("expected_gpus")
    if expected is None:
        return None
    if isinstance(expected, bool) or not isinstance(expected, int) or expected < 0:
        raise PlaybookError(f"nvidia_smi: expected_gpus must be a whole number, not {expected!r}")
    return expected


def _expected_gpus(markers: tuple[Marker, ...], text: str) -> int | None:
    """The count a marker line of an older fleetfix command (or a saved output) carries."""
    for marker in markers:
        value = marker.get("expected_gpus")
        if marker.name == NAME and value is not None:
            if not value.isdigit():
                reason = f"marker expected_gpus={value!r} is not a number"
                raise ProbeParseError(NAME, reason, text, line=marker.number)
            return int(value)
    return None


def _tool_messages(paste: Paste) -> tuple[Paste, tuple[LostGpu, ...], tuple[str, ...]]:
    """Take nvidia-smi's own failure lines out of the output."""
    kept: list[Line] = []
    lost: list[LostGpu] = []
    errors: list[str] = []
    for line in paste.lines:
        stripped = line.text.strip()
        if (match := _LOST.match(stripped)) is not None:
            lost.append(LostGpu(normalize_bus_id(match["bus"]), stripped))
        elif TOOL_ERROR.match(stripped):
            errors.append(stripped)
        else:
            kept.append(line)
    rest = Paste(tuple(kept), paste.elided, paste.command, paste.markers)
    return rest, tuple(lost), tuple(errors)


def _read(paste: Paste, text: str) -> Reading:
    lines = paste.nonblank()
    first = lines[0].text.strip()
    if first.startswith(("<?xml", "<nvidia_smi_log", "<!DOCTYPE")):
        return read_xml(paste.joined(), text, line_numbers=tuple(ln.number for ln in paste.lines))
    if looks_like_table(paste):
        return read_table(paste, text)
    if any(_TEXT_SIGNS.match(line.text) for line in lines):
        return read_text(paste, text)
    if looks_like_csv(paste):
        return read_csv(paste, text)
    reason = "not nvidia-smi output (XML, -q text, --query-gpu CSV or the default table)"
    raise ProbeParseError(NAME, reason, text, line=lines[0].number)


def parse(text: str) -> NvidiaSmiFacts:
    """Facts from any nvidia-smi form; ProbeParseError for anything else."""
    return parse_with(text, {})


def parse_with(text: str, params: Mapping[str, Any]) -> NvidiaSmiFacts:
    """Facts from any nvidia-smi form, counted against the step's `expected_gpus` (else the
    marker line of an older saved output); ProbeParseError for anything else.

    The probe's own `-q -x` output takes the fast path (nvidia_smi_fast: parsed once, no
    clean-up); everything else is cleaned of paste artefacts first.
    """
    expected = _expected_param(params)
    clean = read_clean_xml(text)
    if clean is not None:
        if expected is None:
            expected = _expected_gpus(clean.markers, text)
        return summarize(clean.reading, expected_gpus=expected)
    return _parse_pasted(text, expected)


def _parse_pasted(text: str, expected: int | None = None) -> NvidiaSmiFacts:
    """The slow path: clean the paste, then read whichever form it holds (XML by defusedxml)."""
    paste = clean_paste(text)
    if expected is None:
        expected = _expected_gpus(paste.markers, text)
    rest, lost, errors = _tool_messages(paste)
    if rest.nonblank():
        reading = _read(rest, text)
    elif lost or errors:
        reading = Reading(format=Format.ERROR, complete=False, gpus=())
    else:
        raise ProbeParseError(NAME, "empty output", text)
    return summarize(reading, expected_gpus=expected, lost_gpus=lost, errors=errors)


PROBE: Probe[NvidiaSmiFacts] = Probe(
    name=NAME,
    summary="Per-GPU health from nvidia-smi: ECC, row remap, retired pages, temps, "
    "throttling, processes, MIG, recovery action; GPU count vs expected",
    command=command,
    parse=parse,
    parse_with=parse_with,
    params={
        "expected_gpus": "how many GPUs the host should have; sets the count_ok fact",
    },
)
