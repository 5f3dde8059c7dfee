"""The quick tokenizer for host lines with simple quotes agrees with shlex wherever it answers."""

from __future__ import annotations

import random
import shlex

import pytest

from fleetfix.inventory.ini import _simply_quoted


@pytest.mark.parametrize(
    "line",
    [
        'gpu00001 ansible_host=127.10.1.1 gpus=8 gpu_model="NVIDIA H100 80GB HBM3"',
        "gpu1 a=1 b=\"x y\" c='z w'",
        "h x=\"a\"b'c d'e",
        'h x=""',
        "h x='a\"b'",
        '  h   y="  sp  "  ',
    ],
)
def test_quoted_host_lines_split_as_shlex_does(line: str) -> None:
    assert _simply_quoted(line) == shlex.split(line, comments=True)


@pytest.mark.parametrize("line", ['h x="unbalanced', "h x='a", 'h x="a\\"b"', "h x=1 # comment"])
def test_anything_else_is_left_to_shlex(line: str) -> None:
    assert _simply_quoted(line) is None


def test_random_lines_never_disagree_with_shlex() -> None:
    rng = random.Random(20261125)
    answered = 0
    for _ in range(20_000):
        line = "".join(rng.choice("ab =\"' \t") for _ in range(rng.randint(1, 12)))
        quick = _simply_quoted(line)
        if quick is None:
            continue
        answered += 1
        assert quick == shlex.split(line, comments=True), line
    assert answered > 5_000  # the fast path did answer most lines


def test_random_double_quoted_lines_never_disagree_with_shlex() -> None:
    """Lines whose only quotes are double quotes take a str.split path of their own."""
    rng = random.Random(20261206)
    answered = 0
    for _ in range(20_000):
        line = "".join(rng.choice('ab ="" \t\r') for _ in range(rng.randint(1, 14)))
        quick = _simply_quoted(line)
        if quick is None:
            assert line.count('"') % 2  # only an unbalanced quote is left to shlex
            continue
        answered += 1
        assert quick == shlex.split(line, comments=True), line
    assert answered > 5_000
