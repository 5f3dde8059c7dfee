"""An include_role whose role a host chooses: its name (or a file argument) rendered with the
host's variables when it reaches the include, and the role read then (RunOptions.role_loader).

A role that cannot be found or read fails that host's include, as Ansible's run-time error.
The role's handlers cannot join the play once it runs (the play's handler list is fixed when
it starts), so a role read here whose own steps notify one of its own handlers fails the
include, naming the notify: a run-time role cannot be notified, and a literal name makes the
role's handlers the play's.

Each inclusion of a role (each loop item's) runs again a use a meta: end_role ended
(engine/play.py, RoleRuns.again). An include_role with `public: true` gives its role's
defaults and vars to the host's play variables from here on (PlayScope.expose), as
ansible-core adds the role to the play's.
"""

from __future__ import annotations

from typing import Any

from fleetfix.engine.hoststep import HostStep, Outcome
from fleetfix.engine.kinds import INCLUDED_KEY, UNLOADED_KEY
from fleetfix.errors import FleetfixError, PlaybookError
from fleetfix.playbook.conditions import OMIT
from fleetfix.playbook.model import Step
from fleetfix.playbook.role_loader import LoadedRole, RoleRequest

__all__ = ["ROLE_REQUEST_KEY", "included_role", "request_from", "run_time_role"]

ROLE_REQUEST_KEY = "role_args"
"""In a run-time include_role's registered result: the role and files this host included."""


def included_role(hs: HostStep) -> Outcome:
    """A literal include_role on this host (its role was read at load); a public one's
    variables join the host's play variables."""
    layers = hs.step.args.get("public")
    if isinstance(layers, tuple):
        hs.env.scope.expose(hs.state.name, layers)
    return Outcome(data={INCLUDED_KEY: str(hs.step.args["role"])})


def run_time_role(hs: HostStep) -> Outcome:
    """Render the include's role and files for this host and read the role (once per run)."""
    args = hs.step.args["run_time"]
    name = hs.render(args["name"])
    if not isinstance(name, str) or not name.strip() or name == OMIT:
        return Outcome(failed=True, message=f"include_role needs a role name, not {name!r}")
    files: dict[str, str] = {}
    for key, value in args["files"].items():
        rendered = hs.render(value)
        if rendered == OMIT:  # an omitted file argument is not given (main.yml)
            continue
        if not isinstance(rendered, str):
            return Outcome(
                failed=True, message=f"include_role {key} must be a string, not {rendered!r}"
            )
        files[key] = rendered
    playbook_dir = str(hs.variables.get("playbook_dir", "."))
    chosen = {"name": name.strip(), "files": files, "playbook_dir": playbook_dir}
    loader = hs.ctx.options.role_loader
    if loader is None:
        return Outcome(failed=True, message=f"include_role {name}: no role loader in this run")
    try:
        role = loader(request_from(hs.step, chosen))
    except PlaybookError as exc:  # the role's own file: its place; the include's: none
        where = f"{exc.position}: " if exc.position not in (None, hs.step.position) else ""
        hint = f" ({exc.hint})" if exc.hint else ""
        return _unloaded(f"{where}{exc.message}{hint}", name)
    except FleetfixError as exc:
        return _unloaded(str(exc), name)
    refused = _unnotifiable(role, hs.env.play.handlers)
    if refused:
        return Outcome(failed=True, message=refused)
    if hs.step.args.get("public") is True:
        hs.env.scope.expose(hs.state.name, role.layers)
    return Outcome(data={INCLUDED_KEY: chosen["name"], ROLE_REQUEST_KEY: chosen})


def request_from(include: Step, chosen: dict[str, Any]) -> RoleRequest:
    """The role request a host's rendered include_role names (`chosen`: its registered
    ROLE_REQUEST_KEY)."""
    return RoleRequest(
        name=str(chosen["name"]),
        files=tuple(sorted(dict(chosen["files"]).items())),
        playbook_dir=str(chosen["playbook_dir"]),
        position=include.position,
    )


def _unnotifiable(role: LoadedRole, play_handlers: tuple[Step, ...]) -> str:
    """A notify in the role that only the role's own handlers answer, as an error naming it;
    '' when there is none."""
    if not role.handlers:
        return ""
    known = {t for h in play_handlers for t in (h.name, *h.listen)}
    own = {t for h in role.handlers for t in (h.name, *h.listen)}
    for step in _every(role.steps):
        for topic in step.notify:
            if topic in own and topic not in known:
                return (
                    f"{step.position}: notify {topic!r} names a handler of role"
                    f" {role.handlers[0].role.name if role.handlers[0].role else '?'},"
                    " included with a templated name: fleetfix adds a role's handlers to the"
                    " play when it loads, so this one cannot be notified (name the role"
                    " literally in include_role or import_role)"
                )
    return ""


def _every(steps: tuple[Step, ...]) -> list[Step]:
    found: list[Step] = []
    for step in steps:
        found.append(step)
        found.extend(_every((*step.block, *step.rescue, *step.always)))
        inner = step.args.get("steps")
        if isinstance(inner, tuple):
            found.extend(_every(inner))
    return found


def _unloaded(reason: str, name: str) -> Outcome:
    """A role that could not be read: the include fails as ansible-core's (`reason`), and
    counts as failed even when a rescue catches it (engine/play.py)."""
    return Outcome(failed=True, message=reason, data={"include": name, UNLOADED_KEY: reason})
