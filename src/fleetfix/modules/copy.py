"""`copy` and `template`: bytes from the controller (a file, `content`, a rendered template) or
a file on the node (`remote_src`) put at `dest`, as Ansible's copy action and module do: only
when the sha1 differs, else only the attributes are made right (then `changed` says whether
they were)."""

from __future__ import annotations

import getpass
import hashlib
import json
import os
import posixpath
import socket
import stat
from datetime import datetime
from pathlib import Path
from typing import Any

from fleetfix.engine.hoststep import Outcome
from fleetfix.errors import ConditionError
from fleetfix.modules.call import ModuleCall, ModuleFailed
from fleetfix.modules.remote_files import (
    Attributes,
    Write,
    backup,
    ensure_attributes,
    expand_home,
    stat_path,
    write_file,
)

_NOT_FOUND = (
    " on the Ansible Controller.\nIf you are using a module and expect the file to exist on"
    " the remote, see the remote_src option"
)


def find_source(call: ModuleCall, kind: str, src: str) -> Path:
    """A controller file as Ansible's `_find_needle` finds it: relative to the step's own
    file's directory, then the playbook's, each first in its `kind` (files/, templates/)
    subdirectory; a `tasks/` directory's parent counts too.

    Raises:
        ModuleFailed: in none of them, with Ansible's message listing where it looked.
    """
    if os.path.isabs(src):
        if os.path.isfile(src):
            return Path(src)
        raise ModuleFailed(f"Could not find or access '{src}'{_NOT_FOUND}")
    bases = [Path(str(call.hs.variables["playbook_dir"]))]
    step_file = call.hs.step.position.file
    if step_file and Path(step_file).parent.resolve() != bases[0].resolve():
        bases.insert(0, Path(step_file).parent)
    searched: list[Path] = []
    for base in bases:
        searched += [base / kind / src, base / src]
        if base.name == "tasks":
            searched.append(base.parent / kind / src)
    for candidate in searched:
        if candidate.is_file():
            return candidate
    where = "\n\t".join(str(p) for p in searched)
    raise ModuleFailed(f"Could not find or access '{src}'\nSearched in:\n\t{where}{_NOT_FOUND}")


async def copy(call: ModuleCall) -> Outcome:
    params = call.params
    dest, content = str(params["dest"]), params["content"]
    if params["remote_src"]:
        return await _remote_copy(call, str(params["src"]), dest)
    if content is not None:
        if dest.endswith("/"):
            raise ModuleFailed("can not use content with a dir as dest")
        text = json.dumps(content) if isinstance(content, dict | list) else str(content)
        return await deliver(call, text.encode(), name=None, shown=None)
    source = find_source(call, "files", str(params["src"]))
    if source.is_dir():
        raise ModuleFailed(f"copying directories is not supported; copy files: {source}")
    return await deliver(call, source.read_bytes(), name=source.name, shown=str(source))


async def template(call: ModuleCall) -> Outcome:
    params = call.params
    written = str(params["src"])
    source = find_source(call, "templates", written)
    variables = {
        **call.hs.variables,
        **_template_vars(written, source, str(params["dest"]), call.hs.variables),
    }
    try:
        text = source.read_text(encoding="utf-8")
        rendered = call.hs.ctx.templar.render_file(
            text,
            variables,
            name=str(source),
            trim_blocks=params["trim_blocks"],
            lstrip_blocks=params["lstrip_blocks"],
            newline_sequence=params["newline_sequence"],
        )
    except (OSError, UnicodeDecodeError) as exc:
        raise ModuleFailed(f"could not read template {source}: {exc}") from exc
    except ConditionError as exc:
        raise ModuleFailed(f"{source}: {exc}") from exc
    data = rendered.encode(params["output_encoding"])
    return await deliver(call, data, name=source.name, shown=str(source))


def _template_vars(
    written: str, source: Path, dest: str, variables: dict[str, Any]
) -> dict[str, Any]:
    """Ansible's template_* variables (and ansible_managed unless the user set it)."""
    found = source.stat()
    extra: dict[str, Any] = {
        "template_host": socket.gethostname(),
        "template_path": written,
        "template_mtime": datetime.fromtimestamp(found.st_mtime),
        "template_uid": getpass.getuser(),
        "template_run_date": datetime.now(),
        "template_destpath": dest,
        "template_fullpath": str(source.resolve()),
    }
    if "ansible_managed" not in variables:
        extra["ansible_managed"] = "Ansible managed"
    return extra


