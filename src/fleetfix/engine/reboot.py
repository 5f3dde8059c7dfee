"""Commands that take the host away (reboot): send, wait for a new boot id, and tell later
whether an interrupted one happened."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time

from fleetfix.actions.base import PlannedCommand
from fleetfix.engine.hoststep import HostStep
from fleetfix.errors import UnreachableError
from fleetfix.results import CommandResult

BOOT_ID_COMMAND = "cat /proc/sys/kernel/random/boot_id"
DEFAULT_REBOOT_WAIT = 900.0


async def boot_id(hs: HostStep) -> str | None:
    """The host's boot id now; None when it cannot be reached (it may be rebooting)."""
    try:
        result = await hs.command(BOOT_ID_COMMAND, timeout=30, read_only=True)
    except UnreachableError:
        await hs.ctx.connections.drop(hs.state.name)
        return None
    value = result.stdout.strip()
    return value if result.ok and value else None


def reboot_wait(hs: HostStep) -> float:
    expected = hs.step.expect_unreachable
    return expected.seconds if expected is not None else DEFAULT_REBOOT_WAIT


async def send_reboot_like(hs: HostStep, planned: PlannedCommand, before: str) -> CommandResult:
    """Run a command that takes the host away, then wait for it to return with a new boot id.

    The connection dropping under the command is what a reboot looks like, but also what a
    flaky link does before the command ran: then the boot id decides, as for an interrupted
    run's reboot (`was_delivered`), and one that never happened is not sent again."""
    started = time.monotonic()
    sent: CommandResult | None = None
    if planned.on_controller:
        sent = await on_controller(planned)
        if not sent.ok:
            return sent  # the BMC said no (or was not reached): nothing is going away
    else:
        sent_at = time.time()
        try:
            sent = await hs.command(planned.command, timeout=planned.timeout or 30)
        except UnreachableError as exc:  # expected: the host goes away under us
            if before and not await was_delivered(hs, before, sent_at):
                return _not_delivered(hs, planned, exc, started)
    if sent is not None and sent.rc not in (0, None) and await boot_id(hs) == before:
        return sent  # refused (e.g. scontrol reboot said no): nothing is going away
    await hs.ctx.connections.drop(hs.state.name)
    return await back_with_new_boot(hs, planned.command, before, started)


def _not_delivered(
    hs: HostStep, planned: PlannedCommand, exc: UnreachableError, started: float
) -> CommandResult:
    """The connection dropped under the command and the boot id never changed: it did not
    happen, and it is not sent again on a link that drops."""
    grace = hs.ctx.options.resume_grace
    message = (
        f"connection lost during {planned.why} ({exc.message}) and the boot id did not change "
        f"in {grace:g}s: it did not happen; not repeated: needs a human"
    )
    return CommandResult(planned.command, None, "", message, time.monotonic() - started)


async def on_controller(planned: PlannedCommand) -> CommandResult:
    """Run a planned command on the controller (a BMC power cycle), its secrets in `env`."""
    started = time.monotonic()
    timeout = planned.timeout or 60
    proc = await asyncio.create_subprocess_shell(
        planned.command,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, **planned.env},
        start_new_session=True,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(), timeout)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        message = f"timed out after {timeout:g}s on the controller"
        return CommandResult(planned.command, None, "", message, timeout, timed_out=True)
    elapsed = time.monotonic() - started
    stdout, stderr = out.decode("utf-8", "replace"), err.decode("utf-8", "replace")
    return CommandResult(planned.command, proc.returncode, stdout, stderr, elapsed)


async def back_with_new_boot(
    hs: HostStep, command: str, before: str, started: float
) -> CommandResult:
    wait = reboot_wait(hs)
    new_id = await await_new_boot(hs, before, wait)
    elapsed = time.monotonic() - started
    if new_id is None:
        message = f"host did not come back with a new boot id within {wait:g}s"
        return CommandResult(command, None, "", message, elapsed, timed_out=True)
    return CommandResult(command, 0, f"back with boot id {new_id}", "", elapsed)


async def answering(hs: HostStep, wait: float) -> bool:
    """Wait up to `wait` seconds for the host to answer (a reboot an interrupted run sent may
    still be under way); True once it does."""
    deadline = time.monotonic() + wait
    while await boot_id(hs) is None:
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(hs.ctx.options.reconnect_poll)
    return True


async def await_new_boot(hs: HostStep, old_boot_id: str, wait: float) -> str | None:
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        now_id = await boot_id(hs)
        if now_id is not None and now_id != old_boot_id:
            return now_id
        await asyncio.sleep(hs.ctx.options.reconnect_poll)
    return None


async def was_delivered(hs: HostStep, old_boot_id: str, intent_at: float) -> bool:
    """Did an interrupted reboot happen? Yes once the boot id changed or the host is away;
    no when the old boot id is still there `resume_grace` seconds after the intent (the command
    is detached with a 1 s delay, so a delivered reboot takes the host down well before)."""
    deadline = intent_at + hs.ctx.options.resume_grace
    while True:
        now_id = await boot_id(hs)
        if now_id != old_boot_id:
            return True
        if time.time() >= deadline:
            return False
        await asyncio.sleep(max(0.05, min(hs.ctx.options.reconnect_poll, 1.0)))
