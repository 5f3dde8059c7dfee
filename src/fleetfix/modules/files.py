"""`stat`, `slurp` and `file` (states file, directory, absent, touch; links in `links.py`):
Ansible's arguments, messages and return values, over the transport."""

from __future__ import annotations

import posixpath
from dataclasses import replace
from typing import Any

from fleetfix.engine.hoststep import Outcome
from fleetfix.modules import links
from fleetfix.modules.call import ModuleCall, ModuleFailed, quoted
from fleetfix.modules.remote_files import (
    Attributes,
    PathStat,
    attribute_words,
    ensure_attributes,
    expand_home,
    stat_path,
    wanted_mode,
)

_BATCH = 48 * 1024
"""Characters of paths per chmod/chown command of a recursive change."""


async def stat(call: ModuleCall) -> Outcome:
    params = call.params
    path = await expand_home(call, str(params["path"]))
    found = await stat_path(
        call,
        path,
        follow=params["follow"],
        checksum=params["checksum_algorithm"] if params["get_checksum"] else None,
        mime=params["get_mime"],
        attributes=params["get_attributes"],
    )
    if found is None:
        return call.outcome(stat={"exists": False})
    return call.outcome(
        stat=found.stat_result(mime=params["get_mime"], attributes=params["get_attributes"])
    )


_SLURP_FAILURES = {
    3: "Source is a directory and must be a file: {}",
    4: "File not found: {}",
    5: "File is not readable: {}",
}


async def slurp(call: ModuleCall) -> Outcome:
    source = str(call.params["src"])
    p = quoted(source)
    result = await call.run(
        f"if [ -d {p} ]; then exit 3; elif [ ! -e {p} ]; then exit 4;"
        f" elif [ ! -r {p} ]; then exit 5; fi; base64 < {p}"
    )
    if result.rc != 0 or result.timed_out:
        said = _SLURP_FAILURES.get(result.rc or 0, "Unable to slurp file: {}")
        raise ModuleFailed(said.format(source))
    content = "".join(result.stdout.split())
    return call.outcome(content=content, source=source, encoding="base64")


async def file(call: ModuleCall) -> Outcome:
    params = call.params
    path, src, state = str(params["path"]), params["src"], params["state"]
    path = await expand_home(call, path)
    found = await stat_path(call, path, checksum=None)
    if state not in ("link", "absent") and found is not None and found.is_dir and src:
        path = posixpath.join(path, posixpath.basename(str(src)))
        found = await stat_path(call, path, checksum=None)
    previous = found.state if found is not None else "absent"
    if state is None:
        state = previous if previous != "absent" else "directory" if params["recurse"] else "file"
    if params["recurse"] and state != "directory":
        raise ModuleFailed("recurse option requires state to be 'directory'", path=path)
    if src and state not in ("link", "hard"):
        raise ModuleFailed("src option requires state to be 'link' or 'hard'", path=path)
    if state == "absent":
        return await _absent(call, path, found)
    if state == "touch":
        return await _touch(call, path, found)
    if state == "link":
        return await links.symlink(call, path, found)
    if state == "hard":
        return await links.hardlink(call, path, found)
    found = await _followed(call, found) if params["follow"] else found
    if state == "directory":
        return await _directory(call, path, found)
    return await _file(call, path, found)


async def _followed(call: ModuleCall, found: PathStat | None) -> PathStat | None:
    """A link's target instead of the link (file's `follow`), as an existing path or None."""
    if found is None or not found.is_link or not found.lnk_source:
        return found
    target = await stat_path(call, found.lnk_source, checksum=None)
    return target if target is not None else None


async def _file(call: ModuleCall, path: str, found: PathStat | None) -> Outcome:
    if found is not None:
        path = found.path
    previous = found.state if found is not None else "absent"
    if found is None or previous not in ("file", "hard"):
        raise ModuleFailed(
            f"file ({path}) is {previous}, cannot continue", path=path, state=previous
        )
    changed = await ensure_attributes(call, found, Attributes.of(call.params))
    return await _with_info(call, changed, found, path=path)


async def _with_info(call: ModuleCall, changed: bool, found: PathStat, **data: Any) -> Outcome:
    """The outcome with Ansible's path info, read again when something changed on the node."""
    if changed and not call.dry:
        found = await stat_path(call, found.path, checksum=None) or found
    return call.outcome(changed=changed, **data, **found.path_info())


async def _absent(call: ModuleCall, path: str, found: PathStat | None) -> Outcome:
    if found is None:
        return call.outcome(path=path, state="absent")
    if not call.dry:
        await call.checked(f"rm -rf -- {quoted(path)}", f"remove {path}")
    return call.outcome(changed=True, path=path, state="absent")


async def _touch(call: ModuleCall, path: str, found: PathStat | None) -> Outcome:
    """Ansible's touch always changes: it sets the times to now."""
    if call.dry:
        if found is None:
            return call.outcome(changed=True, dest=path)
        return call.outcome(changed=True, dest=path, **found.path_info())
    created = found is None
    if found is None:
        await call.checked(f": >> {quoted(path)}", "Error, could not touch target.")
        found = await stat_path(call, path, checksum=None)
    if found is None:
        raise ModuleFailed("Error, could not touch target.", path=path)
    try:
        await ensure_attributes(call, found, Attributes.of(call.params))
    except ModuleFailed:
        if created:
            await call.run(f"rm -f -- {quoted(path)}")
        raise
    await call.checked(f"touch -c -- {quoted(path)}", f"touch {path}")
    return await _with_info(call, True, found, dest=path)


