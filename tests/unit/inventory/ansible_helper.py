"""Run by the oracle tests under the venv's Python: ask ansible-core itself, many questions at once.

Usage: python ansible_helper.py REQUEST.json; prints a JSON answer. Starting Ansible costs about
a second, answering one question a millisecond, so one process answers a batch:

- {"mode": "patterns", "sources": [...], "queries": [{"pattern": P} | {"limit": L}, ...]}
  -> one {"hosts": [...]} or {"error": "..."} per query (InventoryManager.get_hosts/subset);
- {"mode": "verdicts", "cases": {NAME: [SOURCE, ...], ...}}
  -> {NAME: null when Ansible accepts the inventory, else its error}: the inventory is loaded
  and every host's variables computed, which is what `ansible-inventory --list` does.

The tests cross-check samples of both against the real CLIs, so what is compared is the CLI's
behaviour; the settings (strict parsing) come from the environment, as for the CLIs.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from ansible.inventory.manager import InventoryManager
from ansible.parsing.dataloader import DataLoader
from ansible.vars.manager import VariableManager


def _answer(manager: Any, query: dict[str, str]) -> dict[str, Any]:
    try:
        if "limit" in query:
            manager.subset(query["limit"])
            hosts = manager.get_hosts("all")
        else:
            hosts = manager.get_hosts(query["pattern"])
    except Exception as exc:  # any Ansible failure is an answer
        return {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        manager.subset(None)
        manager.clear_pattern_cache()
    return {"hosts": [host.name for host in hosts]}


def _patterns(request: dict[str, Any]) -> Any:
    manager = InventoryManager(loader=DataLoader(), sources=request["sources"])
    return [_answer(manager, query) for query in request["queries"]]


def _verdict(sources: list[str]) -> str | None:
    try:
        loader = DataLoader()
        manager = InventoryManager(loader=loader, sources=sources)
        variables = VariableManager(loader=loader, inventory=manager)
        for host in manager.get_hosts("all"):
            variables.get_vars(host=host, include_hostvars=False, stage="all")
    except Exception as exc:  # any Ansible failure is a rejection
        return f"{type(exc).__name__}: {exc}"
    return None


def main() -> None:
    with open(sys.argv[1], encoding="utf-8") as handle:
        request = json.load(handle)
    if request["mode"] == "patterns":
        answer = _patterns(request)
    else:
        answer = {name: _verdict(sources) for name, sources in request["cases"].items()}
    print(json.dumps(answer))


if __name__ == "__main__":
    main()
