"""Registered command results and retries as Ansible has them, over the fake transport."""

from __future__ import annotations

from fleetfix.transport.fake import FakeTransport, Reply

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


async def test_retries_without_until_retry_until_not_failed(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    fake.host("gpu001").on("flaky", lambda _c, n: Reply(rc=0 if n >= 2 else 1))
    run = await run_playbook(
        """
        - hosts: gpu
          tasks:
            - shell: flaky
              retries: 5
              delay: 0
        """,
        hosts=["gpu001"],
    )
    assert fake.commands_on("gpu001").count("flaky") == 3
    assert run.result.results[0].status.value == "changed"


async def test_retries_make_n_plus_one_attempts(run_playbook: Runner, fake: FakeTransport) -> None:
    fake.host("gpu001").on("broken", Reply(rc=1))
    run = await run_playbook(
        """
        - hosts: gpu
          tasks:
            - shell: broken
              retries: 2
              delay: 0
            """,
        hosts=["gpu001"],
    )
    assert fake.commands_on("gpu001").count("broken") == 3
    assert run.recap("gpu001")["failed"] == 1


async def test_zero_retries_run_once_even_with_until(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    fake.host("gpu001").on("state", Reply(stdout="DRAINING"))
    run = await run_playbook(
        """
        - hosts: gpu
          tasks:
            - shell: state
              register: st
              until: "'DRAINED' in st.stdout"
              retries: 0
        """,
        hosts=["gpu001"],
    )
    # Ansible does not even evaluate `until` with retries: 0: the one attempt's verdict stands.
    assert fake.commands_on("gpu001").count("state") == 1
    assert run.recap("gpu001")["failed"] == 0


async def test_failed_when_overrides_an_exhausted_until(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    fake.host("gpu001").on("state", Reply(stdout="DRAINING"))
    run = await run_playbook(
        """
        - hosts: gpu
          tasks:
            - shell: state
              register: st
              until: "'DRAINED' in st.stdout"
              retries: 1
              delay: 0
              failed_when: false
        """,
        hosts=["gpu001"],
    )
    assert fake.commands_on("gpu001").count("state") == 2
    assert run.recap("gpu001")["failed"] == 0


async def test_until_holding_does_not_clear_a_failure(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    fake.host("gpu001").on("check", Reply(rc=3))
    run = await run_playbook(
        """
        - hosts: gpu
          tasks:
            - shell: check
              register: out
              until: out.rc == 3
              retries: 2
              delay: 0
        """,
        hosts=["gpu001"],
    )
    assert fake.commands_on("gpu001").count("check") == 1
    assert run.recap("gpu001")["failed"] == 1
