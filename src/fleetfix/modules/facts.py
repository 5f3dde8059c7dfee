"""`setup` and `gather_facts`: the host's facts in one command (facts/script.py), parsed on the
controller (facts/parse.py) and set as Ansible sets them: `ansible_facts` and each fact as a
top-level `ansible_<name>` variable (INJECT_FACT_VARS, Ansible's default).

The registered value is Ansible's: `ansible_facts` with `ansible_`-prefixed names. The journal
keeps it once, in the step's row; the command's output is read into facts (a probe's short
excerpt is kept, not the whole env and mounts a second time).
"""

from __future__ import annotations

from typing import Any

from fleetfix.engine.hoststep import Outcome
from fleetfix.facts.parse import parse_facts
from fleetfix.facts.script import facts_command
from fleetfix.facts.step import SMART_KEY, gathered_already, prefixed, store_facts
from fleetfix.facts.subsets import SubsetError, filtered, selected
from fleetfix.modules.call import ModuleCall, ModuleFailed
from fleetfix.probes.base import Probe

TIMEOUT_FACTOR = 3
"""Ansible gives each collector `gather_timeout`; the one command that does all of them gets
three times it."""

FACTS_PROBE: Probe[dict[str, Any]] = Probe(
    name="setup",
    summary="the host's facts, Ansible's names (facts/parse.py)",
    command=lambda params: facts_command(selected(params.get("gather_subset"))),
    parse=parse_facts,
)
"""Runs the command as a probe's: read-only (retried on a fresh connection), and journaled
with a probe's short excerpt, since its facts are the evidence."""


async def setup(call: ModuleCall) -> Outcome:
    hs, params = call.hs, call.params
    if hs.step.args.get(SMART_KEY) and gathered_already(hs.state.gathered):
        return Outcome(skipped=True, message="facts gathered already (gathering: smart)")
    try:
        collectors = selected(params["gather_subset"])
    except SubsetError as exc:
        raise ModuleFailed(str(exc)) from exc
    python = hs.variables.get("ansible_python_interpreter") or "python3"
    command = facts_command(
        collectors, fact_path=str(params["fact_path"]), python=str(hs.render(python))
    )
    timeout = float(params["gather_timeout"]) * TIMEOUT_FACTOR
    result = await hs.command(command, timeout=timeout, probe=FACTS_PROBE)
    call.commands.append(result)
    if result.timed_out:
        raise ModuleFailed(f"facts gathering timed out after {timeout:g}s")
    parsed = result.parsed
    facts: dict[str, Any] = {}
    if parsed is not None and isinstance(parsed.facts, dict):
        facts = parsed.facts
    elif result.rc != 0:
        said = (result.stderr.strip() or result.stdout.strip())[:300]
        raise ModuleFailed(f"facts gathering failed: {said or f'exit status {result.rc}'}")
    facts = filtered(facts, params["filter"])
    gathered = prefixed(facts, [str(s) for s in params["gather_subset"]])
    store_facts(hs.state.gathered, gathered)
    return call.outcome(ansible_facts=gathered)


gather_facts = setup
"""Ansible's gather_facts module runs setup (its `parallel` changes nothing here)."""
