"""Files on the node through the transport: stat a path, read it, write it atomically, set its
mode and owner. Only POSIX sh and GNU coreutils on the node; everything that decides is here on
the controller (`parse_stat`, `attribute_words`), so the module code reads like Ansible's.

A write goes to a temporary file next to the destination (same filesystem, so the final `mv`
is atomic), in base64 chunks of at most 48 KiB per command: one SSH command is one argument
of `sh -c`, which Linux limits to 128 KiB. The file gets its mode and owner before the `mv`,
so it never shows with the wrong permissions.
"""

from __future__ import annotations

import base64
import posixpath
import re
import secrets
import stat
from dataclasses import dataclass
from typing import Any

from fleetfix.modules.call import ModuleCall, ModuleFailed, quoted
from fleetfix.modules.modes import ModeError, octal, target_mode

CHUNK = 48 * 1024
"""Base64 characters per write command (a multiple of 4: each chunk decodes on its own)."""

_FIELDS = "%f\\n%u\\n%g\\n%s\\n%i\\n%d\\n%h\\n%.9X\\n%.9Y\\n%.9Z\\n%b\\n%o\\n%t\\n%T\\n%U\\n%G\\n"
_ABSENT = "absent"
_NO_NAME = "UNKNOWN"  # what stat prints for a uid/gid without a name
FILE_ATTRIBUTES = {
    "A": "noatime",
    "a": "append",
    "c": "compressed",
    "C": "nocow",
    "d": "nodump",
    "D": "dirsync",
    "e": "extents",
    "E": "encrypted",
    "h": "blocksize",
    "i": "immutable",
    "I": "indexed",
    "j": "journalled",
    "N": "inline",
    "s": "zero",
    "S": "synchronous",
    "t": "notail",
    "T": "blockroot",
    "u": "undelete",
    "X": "compressedraw",
    "Z": "compresseddirty",
}


@dataclass(frozen=True, slots=True)
class PathStat:
    """What `stat_script` found about an existing path."""

    path: str
    st_mode: int
    uid: int
    gid: int
    size: int
    inode: int
    dev: int
    nlink: int
    atime: float
    mtime: float
    ctime: float
    blocks: int
    block_size: int
    device_type: int
    owner: str | None
    group: str | None
    readable: bool
    writeable: bool
    executable: bool
    umask: int
    lnk_source: str | None = None
    lnk_target: str | None = None
    checksum: str | None = None
    mime: tuple[str, str] | None = None
    lsattr: tuple[str, str] | None = None
    """(version, flags) from `lsattr -vd`, None when it could not tell (tmpfs, links)."""

    @property
    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.st_mode)

    @property
    def is_reg(self) -> bool:
        return stat.S_ISREG(self.st_mode)

    @property
    def is_link(self) -> bool:
        return stat.S_ISLNK(self.st_mode)

    @property
    def perms(self) -> int:
        return stat.S_IMODE(self.st_mode)

    @property
    def state(self) -> str:
        """Ansible's file state of the path: link, directory, hard (a file with more than one
        name) or file."""
        if self.is_link:
            return "link"
        if self.is_dir:
            return "directory"
        return "hard" if self.nlink > 1 else "file"

    def path_info(self) -> dict[str, Any]:
        """What Ansible adds to a file module's result about its path (`add_path_info`)."""
        return {
            "uid": self.uid,
            "gid": self.gid,
            "owner": self.owner if self.owner is not None else str(self.uid),
            "group": self.group if self.group is not None else str(self.gid),
            "mode": octal(self.st_mode),
            "state": self.state,
            "size": self.size,
        }

    def stat_result(self, *, mime: bool, attributes: bool) -> dict[str, Any]:
        """The `stat` module's `stat` dictionary."""
        mode = self.st_mode
        found: dict[str, Any] = {
            "exists": True,
            "path": self.path,
            "mode": f"{stat.S_IMODE(mode):04o}",
            "isdir": stat.S_ISDIR(mode),
            "ischr": stat.S_ISCHR(mode),
            "isblk": stat.S_ISBLK(mode),
            "isreg": stat.S_ISREG(mode),
            "isfifo": stat.S_ISFIFO(mode),
            "islnk": stat.S_ISLNK(mode),
            "issock": stat.S_ISSOCK(mode),
            "uid": self.uid,
            "gid": self.gid,
            "size": self.size,
            "inode": self.inode,
            "dev": self.dev,
            "nlink": self.nlink,
            "atime": self.atime,
            "mtime": self.mtime,
            "ctime": self.ctime,
            **{f"{what}{who}": bool(mode & bit) for what, who, bit in _PERM_FLAGS},
            "isuid": bool(mode & stat.S_ISUID),
            "isgid": bool(mode & stat.S_ISGID),
            "blocks": self.blocks,
            "block_size": self.block_size,
            "device_type": self.device_type,
            "readable": self.readable,
            "writeable": self.writeable,
            "executable": self.executable,
        }
        if self.is_link:
            found.update(lnk_source=self.lnk_source, lnk_target=self.lnk_target)
        if self.owner is not None:
            found["pw_name"] = self.owner
        if self.group is not None:
            found["gr_name"] = self.group
        if self.checksum is not None:
            found["checksum"] = self.checksum
        if mime:
            found["mimetype"], found["charset"] = self.mime or ("unknown", "unknown")
        if attributes:
            version, flags = self.lsattr or (None, "")
            found.update(
                version=version,
                attr_flags=flags,
                attributes=[FILE_ATTRIBUTES[f] for f in flags if f in FILE_ATTRIBUTES],
            )
        return found


