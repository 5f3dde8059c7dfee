"""Ownership on the node itself: a lease a run takes there before it disrupts the node.

Journal leases only keep apart controllers that share a journal. The node lease is the
backstop that needs none: `/var/lib/fleetfix/lease` on the node, one line naming the run,
its controller and pid, since when and until when (the node's clock: `expires` is the node's
`date +%s` plus the lease's seconds, so two machines' clocks are never compared). Every read
and write happens under `flock` on `/var/lib/fleetfix/lease.lock`, held only while one short
script runs, so a take, a renewal and a release are each atomic on the node; the file itself
is replaced by rename, so a reader without the lock (a human, the lab's truth) never sees half
of it.

A run takes the lease before a host's first disruptive action (engine/remediate.py), renews
every lease it holds while it lives and releases them when it ends, Ctrl-C included. A lease
another live run holds leaves the host `owned`; one that expired, or this run's own (a
resumed run), is taken over; one a shared journal knows to be dead may be taken over early.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shlex
import socket
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from enum import StrEnum
from typing import TYPE_CHECKING

from fleetfix.engine.commands import become_wrap
from fleetfix.engine.gates import Refusal
from fleetfix.errors import TransportError, UsageError
from fleetfix.events import CommandRan
from fleetfix.results import CommandResult
from fleetfix.transport.base import ConnectionSpec
from fleetfix.verdicts import LeftKind

if TYPE_CHECKING:
    from fleetfix.engine.context import RunContext, RunOptions
    from fleetfix.engine.hoststep import HostStep

LEASE_ROOT = "/var/lib/fleetfix"
LEASE_FILE = "lease"
LOCK_FILE = "lease.lock"
SECONDS_ENV = "FLEETFIX_NODE_LEASE_SECONDS"
"""Overrides RunOptions.node_lease_seconds (end-to-end tests use a few seconds)."""
COMMAND_TIMEOUT = 30.0
LOCK_WAIT = 20
"""Seconds a lease script waits for another one on the same node to finish."""
RENEW_FORKS = 50
"""Lease commands in flight at once when renewing or releasing."""
_UNSAFE = re.compile(r"[^A-Za-z0-9._:@-]")


class Mode(StrEnum):
    TAKE = "take"
    RENEW = "renew"
    RELEASE = "release"


class Verdict(StrEnum):
    """The first word a lease script prints."""

    TAKEN = "TAKEN"
    HELD = "HELD"  # another run holds it, alive as far as the node can tell
    RENEWED = "RENEWED"
    LOST = "LOST"  # another run took it over: this run no longer holds the node
    RELEASED = "RELEASED"
    GONE = "GONE"  # nothing to release
    NOT_OURS = "NOT-OURS"
    BAD = "BAD"  # a lease file the script cannot read: refuse, never guess


@dataclass(frozen=True, slots=True)
class LeaseOwner:
    """Who takes leases: this run, from this controller process."""

    run: str
    controller: str
    pid: int

    @classmethod
    def here(cls, run: str) -> LeaseOwner:
        return cls(run, socket.gethostname(), os.getpid())

    def line(self) -> str:
        """The owner's part of a lease line (words without spaces or `=`)."""
        run, controller = _word(self.run), _word(self.controller)
        return f"run={run} controller={controller} pid={self.pid}"


@dataclass(frozen=True, slots=True)
class LeaseRecord:
    """A node's lease line, as the script printed it."""

    run: str
    controller: str
    pid: int | None
    since: int | None
    expires: int | None

    @classmethod
    def parse(cls, line: str) -> LeaseRecord:
        fields = dict(word.partition("=")[::2] for word in line.split())
        return cls(
            run=fields.get("run", ""),
            controller=fields.get("controller", "") or "unknown",
            pid=_number(fields.get("pid")),
            since=_number(fields.get("since")),
            expires=_number(fields.get("expires")),
        )

    def holder(self) -> str:
        """'being remediated by run X from controller Y since T' (T in UTC, ISO 8601)."""
        since = ""
        if self.since is not None:
            when = datetime.fromtimestamp(self.since, UTC).isoformat(timespec="seconds")
            since = f" since {when}"
        return f"being remediated by run {self.run} from controller {self.controller}{since}"


@dataclass(frozen=True, slots=True)
class LeaseAnswer:
    verdict: Verdict
    record: LeaseRecord | None


