"""`file` with state link or hard: Ansible's checks and messages, the link replaced atomically
(made under a temporary name next to it, then renamed over it)."""

from __future__ import annotations

import posixpath
import secrets

from fleetfix.engine.hoststep import Outcome
from fleetfix.modules.call import ModuleCall, ModuleFailed, quoted
from fleetfix.modules.remote_files import Attributes, PathStat, ensure_attributes, stat_path


async def symlink(call: ModuleCall, path: str, found: PathStat | None) -> Outcome:
    params = call.params
    src, force = params["src"], params["force"]
    previous = found.state if found is not None else "absent"
    if src is None and params["follow"] and found is not None and found.is_link:
        src = found.lnk_target
    base = path if previous == "directory" else posixpath.dirname(path)
    source_exists, directory_empty = await _look(call, posixpath.join(base, src or ""), path)
    if not force and src is not None and not source_exists:
        raise ModuleFailed(
            "src file does not exist, use 'force=yes' if you really want to create the link:"
            f" {posixpath.join(base, src)}",
            path=path,
            src=src,
        )
    if previous in ("directory", "file", "hard") and not force:
        raise ModuleFailed(f"refusing to convert from {previous} to symlink for {path}", path=path)
    if previous == "directory" and not directory_empty:
        raise ModuleFailed(f"the directory {path} is not empty, refusing to convert it", path=path)
    if previous == "link":
        changed = src is not None and found is not None and found.lnk_target != src
    elif src is None:
        raise ModuleFailed("src is required for creating new symlinks")
    else:
        changed = True
    if changed and not call.dry:
        before = f"rmdir -- {quoted(path)} && " if previous == "directory" else ""
        await _replace(call, path, f"ln -s -- {quoted(str(src))}", before, previous)
    return await _finish(call, path, str(src) if src is not None else None, changed)


async def hardlink(call: ModuleCall, path: str, found: PathStat | None) -> Outcome:
    src, force = call.params["src"], call.params["force"]
    previous = found.state if found is not None else "absent"
    if previous != "hard" and src is None:
        raise ModuleFailed("src is required for creating new hardlinks")
    source = await stat_path(call, str(src), follow=True, checksum=None) if src else None
    if src is not None and source is None:
        raise ModuleFailed("src does not exist", dest=path, src=src)
    same = source is not None and found is not None and found.inode == source.inode
    if previous == "link":
        changed = found is not None and found.lnk_target != src
    elif previous == "hard":
        changed = source is not None and not same
        if changed and not force:
            raise ModuleFailed(
                "Cannot link, different hard link exists at destination", dest=path, src=src
            )
    elif previous == "file":
        changed = True
        if not force:
            raise ModuleFailed(f"Cannot link, {previous} exists at destination", dest=path, src=src)
    elif previous == "directory":
        if same:
            return call.outcome(path=path)
        raise ModuleFailed(
            "Cannot link: different hard link exists at destination", dest=path, src=src
        )
    else:
        changed = True
    if changed and not call.dry:
        await _replace(call, path, f"ln -- {quoted(str(src))}", "", previous)
    return await _finish(call, path, str(src) if src is not None else None, changed)


async def _look(call: ModuleCall, source: str, path: str) -> tuple[bool, bool]:
    """(the link's source exists, seen from the link's directory; path is an empty dir)."""
    out = await call.checked(
        f"if [ -e {quoted(source)} ]; then echo 1; else echo 0; fi;"
        f' if [ -d {quoted(path)} ] && [ -n "$(ls -A -- {quoted(path)})" ];'
        " then echo 0; else echo 1; fi",
        f"look at {path}",
    )
    words = out.split()
    return words[:1] == ["1"], words[1:2] == ["1"]


async def _replace(call: ModuleCall, path: str, link: str, before: str, previous: str) -> None:
    """Make the link at `path`: directly when nothing is there, else under a temporary name
    renamed over what is there."""
    if previous == "absent":
        await call.checked(f"{link} {quoted(path)}", "Error while linking")
        return
    temp = posixpath.join(posixpath.dirname(path), f".{secrets.token_hex(6)}.fleetfix.tmp")
    command = f"{before}{link} {quoted(temp)} && mv -Tf -- {quoted(temp)} {quoted(path)}"
    result = await call.run(command)
    if not result.ok:
        await call.run(f"rm -f -- {quoted(temp)}")
        said = (result.stderr.strip() or result.stdout.strip())[:300]
        raise ModuleFailed(f"Error while replacing: {said}", path=path)


async def _finish(call: ModuleCall, path: str, src: str | None, changed: bool) -> Outcome:
    """Attributes on what the link leads to (follow) or the link itself; Ansible's result."""
    now = await stat_path(call, path, checksum=None)
    if now is None:  # --check, nothing there yet
        return call.outcome(changed=changed, dest=path, src=src)
    target = now
    if call.params["follow"] and now.is_link:
        target = await stat_path(call, path, follow=True, checksum=None) or now
    if not (now.is_link and target is now):
        changed = await ensure_attributes(call, target, Attributes.of(call.params)) or changed
        if changed and not call.dry:
            now = await stat_path(call, path, checksum=None) or now
    return call.outcome(changed=changed, dest=path, src=src, **now.path_info())
