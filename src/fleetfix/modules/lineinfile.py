"""`lineinfile`: read the file over the transport, edit it (`line_edits`, pure), write it back
atomically when the edit changed it; Ansible's checks, messages and return values."""

from __future__ import annotations

import posixpath
from typing import Any

from fleetfix.engine.hoststep import Outcome
from fleetfix.modules.call import ModuleCall, ModuleFailed, quoted
from fleetfix.modules.line_edits import Edit, Wanted, absent, present, read_lines
from fleetfix.modules.remote_files import (
    Attributes,
    PathStat,
    Write,
    attributes_diff,
    backup,
    ensure_attributes,
    expand_home,
    read_bytes,
    stat_path,
    write_file,
)
from fleetfix.results import WARNINGS_KEY

_ATTRS_CHANGED = "ownership, perms or SE linux context changed"


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
    path = await expand_home(call, str(params["path"]))
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
        return call.outcome(msg="file not present", **_warned(wanted))
    lines = read_lines(await read_bytes(call, found.path)) if found is not None else []
    edit = present(lines, wanted) if params["state"] == "present" else absent(lines, wanted)
    return await _apply(call, path, found, edit, _text(lines))


def _warned(wanted: Wanted) -> dict[str, Any]:
    """Ansible's warning for an empty regexp or search_string (it matches every line): in
    the result's `warnings`, and printed."""
    if "" not in (wanted.regexp, wanted.search_string):
        return {}
    name = "regular expression" if wanted.regexp == "" else "search string"
    text = (
        f"The {name} is an empty string, which will match every line in the file. This may"
        " have unintended consequences, such as replacing the last line in the file rather"
        " than appending."
    )
    if wanted.regexp == "":
        text += (
            " If this is desired, use '^' to match every line in the file and avoid this warning."
        )
    return {"warnings": [text], WARNINGS_KEY: [text]}


async def _apply(
    call: ModuleCall, path: str, found: PathStat | None, edit: Edit, before: str
) -> Outcome:
    params = call.params
    extra: dict[str, Any] = {"found": edit.found} if params["state"] == "absent" else {}
    extra.update(_warned(wanted_of(params)))
    # Ansible's diff: the texts only with --diff, the headers always.
    content: dict[str, Any] = {
        "before": before if call.diffing else "",
        "after": _text(edit.lines) if call.diffing else "",
        "before_header": f"{path} (content)",
        "after_header": f"{path} (content)",
    }
    backup_file = ""
    if edit.changed and not call.dry:
        if params["backup"] and found is not None:
            backup_file = await backup(call, found.path)
        found = await _write(call, path, found, edit)
    if found is None:  # --check on a file not there yet: Ansible's diff is the content's alone
        return call.outcome(
            changed=edit.changed, msg=edit.msg, backup=backup_file, diff=content, **extra
        )
    msg, changed = edit.msg, edit.changed
    attrs = Attributes.of(params)
    attributes = {
        **attributes_diff(found, attrs),
        "before_header": f"{path} (file attributes)",
        "after_header": f"{path} (file attributes)",
    }
    if await ensure_attributes(call, found, attrs):
        msg = f"{msg} and {_ATTRS_CHANGED}" if changed else _ATTRS_CHANGED
        changed = True
    return call.outcome(
        changed=changed, msg=msg, backup=backup_file, diff=[content, attributes], **extra
    )


def _text(lines: list[bytes]) -> str:
    return b"".join(lines).decode("utf-8", errors="replace")


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
