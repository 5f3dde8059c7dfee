"""`--limit` naming hosts the inventory does not have (issue 20): the same error, exit 1, in a
run and in --list-hosts, for names given on the command line and in a `--limit @file` (with the
file and line). A glob or group that matches nothing keeps what the run did before."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetfix.cli import run_cli

INVENTORY = "[rack1]\ngpu001\ngpu002\n[rack2]\ngpu003\n"
PLAYBOOK = "- hosts: all\n  gather_facts: false\n  tasks:\n    - shell: 'true'\n"


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hosts.ini").write_text(INVENTORY)
    (tmp_path / "site.yml").write_text(PLAYBOOK)
    return tmp_path


def _run(limit: str, *extra: str) -> list[str]:
    argv = ["run", "site.yml", "-i", "hosts.ini", "--journal", "j.db", "--transport", "local"]
    return [*argv, "--limit", limit, *extra]


@pytest.mark.parametrize("listing", [(), ("--list-hosts",)])
@pytest.mark.parametrize("limit", ["gpu999", "gpu001,gpu999", "rack1:!gpu0O2"])
def test_unknown_names_are_one_error_in_a_run_and_a_listing(
    workdir: Path, limit: str, listing: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli(_run(limit, *listing)) == 1
    captured = capsys.readouterr()
    unknown = "!gpu0O2" if "gpu0O2" in limit else "gpu999"  # as written: a typo'd exclusion
    assert f"--limit names 1 host(s) not in the inventory: {unknown}" in captured.err
    assert "Traceback" not in captured.err
    assert "gpu001" not in captured.out  # nothing listed, nothing run
    assert not (workdir / "j.db").exists()


def test_a_close_name_is_suggested(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_cli(_run("gpu0001", "--list-hosts")) == 1
    assert "did you mean: gpu0001 -> gpu001?" in capsys.readouterr().err


@pytest.mark.parametrize("listing", [(), ("--list-hosts",)])
def test_unknown_names_in_a_limit_file_name_the_file_and_line(
    workdir: Path, listing: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    (workdir / "retry.txt").write_text("gpu001\n\ngpu777\ngpu003\ngpu888\n")
    assert run_cli(_run("@retry.txt", *listing)) == 1
    err = capsys.readouterr().err
    assert "--limit names 2 host(s) not in the inventory:" in err
    assert "gpu777 (retry.txt:3), gpu888 (retry.txt:5)" in err
    assert not (workdir / "j.db").exists()


def test_known_names_groups_and_files_still_list(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (workdir / "retry.txt").write_text("gpu001\nrack2\n")
    assert run_cli(_run("@retry.txt", "--list-hosts")) == 0
    out = capsys.readouterr().out
    assert "hosts (2):" in out and "gpu001" in out and "gpu003" in out


def test_a_glob_matching_nothing_is_not_an_unknown_host(
    workdir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_cli(_run("gpu9*", "--list-hosts")) == 0
    assert "hosts (0):" in capsys.readouterr().out
    assert run_cli(_run("gpu9*")) == 1  # as before: a run with no host is refused
    err = capsys.readouterr().err
    assert "no hosts matched the playbook's patterns" in err and "not in the inventory" not in err