def lease_script(
    mode: Mode, owner: LeaseOwner, *, seconds: int, root: str = LEASE_ROOT, take_from: str = ""
) -> str:
    """The POSIX sh script that takes, renews or releases the lease under `root`.

    It prints one line, `VERDICT LEASE-LINE` (see Verdict), and exits 0; anything it cannot do
    (create `root`, lock, write) exits 3 with why on stderr. `take_from` names a run
    whose unexpired lease may be taken over (the journal knows it is dead)."""
    lease = shlex.quote(f"{root}/{LEASE_FILE}")
    decide = {
        Mode.TAKE: (
            f'if [ -z "$old" ] || [ -n "$mine" ] || [ -z "$live" ] || {{ [ -n {_q(take_from)} ]'
            f' && [ "$run" = {_q(take_from)} ]; }}; then write; echo "TAKEN $new";'
            ' else echo "HELD $old"; fi'
        ),
        Mode.RENEW: (
            'if [ -z "$old" ] || [ -n "$mine" ]; then write; echo "RENEWED $new";'
            ' else echo "LOST $old"; fi'
        ),
        Mode.RELEASE: (
            'if [ -n "$mine" ]; then rm -f "$lease" || exit 3; echo "RELEASED $old";'
            ' elif [ -z "$old" ]; then echo GONE; else echo "NOT-OURS $old"; fi'
        ),
    }[mode]
    return "\n".join(
        (
            "set -f",
            f"root={shlex.quote(root)}; lease={lease}; me={_q(owner.line())}",
            'mkdir -p "$root" || exit 3',
            f'exec 9>>"$root/{LOCK_FILE}" || exit 3',
            f'flock -w {LOCK_WAIT} 9 || {{ echo "cannot lock $root/{LOCK_FILE}" >&2; exit 3; }}',
            "now=$(date +%s) || exit 3",
            'old=; if [ -e "$lease" ]; then old=$(head -n 1 "$lease") || exit 3;'
            ' [ -n "$old" ] || old=empty; fi',
            "run=; since=; expires=",
            "for f in $old; do case $f in run=*) run=${f#run=};; since=*) since=${f#since=};;"
            " expires=*) expires=${f#expires=};; esac; done",
            'if [ -n "$old" ] && [ -z "$run" ]; then echo "BAD $old"; exit 0; fi',
            f'mine=; [ -n "$old" ] && [ "$run" = {_q(_word(owner.run))} ] && mine=1',
            'live=; case $expires in ""|*[!0-9]*) ;; *) [ "$expires" -gt "$now" ] && live=1;; esac',
            'case $since in ""|*[!0-9]*) since=;; esac; [ -n "$mine" ] || since=',
            f'write() {{ new="$me since=${{since:-$now}} expires=$((now + {int(seconds)}))"; '
            'printf "%s\\n" "$new" >"$lease.new" && mv -f "$lease.new" "$lease" || exit 3; }',
            decide,
        )
    )


def read_answer(result: CommandResult) -> LeaseAnswer | str:
    """The script's verdict, or why there is none (a failed, hung or silent script)."""
    if result.timed_out:
        return f"the lease script timed out after {COMMAND_TIMEOUT:.0f}s"
    words = result.stdout.strip().split(None, 1)
    if result.rc != 0 or not words:
        said = (result.stderr.strip() or result.stdout.strip() or "no output")[:300]
        return f"the lease script failed (rc={result.rc}): {said}"
    try:
        verdict = Verdict(words[0])
    except ValueError:
        return f"the lease script said {result.stdout.strip()[:200]!r}"
    if verdict is Verdict.BAD:
        return f"unreadable lease file: {words[1][:200] if len(words) > 1 else ''!r}"
    record = LeaseRecord.parse(words[1]) if len(words) > 1 else None
    return LeaseAnswer(verdict, record)


@dataclass(frozen=True, slots=True)
class NodeShell:
    """How lease commands reach one node: its own connection (never a step's delegate), with
    the step's become."""

    spec: ConnectionSpec
    become_user: str | None

    async def run(self, ctx: RunContext, script: str) -> CommandResult:
        connection = await ctx.connections.get(self.spec)
        remote = become_wrap(script, self.become_user) if self.become_user else script
        result = await connection.run(remote, timeout=COMMAND_TIMEOUT)
        return replace(result, command=script, parsed=None)


def node_shell(hs: HostStep) -> NodeShell:
    """The step's host, reached as its commands are (become as the step says)."""
    play, step, options = hs.env.play, hs.step, hs.ctx.options
    become = step.become if step.become is not None else (play.become or options.become)
    user = step.become_user or play.become_user or options.become_user
    spec = hs.ctx.spec_factory(hs.state.name, hs.variables)
    return NodeShell(spec, user if become else None)