_PERM_FLAGS = tuple(
    (what, who, getattr(stat, f"S_I{flag}{cls}"))
    for what, flag in (("w", "W"), ("r", "R"), ("x", "X"))
    for who, cls in (("usr", "USR"), ("grp", "GRP"), ("oth", "OTH"))
)


def stat_script(
    path: str,
    *,
    follow: bool = False,
    checksum: str | None = "sha1",
    mime: bool = False,
    attributes: bool = False,
) -> str:
    """A command printing what `parse_stat` reads about `path` (one round trip)."""
    p = '"$p"'
    exists = f"[ -e {p} ]" if follow else f"[ -e {p} ] || [ -L {p} ]"
    regular = f"[ -f {p} ]" if follow else f"[ -f {p} ] && [ ! -L {p} ]"
    lines = [
        f"p={quoted(path)}",
        f"if ! {{ {exists}; }}; then echo {_ABSENT}; exit 0; fi",
        "echo present",
        f"stat {'-L ' if follow else ''}--printf '{_FIELDS}' -- {p} || exit 1",
        f'for t in r w x; do if [ -"$t" {p} ]; then echo 1; else echo 0; fi; done',
        "umask",
        f"if [ -L {p} ]; then readlink -m -- {p}; readlink -- {p}; else echo; echo; fi",
        f"if [ -n {quoted(checksum or '')} ] && {regular} && [ -r {p} ]; then"
        f" {checksum or 'sha1'}sum < {p} | cut -d' ' -f1; else echo; fi",
        f"if {'true' if mime else 'false'} && command -v file >/dev/null 2>&1; then"
        f" file -b --mime-type --mime-encoding -- {p} 2>/dev/null || echo; else echo; fi",
        f"if {'true' if attributes else 'false'}; then"
        f' a=$(lsattr -vd -- {p} 2>/dev/null) || a=""; printf "%s\\n" "$a"; else echo; fi',
    ]
    return "\n".join(lines)


