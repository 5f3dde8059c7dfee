"""Module name -> the coroutine that runs it on a host, and the engine's entry point."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import Any

from fleetfix.engine.hoststep import HostStep, Outcome
from fleetfix.modules import copy, files, lineinfile, package, ping, raw, reboot, services, waits
from fleetfix.modules import facts as fact_modules
from fleetfix.modules import include_vars as vars_modules
from fleetfix.modules.call import KindHandlers, ModuleCall, ModuleFailed
from fleetfix.modules.spec import ModuleArgsError, resolve
from fleetfix.modules.specs import MODULE_SPECS
from fleetfix.playbook.conditions import OMIT
from fleetfix.playbook.module_defaults import DEFAULTS_KEY, with_defaults

ModuleRunner = Callable[[ModuleCall], Awaitable[Outcome]]

IMPLEMENTATIONS: Mapping[str, ModuleRunner] = MappingProxyType(
    {
        "raw": raw.raw,
        "ping": ping.ping,
        "pause": waits.pause,
        "wait_for_connection": waits.wait_for_connection,
        "wait_for": waits.wait_for,
        "reboot": reboot.reboot,
        "systemd": services.systemd,
        "service": services.service,
        "stat": files.stat,
        "slurp": files.slurp,
        "file": files.file,
        "tempfile": files.tempfile,
        "copy": copy.copy,
        "template": copy.template,
        "lineinfile": lineinfile.lineinfile,
        "setup": fact_modules.setup,
        "gather_facts": fact_modules.gather_facts,
        "package": package.package,
        "apt": package.apt,
        "dnf": package.dnf,
        "yum": package.yum,
        "include_vars": vars_modules.include_vars,
    }
)


def without_omitted(params: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments without those rendered to `omit` (`mode: "{{ m | default(omit) }}"`),
    as Ansible leaves them out: the module sees its default."""
    return {key: value for key, value in params.items() if value != OMIT}


def _defaults(hs: HostStep) -> Any:
    """The module_defaults that reach the step, a template among them rendered now.

    Raises:
        ModuleArgsError: a templated default is not a mapping once rendered.
    """
    defaults = hs.step.args.get(DEFAULTS_KEY)
    if not isinstance(defaults, str):
        return defaults
    rendered = hs.render(defaults)
    if not isinstance(rendered, Mapping):
        raise ModuleArgsError(
            f"module_defaults for {hs.step.args['module']} must be a mapping of arguments,"
            f" not {type(rendered).__name__}"
        )
    return rendered


async def run_module(hs: HostStep, handlers: KindHandlers) -> Outcome:
    """Resolve the step's rendered arguments against the module's spec and run it; wrong
    arguments (known only once rendered on this host) fail this host's step, saying why."""
    spec = MODULE_SPECS[str(hs.step.args["module"])]
    try:
        given = dict(hs.step.args.get("params") or {})
        params = resolve(spec, without_omitted(hs.render(with_defaults(given, _defaults(hs)))))
    except ModuleArgsError as exc:
        return Outcome(failed=True, message=str(exc), registers_command=False)
    call = ModuleCall(hs, spec, params, handlers)
    try:
        return await IMPLEMENTATIONS[spec.name](call)
    except ModuleFailed as exc:
        return call.failure(str(exc), **exc.data)
