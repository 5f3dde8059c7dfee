"""The Gathering Facts step: when a play gets one, and what it sets on a host."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetfix.facts.step import gathering_step, is_gathering
from fleetfix.playbook.model import Play
from fleetfix.transport.fake import FakeTransport, Reply
from tests.unit.engine.conftest import Runner

FIXTURES = Path(__file__).parents[2] / "fixtures" / "facts"


@pytest.mark.parametrize(
    ("gather_facts", "gathering", "gathers"),
    [
        (None, "implicit", True),
        (False, "implicit", False),
        (True, "implicit", True),
        (None, "explicit", False),
        (True, "explicit", True),
        (None, "smart", True),
        (False, "smart", False),
    ],
)
def test_which_plays_gather(gather_facts: bool | None, gathering: str, gathers: bool) -> None:
    step = gathering_step(Play("p", "all", gather_facts=gather_facts), gathering)
    assert (step is not None) == gathers
    if step is not None:
        assert step.name == "Gathering Facts" and is_gathering(step)
        assert "always" in step.tags
        assert ("smart" in step.args) == (gathering == "smart")


def test_the_plays_subset_and_timeout_go_to_the_step() -> None:
    play = Play("p", "all", gather_subset=("!all", "network"), gather_timeout=5.0)
    step = gathering_step(play, "implicit")
    assert step is not None
    assert step.args["params"] == {"gather_subset": ["!all", "network"], "gather_timeout": 5}


async def test_gathered_facts_are_host_variables(run_playbook: Runner, fake: FakeTransport) -> None:
    fake.host("gpu1").on("@@ff:", Reply(stdout=(FIXTURES / "debian12-vm.txt").read_text()))
    run = await run_playbook(
        """
        - hosts: gpu
          tasks:
            - name: Gathering Facts
              gather_facts:
            - assert:
                that:
                  - ansible_facts.hostname == ansible_hostname == "vm"
                  - ansible_os_family == "Debian"
                  - ansible_processor_vcpus > 0
                  - ansible_local == {}
                  - ansible_facts.gpus == []
            - setup:
                gather_subset: ["!all"]
                filter: ["ansible_dist*"]
              register: again
            - assert:
                that:
                  - again.ansible_facts.ansible_distribution == "Debian"
                  - "'ansible_env' not in again.ansible_facts"
                  - ansible_env.HOME == "/root"
        """,
        hosts=["gpu1"],
    )
    assert run.statuses("gpu1") == [
        ("Gathering Facts", "ok"),
        ("assert", "ok"),
        ("setup", "ok"),
        ("assert", "ok"),
    ]
    assert len(fake.commands_on("gpu1")) == 2  # one command per gathering


async def test_a_bad_subset_fails_the_host_in_ansibles_words(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    run = await run_playbook(
        """
        - hosts: gpu
          tasks:
            - setup:
                gather_subset: [hardwre]
        """,
        hosts=["gpu1"],
    )
    [result] = [r for r in run.result.results if r.host == "gpu1"]
    assert result.status.value == "failed" and "Bad subset 'hardwre'" in result.message
    assert fake.commands_on("gpu1") == []
