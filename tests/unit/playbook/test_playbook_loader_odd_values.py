"""Values the fuzzer found that crashed the loader: numbers where names go, an unknown ~user."""

from __future__ import annotations

from pathlib import Path

from fleetfix.playbook.catalog import StepCatalog
from fleetfix.playbook.loader import validate_playbook


def _errors(tmp_path: Path, catalog: StepCatalog, text: str) -> list[tuple[int, int, str]]:
    path = tmp_path / "pb.yml"
    path.write_text(text, encoding="utf-8")
    found = validate_playbook(path, catalog)
    return [(e.position.line, e.position.column, e.message) for e in found if e.position]


def test_a_number_in_notify_is_a_topic_name(tmp_path: Path, catalog: StepCatalog) -> None:
    text = "- hosts: gpu\n  tasks:\n    - debug: {msg: x}\n      notify: -1\n"
    assert _errors(tmp_path, catalog, text) == [
        (4, 15, "notify names no handler of this play: '-1'")
    ]
    listened = text + "  handlers:\n    - debug: {msg: y}\n      listen: '-1'\n"
    assert _errors(tmp_path, catalog, listened) == []


def test_numbers_and_unknown_users_in_vars_files_are_file_names(
    tmp_path: Path, catalog: StepCatalog
) -> None:
    (tmp_path / "0").write_text("a: 1\n", encoding="utf-8")
    text = "- hosts: gpu\n  vars_files: [0, '~no-such-user-here/x.yml', .nan]\n  tasks: []\n"
    assert _errors(tmp_path, catalog, text) == [
        (2, 19, "vars file not found or unreadable: ~no-such-user-here/x.yml"),
        (2, 47, "vars file not found or unreadable: nan"),
    ]
