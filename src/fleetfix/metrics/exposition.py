"""Prometheus text exposition format (0.0.4): metric families rendered to the text
node_exporter's textfile collector and a /metrics scrape read. Pure: values in, text out."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

MetricType = Literal["counter", "gauge", "histogram", "summary", "untyped"]
Labels = tuple[tuple[str, str], ...]

_NAME = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True, slots=True)
class Sample:
    """One line: the family's name plus `suffix` (`_bucket`, `_sum`, ...), labels, a value."""

    labels: Labels
    value: float
    suffix: str = ""


@dataclass(frozen=True, slots=True)
class Family:
    """A metric family: its HELP and TYPE lines and its samples, rendered together."""

    name: str
    type: MetricType
    help: str
    samples: tuple[Sample, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if not _NAME.match(self.name):
            raise ValueError(f"bad metric name {self.name!r}")
        for sample in self.samples:
            for label, _ in sample.labels:
                if not _LABEL.match(label) or label.startswith("__"):
                    raise ValueError(f"bad label name {label!r} in {self.name}")


def labels(**values: str) -> Labels:
    """Labels in the order given (keyword names are valid label names by construction)."""
    return tuple(values.items())


def escape_label_value(value: str) -> str:
    """Backslash, double quote and line feed escaped, as the format requires."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def escape_help(text: str) -> str:
    """HELP text escapes only backslash and line feed."""
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def format_value(value: float) -> str:
    """Integers without a decimal point, NaN and infinities as the format spells them, other
    floats in Python's shortest round-tripping form (which Go's ParseFloat reads)."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if float(value).is_integer() and abs(value) < 2**53:
        return str(int(value))
    return repr(float(value))


def _label_text(pairs: Labels) -> str:
    if not pairs:
        return ""
    inner = ",".join(f'{name}="{escape_label_value(value)}"' for name, value in pairs)
    return "{" + inner + "}"


def render(families: Iterable[Family]) -> str:
    """The exposition text: each family's HELP, TYPE and samples, one line feed at the end."""
    lines: list[str] = []
    for family in families:
        lines.append(f"# HELP {family.name} {escape_help(family.help)}")
        lines.append(f"# TYPE {family.name} {family.type}")
        for sample in family.samples:
            name = family.name + sample.suffix
            lines.append(f"{name}{_label_text(sample.labels)} {format_value(sample.value)}")
    return "\n".join(lines) + "\n" if lines else ""


def histogram_samples(
    base: Labels, bounds: tuple[float, ...], counts: Mapping[float, int], total: float, count: int
) -> tuple[Sample, ...]:
    """A histogram's `_bucket` lines (cumulative, `le` ascending, ending at +Inf), `_sum` and
    `_count`. `counts` maps each finite bound to the observations that fell in it alone."""
    samples: list[Sample] = []
    running = 0
    for bound in bounds:
        running += counts.get(bound, 0)
        samples.append(Sample((*base, ("le", format_value(bound))), running, "_bucket"))
    samples.append(Sample((*base, ("le", "+Inf")), count, "_bucket"))
    samples.append(Sample(base, total, "_sum"))
    samples.append(Sample(base, count, "_count"))
    return tuple(samples)
