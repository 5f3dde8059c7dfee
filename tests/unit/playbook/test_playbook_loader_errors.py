"""Every bad fixture playbook fails with exactly the errors its `# expect:` header lists.

A header line `# expect: [FILE ]LINE:COL MESSAGE` names one error (FILE relative to the fixtures
directory, default the playbook itself); an optional `# hint: TEXT` right after it is that error's
hint (no hint line: the error must have no hint).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import pytest

from fleetfix.errors import PlaybookError, SourcePosition
from fleetfix.playbook.catalog import StepCatalog
from fleetfix.playbook.loader import load_playbook, validate_playbook

from .conftest import PLAYBOOKS

BAD = sorted((PLAYBOOKS / "bad").glob("*.yml"))
_EXPECT = re.compile(r"# expect: (?:(\S+\.yml) )?(\d+):(\d+) (.*)")


@dataclass(frozen=True, slots=True)
class Expected:
    file: str
    line: int
    column: int
    message: str
    hint: str | None


def expectations(path: Path) -> list[Expected]:
    found: list[Expected] = []
    for text in path.read_text(encoding="utf-8").splitlines():
        if match := _EXPECT.match(text):
            other, line, column, message = match.groups()
            file = str(PLAYBOOKS / other) if other else str(path)
            found.append(Expected(file, int(line), int(column), message, None))
        elif text.startswith("# hint: "):
            last = found.pop()
            hint = text[8:].replace("{fixtures}", str(PLAYBOOKS))
            found.append(Expected(last.file, last.line, last.column, last.message, hint))
    return found


def as_expected(error: PlaybookError) -> Expected:
    assert error.position is not None, error.render()
    file = error.position.file
    # Files other than the playbook are reached through "../vars/x.yml": compare them resolved.
    file = file if file.endswith(tuple(str(p) for p in BAD)) else str(Path(file).resolve())
    return Expected(file, error.position.line, error.position.column, error.message, error.hint)


def test_every_bad_fixture_declares_what_it_expects() -> None:
    assert len(BAD) >= 60
    for path in BAD:
        assert expectations(path), f"{path.name} has no '# expect:' line"


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_bad_playbook_reports_exact_position_message_and_hint(
    path: Path, catalog: StepCatalog
) -> None:
    errors = validate_playbook(path, catalog)
    assert [as_expected(e) for e in errors] == expectations(path)


@pytest.mark.parametrize("path", BAD, ids=[p.stem for p in BAD])
def test_load_raises_the_first_error_with_its_source_line(path: Path, catalog: StepCatalog) -> None:
    first = expectations(path)[0]
    with pytest.raises(PlaybookError) as caught:
        load_playbook(path, catalog)
    assert as_expected(caught.value) == first
    source = Path(first.file).read_text(encoding="utf-8").split("\n")  # keeps the line after EOF
    if caught.value.source_line is not None:
        assert caught.value.source_line == source[first.line - 1]


def test_render_shows_location_line_caret_and_hint(catalog: StepCatalog) -> None:
    path = PLAYBOOKS / "bad" / "unknown_step_keyword.yml"
    with pytest.raises(PlaybookError) as caught:
        load_playbook(path, catalog)
    assert caught.value.render() == (
        f"{path}:7:7: unknown step keyword 'retires'\n"
        "          retires: 3\n"
        "          ^\n"
        "    did you mean 'retries'?"
    )


def test_caret_points_inside_a_flow_mapping(catalog: StepCatalog) -> None:
    path = PLAYBOOKS / "bad" / "unknown_param.yml"
    (error,) = validate_playbook(path, catalog)
    lines = error.render().splitlines()
    caret_column = lines[2].index("^") - 4
    assert lines[1][4 + caret_column :].startswith("since: 1h")


def test_many_errors_come_in_file_order(catalog: StepCatalog) -> None:
    errors = validate_playbook(PLAYBOOKS / "bad" / "many_errors.yml", catalog)
    positions = [e.position for e in errors]
    assert len(errors) == 7
    assert positions == sorted(positions, key=lambda p: (p.line, p.column) if p else (0, 0))


def test_missing_file_is_a_playbook_error_without_traceback(
    tmp_path: Path, catalog: StepCatalog
) -> None:
    with pytest.raises(PlaybookError, match=r"cannot read .*nope\.yml"):
        load_playbook(tmp_path / "nope.yml", catalog)


def test_non_utf8_playbook_names_the_line(tmp_path: Path, catalog: StepCatalog) -> None:
    path = tmp_path / "latin1.yml"
    path.write_bytes(b"- hosts: gpu\n  name: caf\xe9\n")
    (error,) = validate_playbook(path, catalog)
    assert error.message == "file is not valid UTF-8"
    assert error.position == SourcePosition(str(path), 2, 1)


def test_recursive_alias_is_refused(tmp_path: Path, catalog: StepCatalog) -> None:
    path = tmp_path / "loop.yml"
    path.write_text("- hosts: gpu\n  vars: &v\n    self: *v\n", encoding="utf-8")
    (error,) = validate_playbook(path, catalog)
    assert error.message == "invalid YAML: recursive alias: a node contains itself"
    assert error.position == SourcePosition(str(path), 2, 9)  # the anchored node
