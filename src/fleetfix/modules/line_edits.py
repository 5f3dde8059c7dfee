"""lineinfile's edit, pure: Ansible's rules for which line is replaced, where one is inserted,
which are removed, on a file's lines as bytes (as Ansible reads them)."""

from __future__ import annotations

import io
import re
from dataclasses import dataclass

_EOL = b"\n"
_ENDS = b"\r\n"


@dataclass(frozen=True, slots=True)
class Edit:
    """The file's lines after the edit, and what Ansible says about it."""

    lines: list[bytes]
    changed: bool
    msg: str
    found: int = 0


def read_lines(data: bytes) -> list[bytes]:
    """Lines as Python's readlines gives them (split after each \\n, kept)."""
    return io.BytesIO(data).readlines()


@dataclass(frozen=True, slots=True)
class Wanted:
    """lineinfile's search and placement parameters, as given."""

    line: str | None = None
    regexp: str | None = None
    search_string: str | None = None
    insertafter: str | None = None
    insertbefore: str | None = None
    backrefs: bool = False
    firstmatch: bool = False


def present(lines: list[bytes], wanted: Wanted) -> Edit:
    """state=present: replace the line regexp/search_string finds (the last one, or the first
    with firstmatch), else make sure the line is there, inserted where asked (default EOF)."""
    lines = list(lines)
    line = (wanted.line or "").encode()
    after, before = wanted.insertafter, wanted.insertbefore
    if after is None and before is None:
        after = "EOF"
    index, match = _matched(lines, wanted)
    insert_at = -1
    if match is None:
        index, insert_at = _scan(lines, line, after, before, wanted.firstmatch)
    if index != -1:
        new = match.expand(line) if wanted.backrefs and isinstance(match, re.Match) else line
        new = new if new.endswith(_EOL) else new + _EOL
        if lines[index] == new:
            return Edit(lines, False, "")
        lines[index] = new
        return Edit(lines, True, "line replaced")
    if wanted.backrefs:
        return Edit(lines, False, "")
    return _insert(lines, line, after, before, insert_at)


def _matched(lines: list[bytes], wanted: Wanted) -> tuple[int, re.Match[bytes] | bool | None]:
    """(index, match) of the line regexp or search_string finds; (-1, None) if none."""
    if wanted.regexp is None and wanted.search_string is None:
        return -1, None
    pattern = re.compile(wanted.regexp.encode()) if wanted.regexp is not None else None
    needle = (wanted.search_string or "").encode()
    index, match = -1, None
    for lineno, current in enumerate(lines):
        found = pattern.search(current) if pattern is not None else needle in current
        if found:
            index, match = lineno, found
            if wanted.firstmatch:
                break
    return index, match


def _scan(
    lines: list[bytes], line: bytes, after: str | None, before: str | None, firstmatch: bool
) -> tuple[int, int]:
    """(index of a line equal to `line` (the last), -1; where insertafter/insertbefore's
    regexp says to insert (the last match, or the first with firstmatch), -1)."""
    anchor = None
    if after not in (None, "BOF", "EOF"):
        anchor = re.compile(str(after).encode())
    elif before not in (None, "BOF"):
        anchor = re.compile(str(before).encode())
    exact, insert_at = -1, -1
    for lineno, current in enumerate(lines):
        if line == current.rstrip(_ENDS):
            exact = lineno
        elif anchor is not None and anchor.search(current):
            insert_at = lineno + 1 if after else lineno
            if firstmatch:
                break
    return exact, insert_at


def _insert(
    lines: list[bytes], line: bytes, after: str | None, before: str | None, insert_at: int
) -> Edit:
    added = Edit(lines, True, "line added")
    if before == "BOF" or after == "BOF":
        lines.insert(0, line + _EOL)
    elif after == "EOF" or insert_at == -1:
        if lines and lines[-1][-1:] not in (b"\n", b"\r"):
            lines.append(_EOL)
        lines.append(line + _EOL)
    elif after:
        if len(lines) == insert_at:
            if lines[insert_at - 1].rstrip(_ENDS) == line:
                return Edit(lines, False, "")
            lines.append(line + _EOL)  # after a last line without newline: joined, as Ansible
        elif lines[insert_at].rstrip(_ENDS) == line:
            return Edit(lines, False, "")
        else:
            lines.insert(insert_at, line + _EOL)
    else:
        lines.insert(insert_at, line + _EOL)
    return added


def absent(lines: list[bytes], wanted: Wanted) -> Edit:
    """state=absent: remove every line regexp matches, search_string is in, or equal to line."""
    pattern = re.compile(wanted.regexp.encode()) if wanted.regexp is not None else None
    needle = wanted.search_string.encode() if wanted.search_string is not None else None
    line = (wanted.line or "").encode()

    def matches(current: bytes) -> bool:
        if pattern is not None:
            return pattern.search(current) is not None
        if needle is not None:
            return needle in current
        return current.rstrip(_ENDS) == line

    kept = [current for current in lines if not matches(current)]
    found = len(lines) - len(kept)
    return Edit(kept, found > 0, f"{found} line(s) removed" if found else "", found)
