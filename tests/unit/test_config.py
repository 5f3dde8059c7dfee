"""The site's config file: settings every run shares, overridden by options; bad files are
clear errors with their location."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetfix.cli import run_cli
from fleetfix.config import setting_list
from fleetfix.errors import InputError
from fleetfix.journal import journal_target


def _config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> Path:
    path = tmp_path / "fleetfix.toml"
    path.write_text(text)
    monkeypatch.setenv("FLEETFIX_CONFIG", str(path))
    monkeypatch.delenv("FLEETFIX_JOURNAL", raising=False)
    return path


def test_the_journal_comes_from_the_config_unless_chosen(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _config(tmp_path, monkeypatch, 'journal = "postgresql://fleetfix@db01:5433/fleetfix"\n')
    assert journal_target() == "postgresql://fleetfix@db01:5433/fleetfix"  # a str: // kept
    assert journal_target("/tmp/j.sqlite") == Path("/tmp/j.sqlite")
    monkeypatch.setenv("FLEETFIX_JOURNAL", str(tmp_path / "env.sqlite"))
    assert journal_target() == tmp_path / "env.sqlite"


def test_lists_accept_one_string(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _config(tmp_path, monkeypatch, 'secret_vars = "bmc_password"\nwebhooks = []\n')
    assert setting_list("secret_vars") == ["bmc_password"]
    assert setting_list("webhooks") == []


@pytest.mark.parametrize(
    ("text", "where", "says"),
    [
        ('journal = "x"\nmetrics_fil = "/tmp/m.prom"\n', ":2:1", "unknown setting 'metrics_fil'"),
        ('journal = "x\n', ":1:", "not valid TOML"),
        ("secret_vars = [1, 2]\n", ":1:1", "secret_vars must be a string or a list of strings"),
    ],
)
def test_a_bad_config_file_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, where: str, says: str
) -> None:
    path = _config(tmp_path, monkeypatch, text)
    with pytest.raises(InputError) as refused:
        setting_list("secret_vars")
    assert f"{path}{where}" in refused.value.render()
    assert says in refused.value.render()


def test_a_bad_webhook_in_the_config_stops_the_run_before_it_starts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _config(tmp_path, monkeypatch, 'webhooks = ["carrier-pigeon:coo"]\n')
    journal = tmp_path / "j.sqlite"
    code = run_cli(
        [
            "run",
            "playbooks/shm.yml",
            "-i",
            "inventories/lab.ini",
            "--yes",
            "--journal",
            str(journal),
        ]
    )
    err = capsys.readouterr().err
    assert code == 1, err
    assert str(path) in err and "webhooks:" in err
    assert not journal.exists()  # nothing was started
