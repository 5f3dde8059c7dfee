"""`fleetfix parse --list`, which `fleetfix parse`'s own help names (issue 20): lists every
probe whose parser `parse` runs, one line each with its summary, and exits 0."""

from __future__ import annotations

import pytest

from fleetfix.cli import run_cli
from fleetfix.probes import probe_registry


def test_parse_list_names_every_probe_once_with_its_summary(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run_cli(["parse", "--list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    probes = sorted(probe_registry(), key=lambda p: p.name)
    assert [line.split()[0] for line in lines] == [p.name for p in probes]
    for line, probe in zip(lines, probes, strict=True):
        assert probe.summary.strip().splitlines()[0] in line


def test_the_help_that_names_it_is_true(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        run_cli(["parse", "--help"])
    assert done.value.code == 0
    assert "fleetfix parse --list shows them" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["parse"], "parse needs a probe and a file"),
        (["parse", "nvidia_smi"], "parse needs a probe and a file"),
        (["parse", "--list", "nvidia_smi"], "parse --list takes no probe or file"),
    ],
)
def test_parse_without_its_arguments_is_a_usage_error(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli(argv) == 5
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
