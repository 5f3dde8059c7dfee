"""The retry file: the failing hosts, one per line, under .fleetfix/retry/, read back by
`--limit @FILE` to the same hosts."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetfix.cli.retry import RETRY_DIR, retry_hosts, shown_path, write_retry_file
from fleetfix.inventory import load_inventory
from fleetfix.verdicts import Verdict, VerdictKind

FAILING = {
    "gpu005": VerdictKind.DEFERRED,
    "gpu007": VerdictKind.NEEDS_RMA,
    "gpu014": VerdictKind.LEFT_ALONE,
    "gpu020": VerdictKind.UNREACHABLE,
    "gpu010": VerdictKind.HELD,
}
PASSING = {
    "gpu001": VerdictKind.HEALTHY,
    "gpu003": VerdictKind.FIXED,
    "gpu009": VerdictKind.LEFT_OUT,  # another run holds it: not this run's to retry
    "gpu012": VerdictKind.DRAINED,
}


def verdicts() -> list[Verdict]:
    return [Verdict(host, kind) for host, kind in {**PASSING, **FAILING}.items()]


def test_the_retry_file_lists_exactly_the_failing_hosts(tmp_path: Path) -> None:
    path = write_retry_file(verdicts(), "20261206-1", base=tmp_path)
    assert path == tmp_path / RETRY_DIR / "20261206-1.txt"
    assert path.read_text() == "".join(f"{host}\n" for host in sorted(FAILING))
    assert retry_hosts(verdicts()) == sorted(FAILING)


def test_no_file_when_nothing_failed(tmp_path: Path) -> None:
    passing = [Verdict(host, kind) for host, kind in PASSING.items()]
    assert write_retry_file(passing, "20261206-1", base=tmp_path) is None
    assert not (tmp_path / ".fleetfix").exists()


def test_a_retry_file_that_cannot_be_written_raises(tmp_path: Path) -> None:
    (tmp_path / ".fleetfix").write_text("a file where the directory would go")
    with pytest.raises(OSError):
        write_retry_file(verdicts(), "20261206-1", base=tmp_path)


def test_limit_at_the_retry_file_selects_those_hosts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = sorted({**PASSING, **FAILING})
    inventory_file = tmp_path / "hosts.ini"
    inventory_file.write_text("[gpus]\n" + "".join(f"{name}\n" for name in names))
    monkeypatch.chdir(tmp_path)
    path = write_retry_file(verdicts(), "run-7")
    assert path is not None
    shown = shown_path(path)
    assert shown == ".fleetfix/retry/run-7.txt"
    inventory = load_inventory([str(inventory_file)])
    assert inventory.limit(names, f"@{shown}") == sorted(FAILING)