def _mode_of(call: ModuleCall, source: Path | None) -> Attributes:
    """The attributes asked for; mode 'preserve' is the controller file's mode."""
    attrs = Attributes.of(call.params)
    if attrs.mode == "preserve":
        if source is None:
            raise ModuleFailed("mode: preserve needs a src file")
        return Attributes(f"0{stat.S_IMODE(source.stat().st_mode):03o}", attrs.owner, attrs.group)
    return attrs


async def deliver(call: ModuleCall, data: bytes, *, name: str | None, shown: str | None) -> Outcome:
    """Put `data` at dest like Ansible's copy action: a directory dest gets `name` in it; an
    existing file is left alone without force; same sha1 -> only the attributes."""
    params = call.params
    dest = await expand_home(call, str(params["dest"]))
    attrs = _mode_of(call, Path(shown) if shown else None)
    dest_file = posixpath.join(dest, name) if dest.endswith("/") and name else dest
    found = await stat_path(call, dest_file, follow=params["follow"])
    if found is not None and found.is_dir:
        if name is None:
            raise ModuleFailed("can not use content with a dir as dest")
        dest_file = posixpath.join(dest_file, name)
        found = await stat_path(call, dest_file, follow=params["follow"])
    if found is not None and not params["force"]:
        return call.outcome(dest=dest, src=shown)
    checksum = hashlib.sha1(data, usedforsecurity=False).hexdigest()
    if found is not None and found.checksum == checksum and not found.is_link:
        changed = await ensure_attributes(call, found, attrs)
        if changed and not call.dry:
            found = await stat_path(call, found.path) or found
        return call.outcome(
            changed=changed, dest=found.path, path=found.path, checksum=checksum,
            **found.path_info(),
        )  # fmt: skip
    if call.dry:
        return call.outcome(changed=True, dest=dest_file, checksum=checksum)
    return await _write(call, Write(dest_file, data, attrs, found, params["validate"]), shown)


async def _write(
    call: ModuleCall, write: Write, shown: str | None, *, checksum: str | None = None
) -> Outcome:
    dest = write.dest
    if write.current is None:
        parent = posixpath.dirname(dest) or "."
        above = await stat_path(call, parent, follow=True, checksum=None)
        if above is None or not above.is_dir:
            raise ModuleFailed(f"Destination directory {parent} does not exist")
        umask = above.umask
    else:
        umask = write.current.umask
    backup_file = await backup(call, dest) if call.params["backup"] and write.current else None
    after = await write_file(call, write, umask=umask)
    result: dict[str, Any] = {"dest": dest, "src": shown}
    if write.from_path is None:
        result["md5sum"] = hashlib.md5(write.data, usedforsecurity=False).hexdigest()
        checksum = hashlib.sha1(write.data, usedforsecurity=False).hexdigest()
    result.update(checksum=checksum, **after.path_info())
    if backup_file:
        result["backup_file"] = backup_file
    return call.outcome(changed=True, **result)


async def _remote_copy(call: ModuleCall, src: str, dest: str) -> Outcome:
    """remote_src: a file already on the node copied there (its mode kept, as Ansible's
    copystat does), only when the sha1 differs."""
    source = await stat_path(call, src, follow=True)
    if source is None:
        raise ModuleFailed(f"Source {src} not found")
    if not source.is_reg:
        raise ModuleFailed(f"Cannot copy invalid source '{src}': not a file")
    dest_file = dest
    found = await stat_path(call, dest_file, follow=call.params["follow"])
    if found is not None and found.is_dir:
        dest_file = posixpath.join(dest, posixpath.basename(src))
        found = await stat_path(call, dest_file, follow=call.params["follow"])
    if found is not None and not call.params["force"]:
        return call.outcome(msg="file already exists", src=src, dest=dest_file)
    attrs = Attributes.of(call.params)
    if found is not None and found.checksum == source.checksum and not found.is_link:
        changed = await ensure_attributes(call, found, attrs)
        if changed and not call.dry:
            found = await stat_path(call, found.path) or found
        return call.outcome(
            changed=changed, dest=dest_file, src=src, checksum=source.checksum,
            **found.path_info(),
        )  # fmt: skip
    if call.dry:
        return call.outcome(changed=True, dest=dest_file, src=src, checksum=source.checksum)
    kept = Attributes(attrs.mode or f"{source.perms:04o}", attrs.owner, attrs.group)
    write = Write(dest_file, b"", kept, found, call.params["validate"], from_path=src)
    return await _write(call, write, src, checksum=source.checksum)
