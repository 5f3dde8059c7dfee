"""Engine control flow over the fake transport: the Ansible semantics operators rely on."""

from __future__ import annotations

import asyncio

from fleetfix.errors import UnreachableError
from fleetfix.events import BatchStarted, CommandRan, HostStepFinished, SafetyStop, TaskStarted
from fleetfix.results import Outcome
from fleetfix.transport.fake import FakeTransport, Reply

from .conftest import Runner

HOSTS = ["gpu001", "gpu002", "gpu003"]


async def test_recap_counts_ok_changed_skipped(run_playbook: Runner, fake: FakeTransport) -> None:
    run = await run_playbook(
        """
        - hosts: gpu
          tasks:
            - name: look
              shell: echo hi
              changed_when: false
            - name: change
              shell: touch /tmp/x
            - name: never
              shell: echo never
              when: false
        """,
        hosts=HOSTS,
    )
    for host in HOSTS:
        assert run.recap(host) == {
            "ok": 2,
            "changed": 1,
            "unreachable": 0,
            "failed": 0,
            "skipped": 1,
            "rescued": 0,
            "ignored": 0,
        }
        assert "echo never" not in fake.commands_on(host)
    assert run.result.outcome() is Outcome.OK


async def test_register_and_when_gate_on_output(run_playbook: Runner, fake: FakeTransport) -> None:
    fake.host("gpu001").on("count_gpus", Reply(stdout="7\n"))
    fake.host("gpu002").on("count_gpus", Reply(stdout="8\n"))
    run = await run_playbook(
        """
        - hosts: gpu
          tasks:
            - shell: count_gpus
              register: gpus
              changed_when: false
            - name: fix missing gpu
              shell: fix_it
              when: gpus.stdout | int < 8
        """,
        hosts=["gpu001", "gpu002"],
    )
    assert "fix_it" in fake.commands_on("gpu001")
    assert "fix_it" not in fake.commands_on("gpu002")
    assert run.recap("gpu002")["skipped"] == 1