def parse_stat(path: str, text: str) -> PathStat | None:
    """What `stat_script` printed: None when the path does not exist.

    Raises:
        ValueError: output that is not what the script prints.
    """
    lines = text.split("\n")
    if lines[0] == _ABSENT:
        return None
    if lines[0] != "present" or len(lines) < 26:
        raise ValueError(f"unexpected stat output: {text[:200]!r}")
    fields = lines[1:17]
    ints = [0, *(int(value) for value in fields[1:7])]  # [0]: the mode, in hex
    major, minor = int(fields[12], 16), int(fields[13], 16)
    return PathStat(
        path=path,
        st_mode=int(fields[0], 16),
        uid=ints[1],
        gid=ints[2],
        size=ints[3],
        inode=ints[4],
        dev=ints[5],
        nlink=ints[6],
        atime=float(fields[7]),
        mtime=float(fields[8]),
        ctime=float(fields[9]),
        blocks=int(fields[10]),
        block_size=int(fields[11]),
        device_type=_makedev(major, minor),
        owner=None if fields[14] == _NO_NAME else fields[14],
        group=None if fields[15] == _NO_NAME else fields[15],
        readable=lines[17] == "1",
        writeable=lines[18] == "1",
        executable=lines[19] == "1",
        umask=int(lines[20], 8),
        lnk_source=lines[21] or None,
        lnk_target=lines[22] or None,
        checksum=lines[23] or None,
        mime=_mime(lines[24]),
        lsattr=_lsattr(lines[25]),
    )


def _makedev(major: int, minor: int) -> int:
    """glibc's makedev (os.makedev), for device numbers above 8 bits of minor."""
    return (
        ((major & 0xFFFFF000) << 32)
        | ((major & 0xFFF) << 8)
        | ((minor & 0xFFFFFF00) << 12)
        | (minor & 0xFF)
    )


def _mime(line: str) -> tuple[str, str] | None:
    kind, _, charset = line.partition(";")
    if not kind.strip() or "=" not in charset:
        return None
    return kind.strip(), charset.split("=", 1)[1].strip()


def _lsattr(line: str) -> tuple[str, str] | None:
    words = line.split()
    if len(words) < 3:
        return None
    return words[0], words[1].replace("-", "")


_TILDE = re.compile(r"~[A-Za-z0-9._-]*")
"""A leading `~` or `~USER` (a user name the shell expands, nothing it would run)."""


async def expand_home(call: ModuleCall, path: str) -> str:
    """`path` with a leading `~` or `~USER` expanded by the node's shell, as Ansible expands
    a module's path arguments and the copy action its dest; any other path as it is."""
    head, sep, rest = path.partition("/")
    if _TILDE.fullmatch(head) is None:
        return path
    home = (await call.checked(f"printf '%s\\n' {head}", f"expand {head}")).rstrip("\n")
    return f"{home}{sep}{rest}" if home and not home.startswith("~") else path


async def stat_path(
    call: ModuleCall,
    path: str,
    *,
    follow: bool = False,
    checksum: str | None = "sha1",
    mime: bool = False,
    attributes: bool = False,
) -> PathStat | None:
    """Stat a path on the node; None if it is not there.

    Raises:
        ModuleFailed: stat failed (a parent directory not searchable, ...).
    """
    script = stat_script(path, follow=follow, checksum=checksum, mime=mime, attributes=attributes)
    return _parsed(path, await call.checked(script, f"stat {path}"))


def _parsed(path: str, text: str) -> PathStat | None:
    try:
        return parse_stat(path, text)
    except ValueError as exc:
        raise ModuleFailed(f"stat {path}: {exc}") from exc


async def read_bytes(call: ModuleCall, path: str) -> bytes:
    """A file's bytes, carried as base64.

    Raises:
        ModuleFailed: it cannot be read.
    """
    text = await call.checked(f"base64 < {quoted(path)}", f"read {path}")
    return base64.b64decode(text)


