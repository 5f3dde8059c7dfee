"""Clean tool output that a human pasted (prompts, markdown quotes, indentation, CRLF) for parsers,
and strip the terminal escapes some tools print even into a pipe.

Real command output captured by a transport has none of these artefacts, so cleaning it is a no-op;
samples copied from issues and docs carry them (see shared/samples/MANIFEST.md). Each kept line
remembers its 1-based number in the original text, so a parser can point errors at the raw line.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

# A markdown quote (`> `) or a quote inside a diff view (`+> `); `>` alone is a quoted empty line.
_QUOTE = re.compile(r"^\+?>(?: |$)")
# `$ cmd`, `# cmd` is NOT included: `#` starts real output lines (nccl-tests headers).
_DOLLAR_PROMPT = re.compile(r"^\s*\$ \S")
# `root@node03:~# cmd`, `user@host:~/dir> cmd`, `[user@host dir]$ cmd`.
_USER_PROMPT = re.compile(r"^\s*\[?[\w.-]+@[\w.-]+(?:[: ][^\s\]#$>]*)?\]?[#$>] ?\S")
# `> cmd` is a prompt only before any output; later it is indistinguishable from data.
_GT_PROMPT = re.compile(r"^> \S")
_ELISIONS = frozenset({"...", "....", "[...]", "…", "[…]"})
_TERMINAL_ESCAPE = re.compile(
    r"\x1b(?:"
    r"\[[0-?]*[ -/]*[@-~]"  # CSI: colour, underline (topo -m's header), cursor moves
    r"|\][^\x07\x1b\n]*(?:\x07|\x1b\\)"  # OSC: a window title or hyperlink, BEL or ST ends it
    r"|[ -/]+[0-~]"  # nF: character set selection (`tput sgr0` prints ESC ( B)
    r"|[@-Z\\-_]"  # the other two-byte escapes
    r")"
)


def strip_terminal_escapes(text: str) -> str:
    """`text` without terminal control sequences (CSI, OSC and the short escapes).

    `nvidia-smi topo -m` wraps its header row in ESC[4m ... ESC[0m even when its output is
    a pipe; no tool's data contains ESC, so what is removed was never data. Text without an
    ESC byte (nearly all output) is returned as it is, at the cost of one scan.
    """
    if "\x1b" not in text:
        return text
    return _TERMINAL_ESCAPE.sub("", text)


@dataclass(frozen=True, slots=True)
class Line:
    """One kept line: its 1-based number in the original text and its cleaned content."""

    number: int
    text: str


def split_lines(text: str) -> tuple[Line, ...]:
    """Lines of `text` with CRLF/CR normalised; numbering is 1-based."""
    normalised = text.replace("\r\n", "\n").replace("\r", "\n")
    return tuple(Line(n, s) for n, s in enumerate(normalised.split("\n"), start=1))


def strip_quotes(lines: tuple[Line, ...]) -> tuple[Line, ...]:
    """Remove a markdown quote prefix when every non-blank line carries it (a quoted paste)."""
    # Tool output starts with anything but `>`: one look at the first line settles most texts.
    first = next((ln.text for ln in lines if ln.text.strip()), "")
    if not first.startswith(("+", ">")):
        return lines
    content = [ln for ln in lines if ln.text.strip()]
    if not all(_QUOTE.match(ln.text) for ln in content):
        return lines
    return tuple(Line(ln.number, _QUOTE.sub("", ln.text, count=1)) for ln in lines)


def is_prompt(text: str, *, leading: bool = False) -> bool:
    """Whether `text` is a shell prompt line (`$ cmd`, `root@host# cmd`; `> cmd` if `leading`)."""
    # Every prompt has a `$` or an `@` (or starts `>`): most output lines need no regex.
    if ("$" in text and _DOLLAR_PROMPT.match(text)) or ("@" in text and _USER_PROMPT.match(text)):
        return True
    return leading and bool(_GT_PROMPT.match(text))


def drop_prompts(lines: tuple[Line, ...]) -> tuple[Line, ...]:
    """Remove shell prompt lines; `> cmd` only counts as a prompt before the first output line."""
    texts = "\n".join([ln.text for ln in lines])
    if "$" not in texts and "@" not in texts:  # most output: only `> cmd` could be a prompt
        first = next((ln.text for ln in lines if ln.text.strip()), "")
        if not _GT_PROMPT.match(first):
            return lines
    kept: list[Line] = []
    leading = True  # no output line kept yet
    for ln in lines:
        if not is_prompt(ln.text, leading=leading):
            kept.append(ln)
            leading = leading and not ln.text.strip()
    return tuple(kept)


def dedent(lines: tuple[Line, ...]) -> tuple[Line, ...]:
    """Remove the whitespace prefix that every non-blank line shares (markdown indentation)."""
    first = next((ln.text for ln in lines if ln.text.strip()), "")
    if not first.startswith((" ", "\t")):  # most output: nothing is common to every line
        return lines
    indents = [_indent(ln.text) for ln in lines if ln.text.strip()]
    # Character-wise on purpose: indentation is a string prefix, not a path.
    common = os.path.commonprefix(indents) if indents else ""  # noqa: RUF071
    if not common:
        return lines
    return tuple(Line(ln.number, ln.text[len(common) :]) for ln in lines)


def is_elision(text: str) -> bool:
    """Whether a line is a poster's elision marker (`...`, `[...]`) rather than tool output."""
    return text.strip() in _ELISIONS


def clean_lines(text: str, *, indent: bool = True) -> tuple[Line, ...]:
    """Undo paste artefacts: CRLF, quote prefixes, prompt lines, common indentation (if `indent`).

    Blank lines are kept (some formats use them as separators); elisions are left for the parser
    to judge, since only it knows whether a gap matters.
    """
    lines = drop_prompts(strip_quotes(split_lines(text)))
    return dedent(lines) if indent else lines


def clean_text(text: str, *, indent: bool = True) -> str:
    """`clean_lines` joined back into text (line numbers are lost)."""
    return "\n".join(ln.text for ln in clean_lines(text, indent=indent))


def _indent(text: str) -> str:
    return text[: len(text) - len(text.lstrip(" \t"))]
