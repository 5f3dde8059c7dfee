"""Cap slots: how controllers that share no journal keep a domain's cap between them.

Two engineers with their own journals share the nodes, not a database. A domain's slots live
on its first member in natural order (its *cap node*) under /var/lib/fleetfix/caps/KIND-NAME/,
one file per host taken out, naming the run and an expiry on the node's clock, written under
`flock` so that counting and claiming are one step. A slot only has to bridge the seconds
between a decision and the scheduler showing the node drained (the drain is the first
disruptive action); it lapses after the node lease's lifetime, and a run clears its own slots
for the hosts it returned to service when it ends. A cap node that cannot be reached holds the
action. docs/team.md tells what holds with one journal, several, or none shared.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import TYPE_CHECKING

from fleetfix.engine.commands import vars_for
from fleetfix.engine.node_lease import NodeShell, node_shell
from fleetfix.errors import TransportError
from fleetfix.events import CommandRan
from fleetfix.topology.caps import DomainCap
from fleetfix.topology.graph import natural_sorted

if TYPE_CHECKING:
    from fleetfix.engine.context import RunContext
    from fleetfix.engine.hoststep import HostStep

SLOT_SECONDS = 600
"""How long a slot outlives a controller that never cleared it (the node lease's default)."""
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass(frozen=True, slots=True)
class CapSlot:
    """A host's slot in one domain, on the domain's cap node."""

    host: str
    domain: str  # directory name under caps/
    shell: NodeShell


async def claim(hs: HostStep, domains: list[DomainCap]) -> list[CapSlot] | str:
    """A slot in every capped domain of the host, or none (those taken are cleared) and why."""
    taken: list[CapSlot] = []
    for domain in domains:
        slot = await _claim_one(hs, domain)
        if isinstance(slot, str):
            await clear(hs.ctx, taken)
            return slot
        taken.append(slot)
    return taken


async def _claim_one(hs: HostStep, domain: DomainCap) -> CapSlot | str:
    ctx, host = hs.ctx, hs.state.name
    cap_node = natural_sorted(domain.members)[0]
    known = sorted(ctx.safety.known_out(domain, host))
    slug = _UNSAFE.sub("_", domain.label.replace(" ", "-"))
    script = slot_script(
        root=ctx.options.node_lease_root,
        domain=slug,
        run=_word(ctx.options.run_id),
        host=host,
        cap=domain.cap,
        known=known,
        seconds=SLOT_SECONDS,
    )
    mine = node_shell(hs)
    shell = NodeShell(ctx.spec_factory(cap_node, vars_for(ctx, cap_node)), mine.become_user)
    try:
        result = await shell.run(ctx, script)
    except TransportError as exc:
        return f"cannot count {domain.label}'s slots on its cap node {cap_node}: {exc}"
    ctx.bus.emit(CommandRan(host=host, step=hs.step.name, result=result))
    words = result.stdout.split()
    if result.rc != 0 or not words or words[0] not in ("TAKEN", "FULL"):
        said = (result.stderr.strip() or result.stdout.strip() or "no output")[:200]
        return f"cannot count {domain.label}'s slots on {cap_node} (rc={result.rc}): {said}"
    if words[0] == "FULL":
        return (
            f"max_unavailable_per reached in {domain.label} across controllers "
            f"(cap {domain.cap}; out: {', '.join(words[1:]) or 'none named'})"
        )
    return CapSlot(host, slug, shell)


def slot_script(
    *, root: str, domain: str, run: str, host: str, cap: int, known: list[str], seconds: int
) -> str:
    """Count the domain's live slots of other runs plus `known` (out by this run or the
    scheduler) and, below `cap`, write `host`'s slot; one step under the caps lock. Prints
    `TAKEN`, or `FULL host(run) ...`; exits 3 when it cannot."""
    q = shlex.quote
    return "\n".join(
        (
            f"root={q(root)}; dir={q(f'{root}/caps/{domain}')}; me={q(run)}; host={q(host)}",
            f"out=' {' '.join(known)} '; named={q(' '.join(known))}",
            'mkdir -p "$dir" || exit 3',
            'exec 9>>"$root/caps.lock" || exit 3',
            'flock -w 20 9 || { echo "cannot lock $root/caps.lock" >&2; exit 3; }',
            "now=$(date +%s) || exit 3",
            'for f in "$dir"/*; do [ -f "$f" ] || continue; name=${f##*/}',
            "  case $name in *.new) continue;; esac",
            '  read -r frun fexp < "$f" || fexp=',
            '  case $fexp in ""|*[!0-9]*) rm -f "$f"; continue;; esac',
            '  [ "$fexp" -gt "$now" ] || { rm -f "$f"; continue; }',
            '  [ "$frun" = "$me" ] && continue; [ "$name" = "$host" ] && continue',
            '  case $out in *" $name "*) continue;; esac',
            '  out="$out$name "; named="$named $name(run:$frun)"',
            "done",
            "n=0; for h in $out; do n=$((n + 1)); done",
            f'if [ "$n" -ge {int(cap)} ]; then echo "FULL $named"; exit 0; fi',
            f'printf "%s %s\\n" "$me" "$((now + {int(seconds)}))" > "$dir/$host.new"'
            ' && mv -f "$dir/$host.new" "$dir/$host" || exit 3',
            "echo TAKEN",
        )
    )


def clear_script(*, root: str, domain: str, run: str, host: str) -> str:
    """Remove `host`'s slot in the domain if it is still this run's."""
    q = shlex.quote
    return "\n".join(
        (
            f"root={q(root)}; f={q(f'{root}/caps/{domain}/{host}')}; me={q(run)}",
            'exec 9>>"$root/caps.lock" || exit 3',
            "flock -w 20 9 || exit 3",
            '[ -f "$f" ] || exit 0',
            'read -r frun fexp < "$f" || exit 0',
            '[ "$frun" = "$me" ] && rm -f "$f"',
            "exit 0",
        )
    )


async def release_slots(ctx: RunContext) -> None:
    """At the end of a run: clear the slots of hosts it returned to service (those still out,
    drained for a human, keep theirs until they lapse; the scheduler shows them out anyway)."""
    back = [slot for slot in ctx.cap_slots if slot.host not in ctx.safety.out]
    await clear(ctx, back)
    ctx.cap_slots[:] = [slot for slot in ctx.cap_slots if slot not in back]


async def clear(ctx: RunContext, slots: list[CapSlot]) -> None:
    for slot in slots:
        script = clear_script(
            root=ctx.options.node_lease_root,
            domain=slot.domain,
            run=_word(ctx.options.run_id),
            host=slot.host,
        )
        try:
            await slot.shell.run(ctx, script)
        except TransportError:
            continue  # it lapses on its own


def _word(text: str) -> str:
    return _UNSAFE.sub("_", text) or "_"
