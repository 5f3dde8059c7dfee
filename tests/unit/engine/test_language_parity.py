"""The playbook language against ansible-playbook: each fixture under fixtures/playbooks/parity
runs under both tools on localhost and must show the same banners, verdicts (a loop's per item),
recap and exit code; the tags fixture also under --tags/--skip-tags."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.parity import assert_same, copy_fixtures

PARITY = Path(__file__).parents[2] / "fixtures" / "playbooks" / "parity"


@pytest.mark.parametrize("playbook", sorted(p.name for p in PARITY.glob("*.yml")))
def test_playbook_agrees_with_ansible(tmp_path: Path, playbook: str) -> None:
    theirs_dir = copy_fixtures(PARITY, tmp_path, "ansible")
    ours_dir = copy_fixtures(PARITY, tmp_path, "fleetfix")
    assert_same(theirs_dir / playbook, ours_dir / playbook)


@pytest.mark.parametrize(
    "options",
    [
        ("--tags", "deep"),
        ("--tags", "xid_checks"),
        ("--tags", "cleanup"),
        ("--tags", "debug_only"),
        ("--skip-tags", "outer"),
        ("--tags", "imported", "--skip-tags", "always"),
    ],
    ids=" ".join,
)
def test_tag_selection_agrees_with_ansible(tmp_path: Path, options: tuple[str, ...]) -> None:
    """Which steps run under --tags/--skip-tags: templated tags, block tags at any depth (a
    block runs for a tagged step in its always), never/always and an import's tags."""
    theirs_dir = copy_fixtures(PARITY, tmp_path, "ansible")
    ours_dir = copy_fixtures(PARITY, tmp_path, "fleetfix")
    ours = assert_same(theirs_dir / "tags.yml", ours_dir / "tags.yml", *options)
    assert len(ours.banners) > 2  # a selection that ran something, not two empty plays