def write_commands(temp: str, data: bytes) -> list[str]:
    """Commands creating `temp` (only if it does not exist; mode from the umask, as a new file
    gets) with `data`, each under CHUNK characters of base64."""
    encoded = base64.b64encode(data).decode("ascii")
    create = f"(set -C; : > {quoted(temp)})"
    chunks = [encoded[i : i + CHUNK] for i in range(0, len(encoded), CHUNK)] or [""]
    commands = []
    for index, chunk in enumerate(chunks):
        append = f"printf %s {chunk} | base64 -d >> {quoted(temp)}" if chunk else ":"
        commands.append(f"{create} && {append}" if index == 0 else append)
    return commands


_PAYLOAD = re.compile(r"printf %s ([A-Za-z0-9+/=]+) \|")


def without_payload(command: str) -> str:
    """A write command as the journal and console show it: the content's size, not the
    content (a file may hold a secret; base64 would slip past redaction)."""
    return _PAYLOAD.sub(lambda m: f"printf %s <{len(m.group(1))} base64 characters> |", command)


def temp_name(dest: str) -> str:
    """A fresh name next to `dest`, keeping its suffix (validators may look at it)."""
    head, tail = posixpath.split(dest)
    suffix = posixpath.splitext(tail)[1]
    return posixpath.join(head, f".{tail}.fleetfix-{secrets.token_hex(6)}{suffix}")


@dataclass(frozen=True, slots=True)
class Attributes:
    """The mode (as written: octal or symbolic), owner and group a module was given."""

    mode: Any = None
    owner: str | None = None
    group: str | None = None

    @classmethod
    def of(cls, params: dict[str, Any]) -> Attributes:
        owner, group = params.get("owner"), params.get("group")
        return cls(params.get("mode"), owner and str(owner), group and str(group))


def wanted_mode(attrs: Attributes, current: int, *, is_dir: bool, umask: int) -> int | None:
    """The permission bits `attrs.mode` asks for, None when no mode was given.

    Raises:
        ModuleFailed: a mode that is neither octal nor symbolic.
    """
    if attrs.mode is None:
        return None
    try:
        return target_mode(attrs.mode, current, is_dir=is_dir, umask=umask)
    except ModeError as exc:
        raise ModuleFailed(str(exc), details=exc.details) from exc


def attribute_words(st: PathStat, attrs: Attributes) -> list[str]:
    """The chown/chgrp/chmod commands (without the path) that give `st` the wanted
    attributes; none when it has them."""
    words = []
    owner, group = attrs.owner, attrs.group
    if owner is not None and not _same(owner, st.uid, st.owner):
        words.append(f"chown {quoted(owner)}")
    if group is not None and not _same(group, st.gid, st.group):
        words.append(f"chgrp {quoted(group)}")
    mode = wanted_mode(attrs, st.perms, is_dir=st.is_dir, umask=st.umask)
    if mode is not None and mode != st.perms and not st.is_link:
        words.append(f"chmod {mode:04o}")
    return words


def attributes_diff(st: PathStat, attrs: Attributes) -> dict[str, dict[str, Any]]:
    """Ansible's file-attributes diff (set_fs_attributes_if_different): `before` and `after`
    of each of owner, group and mode that differs; empty when none does. An owner or group
    given by name is shown by name (Ansible shows the number it resolves the name to)."""
    before: dict[str, Any] = {}
    after: dict[str, Any] = {}
    owner, group = attrs.owner, attrs.group
    if owner is not None and not _same(owner, st.uid, st.owner):
        before["owner"], after["owner"] = st.uid, int(owner) if owner.isdigit() else owner
    if group is not None and not _same(group, st.gid, st.group):
        before["group"], after["group"] = st.gid, int(group) if group.isdigit() else group
    mode = wanted_mode(attrs, st.perms, is_dir=st.is_dir, umask=st.umask)
    if mode is not None and mode != st.perms and not st.is_link:
        before["mode"], after["mode"] = f"0{st.perms:03o}", f"0{mode:03o}"
    return {"before": before, "after": after} if before else {}


def _same(wanted: str, number: int, name: str | None) -> bool:
    return int(wanted) == number if wanted.isdigit() else wanted == name


