"""no_log in the engine: a step's record hides what it set and printed, what it produced is
masked wherever it shows up later, and a resumed run sets a hidden fact again."""

from __future__ import annotations

from pathlib import Path

from fleetfix.events import CommandRan, HostStepFinished
from fleetfix.results import JournaledStep, ResumeState, Status
from fleetfix.secrets import MASK, NO_LOG_TEXT
from fleetfix.transport.fake import FakeTransport, Reply
from tests.unit.engine.conftest import Runner

TOKEN = "tok-8472-secret-value"


async def test_a_no_log_steps_record_hides_its_values_and_later_steps_mask_them(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    fake.host("gpu001").on(r"fetch", Reply(stdout="fetched-9911\n"))
    run = await run_playbook(
        f"""
        - hosts: gpu
          tasks:
            - set_fact:
                token: "{TOKEN}"
              no_log: true
            - shell: fetch
              no_log: true
            - fail:
                msg: "bad {{{{ token }}}}"
              no_log: true
              ignore_errors: true
            - shell: "use {{{{ token }}}} fetched-9911"
        """,
        hosts=["gpu001"],
    )
    assert fake.commands_on("gpu001")[-1] == f"use {TOKEN} fetched-9911"  # the real value ran
    steps = [e.result for e in run.events if isinstance(e, HostStepFinished)]
    assert steps[0].data["ansible_facts"] == {"token": NO_LOG_TEXT}
    assert steps[0].data["censored"] == NO_LOG_TEXT
    assert steps[2].message == NO_LOG_TEXT
    commands = [e.result.command for e in run.events if isinstance(e, CommandRan)]
    assert commands[-1] == f"use {MASK} {MASK}"
    assert TOKEN not in repr(run.events)
    assert "fetched-9911" not in repr(run.events)


async def test_a_resumed_run_sets_a_no_log_fact_again(
    run_playbook: Runner, fake: FakeTransport, tmp_path: Path
) -> None:
    book = tmp_path / "playbook.yml"
    journaled = JournaledStep(Status.OK, False, "", {"ansible_facts": {"token": NO_LOG_TEXT}})
    masked = JournaledStep(Status.OK, False, "", {"ansible_facts": {"url": f"db://u:{MASK}@h"}})
    resume = ResumeState(
        run_id="r1", steps={("gpu001", f"{book}:4:7"): journaled, ("gpu001", f"{book}:7:7"): masked}
    )
    await run_playbook(
        f"""
        - hosts: gpu
          tasks:
            - set_fact:
                token: "{TOKEN}"
              no_log: true
            - set_fact:
                url: "db://u:{{{{ db_password }}}}@h"
            - shell: "use {{{{ token }}}} {{{{ url }}}}"
        """,
        hosts=["gpu001"],
        resume=resume,
        extra_vars={"db_password": "pw-1234"},
    )
    assert fake.commands_on("gpu001") == [f"use {TOKEN} db://u:pw-1234@h"]


async def test_debug_var_masks_a_secret_whose_repr_escapes_it(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    """`debug: var=` shows repr(value): a password with a quote and a backslash comes out
    escaped there (pa\\'ss"w\\\\rd), which exact-string masking does not match. It is masked
    before repr."""
    password = "pa'ss\"w\\rd-7731"
    run = await run_playbook(
        """
        - hosts: gpu
          tasks:
            - debug:
                var: db_password
        """,
        hosts=["gpu001"],
        secrets=(password,),
        extra_vars={"db_password": password},
    )
    (step,) = [e.result for e in run.events if isinstance(e, HostStepFinished)]
    assert step.message == f"db_password: {MASK!r}", step.message
    assert "rd-7731" not in str(step)
