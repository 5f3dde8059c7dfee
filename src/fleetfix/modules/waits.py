"""Waiting modules: `pause` (a fixed time; prompts are refused at load: no one answers them at
3 a.m.) and `wait_for_connection` (until the node answers over the transport again)."""

from __future__ import annotations

import asyncio
import time
from datetime import datetime

from fleetfix.engine.hoststep import Outcome
from fleetfix.errors import UnreachableError
from fleetfix.modules.call import ModuleCall


async def pause(call: ModuleCall) -> Outcome:
    minutes, seconds = call.params["minutes"], call.params["seconds"]
    wait = float(minutes) * 60 if minutes is not None else float(seconds or 0)
    start = datetime.now()
    await asyncio.sleep(max(0.0, wait))
    stop = datetime.now()
    delta = int((stop - start).total_seconds())
    said = f"{float(minutes)} minutes" if minutes is not None else f"{wait} seconds"
    return call.outcome(
        start=str(start),
        stop=str(stop),
        delta=delta,
        user_input="",
        echo=call.params["echo"],
        rc=0,
        stderr="",
        stdout=f"Paused for {said}",
    )


async def wait_for_connection(call: ModuleCall) -> Outcome:
    """Ansible's loop: after `delay`, try a trivial command every `sleep` seconds until one
    answers within `connect_timeout`, for at most `timeout` seconds."""
    params = call.params
    started = time.monotonic()
    await asyncio.sleep(params["delay"])
    deadline = started + params["timeout"]
    last = "no attempt"
    while True:
        try:
            result = await call.hs.command("true", timeout=params["connect_timeout"])
            if result.ok:
                return call.outcome(elapsed=int(time.monotonic() - started))
            last = result.stderr.strip() or f"exit status {result.rc}"
        except UnreachableError as exc:
            await call.hs.ctx.connections.drop(call.host)
            last = str(exc)
        if time.monotonic() + params["sleep"] >= deadline:
            return call.failure(
                f"timed out waiting for connection port up: {last}",
                elapsed=int(time.monotonic() - started),
            )
        await asyncio.sleep(params["sleep"])
