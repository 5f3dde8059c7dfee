"""Values of plain words (a quoted `gpu_model`) skip literal_eval: typed as it types them."""

from __future__ import annotations

import ast
import random
import warnings
from typing import Any

import pytest

from fleetfix.inventory.ini import _coerce, parse_value

WORDS = (
    "a", "H100", "80GB", "not", "is", "in", "and", "or", "if", "else", "lambda", "await",
    "yield", "None", "True", "Nonesuch", "set", "1", "1j", "-1j", "2.5", "0x1f", "1_000",
    "-", "+", ".5", "a.b", "a:b", "/", "@", "-1", "()", "[1]",
)  # fmt: skip


def _literal_eval_path(text: str) -> Any:
    """What parse_value answered before the shortcut: literal_eval, else the text."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            value = ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text
    return _coerce(value)


@pytest.mark.parametrize(
    "text", ["NVIDIA H100 80GB HBM3", "Tesla V100-SXM2-32GB", "a is 1", "not x", "x\ty"]
)
def test_words_stay_text(text: str) -> None:
    assert parse_value(text) == text


def test_random_word_runs_are_typed_as_literal_eval_types_them() -> None:
    rng = random.Random(20261206)
    for _ in range(20_000):
        separator = rng.choice([" ", "  ", "\t", ""])
        text = separator.join(rng.choice(WORDS) for _ in range(rng.randint(1, 4)))
        expected = _literal_eval_path(text)
        value = parse_value(text)
        assert (value, type(value)) == (expected, type(expected)), text
