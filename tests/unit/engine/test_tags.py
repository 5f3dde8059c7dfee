"""engine.tags.selected against ansible-core's own Taggable.evaluate_tags, for every combination.

ansible-core answers in a process of its own (importing it patches Jinja2 globally, which other
tests must not inherit): this file, run as a script, is that helper. It is given step tag sets
and --tags/--skip-tags sets and prints whether each step would run.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from fleetfix.engine.tags import selected

TagSet = tuple[str, ...]


def _subsets(words: TagSet, largest: int) -> list[TagSet]:
    return [combo for size in range(largest + 1) for combo in itertools.combinations(words, size)]


STEP_TAGS: list[TagSet] = [
    *_subsets(("always", "never", "debug", "probe"), 3),
    ("untagged",),
    ("tagged",),
    ("all",),
    ("untagged", "debug"),
]
CLI_TAGS: list[TagSet] = _subsets(
    ("all", "tagged", "untagged", "always", "never", "debug", "probe", "fix"), 2
)

# (step tags, --tags, --skip-tags, runs): the rules as an operator reads them.
NAMED = [
    ((), (), (), True),
    (("never",), (), (), False),
    (("never",), ("tagged",), (), False),  # --tags tagged does not reach into never
    (("debug",), ("tagged",), (), True),
    ((), ("tagged",), (), False),
    ((), ("untagged",), (), True),  # an untagged step is tagged `untagged`
    (("debug",), ("untagged",), (), False),
    (("never",), ("never",), (), True),
    (("never", "debug"), ("debug",), (), True),
    (("never", "debug"), ("all",), (), False),
    (("always",), ("debug",), (), True),
    (("always",), (), ("always",), False),  # always runs unless skipped by name
    (("always",), (), ("debug",), True),
    (("always",), (), ("all",), True),  # --skip-tags all spares always...
    (("always",), (), ("all", "always"), False),  # ...unless always is skipped too
    (("debug",), (), ("all",), False),
    ((), (), ("all",), False),
    (("debug",), (), ("tagged",), False),
    ((), (), ("tagged",), True),  # untagged steps are not tagged
    ((), (), ("untagged",), False),
    (("always", "debug"), (), ("debug",), False),
    (("always", "debug"), (), ("all", "debug"), True),  # Ansible checks `all` first
]


def _as_request() -> dict[str, Any]:
    return {
        "steps": [list(tags) for tags in STEP_TAGS],
        "cli": [list(tags) for tags in CLI_TAGS],
        "named": [[list(s), list(o), list(k)] for s, o, k, _ in NAMED],
    }


@pytest.fixture(scope="module")
def ansible(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """ansible-core's verdicts for every combination and every named case."""
    request = tmp_path_factory.mktemp("tags") / "request.json"
    request.write_text(json.dumps(_as_request()), encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(Path(__file__)), str(request)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    answer: dict[str, Any] = json.loads(done.stdout)
    return answer


@pytest.mark.parametrize(("step", "only", "skip", "runs"), NAMED)
def test_named_rules(
    ansible: dict[str, Any], step: TagSet, only: TagSet, skip: TagSet, runs: bool
) -> None:
    ours = selected(frozenset(step), frozenset(only), frozenset(skip))
    theirs = ansible["named"][NAMED.index((step, only, skip, runs))]
    assert (ours, theirs) == (runs, runs)


def test_every_combination_matches_ansible(ansible: dict[str, Any]) -> None:
    verdicts = ansible["verdicts"]
    differ = []
    for (s, step), (o, only), (k, skip) in itertools.product(
        enumerate(STEP_TAGS), enumerate(CLI_TAGS), enumerate(CLI_TAGS)
    ):
        ours = selected(frozenset(step), frozenset(only), frozenset(skip))
        if ours != verdicts[s][o][k]:
            differ.append((step, only, skip, ours))
    assert len(verdicts) * len(verdicts[0]) * len(verdicts[0][0]) == 19 * 37 * 37
    assert differ[:20] == []


# --- the helper process ------------------------------------------------------------------------


def _ansible_answers(request: dict[str, Any]) -> dict[str, Any]:
    """Runs only in the helper process: ansible-core is imported here, never by pytest."""
    from ansible.parsing.dataloader import DataLoader  # noqa: PLC0415
    from ansible.playbook.block import Block  # noqa: PLC0415
    from ansible.playbook.play import Play  # noqa: PLC0415
    from ansible.playbook.task import Task  # noqa: PLC0415

    loader = DataLoader()
    block = Block(play=Play.load({"hosts": "all", "tasks": []}, loader=loader))

    def runs(step: list[str], only: list[str], skip: list[str]) -> bool:
        data: dict[str, Any] = {"action": "debug", **({"tags": step} if step else {})}
        task = Task.load(data, block=block, loader=loader)
        # ansible-playbook's default for --tags is ['all'].
        return bool(task.evaluate_tags(only or ["all"], skip, {}))

    cli = request["cli"]
    return {
        "verdicts": [[[runs(s, o, k) for k in cli] for o in cli] for s in request["steps"]],
        "named": [runs(s, o, k) for s, o, k in request["named"]],
    }


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as handle:
        print(json.dumps(_ansible_answers(json.load(handle))))
