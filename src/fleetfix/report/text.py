"""Making hostile remote text safe to keep and show: bounded excerpts, no control characters."""

from __future__ import annotations

import re

EXCERPT_CHARS = 4000
# Terminal escape sequences (colour, cursor moves) that tools print even when piped.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
# What XML 1.0 cannot hold at all, plus the C1 controls that only confuse a reader.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")


def clean(text: str) -> str:
    """`text` without terminal escapes and control characters (tab, CR and LF are kept)."""
    return _CONTROL.sub("\ufffd", _ANSI.sub("", text))


def excerpt(text: str, limit: int = EXCERPT_CHARS) -> str:
    """At most about `limit` characters of `text`: a quarter from the head, the rest from the
    tail, where tools print their verdict and errors."""
    if len(text) <= limit:
        return text
    head = limit // 4
    tail = limit - head
    omitted = len(text) - head - tail
    return f"{text[:head]}\n... [{omitted} characters omitted] ...\n{text[-tail:]}"


__all__ = ["EXCERPT_CHARS", "clean", "excerpt"]