async def ensure_attributes(call: ModuleCall, st: PathStat, attrs: Attributes) -> bool:
    """Give an existing path the wanted owner, group and mode (not in --check); whether any
    differed (Ansible's set_fs_attributes_if_different)."""
    words = attribute_words(st, attrs)
    if words and not call.dry:
        path = quoted(st.path)
        await call.checked(
            " && ".join(f"{word} -- {path}" for word in words), f"set attributes of {st.path}"
        )
    return bool(words)


async def backup(call: ModuleCall, path: str) -> str:
    """Copy `path` (mode, owner, times kept) to Ansible's backup name; that name."""
    name = f"{quoted(path)}.$$.$(date +%Y-%m-%d@%H:%M:%S)~"
    out = await call.checked(
        f'b={name}; cp -p -- {quoted(path)} "$b" && printf "%s\\n" "$b"', f"back up {path}"
    )
    return out.strip()


@dataclass(frozen=True, slots=True)
class Write:
    """Bytes to put at `dest` (existing: `current`), with the attributes it should end with."""

    dest: str
    data: bytes
    attrs: Attributes
    current: PathStat | None
    validate: str | None = None
    from_path: str | None = None
    """A file on the node to copy instead of `data` (copy's remote_src)."""


async def write_file(call: ModuleCall, write: Write, *, umask: int) -> PathStat:
    """Write the bytes atomically (temp file, attributes, optional validation, `mv`); the
    destination's stat afterwards. An existing destination's mode and owner are kept unless
    `attrs` says otherwise, as Ansible's atomic_move keeps them.

    Raises:
        ModuleFailed: a command failed (the temp file is removed) or validation failed.
    """
    temp = temp_name(write.dest)
    try:
        if write.from_path is not None:
            commands = [
                f"(set -C; : > {quoted(temp)}) && cat -- {quoted(write.from_path)} > {quoted(temp)}"
            ]
        else:
            commands = write_commands(temp, write.data)
        for command in commands:
            await call.checked(command, f"write {write.dest}", shown=without_payload(command))
        await call.checked(_finish(temp, write, umask), f"write {write.dest}")
        if write.validate:
            await _validate(call, write.validate, temp)
        moved = f"mv -f -- {quoted(temp)} {quoted(write.dest)} && {stat_script(write.dest)}"
        after = _parsed(write.dest, await call.checked(moved, f"write {write.dest}"))
    except ModuleFailed:
        await call.run(f"rm -f -- {quoted(temp)}")
        raise
    if after is None:
        raise ModuleFailed(f"write {write.dest}: gone after writing")
    return after


def _finish(temp: str, write: Write, umask: int) -> str:
    """Mode and owner of the temp file before it takes the destination's place."""
    current = write.current
    base = current.perms if current is not None and not current.is_link else 0o666 & ~umask
    mode = wanted_mode(write.attrs, base, is_dir=False, umask=umask)
    words = [f"chmod {(base if mode is None else mode):04o} -- {quoted(temp)}"]
    if current is not None and not current.is_link:
        words.append(f"{{ chown {current.uid}:{current.gid} -- {quoted(temp)} 2>/dev/null || :; }}")
    if write.attrs.owner is not None:
        words.append(f"chown {quoted(write.attrs.owner)} -- {quoted(temp)}")
    if write.attrs.group is not None:
        words.append(f"chgrp {quoted(write.attrs.group)} -- {quoted(temp)}")
    return " && ".join(words)


async def _validate(call: ModuleCall, validate: str, temp: str) -> None:
    if "%s" not in validate:
        raise ModuleFailed(f"validate must contain %s: {validate}")
    result = await call.run(validate.replace("%s", quoted(temp)))
    if result.rc != 0 or result.timed_out:
        raise ModuleFailed(
            "failed to validate", exit_status=result.rc, stdout=result.stdout, stderr=result.stderr
        )
