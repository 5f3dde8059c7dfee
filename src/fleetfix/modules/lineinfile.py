"""`lineinfile`: Ansible's rules for which line is replaced, where one is inserted, which are
removed. The edit is pure (`present`, `absent` on the file's lines as bytes, as Ansible reads
them); the module reads the file over the transport, edits, and writes it back atomically."""

from __future__ import annotations

import io
import posixpath
import re
from dataclasses import dataclass
from typing import Any

from fleetfix.engine.hoststep import Outcome
from fleetfix.modules.call import ModuleCall, ModuleFailed, quoted
from fleetfix.modules.remote_files import (
    Attributes,
    PathStat,
    Write,
    backup,
    ensure_attributes,
    read_bytes,
    stat_path,
    write_file,
)

_EOL = b"\n"
_ENDS = b"\r\n"
_ATTRS_CHANGED = "ownership, perms or SE linux context changed"


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


def wanted_of(params: dict[str, object]) -> Wanted:
    def text(name: str) -> str | None:
        value = params.get(name)
        return None if value is None else str(value)

    return Wanted(
        line=text("line"),
        regexp=text("regexp"),
        search_string=text("search_string"),
        insertafter=text("insertafter"),
        insertbefore=text("insertbefore"),
        backrefs=bool(params.get("backrefs")),
        firstmatch=bool(params.get("firstmatch")),
    )


async def lineinfile(call: ModuleCall) -> Outcome:
    params = call.params
    path = str(params["path"])
    wanted = wanted_of(params)
    found = await stat_path(call, path, checksum=None)
    if found is not None and found.is_link and found.lnk_source:
        found = await stat_path(call, found.lnk_source, checksum=None)
    if found is not None and found.is_dir:
        raise ModuleFailed(f"Path {path} is a directory !", rc=256)
    if params["state"] == "present":
        if wanted.backrefs and wanted.regexp is None:
            raise ModuleFailed("regexp is required with backrefs=true")
        if wanted.line is None:
            raise ModuleFailed("line is required with state=present")
        if found is None and not params["create"]:
            raise ModuleFailed(f"Destination {path} does not exist !", rc=257)
    elif (wanted.line, wanted.regexp, wanted.search_string) == (None, None, None):
        raise ModuleFailed("one of line, search_string, or regexp is required with state=absent")
    elif found is None:
        return call.outcome(msg="file not present")
    lines = read_lines(await read_bytes(call, found.path)) if found is not None else []
    edit = present(lines, wanted) if params["state"] == "present" else absent(lines, wanted)
    return await _apply(call, path, found, edit)


async def _apply(call: ModuleCall, path: str, found: PathStat | None, edit: Edit) -> Outcome:
    params = call.params
    extra: dict[str, Any] = {"found": edit.found} if params["state"] == "absent" else {}
    backup_file = ""
    if edit.changed and not call.dry:
        if params["backup"] and found is not None:
            backup_file = await backup(call, found.path)
        found = await _write(call, path, found, edit)
    if found is None:  # --check on a file not there yet
        return call.outcome(changed=edit.changed, msg=edit.msg, backup=backup_file, **extra)
    msg, changed = edit.msg, edit.changed
    if await ensure_attributes(call, found, Attributes.of(params)):
        msg = f"{msg} and {_ATTRS_CHANGED}" if changed else _ATTRS_CHANGED
        changed = True
    return call.outcome(changed=changed, msg=msg, backup=backup_file, **extra)


async def _write(call: ModuleCall, path: str, found: PathStat | None, edit: Edit) -> PathStat:
    """The edited lines written to the file (its real path: links are followed, as Ansible's
    atomic_move of the realpath); a new file's parent directories made first."""
    if found is None:
        parent = posixpath.dirname(path)
        umask_text = await call.checked(
            f"umask; mkdir -p -- {quoted(parent)}" if parent else "umask",
            f"Error creating {parent}",
        )
        umask = int(umask_text.split()[0], 8)
    else:
        path, umask = found.path, found.umask
    write = Write(path, b"".join(edit.lines), Attributes(), found, call.params["validate"])
    try:
        return await write_file(call, write, umask=umask)
    except ModuleFailed as exc:
        if str(exc) != "failed to validate":
            raise
        said = f"rc:{exc.data.get('exit_status')} error:{exc.data.get('stderr', '')}"
        raise ModuleFailed(f"failed to validate: {said}") from exc
