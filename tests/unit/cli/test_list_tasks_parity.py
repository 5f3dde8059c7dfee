"""`fleetfix run --list-tasks` against `ansible-playbook --list-tasks`: the same lines for every
parity playbook, and for the tags playbook under --tags/--skip-tags (which steps are listed,
`never` left out unless asked for by tag, templated tags rendered, the play's tags as written)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from tests.support.parity import ansible_playbook, assert_same_listing, fleetfix

PARITY = Path(__file__).parents[2] / "fixtures" / "playbooks" / "parity"


def _listing(tmp_path: Path, playbook: str, *options: str) -> list[str]:
    theirs, ours = tmp_path / "ansible", tmp_path / "fleetfix"
    shutil.copytree(PARITY, theirs)
    shutil.copytree(PARITY, ours)
    return assert_same_listing(theirs / playbook, ours / playbook, *options)


LISTED_AS_RUN = frozenset({"roles_includes.yml"})
"""roles_includes.yml has an unnamed include_role: fleetfix lists it with its role's name,
`include_role : NAME`, as both tools print its TASK banner; ansible-playbook lists it bare.
A role named twice is listed twice by both: which use runs is decided per host as it runs."""


@pytest.mark.parametrize(
    "playbook", sorted(p.name for p in PARITY.glob("*.yml") if p.name not in LISTED_AS_RUN)
)
def test_list_tasks_agrees_with_ansible(tmp_path: Path, playbook: str) -> None:
    lines = _listing(tmp_path, playbook)
    assert any(line.startswith("      ") and "\tTAGS: [" in line for line in lines)


@pytest.mark.parametrize(
    "options",
    [
        ("--tags", "deep"),
        ("--tags", "xid_checks"),
        ("--tags", "never"),
        ("--tags", "debug_only,post"),
        ("--tags", "cleanup"),
        ("--tags", "imported"),
        ("--tags", "tagged"),
        ("--tags", "untagged"),
        ("--skip-tags", "outer"),
        ("--skip-tags", "always", "--skip-tags", "gpu_play"),
        ("--tags", "reset", "--skip-tags", "z_last"),
    ],
    ids=" ".join,
)
def test_tag_selection_listed_as_ansible(tmp_path: Path, options: tuple[str, ...]) -> None:
    _listing(tmp_path, "tags.yml", *options)


def test_listing_shows_what_ansible_shows(tmp_path: Path) -> None:
    """The points the comparisons above rest on, spelled out: never-tagged steps and a block's
    rescue/always are not listed, a templated tag is rendered, the task name is not."""
    lines = _listing(tmp_path, "tags.yml")
    assert "      templated tag {{ family }}\tTAGS: [gpu_play, reset, xid_checks]" in lines
    assert "      deep step\tTAGS: [deep, gpu_play, outer]" in lines
    assert not any("only when asked for" in line or "inner rescue" in line for line in lines)
    assert not any("inner always" in line or "after everything" in line for line in lines)
    asked = _listing(tmp_path / "never", "tags.yml", "--tags", "never")
    assert "      only when asked for\tTAGS: [debug_only, gpu_play, never]" in asked


BAD_TAG_PLAYBOOK = """\
- hosts: localhost
  gather_facts: false
  tasks:
    - name: first play's step
      shell: touch {{ playbook_dir }}/first-play-ran
- hosts: localhost
  gather_facts: false
  tasks:
    - name: a tag nobody can render
      debug:
        msg: never
      tags: ["{{ no_such_variable }}"]
"""


def test_a_tag_that_cannot_render_is_refused_before_anything_runs(tmp_path: Path) -> None:
    """A deliberate difference (docs/decisions.md): ansible-playbook runs the first play and
    fails at the second; fleetfix refuses the run with the tag's place before any step runs."""
    for tool in ("ansible", "fleetfix"):
        (tmp_path / tool).mkdir()
        (tmp_path / tool / "bad_tag.yml").write_text(BAD_TAG_PLAYBOOK)
    theirs = ansible_playbook(tmp_path / "ansible" / "bad_tag.yml")
    assert theirs.exit_code != 0
    assert (tmp_path / "ansible" / "first-play-ran").exists(), theirs.output
    ours = fleetfix(tmp_path / "fleetfix" / "bad_tag.yml")
    assert ours.exit_code == 1, ours.output
    assert "bad_tag.yml:9:7: tag '{{ no_such_variable }}' cannot be rendered" in ours.output
    assert not (tmp_path / "fleetfix" / "first-play-ran").exists()
    listing = fleetfix(tmp_path / "fleetfix" / "bad_tag.yml", "--list-tasks")
    assert listing.exit_code == 1
    assert "cannot be rendered" in listing.output