@dataclass(slots=True)
class NodeLeases:
    """The node leases of one run: taken once per host, renewed while the run lives, released
    at its end (only where the lease is still this run's)."""

    owner: LeaseOwner
    seconds: int = 600
    renew_every: float = 60.0
    root: str = LEASE_ROOT
    is_dead: Callable[[str], bool] | None = None
    """Whether a run is known dead (a shared journal); its unexpired lease may be taken over."""
    held: dict[str, NodeShell] = field(default_factory=dict)
    asked: dict[str, NodeShell] = field(default_factory=dict)
    """Hosts a take was sent to (it may have been taken even if the answer never came)."""
    lost: dict[str, str] = field(default_factory=dict)
    """Hosts whose lease another run took over while this one held it: host -> holder."""
    slots: asyncio.Semaphore = field(default_factory=lambda: asyncio.Semaphore(RENEW_FORKS))
    """Not the run's forks: hosts busy for minutes (a reboot's wait) hold those."""

    async def take(self, hs: HostStep, action: str) -> Refusal | None:
        """None when this run holds the host's lease (taken now or earlier); else why not: the
        holder (`owned`), or why the lease could not be read or taken (`refused`)."""
        host = hs.state.name
        if host in self.held:
            return None
        shell = node_shell(hs)
        answer = await self._take(hs, shell, "")
        if isinstance(answer, LeaseAnswer) and answer.verdict is Verdict.HELD:
            dead = answer.record.run if answer.record is not None else ""
            if dead and self.is_dead is not None and self.is_dead(dead):
                answer = await self._take(hs, shell, dead)
        if isinstance(answer, str):
            return Refusal(
                LeftKind.REFUSED, f"{action} refused: cannot take the node lease: {answer}"
            )
        if answer.verdict is Verdict.TAKEN:
            self.held[host] = shell
            self.lost.pop(host, None)
            return None
        if answer.verdict is Verdict.HELD and answer.record is not None:
            self.asked.pop(host, None)  # another run's: nothing of ours to release there
            return Refusal(LeftKind.OWNED, answer.record.holder())
        return Refusal(LeftKind.REFUSED, f"{action} refused: the node lease said {answer.verdict}")

    async def _take(self, hs: HostStep, shell: NodeShell, take_from: str) -> LeaseAnswer | str:
        script = self.script(Mode.TAKE, take_from)
        self.asked[hs.state.name] = shell
        try:
            result = await shell.run(hs.ctx, script)
        except TransportError as exc:
            return f"{hs.state.name} did not answer: {exc}"
        hs.ctx.bus.emit(CommandRan(host=hs.state.name, step=hs.step.name, result=result))
        return read_answer(result)

    def script(self, mode: Mode, take_from: str = "") -> str:
        return lease_script(
            mode, self.owner, seconds=self.seconds, root=self.root, take_from=take_from
        )

    async def renew(self, ctx: RunContext) -> dict[str, str]:
        """Extend every lease this run holds; host -> why it could not be (a node rebooting
        does not answer: its lease is renewed at the next round). A lease another run took
        over is no longer held: the host's next disruptive action finds that run."""
        answers = await self._each(ctx, self.held, Mode.RENEW)
        problems: dict[str, str] = {}
        for host, answer in answers.items():
            if isinstance(answer, str):
                problems[host] = answer
            elif answer.verdict is Verdict.LOST:
                self.held.pop(host, None)
                holder = answer.record.holder() if answer.record else "another run"
                self.lost[host] = problems[host] = holder
        return problems

    async def release(self, ctx: RunContext) -> dict[str, str]:
        """Give back every lease this run may hold; host -> why not (it expires anyway)."""
        hosts = {**self.asked, **self.held}
        answers = await self._each(ctx, hosts, Mode.RELEASE)
        self.held.clear()
        self.asked.clear()
        return {h: a for h, a in answers.items() if isinstance(a, str)}

    async def renewing(self, ctx: RunContext) -> None:
        """Renew every `renew_every` seconds until cancelled."""
        while True:
            await asyncio.sleep(self.renew_every)
            await self.renew(ctx)

    async def _each(
        self, ctx: RunContext, hosts: Mapping[str, NodeShell], mode: Mode
    ) -> dict[str, LeaseAnswer | str]:
        script = self.script(mode)

        async def one(host: str, shell: NodeShell) -> tuple[str, LeaseAnswer | str]:
            async with self.slots:
                try:
                    return host, read_answer(await shell.run(ctx, script))
                except TransportError as exc:
                    return host, f"{host} did not answer: {exc}"

        pairs: Iterable[tuple[str, LeaseAnswer | str]] = await asyncio.gather(
            *(one(host, shell) for host, shell in list(hosts.items()))
        )
        return dict(pairs)


def node_leases(options: RunOptions) -> NodeLeases | None:
    """This run's node leases, as its options (and FLEETFIX_NODE_LEASE_SECONDS) say; None when
    the run takes none (node_lease_seconds None). In --check none is taken (only a step with
    `check_mode: false` acts), so none is renewed or released.

    Raises:
        UsageError: FLEETFIX_NODE_LEASE_SECONDS is not a number of seconds > 0.
    """
    seconds = options.node_lease_seconds
    override = os.environ.get(SECONDS_ENV, "").strip()
    if override:
        try:
            seconds = float(override)
        except ValueError:
            seconds = 0.0
        if not seconds > 0:
            raise UsageError(f"{SECONDS_ENV}={override!r}: expected a number of seconds > 0")
    if seconds is None:
        return None
    alive = options.run_alive
    is_dead = None if alive is None else (lambda run: alive(run) is False)
    renew = min(options.node_lease_renew, seconds / 4)
    owner = LeaseOwner.here(options.run_id or f"pid-{os.getpid()}")
    return NodeLeases(owner, max(1, round(seconds)), renew, options.node_lease_root, is_dead)


async def stop_renewing(task: asyncio.Task[None] | None) -> None:
    if task is None:
        return
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def _q(text: str) -> str:
    return shlex.quote(text)


def _word(text: str) -> str:
    return _UNSAFE.sub("_", text) or "_"


def _number(text: str | None) -> int | None:
    return int(text) if text is not None and text.isdigit() else None
