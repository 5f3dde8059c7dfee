"""The exposition text: escaping, values, histograms, read back by a strict parser."""

from __future__ import annotations

import math

import pytest

from fleetfix.metrics.exposition import (
    Family,
    Sample,
    escape_label_value,
    format_value,
    histogram_samples,
    labels,
    render,
)
from tests.unit.metrics.promtext import ExpositionError, parse, value

NASTY = 'gpu"01\\rack\nleaf-ü {a="b"}'


def test_label_values_and_help_are_escaped_and_read_back_as_written() -> None:
    text = render(
        [
            Family(
                "fleetfix_things_total",
                "counter",
                "Things with a \\ backslash\nand a line feed.",
                (Sample(labels(host=NASTY, kind="a,b=c"), 3),),
            )
        ]
    )
    families = parse(text)
    assert families["fleetfix_things_total"].help == "Things with a \\ backslash\nand a line feed."
    assert value(families, "fleetfix_things_total", host=NASTY, kind="a,b=c") == 3
    assert len(text.splitlines()) == 3  # the line feed in the value did not break the line


def test_escape_label_value_follows_the_format() -> None:
    assert escape_label_value('a\\b"c\nd') == 'a\\\\b\\"c\\nd'


@pytest.mark.parametrize(
    ("number", "text"),
    [
        (0, "0"),
        (3.0, "3"),
        (-2, "-2"),
        (0.25, "0.25"),
        (1795610478.655298, "1795610478.655298"),
        (1e-7, "1e-07"),
        (math.inf, "+Inf"),
        (-math.inf, "-Inf"),
        (math.nan, "NaN"),
        (2.0**60, "1.152921504606847e+18"),
    ],
)
def test_values_are_formatted_as_prometheus_reads_them(number: float, text: str) -> None:
    assert format_value(number) == text
    parsed = float(text)
    assert (math.isnan(parsed) and math.isnan(number)) or parsed == pytest.approx(number)


def test_histogram_buckets_are_cumulative_and_end_at_inf() -> None:
    samples = histogram_samples(labels(phase="fix"), (1.0, 5.0), {1.0: 2, 5.0: 1}, 9.5, 4)
    text = render([Family("fleetfix_x_seconds", "histogram", "X.", samples)])
    families = parse(text)
    assert value(families, "fleetfix_x_seconds_bucket", le="1") == 2
    assert value(families, "fleetfix_x_seconds_bucket", le="5") == 3
    assert value(families, "fleetfix_x_seconds_bucket", le="+Inf") == 4
    assert value(families, "fleetfix_x_seconds_count", phase="fix") == 4
    assert value(families, "fleetfix_x_seconds_sum", phase="fix") == 9.5


def test_bad_names_are_refused_when_the_family_is_built() -> None:
    with pytest.raises(ValueError, match="metric name"):
        Family("fleetfix-bad", "gauge", "x")
    with pytest.raises(ValueError, match="label name"):
        Family("fleetfix_ok", "gauge", "x", (Sample((("__reserved", "v"),), 1),))


def test_nothing_renders_as_an_empty_file() -> None:
    assert render([]) == ""
    assert parse("") == {}


@pytest.mark.parametrize(
    "text",
    [
        "# HELP a_total x\n# TYPE a_total counter\na_total 1",  # no final line feed
        "# TYPE a gauge\na 1\n",  # TYPE without HELP
        "# HELP a x\n# TYPE a gauge\na 1\n\n",  # blank line
        '# HELP a x\n# TYPE a gauge\na{b="\\q"} 1\n',  # bad escape
        "# HELP a x\n# TYPE a gauge\na 1\na 2\n",  # series twice
        "# HELP a x\n# TYPE a counter\na 1\n",  # counter without _total
        "# HELP a x\n# TYPE a gauge\n# HELP b x\n# TYPE b gauge\nb 1\na 1\n",  # not contiguous
        '# HELP h x\n# TYPE h histogram\nh_bucket{le="1"} 2\nh_bucket{le="+Inf"} 1\n'
        "h_sum 1\nh_count 1\n",  # not cumulative
        "# HELP a x\n# TYPE a gauge\na one\n",  # bad value
    ],
)
def test_the_strict_parser_refuses_what_the_format_does_not_allow(text: str) -> None:
    with pytest.raises(ExpositionError):
        parse(text)
