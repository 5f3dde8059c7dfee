"""File modes as Ansible's file modules take them: 0o644, '0644', '644', or symbolic 'u+x,go-w'.

Pure: the mode a path should end up with is computed on the controller from its current mode
(symbolic modes are relative to it, `X` depends on whether it is a directory) and the node's
umask (a symbolic mode without users, like '+x', leaves the umask's bits alone, as chmod does).
"""

from __future__ import annotations

import re
import stat
from typing import Any

PERM_BITS = 0o7777
_OPERATOR = re.compile(r"[+=-]")
_USERS = re.compile(r"^[ugo]+$")
_PERMS = re.compile(r"^[rwxXstugo]*$")
_ANY_X = stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH
_CLASS_BITS = {  # what `=` clears for each user class
    "u": stat.S_IRWXU | stat.S_ISUID,
    "g": stat.S_IRWXG | stat.S_ISGID,
    "o": stat.S_IRWXO | stat.S_ISVTX,
}
_SHIFT = {"u": 6, "g": 3, "o": 0}
_SPECIAL = {"u": ("s", stat.S_ISUID), "g": ("s", stat.S_ISGID), "o": ("t", stat.S_ISVTX)}


class ModeError(ValueError):
    """A mode that is neither octal nor symbolic; the message is Ansible's."""

    def __init__(self, message: str, details: str) -> None:
        super().__init__(message)
        self.details = details


def target_mode(mode: Any, current: int, *, is_dir: bool, umask: int = 0o022) -> int:
    """The permission bits a path gets for `mode` (as written) given its `current` ones.

    Raises:
        ModeError: not an octal number nor a symbolic mode, or more than permission bits.
    """
    if isinstance(mode, int) and not isinstance(mode, bool):
        wanted = mode
    else:
        text = str(mode)
        try:
            wanted = int(text, 8)
        except ValueError:
            try:
                wanted = symbolic_mode(text, current, is_dir=is_dir, umask=umask)
            except ValueError as exc:
                raise ModeError("mode must be in octal or symbolic form", str(exc)) from exc
    if wanted != stat.S_IMODE(wanted):
        raise ModeError("Invalid mode supplied, only permission info is allowed", str(wanted))
    return wanted


def symbolic_mode(text: str, current: int, *, is_dir: bool, umask: int = 0o022) -> int:
    """chmod's symbolic modes as Ansible applies them ('u=rw-x+X,g=r-x+X,o=r-x+X').

    Raises:
        ValueError: a clause with unknown users or permissions.
    """
    mode = stat.S_IMODE(current)
    for clause in text.split(","):
        parts = _OPERATOR.split(clause)
        operators = _OPERATOR.findall(clause)
        users = parts.pop(0)
        use_umask = users == ""
        if users in ("", "a"):
            users = "ugo"
        if not _USERS.match(users) or not operators:
            raise ValueError(f"bad symbolic permission for mode: {clause}")
        for operator, perms in zip(operators, parts, strict=True):
            if not _PERMS.match(perms):
                raise ValueError(f"bad symbolic permission for mode: {clause}")
            for user in users:
                bits = _bits_for(user, perms, mode, is_dir=is_dir, umask=umask if use_umask else 0)
                mode = _apply(user, operator, bits, mode)
    return mode


def _bits_for(user: str, perms: str, mode: int, *, is_dir: bool, umask: int) -> int:
    shift = _SHIFT[user]
    allowed = ~umask & PERM_BITS
    bits = 0
    for perm in perms:
        if perm in "rwx":
            bits |= ({"r": 4, "w": 2, "x": 1}[perm] << shift) & allowed
        elif perm == "X":
            bits |= (1 << shift) if is_dir or mode & _ANY_X else 0
        elif perm in "st":
            special, bit = _SPECIAL[user]
            bits |= bit if perm == special else 0
        else:  # u, g, o: copy that class's current bits
            bits |= ((mode >> _SHIFT[perm]) & 0o7) << shift
    return bits


def _apply(user: str, operator: str, bits: int, mode: int) -> int:
    if operator == "=":
        return (mode & ~_CLASS_BITS[user] & PERM_BITS) | bits
    if operator == "+":
        return mode | bits
    return mode & ~bits


def octal(mode: int) -> str:
    """A mode as Ansible's file modules return it: '0644', '01777' (stat's is '%04o')."""
    return f"0{stat.S_IMODE(mode):03o}"
