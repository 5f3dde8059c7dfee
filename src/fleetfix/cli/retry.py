"""The retry file: the hosts a run left failing, one per line, for `--limit @FILE`.

Written to `.fleetfix/retry/RUN_ID.txt` under the current directory, not next to the
playbook as Ansible's `PLAYBOOK.retry` is: playbooks often live in a read-only checkout or
an installed package, and two runs of one playbook would overwrite each other's file. The path
is shown relative to the current directory, so the command the summary prints works as is
from where the run was started (as `--limit @site.retry` does for Ansible).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from fleetfix.verdicts import Verdict

RETRY_DIR = Path(".fleetfix") / "retry"


def retry_hosts(verdicts: Iterable[Verdict]) -> list[str]:
    """The hosts whose verdict fails the run, sorted: what the next run should look at again
    (not the healthy ones, nor those another run held: `left out` does not fail the run)."""
    return sorted(v.host for v in verdicts if v.failing)


def write_retry_file(
    verdicts: Iterable[Verdict], run_id: str, base: Path | None = None
) -> Path | None:
    """Write the retry file of run `run_id` under `base` (the current directory); None when no
    host failed.

    Raises:
        OSError: the file could not be written (the run's work and its journal stand).
    """
    hosts = retry_hosts(verdicts)
    if not hosts or not run_id:
        return None
    where = (base or Path.cwd()) / RETRY_DIR
    path = where / f"{run_id}.txt"
    where.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{host}\n" for host in hosts), encoding="utf-8")
    return path


def shown_path(path: Path, base: Path | None = None) -> str:
    """`path` as the summary shows it: relative to `base` (the current directory) when below
    it, so `--limit @.fleetfix/retry/RUN.txt` is short and works from there."""
    try:
        return os.path.relpath(path, base or Path.cwd())
    except ValueError:  # another drive (Windows)
        return str(path)


__all__ = ["RETRY_DIR", "retry_hosts", "shown_path", "write_retry_file"]
