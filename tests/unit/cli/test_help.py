"""Every command's --help renders: a help string argparse cannot format is a crash at 3 a.m."""

from __future__ import annotations

import argparse

import pytest

from fleetfix.cli import build_parser


def _commands(
    parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()
) -> list[tuple[str, ...]]:
    found = [prefix]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _commands(sub, (*prefix, name))
    return found


COMMANDS = _commands(build_parser())


def test_every_subcommand_is_listed() -> None:
    assert {("run",), ("probe",), ("lab",), ("report",)} <= set(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c) or "fleetfix")
def test_help_renders(command: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        build_parser().parse_args([*command, "--help"])

    assert done.value.code == 0
    assert "usage: fleetfix" in capsys.readouterr().out