async def test_until_retries_until_condition_holds(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    fake.host("gpu001").on("state", lambda _c, n: Reply(stdout="DRAINED" if n >= 2 else "DRAINING"))
    run = await run_playbook(
        """
        - hosts: gpu
          tasks:
            - name: wait for drain
              shell: state
              register: st
              until: "'DRAINED' in st.stdout"
              retries: 5
              delay: 0
        """,
        hosts=["gpu001"],
    )
    assert fake.commands_on("gpu001").count("state") == 3
    result = run.result.results[0]
    assert result.attempts == 3 and result.status.value == "changed"


async def test_until_exhausted_fails(run_playbook: Runner, fake: FakeTransport) -> None:
    fake.host("gpu001").on("state", Reply(stdout="DRAINING"))
    run = await run_playbook(
        """
        - hosts: gpu
          tasks:
            - shell: state
              register: st
              until: "'DRAINED' in st.stdout"
              retries: 2
              delay: 0
        """,
        hosts=["gpu001"],
    )
    assert fake.commands_on("gpu001").count("state") == 3  # retries: 2 is 3 attempts, as Ansible
    assert run.recap("gpu001")["failed"] == 1
    assert run.result.outcome() is Outcome.HOST_FAILED


async def test_failed_when_and_ignore_errors(run_playbook: Runner, fake: FakeTransport) -> None:
    fake.host("gpu001").on("nvsmi", Reply(stdout="Xid 79", rc=0))
    fake.host("gpu001").on("false", Reply(rc=1))
    run = await run_playbook(
        """
        - hosts: gpu
          tasks:
            - shell: "false"
              ignore_errors: true
            - shell: nvsmi
              register: out
              failed_when: "'Xid' in out.stdout"
            - shell: after
        """,
        hosts=["gpu001"],
    )
    assert [status for _, status in run.statuses("gpu001")] == ["ignored", "failed"]
    assert "after" not in fake.commands_on("gpu001")
    assert run.recap("gpu001")["ignored"] == 1


async def test_block_rescue_always(run_playbook: Runner, fake: FakeTransport) -> None:
    fake.host("gpu001").on("risky", Reply(rc=2, stderr="boom"))
    run = await run_playbook(
        """
        - hosts: gpu
          tasks:
            - block:
                - shell: risky
                - shell: not_reached
              rescue:
                - shell: rescue_it
              always:
                - shell: cleanup
            - shell: next_step
        """,
        hosts=["gpu001", "gpu002"],
    )
    assert fake.commands_on("gpu001") == ["risky", "rescue_it", "cleanup", "next_step"]
    assert fake.commands_on("gpu002") == ["risky", "not_reached", "cleanup", "next_step"]
    assert run.recap("gpu001")["rescued"] == 1
    assert run.recap("gpu001")["failed"] == 0
    assert run.result.outcome() is Outcome.OK


async def test_always_runs_after_unrescued_failure(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    fake.host("gpu001").on("risky", Reply(rc=1))
    run = await run_playbook(
        """
        - hosts: gpu
          tasks:
            - block:
                - shell: risky
              always:
                - shell: cleanup
            - shell: next_step
        """,
        hosts=["gpu001"],
    )
    assert fake.commands_on("gpu001") == ["risky", "cleanup"]
    assert run.result.outcome() is Outcome.HOST_FAILED


async def test_handlers_run_once_in_definition_order(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    fake.host("gpu002").on("maybe", Reply(rc=0))
    run = await run_playbook(
        """
        - hosts: gpu
          tasks:
            - shell: change_a
              notify: [second, first]
            - shell: change_b
              notify: second
              when: inventory_hostname == 'gpu001'
          handlers:
            - name: first
              shell: handler_first
            - name: second
              shell: handler_second
        """,
        hosts=["gpu001", "gpu002"],
    )
    assert fake.commands_on("gpu001") == ["change_a", "change_b", "handler_first", "handler_second"]
    assert fake.commands_on("gpu002") == ["change_a", "handler_first", "handler_second"]
    assert any(isinstance(e, TaskStarted) and e.handler for e in run.events)


async def test_handler_not_run_without_change(run_playbook: Runner, fake: FakeTransport) -> None:
    await run_playbook(
        """
        - hosts: gpu
          tasks:
            - shell: look
              changed_when: false
              notify: restart
          handlers:
            - name: restart
              shell: restart_it
        """,
        hosts=["gpu001"],
    )
    assert fake.commands_on("gpu001") == ["look"]


async def test_serial_batches_and_max_fail_percentage(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    hosts = [f"gpu{i:03d}" for i in range(1, 9)]
    fake.host("gpu001").on("work", Reply(rc=1))
    fake.host("gpu002").on("work", Reply(rc=1))
    run = await run_playbook(
        """
        - hosts: gpu
          serial: 4
          max_fail_percentage: 25
          tasks:
            - shell: work
        """,
        hosts=hosts,
    )
    # 2 of 4 failed in batch 1: 50% > 25%, so batch 2 never starts.
    assert all(not fake.commands_on(h) for h in hosts[4:])
    assert run.result.outcome() is Outcome.SAFETY_ABORT
    assert any(isinstance(e, SafetyStop) for e in run.events)


async def test_max_fail_percentage_must_be_exceeded(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    hosts = [f"gpu{i:03d}" for i in range(1, 9)]
    fake.host("gpu001").on("work", Reply(rc=1))
    run = await run_playbook(
        """
        - hosts: gpu
          serial: "50%"
          max_fail_percentage: 25
          tasks:
            - shell: work
        """,
        hosts=hosts,
    )
    # 1 of 4 = 25%, not exceeded: both batches run.
    assert all(fake.commands_on(h) == ["work"] for h in hosts)
    assert run.result.outcome() is Outcome.HOST_FAILED


async def test_serial_list_last_value_repeats(run_playbook: Runner, fake: FakeTransport) -> None:
    hosts = [f"gpu{i:03d}" for i in range(1, 8)]
    run = await run_playbook(
        """
        - hosts: gpu
          serial: [1, 2]
          tasks:
            - shell: work
        """,
        hosts=hosts,
    )
    sizes = [len(e.hosts) for e in run.events if isinstance(e, BatchStarted)]
    assert sizes == [1, 2, 2, 2]


async def test_any_errors_fatal_stops_everyone(run_playbook: Runner, fake: FakeTransport) -> None:
    fake.host("gpu001").on("first", Reply(rc=1))
    await run_playbook(
        """
        - hosts: gpu
          any_errors_fatal: true
          tasks:
            - shell: first
            - shell: second
        """,
        hosts=["gpu001", "gpu002"],
    )
    assert "second" not in fake.commands_on("gpu002")


async def test_unreachable_host_reported_others_finish(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    fake.host("gpu002").unreachable = "connection refused"
    run = await run_playbook(
        """
        - hosts: gpu
          tasks:
            - shell: one
            - shell: two
        """,
        hosts=["gpu001", "gpu002"],
    )
    assert fake.commands_on("gpu001") == ["one", "two"]
    assert run.recap("gpu002")["unreachable"] == 1
    assert run.result.outcome() is Outcome.UNREACHABLE


async def test_connection_lost_midway_is_unreachable(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    fake.host("gpu001").on("reboot-ish", Reply(drop=True))
    run = await run_playbook(
        """
        - hosts: gpu
          tasks:
            - shell: reboot-ish
            - shell: after
        """,
        hosts=["gpu001"],
    )
    assert run.recap("gpu001")["unreachable"] == 1
    assert "after" not in fake.commands_on("gpu001")


async def test_hung_command_times_out_and_fails(run_playbook: Runner, fake: FakeTransport) -> None:
    fake.host("gpu001").on("nvidia-smi", Reply(hang=True))
    run = await run_playbook(
        """
        - hosts: gpu
          tasks:
            - shell: nvidia-smi
              timeout: 0.05
        """,
        hosts=["gpu001", "gpu002"],
    )
    failed = next(r for r in run.result.results if r.host == "gpu001")
    assert failed.status.value == "failed"
    assert "timed out" in failed.message
    assert run.recap("gpu002")["ok"] == 1


async def test_check_mode_runs_nothing_mutating(run_playbook: Runner, fake: FakeTransport) -> None:
    run = await run_playbook(
        """
        - hosts: gpu
          tasks:
            - shell: rm -rf /dev/shm/nccl-*
            - shell: cat /proc/version
              check_mode: false
              changed_when: false
        """,
        hosts=["gpu001"],
        check=True,
    )
    assert fake.commands_on("gpu001") == ["cat /proc/version"]
    planned = [e.result.command for e in run.events if isinstance(e, CommandRan) and e.planned_only]
    assert planned == ["rm -rf /dev/shm/nccl-*"]


async def test_run_once_and_delegate_to(run_playbook: Runner, fake: FakeTransport) -> None:
    fake.host("head01").on("sinfo", Reply(stdout="idle\n"))
    run = await run_playbook(
        """
        - hosts: gpu
          tasks:
            - shell: sinfo
              delegate_to: head01
              run_once: true
              register: si
              changed_when: false
            - shell: "echo {{ si.stdout | trim }}"
        """,
        inventory="[gpu]\ngpu001\ngpu002\n[head]\nhead01\n",
    )
    assert fake.commands_on("head01") == ["sinfo"]
    assert fake.commands_on("gpu001") == ["echo idle"]
    assert fake.commands_on("gpu002") == ["echo idle"]
    assert run.result.outcome() is Outcome.OK


async def test_tags_select_and_skip(run_playbook: Runner, fake: FakeTransport) -> None:
    book = """
        - hosts: gpu
          tasks:
            - shell: probe_it
              tags: [probe]
            - shell: fix_it
              tags: [fix]
            - shell: always_it
              tags: [always]
            - shell: never_it
              tags: [never]
    """
    await run_playbook(book, hosts=["gpu001"], tags=frozenset({"probe"}))
    assert fake.commands_on("gpu001") == ["probe_it", "always_it"]
    fake.ran.clear()
    await run_playbook(book, hosts=["gpu001"], skip_tags=frozenset({"fix"}))
    assert fake.commands_on("gpu001") == ["probe_it", "always_it"]


async def test_free_strategy_lets_fast_hosts_finish(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    fake.host("gpu001").on("slow", Reply(hang=True))
    run = await run_playbook(
        """
        - hosts: gpu
          strategy: free
          tasks:
            - shell: slow
              timeout: 0.2
            - shell: done
        """,
        hosts=["gpu001", "gpu002"],
    )
    assert fake.commands_on("gpu002") == ["slow", "done"]
    assert run.recap("gpu001")["failed"] == 1


GPU_COUNT_CHECK = """
- hosts: gpu
  vars:
    expected: 8
  tasks:
    - set_fact:
        seen: 7
    - assert:
        that: seen == expected
        fail_msg: "expected {{ expected }} GPUs, saw {{ seen }}"
"""


async def test_set_fact_assert_and_extra_vars(run_playbook: Runner, fake: FakeTransport) -> None:
    run = await run_playbook(
        GPU_COUNT_CHECK,
        hosts=["gpu001"],
        extra_vars={"expected": 7},
    )
    assert run.result.outcome() is Outcome.OK
    run = await run_playbook(
        GPU_COUNT_CHECK,
        hosts=["gpu001"],
    )
    failed = run.result.results[-1]
    assert failed.message == "expected 8 GPUs, saw 7"


async def test_remote_output_is_never_rendered(run_playbook: Runner, fake: FakeTransport) -> None:
    fake.host("gpu001").on("evil", Reply(stdout="{{ 7 * 7 }}"))
    await run_playbook(
        """
        - hosts: gpu
          tasks:
            - shell: evil
              register: out
            - shell: "echo {{ out.stdout | quote }}"
        """,
        hosts=["gpu001"],
    )
    assert fake.commands_on("gpu001")[1] == "echo '{{ 7 * 7 }}'"


async def test_failed_hosts_skip_later_plays(run_playbook: Runner, fake: FakeTransport) -> None:
    fake.host("gpu001").on("first", Reply(rc=1))
    await run_playbook(
        """
        - hosts: gpu
          tasks:
            - shell: first
        - hosts: gpu
          tasks:
            - shell: second
        """,
        hosts=["gpu001", "gpu002"],
    )
    assert fake.commands_on("gpu001") == ["first"]
    assert fake.commands_on("gpu002") == ["first", "second"]


async def test_cancel_stops_cleanly_and_marks_interrupted(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    fake.host("gpu001").on("long", Reply(hang=True))
    task = asyncio.create_task(
        run_playbook(
            """
            - hosts: gpu
              tasks:
                - shell: quick
                - shell: long
            """,
            hosts=["gpu001"],
        )
    )
    while "long" not in fake.commands_on("gpu001"):
        await asyncio.sleep(0.001)
    task.cancel()
    run = await task
    assert run.result.interrupted
    assert run.result.outcome() is Outcome.INTERRUPTED
    assert run.recap("gpu001")["changed"] == 1  # the finished step is kept
    assert fake.closed


async def test_an_error_on_the_way_out_of_a_cancel_is_no_verdict(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    """Ctrl-C closes every connection as the run stops, maybe under a command being killed:
    asyncssh then fails with errors of its own (seen in CI: AttributeError, AssertionError).
    Such an error is not the host's verdict: journaled as failed (or unreachable), a resumed
    run would replay the failure instead of running the step."""
    started = {"gpu001": asyncio.Event(), "gpu002": asyncio.Event()}
    errors: dict[str, Exception] = {
        "gpu001": AttributeError("'NoneType' object has no attribute 'session_started'"),
        "gpu002": UnreachableError("gpu002", "connection lost: closed"),
    }
    for host, error in errors.items():

        def hang(_command: str, _hits: int, host: str = host, error: Exception = error) -> Reply:
            started[host].set()
            return Reply(hang=True, cancel_error=error)

        fake.host(host).on("long", hang)
    task = asyncio.create_task(
        run_playbook(
            """
            - hosts: gpu
              tasks:
                - shell: quick
                - name: long one
                  shell: long
            """,
            hosts=["gpu001", "gpu002"],
        )
    )
    for event in started.values():
        await event.wait()
    task.cancel()
    run = await task
    assert run.result.interrupted
    verdicts = [
        e.result
        for e in run.events
        if isinstance(e, HostStepFinished) and e.result.step == "long one"
    ]
    assert verdicts == []
    assert run.recap("gpu001")["failed"] == 0 and run.recap("gpu002")["unreachable"] == 0


async def test_end_host_does_not_stop_later_batches(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    run = await run_playbook(
        """
        - hosts: gpu
          serial: 1
          tasks:
            - meta: end_host
              when: inventory_hostname != 'gpu003'
            - shell: only_on_three
        """,
        hosts=["gpu001", "gpu002", "gpu003"],
    )
    assert fake.commands_on("gpu003") == ["only_on_three"]
    assert fake.commands_on("gpu001") == []
    assert run.result.outcome() is Outcome.OK


async def test_a_batch_that_fails_entirely_ends_the_play(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    fake.host("gpu001").on("work", Reply(rc=1))
    await run_playbook(
        """
        - hosts: gpu
          serial: 1
          tasks:
            - shell: work
        """,
        hosts=["gpu001", "gpu002"],
    )
    assert fake.commands_on("gpu002") == []


async def test_a_meta_step_whose_when_fails_fails_the_host(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    """A meta step is left out of the recap, unless its `when` could not be evaluated: then
    the host failed there, and the recap, the verdict and the exit code say so (a runbook's
    "skip busy nodes" end_host must never pass silently when it cannot read its facts)."""
    run = await run_playbook(
        """
        - hosts: gpu
          tasks:
            - name: look
              probe: slurm_node
              register: slurm
              ignore_errors: true
            - name: skip busy nodes
              meta: end_host
              when: slurm.nothing_here
            - name: act
              shell: echo acted
        """,
        hosts=HOSTS,
    )
    for host in HOSTS:
        assert run.recap(host)["failed"] == 1
        assert "echo acted" not in fake.commands_on(host)
    assert run.result.outcome() is Outcome.HOST_FAILED


async def test_a_probe_result_keeps_failed_and_skipped(
    run_playbook: Runner, fake: FakeTransport
) -> None:
    """fleetfix's own probe and action results keep `failed` and `skipped` whatever the
    outcome (Ansible's modules register Ansible's key set): runbooks read `r.skipped`."""
    run = await run_playbook(
        """
        - hosts: gpu
          tasks:
            - name: look
              probe: slurm_node
              register: slurm
              ignore_errors: true
            - name: read the keys
              assert:
                that:
                  - slurm.skipped is false
                  - slurm.failed is boolean
        """,
        hosts=HOSTS,
    )
    for host in HOSTS:
        assert run.recap(host)["failed"] == 0
