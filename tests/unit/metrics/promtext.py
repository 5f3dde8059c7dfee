"""A strict reader of the Prometheus text exposition format (0.0.4), for tests.

Independent of fleetfix.metrics (it shares no code with the writer) and stricter than
Prometheus itself where our files promise more: every family has exactly one HELP and one TYPE
line before its samples, its samples are contiguous, counters end in `_total` and never go
negative, histograms are cumulative with `le` ascending and `+Inf` equal to `_count`, no series
appears twice, and there are no other comments or blank lines. Anything else raises
`ExpositionError` naming the line.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r"[a-zA-Z_][a-zA-Z0-9_]*"
_FLOAT = re.compile(r"^[+-]?(?:Inf|NaN|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)$")
_HELP = re.compile(rf"^# HELP ({_NAME}) (.*)$")
_TYPE = re.compile(rf"^# TYPE ({_NAME}) (counter|gauge|histogram|summary|untyped)$")
_SAMPLE_NAME = re.compile(rf"^({_NAME})")
_LABEL_NAME = re.compile(rf"^({_LABEL})=\"")
_SUFFIXES = {
    "counter": ("",),
    "gauge": ("",),
    "untyped": ("",),
    "histogram": ("_bucket", "_sum", "_count"),
    "summary": ("", "_sum", "_count"),
}

Labels = tuple[tuple[str, str], ...]


class ExpositionError(ValueError):
    pass


@dataclass
class MetricFamily:
    name: str
    type: str
    help: str
    samples: list[tuple[str, dict[str, str], float]] = field(default_factory=list)


def unescape(text: str, allowed: str, line: int) -> str:
    """Undo backslash escapes; only `\\\\`, `\\n` and the characters in `allowed`."""
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char == "\\":
            following = text[index + 1 : index + 2]
            if following == "n":
                out.append("\n")
            elif following == "\\" or (following and following in allowed):
                out.append(following)
            else:
                raise ExpositionError(f"line {line}: bad escape \\{following!r}")
            index += 2
            continue
        out.append(char)
        index += 1
    return "".join(out)


def parse_float(text: str, line: int) -> float:
    if not _FLOAT.match(text):
        raise ExpositionError(f"line {line}: bad value {text!r}")
    return float(text)


def _labels(text: str, line: int) -> tuple[dict[str, str], str]:
    """Parse `{a="x",b="y"}` at the start of `text`; return the labels and the rest."""
    found: dict[str, str] = {}
    rest = text[1:]
    while True:
        if rest.startswith("}"):
            return found, rest[1:]
        match = _LABEL_NAME.match(rest)
        if match is None:
            raise ExpositionError(f"line {line}: bad label at {rest[:20]!r}")
        name = match.group(1)
        rest = rest[match.end() :]
        end = 0
        while True:
            if end >= len(rest):
                raise ExpositionError(f"line {line}: unterminated label value")
            if rest[end] == "\\":
                end += 2
                continue
            if rest[end] == '"':
                break
            end += 1
        if name in found:
            raise ExpositionError(f"line {line}: label {name!r} twice")
        if "\n" in rest[:end]:
            raise ExpositionError(f"line {line}: raw line feed in a label value")
        found[name] = unescape(rest[:end], '"', line)
        rest = rest[end + 1 :]
        if rest.startswith(","):
            rest = rest[1:]
        elif not rest.startswith("}"):
            raise ExpositionError(f"line {line}: expected , or }} after label {name!r}")


def _sample(text: str, line: int) -> tuple[str, dict[str, str], float]:
    match = _SAMPLE_NAME.match(text)
    if match is None:
        raise ExpositionError(f"line {line}: bad sample {text!r}")
    name, rest = match.group(1), text[match.end() :]
    labels: dict[str, str] = {}
    if rest.startswith("{"):
        labels, rest = _labels(rest, line)
    if not rest.startswith(" "):
        raise ExpositionError(f"line {line}: expected a space before the value")
    parts = rest[1:].split(" ")
    if len(parts) not in (1, 2) or (len(parts) == 2 and not parts[1].lstrip("-").isdigit()):
        raise ExpositionError(f"line {line}: bad value/timestamp {rest!r}")
    return name, labels, parse_float(parts[0], line)


def parse(text: str) -> dict[str, MetricFamily]:
    """The families in `text`, in order; raises ExpositionError on anything not strictly valid."""
    if text and not text.endswith("\n"):
        raise ExpositionError("the text does not end with a line feed")
    families: dict[str, MetricFamily] = {}
    helps: dict[str, str] = {}
    current: MetricFamily | None = None
    series: set[tuple[str, Labels]] = set()
    for number, line in enumerate(text.split("\n")[:-1], start=1):
        if line.startswith("# HELP "):
            match = _HELP.match(line)
            if match is None or match.group(1) in helps or match.group(1) in families:
                raise ExpositionError(f"line {number}: bad or repeated HELP: {line!r}")
            helps[match.group(1)] = unescape(match.group(2), "", number)
        elif line.startswith("# TYPE "):
            match = _TYPE.match(line)
            if match is None or match.group(1) in families:
                raise ExpositionError(f"line {number}: bad or repeated TYPE: {line!r}")
            name = match.group(1)
            if name not in helps:
                raise ExpositionError(f"line {number}: TYPE of {name} without its HELP first")
            current = families[name] = MetricFamily(name, match.group(2), helps[name])
        elif not line or line.startswith("#"):
            raise ExpositionError(f"line {number}: blank line or stray comment {line!r}")
        else:
            name, labels, value = _sample(line, number)
            if current is None or not _belongs(current, name):
                raise ExpositionError(f"line {number}: {name} outside its family's group")
            key = (name, tuple(sorted(labels.items())))
            if key in series:
                raise ExpositionError(f"line {number}: series repeated: {line!r}")
            series.add(key)
            current.samples.append((name, labels, value))
    for family in families.values():
        _check_family(family)
    return families


def _belongs(family: MetricFamily, name: str) -> bool:
    return any(name == family.name + suffix for suffix in _SUFFIXES[family.type])


def _check_family(family: MetricFamily) -> None:
    if family.type == "counter":
        if not family.name.endswith("_total"):
            raise ExpositionError(f"counter {family.name} does not end in _total")
        if any(value < 0 or math.isnan(value) for _, _, value in family.samples):
            raise ExpositionError(f"counter {family.name} has a negative or NaN value")
    if family.type == "histogram":
        _check_histogram(family)


def _check_histogram(family: MetricFamily) -> None:
    groups: dict[Labels, dict[str, list[tuple[float, float]]]] = {}
    for name, labels, value in family.samples:
        suffix = name[len(family.name) :]
        base = tuple(sorted((k, v) for k, v in labels.items() if k != "le"))
        group = groups.setdefault(base, {"_bucket": [], "_sum": [], "_count": []})
        if suffix == "_bucket":
            if "le" not in labels:
                raise ExpositionError(f"{family.name}: a bucket without le")
            group["_bucket"].append((parse_float(labels["le"], 0), value))
        else:
            if "le" in labels:
                raise ExpositionError(f"{family.name}{suffix} has an le label")
            group[suffix].append((0.0, value))
    for base, group in groups.items():
        buckets = group["_bucket"]
        bounds = [bound for bound, _ in buckets]
        counts = [count for _, count in buckets]
        if not buckets or bounds[-1] != math.inf or bounds != sorted(set(bounds)):
            raise ExpositionError(f"{family.name}{dict(base)}: le must ascend to +Inf")
        if counts != sorted(counts):
            raise ExpositionError(f"{family.name}{dict(base)}: buckets are not cumulative")
        if len(group["_count"]) != 1 or len(group["_sum"]) != 1:
            raise ExpositionError(f"{family.name}{dict(base)}: needs one _sum and one _count")
        if group["_count"][0][1] != counts[-1]:
            raise ExpositionError(f"{family.name}{dict(base)}: +Inf bucket != _count")


def value(families: dict[str, MetricFamily], name: str, **labels: str) -> float:
    """The one sample of `name` (family name plus any suffix) whose labels include `labels`."""
    found = [
        sample_value
        for family in families.values()
        for sample_name, sample_labels, sample_value in family.samples
        if sample_name == name and labels.items() <= sample_labels.items()
    ]
    if len(found) != 1:
        raise KeyError(f"{len(found)} samples of {name} with {labels}")
    return found[0]


def samples(
    families: dict[str, MetricFamily], name: str, **labels: str
) -> list[tuple[dict[str, str], float]]:
    """Every sample of `name` whose labels include `labels`."""
    return [
        (sample_labels, sample_value)
        for family in families.values()
        for sample_name, sample_labels, sample_value in family.samples
        if sample_name == name and labels.items() <= sample_labels.items()
    ]
