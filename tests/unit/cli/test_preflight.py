"""Bad options and input are refused before anything runs: right exit code, no journal run."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetfix.cli import run_cli
from fleetfix.journal import Journal


@pytest.fixture
def files(tmp_path: Path) -> Path:
    (tmp_path / "hosts.ini").write_text("[gpu]\nnode1 ansible_connection=local\n")
    (tmp_path / "pb.yml").write_text("- hosts: gpu\n  tasks:\n    - shell: touch never-run\n")
    (tmp_path / "adir.json").mkdir()
    return tmp_path


@pytest.mark.parametrize(
    ("extra", "code", "message"),
    [
        (["-e", "@missing.yml"], 5, "cannot read"),
        (["--transport", "sshh"], 5, "did you mean 'ssh'"),
        (["--limit", "node[1:"], 1, "unbalanced brackets"),
        (["--report", "out.pdf"], 5, "unknown report format"),
        (["--report", "gone/out.json"], 5, "--report gone/out.json: no directory 'gone'"),
        (["--report", "."], 5, "unknown report format"),
        (["--report", "pb.yml/x.html"], 5, "no directory 'pb.yml'"),
        (["--report", "adir.json"], 5, "--report adir.json: is a directory"),
        (["--forks", "0"], 5, "--forks must be at least 1"),
    ],
)
def test_refused_before_the_journal_opens_a_run(
    files: Path,
    extra: list[str],
    code: int,
    message: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(files)
    journal = files / "j.sqlite"
    argv = ["run", "pb.yml", "-i", "hosts.ini", "--yes", "--journal", str(journal), *extra]
    assert run_cli(argv) == code
    assert message in capsys.readouterr().err
    assert not (files / "never-run").exists()
    if journal.exists():
        opened = Journal(journal)
        try:
            assert opened.history() == []
        finally:
            opened.close()
