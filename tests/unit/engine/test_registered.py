"""Registered command results and retries as Ansible has them, over the fake transport."""

from __future__ import annotations

import pytest

from fleetfix.transport.fake import FakeTransport, Reply, Responder

from .conftest import Runner


async def test_stdout_is_registered_without_its_trailing_newline(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    fake.host("gpu001").on("say", Reply(stdout="hello\n", stderr="warn\r\n"))
    run = await run_playbook(
        """
        - hosts: gpu
          tasks:
            - shell: say
              register: out
            - assert:
                that:
                  - out.stdout == 'hello'
                  - out.stdout_lines == ['hello']
                  - out.stderr == 'warn'
        """,
        hosts=["gpu001"],
    )
    assert run.recap("gpu001")["failed"] == 0


def _flaky(_command: str, attempt: int) -> Reply:
    return Reply(rc=0 if attempt >= 2 else 1)


RETRIES = [
    # (what the command answers, the step's keywords, attempts made, hosts failed), as ansible-core
    # 2.19 runs them (checked with ansible-playbook -c local)
    pytest.param(_flaky, "retries: 5", 3, 0, id="retries-without-until-retry-until-not-failed"),
    pytest.param(Reply(rc=1), "retries: 2", 3, 1, id="retries-make-n-plus-one-attempts"),
    pytest.param(
        Reply(stdout="DRAINING"),
        "register: out, until: \"'DRAINED' in out.stdout\", retries: 0",
        1, 0, id="zero-retries-run-once-even-with-until",
    ),
    pytest.param(
        Reply(stdout="DRAINING"),
        "register: out, until: \"'DRAINED' in out.stdout\", retries: 1, failed_when: false",
        2, 0, id="failed-when-overrides-an-exhausted-until",
    ),
    pytest.param(
        Reply(rc=3), "register: out, until: out.rc == 3, retries: 2", 1, 1,
        id="until-holding-does-not-clear-a-failure",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("answer", "keywords", "attempts", "failed"), RETRIES)
async def test_retries_as_ansible_has_them(
    run_playbook: Runner,
    fake: FakeTransport,
    answer: Reply | Responder,
    keywords: str,
    attempts: int,
    failed: int,
) -> None:
    fake.host("gpu001").on("probe_it", answer)
    run = await run_playbook(
        f"""
        - hosts: gpu
          tasks:
            - {{shell: probe_it, delay: 0, {keywords}}}
        """,
        hosts=["gpu001"],
    )
    assert fake.commands_on("gpu001").count("probe_it") == attempts
    assert run.recap("gpu001")["failed"] == failed
