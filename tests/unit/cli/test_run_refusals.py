"""Small run-level refusals (issue 19): `--resume ""` is not a fresh full run, and a retry
count without a sane bound does not load."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetfix.cli import run_cli
from fleetfix.playbook.steps import MAX_RETRIES

RETRIED = """\
- hosts: all
  tasks:
    - name: wait for the GPUs
      shell: nvidia-smi -L
      register: listed
      until: listed.rc == 0
      retries: {retries}
      delay: 0
"""


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hosts.ini").write_text("[gpu]\ngpu001\n")
    (tmp_path / "site.yml").write_text(RETRIED.format(retries=3))
    return tmp_path


@pytest.mark.parametrize("empty", ["", "   ", "\t"])
def test_an_empty_resume_is_refused(
    workdir: Path, empty: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["run", "site.yml", "-i", "hosts.ini", "--journal", "j.db", "--resume", empty]
    assert run_cli([*argv, "--transport", "local"]) == 5
    err = capsys.readouterr().err
    assert "--resume" in err and "empty" in err
    assert not (workdir / "j.db").exists()  # nothing started: no journal, no run


@pytest.mark.parametrize("command", ["run", "validate"])
def test_unbounded_retries_do_not_load(
    workdir: Path, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    (workdir / "site.yml").write_text(RETRIED.format(retries=99999999))
    argv = ["run", "site.yml", "-i", "hosts.ini", "--journal", "j.db", "--transport", "local"]
    assert run_cli(argv if command == "run" else ["validate", "site.yml"]) == 1
    err = capsys.readouterr().err
    assert "site.yml:7" in err  # the retries line
    assert f"retries must be at most {MAX_RETRIES}, not 99999999" in err
    assert "Traceback" not in err
    assert not (workdir / "j.db").exists()


def test_the_bound_itself_loads(workdir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (workdir / "site.yml").write_text(RETRIED.format(retries=MAX_RETRIES))
    assert run_cli(["validate", "site.yml"]) == 0
    assert "OK" in capsys.readouterr().out
