"""The bash shims a lab node runs as nvidia-smi, dmesg, scontrol, ...: argv in, shell code out.

A shim opens bash's `/dev/tcp` to the lab server's control port, sends
`FFLAB1 token node user tool argc args...` as NUL-terminated fields, and evaluates the reply
(`printf %s '<stdout>'; printf %s '<stderr>' >&2; exit N`). No Python starts per call, and all
node state stays in the server. A tool that hangs is a reply that never comes.

The reply comes as a length line and then that many characters, read with `read -N` (bash
reads a pipe or socket byte by byte until a delimiter, which costs 50 ms per 100 KB of
nvidia-smi XML; `-N` reads in blocks). The reply is pure ASCII (non-ASCII text is written as
$'\\xHH' escapes) so its length means the same in every locale.
"""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterable
from pathlib import Path

MAGIC = "FFLAB1"
SHIM_NAME = "fleetfix-lab-shim"

_TEMPLATE = """#!/bin/bash
# fleetfix lab shim: forwards this command to the lab server; the reply is shell code run here.
{{ exec 3<>/dev/tcp/127.0.0.1/{port}; }} 2>/dev/null || {{
  echo "${{0##*/}}: the fleetfix lab server is not reachable" >&2
  exit 127
}}
printf '%s\\0' {magic} {token} "${{FLEETFIX_LAB_NODE-}}" "${{USER-root}}" "${{0##*/}}" "$#" "$@" >&3
IFS= read -r __fleetfix_lab_size <&3 || exit 127
IFS= read -r -N "$__fleetfix_lab_size" __fleetfix_lab_reply <&3
exec 3<&-
eval "$__fleetfix_lab_reply"
"""


def shim_script(port: int, token: str) -> str:
    return _TEMPLATE.format(port=port, magic=MAGIC, token=shlex.quote(token))


def write_shims(tools_dir: Path, port: int, token: str, names: Iterable[str]) -> None:
    """One script plus a symlink per tool name (the shim reads its name from $0)."""
    tools_dir.mkdir(parents=True, exist_ok=True)
    for entry in tools_dir.iterdir():
        entry.unlink()
    script = tools_dir / SHIM_NAME
    fd = os.open(script, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o700)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        handle.write(shim_script(port, token))
    for name in names:
        (tools_dir / name).symlink_to(SHIM_NAME)


def render_reply(stdout: str, stderr: str, rc: int, script: str = "") -> str:
    """The shell code a shim evaluates: print the outputs, run any script, exit with rc."""
    parts = []
    if stdout:
        parts.append(f"printf %s {quote(stdout)}")
    if stderr:
        parts.append(f"printf %s {quote(stderr)} >&2")
    if script:
        parts.append(script)
    parts.append(f"exit {rc}")
    return "\n".join(parts) + "\n"


def frame_reply(code: str) -> bytes:
    """The bytes on the wire: the code's length in characters, a newline, the code."""
    return f"{len(code)}\n{code}".encode("ascii")


def quote(text: str) -> str:
    """Shell-quote `text` as ASCII: plain single quotes, or $'...' with \\xHH for other bytes.

    NUL is dropped: it cannot travel through a shell variable (real tools never print it)."""
    text = text.replace("\0", "")
    if text.isascii():
        return shlex.quote(text)
    return "$'" + "".join(_escape(char) for char in text) + "'"


def _escape(char: str) -> str:
    if char in ("\\", "'"):
        return "\\" + char
    if char.isascii() and (char.isprintable() or char == " "):
        return char
    if char == "\n":
        return "\\n"
    if char == "\t":
        return "\\t"
    return "".join(f"\\x{byte:02x}" for byte in char.encode("utf-8", errors="surrogateescape"))