async def _directory(call: ModuleCall, path: str, found: PathStat | None) -> Outcome:
    attrs = Attributes.of(call.params)
    if found is None:
        if call.dry:
            return call.outcome(changed=True, path=path)
        changed = await _make_directories(call, path, attrs)
        made = await stat_path(call, path, checksum=None)
        if made is None:
            raise ModuleFailed(f"There was an issue creating {path} as requested", path=path)
        return call.outcome(changed=changed, path=path, **made.path_info())
    path = found.path
    if not found.is_dir:
        raise ModuleFailed(f"{path} already exists as a {found.state}", path=path)
    changed = await ensure_attributes(call, found, attrs)
    if call.params["recurse"]:
        changed = await _recurse(call, found, attrs) or changed
    return await _with_info(call, changed, found, path=path)


async def _make_directories(call: ModuleCall, path: str, attrs: Attributes) -> bool:
    """mkdir each missing component, each given the attributes, as Ansible does."""
    parts = [part for part in path.strip("/").split("/") if part]
    prefix = "/" if path.startswith("/") else ""
    components = [prefix + "/".join(parts[: i + 1]) for i in range(len(parts))]
    words = " ".join(quoted(c) for c in components)
    out = await call.checked(
        f'umask; for d in {words}; do if [ ! -d "$d" ]; then mkdir -- "$d" || exit 1;'
        ' printf "%s\\n" "$d"; fi; done',
        f"There was an issue creating {path} as requested",
    )
    lines = out.splitlines()
    umask, created = int(lines[0], 8), lines[1:]
    mode = wanted_mode(attrs, 0o777 & ~umask, is_dir=True, umask=umask)
    commands = [] if mode is None else [f"chmod {mode:04o}"]
    commands += [f"chown {quoted(attrs.owner)}"] if attrs.owner is not None else []
    commands += [f"chgrp {quoted(attrs.group)}"] if attrs.group is not None else []
    for command in commands:
        for batch in _batches([quoted(c) for c in created]):
            await call.checked(f"{command} -- {batch}", f"set attributes under {path}")
    return bool(created)


async def _recurse(call: ModuleCall, top: PathStat, attrs: Attributes) -> bool:
    """recurse: the attributes on everything under `top` (symbolic modes per entry, links
    left alone); whether anything differed."""
    out = await call.checked(
        f"umask; find {quoted(top.path)} -mindepth 1 ! -type l"
        " -exec stat --printf '%f %u %g %U %G %n\\n' -- {} +",
        f"list {top.path}",
    )
    lines = out.splitlines()
    umask = int(lines[0], 8)
    by_words: dict[str, list[str]] = {}
    for line in lines[1:]:
        raw_mode, uid, gid, owner, group, name = line.split(" ", 5)
        entry = replace(
            top,
            path=name,
            st_mode=int(raw_mode, 16),
            uid=int(uid),
            gid=int(gid),
            owner=owner,
            group=group,
            umask=umask,
        )
        for word in attribute_words(entry, attrs):
            by_words.setdefault(word, []).append(name)
    if not call.dry:
        for word, names in by_words.items():
            for batch in _batches([quoted(n) for n in names]):
                await call.checked(f"{word} -- {batch}", f"set attributes under {top.path}")
    return bool(by_words)


def _batches(words: list[str]) -> list[str]:
    """Words joined into command tails of at most _BATCH characters."""
    batches: list[list[str]] = [[]]
    size = 0
    for word in words:
        if batches[-1] and size + len(word) > _BATCH:
            batches.append([])
            size = 0
        batches[-1].append(word)
        size += len(word) + 1
    return [" ".join(batch) for batch in batches if batch]


async def tempfile(call: ModuleCall) -> Outcome:
    """Ansible's tempfile: a new file or directory from `mktemp`, always changed, its path
    returned. Ansible's module has no check mode: under --check it is skipped, as there."""
    params = call.params
    prefix, suffix = str(params["prefix"]), str(params["suffix"])
    for name, value in (("prefix", prefix), ("suffix", suffix)):
        if value and value != posixpath.basename(value):
            raise ModuleFailed(f"{name} must be a valid file name component, got {value!r}")
    if call.dry:
        outcome = call.outcome(message="remote module (tempfile) does not support check mode")
        outcome.skipped = True
        return outcome
    where = f"--tmpdir={quoted(str(params['path']))}" if params["path"] else "--tmpdir"
    kind = "-d " if params["state"] == "directory" else ""
    template = quoted(f"{prefix}XXXXXXXX")
    made = await call.checked(
        f"mktemp {kind}{where} --suffix={quoted(suffix)} -- {template}", "mktemp failed"
    )
    return call.outcome(changed=True, path=made.strip())
