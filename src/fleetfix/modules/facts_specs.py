"""The specs of `setup` and `gather_facts` (Ansible's parameters), pure data for specs.py."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from fleetfix.facts.script import DEFAULT_FACT_PATH
from fleetfix.modules.spec import ModuleSpec, Param

_PARAMS: Mapping[str, Param] = {
    "gather_subset": Param("list", default=["all"]),
    "gather_timeout": Param("int", default=10),
    "filter": Param("list", default=[]),
    "fact_path": Param("path", default=DEFAULT_FACT_PATH),
}

FACT_SPECS: Mapping[str, ModuleSpec] = MappingProxyType(
    {
        "setup": ModuleSpec(
            "setup",
            "gather the host's facts (one shell command) into ansible_facts and ansible_* vars",
            _PARAMS,
            read_only=True,
        ),
        "gather_facts": ModuleSpec(
            "gather_facts",
            "gather the host's facts, as the play's implicit Gathering Facts step does",
            {**_PARAMS, "parallel": Param("bool")},
            read_only=True,
        ),
    }
)
"""`setup` and `gather_facts` (gather_facts takes setup's parameters, and `parallel`, which
changes nothing here: one command per host, every host at once)."""
