"""A play's `vars_files`, read as ansible-core 2.19's VariableManager reads them.

Each entry is a file name or a list of alternatives (the first that exists is read). Names
are templates rendered with the variables known at that point: extra vars, the play's vars,
the files read before it and, for a host, its inventory vars (`vars/{{ site }}.yml` with
`site` an inventory var picks a file per host). A name that cannot be rendered yet (an
undefined variable) is skipped, as Ansible skips it. A file is looked for in the play's
directory, its `vars/` first (ansible's path_dwim_relative_stack with 'vars').
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol

from fleetfix.errors import FleetfixError, PlaybookError
from fleetfix.playbook.conditions import is_template
from fleetfix.playbook.extravars import load_vars_file

VarsFileEntry = str | tuple[str, ...]
"""One `vars_files` entry: a name, or alternatives (the first found is read)."""


class _Renders(Protocol):
    def render(self, value: Any, variables: Mapping[str, Any]) -> Any: ...


def is_templated(entries: Sequence[VarsFileEntry]) -> bool:
    """Does any entry (or alternative) name its file with a template?"""
    return any(
        is_template(name)
        for entry in entries
        for name in (entry if isinstance(entry, tuple) else (entry,))
    )


def read_vars_files(
    templar: _Renders,
    entries: Sequence[VarsFileEntry],
    variables: Mapping[str, Any],
    base: Path,
) -> dict[str, Any]:
    """The variables of every entry, later files over earlier ones.

    Raises:
        PlaybookError: a rendered file is found by none of the alternatives, or is not a
            mapping of variable names (positioned in the file).
    """
    merged: dict[str, Any] = {}
    for entry in entries:
        alternatives = entry if isinstance(entry, tuple) else (entry,)
        seen = {**variables, **merged}
        try:
            names = [str(templar.render(name, seen)) for name in alternatives]
        except FleetfixError:
            continue  # Ansible: "skipping vars_file ... due to an undefined variable"
        found = next((p for name in names for p in _candidates(name, base) if p.is_file()), None)
        if found is None:
            shown = names[0] if isinstance(entry, str) else "[" + ", ".join(names) + "]"
            raise PlaybookError(f"vars file {shown} was not found", hint=f"looked in {base}")
        merged.update(load_vars_file(found))
    return merged


def _candidates(name: str, base: Path) -> list[Path]:
    path = Path(os.path.expanduser(name))
    if path.is_absolute():
        return [path]
    if name.split("/", maxsplit=1)[0] == "vars":
        return [base / path]
    return [base / "vars" / path, base / path]
