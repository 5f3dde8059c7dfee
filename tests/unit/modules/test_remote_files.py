"""The remote primitives' shell commands, run here with /bin/sh on files under tmp_path: the
stat script read back matches os.stat, and chunked writes rebuild the bytes exactly."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
from pathlib import Path

from fleetfix.modules.remote_files import CHUNK, parse_stat, stat_script, write_commands


def _sh(command: str) -> str:
    done = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, check=True)
    return done.stdout


def test_stat_script_reads_what_os_stat_sees(tmp_path: Path) -> None:
    path = tmp_path / "a.conf"
    path.write_bytes(b"hello\n")
    path.chmod(0o640)
    found = parse_stat(str(path), _sh(stat_script(str(path), mime=True, attributes=True)))
    assert found is not None
    real = os.stat(path)
    result = found.stat_result(mime=True, attributes=True)
    assert result["mode"] == "0640"
    assert (result["uid"], result["gid"], result["inode"]) == (
        real.st_uid,
        real.st_gid,
        real.st_ino,
    )
    assert (result["dev"], result["nlink"], result["size"]) == (real.st_dev, 1, 6)
    assert abs(result["mtime"] - real.st_mtime) < 1e-6
    assert result["checksum"] == hashlib.sha1(b"hello\n").hexdigest()
    assert result["isreg"] and not result["islnk"]
    assert found.path_info()["state"] == "file"


def test_stat_script_on_links_and_absent_paths(tmp_path: Path) -> None:
    (tmp_path / "target").write_text("x")
    (tmp_path / "link").symlink_to("target")
    link = parse_stat("l", _sh(stat_script(str(tmp_path / "link"))))
    assert link is not None
    assert link.is_link and link.lnk_target == "target"
    assert link.lnk_source == str((tmp_path / "target").resolve())
    assert link.checksum is None
    followed = parse_stat("l", _sh(stat_script(str(tmp_path / "link"), follow=True)))
    assert followed is not None and stat.S_ISREG(followed.st_mode)
    assert parse_stat("n", _sh(stat_script(str(tmp_path / "none")))) is None


def test_chunked_writes_rebuild_the_bytes(tmp_path: Path) -> None:
    data = os.urandom(300 * 1024)
    temp = tmp_path / "out.bin"
    commands = write_commands(str(temp), data)
    assert len(commands) > 1
    assert all(len(command) < CHUNK + 200 for command in commands)
    for command in commands:
        _sh(command)
    assert temp.read_bytes() == data


def test_an_empty_write_creates_an_empty_file(tmp_path: Path) -> None:
    temp = tmp_path / "empty"
    for command in write_commands(str(temp), b""):
        _sh(command)
    assert temp.read_bytes() == b""
