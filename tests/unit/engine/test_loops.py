"""Looped steps over the fake transport: items, registered results, journal keys and resume."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from fleetfix.actions.base import Action, ActionContext, ActionPlan, PlannedCommand
from fleetfix.events import LoopItemFinished
from fleetfix.journal import Journal
from fleetfix.results import ResumeState
from fleetfix.transport.fake import FakeTransport, Reply

from .conftest import Runner
from .test_safety_invariants import node


def _cordon(ctx: ActionContext) -> ActionPlan:
    gpu = ctx.params["gpu"]
    return ActionPlan(commands=(PlannedCommand(f"cordon-gpu {gpu}", why=f"GPU {gpu} is bad"),))


CORDON = Action(
    name="cordon_gpu",
    summary="take one GPU out of scheduling",
    plan=_cordon,
    params={"gpu": "GPU index"},
    disruptive=True,
)


async def test_item_is_seen_in_when_and_arguments(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    run = await run_playbook(
        """
        - hosts: gpu
          tasks:
            - name: reset
              shell: reset-gpu {{ item }}
              loop: [0, 1, 2]
              when: item != 1
              register: resets
            - assert:
                that:
                  - resets.results | map(attribute='item') | list == [0, 1, 2]
                  - resets.results[1].skipped
                  - resets.changed
        """,
        hosts=["gpu001"],
    )
    assert fake.commands_on("gpu001") == ["reset-gpu 0", "reset-gpu 2"]
    assert run.recap("gpu001") == {**run.recap("gpu001"), "ok": 2, "changed": 1, "failed": 0}
    labels = [e.label for e in run.events if isinstance(e, LoopItemFinished)]
    assert labels == ["0", "1", "2"]


async def test_a_loop_over_a_non_list_fails_the_host_with_its_location(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    run = await run_playbook(
        """
        - hosts: gpu
          vars:
            gpus: {a: 1}
          tasks:
            - shell: reset-gpu {{ item }}
              loop: "{{ gpus }}"
        """,
        hosts=["gpu001"],
    )
    assert fake.commands_on("gpu001") == []
    assert "loop requires a list" in run.result.results[0].message
    assert "playbook.yml:6:7: loop requires" in run.result.results[0].message


async def test_items_come_from_a_registered_output_as_data(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    fake.host("gpu001").on("list-bad", Reply(stdout="3\n{{ 7 * 6 }}\n"))
    await run_playbook(
        """
        - hosts: gpu
          tasks:
            - shell: list-bad
              register: bad
            - shell: echo '{{ item }}'
              loop: "{{ bad.stdout_lines }}"
        """,
        hosts=["gpu001"],
    )
    assert fake.commands_on("gpu001")[1:] == ["echo '3'", "echo '{{ 7 * 6 }}'"]


async def test_a_disruptive_action_in_a_loop_journals_one_intent_per_item(
    run_playbook: Runner, fake: FakeTransport, tmp_path: Path
) -> None:
    journal = Journal(tmp_path / "j.sqlite")
    journal.start_run("pb.yml", [], check=False, hosts=1)
    node(fake, "gpu001")
    await run_playbook(
        """
        - hosts: gpu
          tasks:
            - name: cordon
              action: {name: cordon_gpu, gpu: "{{ item }}"}
              loop: [3, 5]
        """,
        hosts=["gpu001"],
        actions=(CORDON,),
        memory=journal,
        subscribe=journal,
    )
    journal.close()
    with sqlite3.connect(tmp_path / "j.sqlite") as db:
        intents = db.execute("SELECT step_key, state FROM actions ORDER BY id").fetchall()
        step_keys = [k for (k,) in db.execute("SELECT step_key FROM steps ORDER BY id")]
    assert [state for _key, state in intents] == ["ok", "ok"]
    first, second = (key for key, _state in intents)
    assert first != second and first.startswith(f"{tmp_path / 'playbook.yml'}:4:7[0:")
    assert step_keys == [first, second, f"{tmp_path / 'playbook.yml'}:4:7"]
    assert [c for c in fake.commands_on("gpu001") if "cordon" in c] == [
        "cordon-gpu 3",
        "cordon-gpu 5",
    ]


async def test_resume_replays_finished_items_and_runs_the_rest(
    run_playbook: Runner, fake: FakeTransport, tmp_path: Path
) -> None:
    book = """
        - hosts: gpu
          tasks:
            - name: fix
              shell: fix {{ item }}
              loop: [a, b, c]
              register: fixed
            - assert:
                that: fixed.results | map(attribute='stdout') | list == ['did a', 'did b', 'did c']
    """
    fake.host("gpu001").on(r"^fix ", lambda command, _n: Reply(stdout=f"did {command[4:]}\n"))
    journal = Journal(tmp_path / "j.sqlite")
    journal.start_run("pb.yml", [], check=False, hosts=1)
    await run_playbook(book, hosts=["gpu001"], subscribe=journal)
    journal.finish_run(99)  # interrupted: its controller no longer holds it
    done = journal.resume_state(journal.run_id or "")
    journal.close()
    # As if killed while item c ran: items a and b have verdicts, the step has none yet.
    steps = {key: value for key, value in done.steps.items() if key[1].endswith("]")}
    steps = {key: value for key, value in steps.items() if not key[1].split("[")[1].startswith("2")}
    assert len(steps) == 2
    fake.ran.clear()
    run = await run_playbook(book, hosts=["gpu001"], resume=ResumeState(run_id="r1", steps=steps))
    assert fake.commands_on("gpu001") == ["fix c"]
    assert run.recap("gpu001")["failed"] == 0
    # The whole step journaled: replayed with its items' registered values, lines and all.
    fake.ran.clear()
    lines_checked = (
        book.rstrip()
        + "\n            - assert:"
        + "\n                that: fixed.results[2].stdout_lines == ['did c']\n"
    )
    run = await run_playbook(lines_checked, hosts=["gpu001"], resume=done)
    assert fake.commands_on("gpu001") == []
    assert run.recap("gpu001")["failed"] == 0


async def test_a_handler_loops_and_until_retries_each_item(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    fake.host("gpu001").on(r"^probe b", lambda _c, n: Reply(stdout="up" if n >= 1 else "down"))
    fake.host("gpu001").on(r"^probe a", Reply(stdout="up"))
    run = await run_playbook(
        """
        - hosts: gpu
          tasks:
            - shell: change
              notify: restart
          handlers:
            - name: restart
              shell: probe {{ item }}
              register: state
              until: state.stdout == 'up'
              retries: 2
              delay: 0
              loop: [a, b]
        """,
        hosts=["gpu001"],
    )
    assert fake.commands_on("gpu001") == ["change", "probe a", "probe b", "probe b"]
    assert run.recap("gpu001")["failed"] == 0
