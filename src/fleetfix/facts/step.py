"""The play's implicit "Gathering Facts" step, and how gathered facts become host variables.

Ansible runs a setup task before a play's first task when its DEFAULT_GATHERING setting says
so: 'implicit' (the default) unless the play says `gather_facts: false`, 'explicit' only when
it says `gather_facts: true`, 'smart' as implicit but only on hosts without facts from earlier
in the run. Gathered facts are stored twice over the same values (no copy): under
`ansible_facts` (names without the prefix, merged with facts gathered before) and, as Ansible's
INJECT_FACT_VARS default does, each as a top-level `ansible_<name>` variable.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, MutableMapping
from typing import Any

from fleetfix.playbook.model import Play, Step, StepKind

GATHERING_STEP_NAME = "Gathering Facts"
DEFAULT_GATHERING = "implicit"
SMART_KEY = "smart"
"""In the gathering step's args: gather only on hosts without facts yet (gathering: smart)."""
GATHERED_KEY = "module_setup"
"""Set (true) among a host's facts once setup ran on it, as Ansible sets it."""


def gathering_step(play: Play, gathering: str = DEFAULT_GATHERING) -> Step | None:
    """The step to run first in each batch of `play` (ahead of pre_tasks), or None when the
    play does not gather facts under `gathering` (implicit, explicit or smart)."""
    if play.gather_facts is False:
        return None
    if gathering == "explicit" and play.gather_facts is not True:
        return None
    params: dict[str, Any] = {}
    if play.gather_subset:
        params["gather_subset"] = list(play.gather_subset)
    if play.gather_timeout is not None:
        params["gather_timeout"] = max(1, round(play.gather_timeout))
    args: dict[str, Any] = {"module": "gather_facts", "params": params}
    if gathering == "smart":
        args[SMART_KEY] = True
    return Step(
        kind=StepKind.MODULE,
        name=GATHERING_STEP_NAME,
        args=args,
        position=play.position,
        tags=frozenset({"always"}),
    )


def prefixed(facts: Mapping[str, Any], gather_subset: Iterable[str]) -> dict[str, Any]:
    """Facts as setup returns them: `ansible_`-prefixed names, with `gather_subset` and
    `module_setup` (Ansible's registered value of a setup task)."""
    returned = {f"ansible_{name}": value for name, value in facts.items()}
    returned["gather_subset"] = list(gather_subset) or ["all"]
    returned[GATHERED_KEY] = True
    return returned


def store_facts(host_facts: MutableMapping[str, Any], gathered: Mapping[str, Any]) -> None:
    """Gathered facts (setup's return, `prefixed`) into a host's facts: `ansible_facts` merged
    with what it held, and each fact as a top-level variable (same objects, stored once)."""
    current = host_facts.get("ansible_facts")
    merged = dict(current) if isinstance(current, Mapping) else {}
    for name, value in gathered.items():
        merged[name.removeprefix("ansible_")] = value
        host_facts[name] = value
    host_facts["ansible_facts"] = merged


def gathered_already(host_facts: Mapping[str, Any]) -> bool:
    """Whether setup already ran on this host in this run (gathering: smart skips it)."""
    return bool(host_facts.get(GATHERED_KEY))


def is_gathering(step: Step) -> bool:
    """Whether a step gathers facts (setup or gather_facts): a resumed run re-runs it (it only
    reads the node) or restores its facts with `store_facts`, never just its verdict."""
    return step.kind is StepKind.MODULE and step.args.get("module") in ("setup", "gather_facts")
