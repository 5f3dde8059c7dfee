"""The console while a run runs: Ansible's task-by-task stream, or a live view on a terminal.

Off a terminal (a pipe, `| tee`, cron, the e2e tests) the stream is printed as Ansible prints
it: TASK banners, per-host lines, the PLAY RECAP and the hosts left. On a terminal the live
view (report/progress.py) replaces the stream, and `-v` brings the stream back above it, as
ansible-playbook's verbose detail. Either way the run ends with the summary the CLI prints
after the reports (report/summary.py).

Off a terminal nothing here needs rich, so rich is imported only when the console is a
terminal (or may be one: FORCE_COLOR, TTY_COMPATIBLE) or when the run ends: a run's start,
up to its first command, does not pay for it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence, Set
from typing import IO, TYPE_CHECKING, Any, TextIO

from fleetfix.events import (
    BatchStarted,
    CommandRan,
    Event,
    FindingRaised,
    HostLeft,
    HostOutOfService,
    HostStepFinished,
    LoopItemFinished,
    OwnershipOverridden,
    PlayStarted,
    Reconnecting,
    RunFinished,
    RunStarted,
    SafetyStop,
    StepRetry,
    TaskStarted,
)
from fleetfix.results import (
    DEBUG_KEY,
    INTERNAL_PREFIX,
    META_KEY,
    QUIET_KEY,
    RECAP_FIELDS,
    VERBOSE_KEY,
    WARNINGS_KEY,
    HostStats,
    RunResult,
    Status,
    StepResult,
)
from fleetfix.secrets import NO_LOG_TEXT
from fleetfix.verdicts import LeftKind

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.live import Live

    from fleetfix.report.progress import LiveProgress

COLUMNS = 79
_CONTROL_CODES = dict.fromkeys((7, 8, 11, 12, 13))
"""The control codes rich's strip_control_codes removes (bell, backspace, vertical tab, form
feed, carriage return): a plain line is written as rich would write it."""
_TERMINAL_ENV = ("FORCE_COLOR", "TTY_COMPATIBLE")
"""Variables by which rich may take a pipe for a terminal (rich.console.Console.is_terminal)."""
STYLES: Mapping[Status, str] = {
    Status.OK: "green",
    Status.CHANGED: "yellow",
    Status.FAILED: "red",
    Status.UNREACHABLE: "bold red",
    Status.SKIPPED: "cyan",
    Status.IGNORED: "red",
    Status.RESCUED: "magenta",
}


def banner(title: str, columns: int = COLUMNS) -> str:
    """`PLAY [x] *****` padded with stars like Ansible (at least three)."""
    return f"{title} {'*' * max(3, columns - len(title))}"


def recap_line(host: str, stats: HostStats) -> str:
    """One PLAY RECAP line in Ansible's exact format."""
    counts = stats.as_dict()
    fields = " ".join(f"{name}={counts[name]!s:<4}" for name in RECAP_FIELDS)
    return f"{host:<26} : {fields}"


def recap_lines(result: RunResult) -> list[str]:
    return [recap_line(host, result.stats[host]) for host in sorted(result.stats)]


def host_line(result: StepResult, verbosity: int) -> str | None:
    """`ok: [gpu001]`, `fatal: [gpu001]: FAILED! => {...}` and friends; a debug or assert
    result printed whole, as Ansible prints it. None: Ansible prints no line (a meta step)."""
    host = result.host
    if result.status is Status.FAILED:
        return f"fatal: [{host}]: FAILED! => {_details(result, verbosity)}"
    if result.status is Status.UNREACHABLE:
        return f"fatal: [{host}]: UNREACHABLE! => {_details(result, verbosity)}"
    if result.status is Status.IGNORED:
        return f"fatal: [{host}]: FAILED! => {_details(result, verbosity)}\n...ignoring"
    if result.status is Status.OK and isinstance(result.data.get("included"), str):
        return f"included: {result.data['included']} for {host}"  # an include_tasks/_role
    if result.data.get(META_KEY) and result.status is not Status.SKIPPED:
        return None
    word = {Status.SKIPPED: "skipping", Status.CHANGED: "changed"}.get(result.status, "ok")
    line = f"{word}: [{host}]"
    if _censored(result):
        return line + (f" => {_details(result, verbosity)}" if verbosity > 0 else "")
    if _verbose(result):
        return f"{line} => {_dump(_shown(result))}"
    if result.message and (verbosity > 0 or _always_show(result)):
        line += f" => {result.message.rstrip()}"
    if verbosity > 0 and result.status is not Status.SKIPPED:
        line += _verbose_output(result)
    return line


def item_line(result: StepResult, label: str, verbosity: int) -> str:
    """One loop item's line as Ansible prints it: `changed: [gpu001] => (item=0)`,
    `failed: [gpu001] (item=2) => {...}`, `skipping: [gpu001] => (item=1) `."""
    host, item = result.host, f"(item={label})"
    if result.status in (Status.FAILED, Status.IGNORED):
        return f"failed: [{host}] {item} => {_details(result, verbosity)}"
    if result.status is Status.UNREACHABLE:
        return f"fatal: [{host}]: UNREACHABLE! => {item} => {_details(result, verbosity)}"
    if result.status is Status.SKIPPED:
        return f"skipping: [{host}] => {item} "
    if result.status is Status.OK and isinstance(result.data.get("included"), str):
        return f"included: {result.data['included']} for {host} => {item}"
    word = "changed" if result.status is Status.CHANGED else "ok"
    line = f"{word}: [{host}] => {item}"
    if _censored(result):
        return line + (f" => {_details(result, verbosity)}" if verbosity > 0 else "")
    if _verbose(result):
        return f"{line} => {_dump(_shown(result))}"
    if result.message and (verbosity > 0 or _always_show(result)):
        line += f" => {result.message.rstrip()}"
    return line


def warning_lines(result: StepResult) -> list[str]:
    """The warnings a result carries, as Ansible prints them before its line."""
    warnings = result.data.get(WARNINGS_KEY)
    return [f"[WARNING]: {text}" for text in warnings] if isinstance(warnings, list) else []


def looped_line(result: StepResult, verbosity: int) -> str | None:
    """A looped step's own line once its items were printed, as Ansible prints it: none when
    it went well or failed (its items said it), `skipping` when every item was skipped,
    `...ignoring` for an ignored failure; the usual line when the loop itself failed."""
    if result.status in (Status.OK, Status.CHANGED):
        return None
    if result.status is Status.SKIPPED:
        return f"skipping: [{result.host}]"
    if result.status is Status.FAILED:
        return None
    if result.status is Status.IGNORED:
        return "...ignoring"
    return host_line(result, verbosity)


def _step_key(key: str) -> str:
    """A loop item's key without its item part: the key of the step it belongs to."""
    return key[: key.rindex("[")] if key.endswith("]") and "[" in key else key


def _always_show(result: StepResult) -> bool:
    """Messages an operator needs without -v: what fleetfix's probes and actions found or
    did, and check-mode decisions; never an Ansible module's msg, which Ansible shows only
    at -v (QUIET_KEY)."""
    if result.message.startswith("check mode"):
        return True
    return result.status is not Status.SKIPPED and not result.data.get(QUIET_KEY)


def _censored(result: StepResult) -> bool:
    """A no_log step's result: shown as Ansible shows it, `{"censored": ..., "changed": ...}`."""
    return result.data.get("censored") == NO_LOG_TEXT


def _verbose(result: StepResult) -> bool:
    """A result Ansible prints whole without -v (debug, assert unless quiet)."""
    return bool(result.data.get(VERBOSE_KEY))


_DEBUG_HIDDEN = frozenset(
    {"changed", "failed", "skipped", "invocation", "skip_reason"}
    | {"ansible_loop_var", "ansible_index_var", "ansible_loop"}
)
"""What Ansible's callback hides of a `debug: var=` result (CallbackBase._hide_in_debug)."""
_NOT_SHOWN = frozenset(("failed", "skipped"))
"""What Ansible's callback result never holds (executor/task_result.py `_IGNORE`)."""


def _shown(result: StepResult) -> dict[str, Any]:
    """A result as Ansible's default callback prints it: without its internal keys, `failed`
    or `skipped`; a debug result its msg alone, or its var without the keys Ansible hides."""
    data = result.data
    shown = {
        k: v for k, v in data.items() if not k.startswith(INTERNAL_PREFIX) and k not in _NOT_SHOWN
    }
    if not data.get(DEBUG_KEY):
        return shown
    if "msg" in shown:
        return {"msg": shown["msg"]}
    return {k: v for k, v in shown.items() if k not in _DEBUG_HIDDEN}


def _dump(value: Any) -> str:
    """json.dumps as Ansible's _dump_results does for a result it always shows whole."""
    return json.dumps(value, indent=4, sort_keys=True, ensure_ascii=False, default=_jsonable)


def _jsonable(value: Any) -> Any:
    """What json cannot write itself: a mapping or sequence as one, anything else as text."""
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, Sequence | Set) and not isinstance(value, str | bytes):
        return list(value)
    return str(value)


def _details(result: StepResult, verbosity: int) -> str:
    if _censored(result):
        return json.dumps({"censored": NO_LOG_TEXT, "changed": result.changed})
    if _verbose(result):  # a failed assert: printed whole, as Ansible does
        return _dump(_shown(result))
    data: dict[str, Any] = {"changed": result.changed, "msg": result.message}
    for key in ("rc", "stderr", "stdout", "timed_out"):
        value = result.data.get(key)
        if value not in (None, "", False):
            data[key] = _trim(value) if verbosity < 2 else value
    if "assertion" in result.data:  # which assertion failed, as Ansible shows it
        data.update(assertion=result.data["assertion"], evaluated_to=False)
    return json.dumps(data, default=str, sort_keys=True)


def _trim(value: Any, limit: int = 400) -> Any:
    if isinstance(value, str) and len(value) > limit:
        return value[:limit] + f"... ({len(value) - limit} more chars; -vv shows all)"
    return value


def _verbose_output(result: StepResult) -> str:
    stdout = str(result.data.get("stdout", "")).rstrip()
    return f"\n{_trim(stdout, 2000)}" if stdout else ""


class ConsoleView:
    """Subscribes to engine events and prints them. Plain text when not a TTY or NO_COLOR.

    On a terminal the live view is drawn instead of the stream; `verbosity` > 0 prints the
    stream there too. `console` and `clock` are for tests (a forced terminal, a fixed time).
    """

    def __init__(
        self,
        stream: TextIO | None = None,
        *,
        verbosity: int = 0,
        diff: bool = False,
        console: Console | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._stream = stream
        self._console = console
        self.verbosity = verbosity
        self.diff = diff
        self.live = False if console is None and _plain(stream) else self.console.is_terminal
        self.streaming = not self.live or verbosity > 0
        """The task-by-task stream is printed: off a terminal, or with -v."""
        self._progress: LiveProgress | None = None
        self._clock = clock
        self._run_id = ""
        self._live: Live | None = None
        self._titles: dict[str, str] = {}  # step key -> its banner's title
        self._shown_key = ""  # the step whose banner was printed last
        self._itemized: set[tuple[str, str]] = set()  # (host, step key) whose items printed
        self._handlers = self._make_handlers()

    @property
    def console(self) -> Console:
        """rich's console on the stream, made when first needed (a terminal's live view)."""
        if self._console is None:
            from rich.console import Console  # noqa: PLC0415 (see the module docstring)

            self._console = Console(file=self._stream, highlight=False, soft_wrap=True)
        return self._console

    @property
    def progress(self) -> LiveProgress:
        """What the live view shows, kept from the run's events (on a terminal)."""
        if self._progress is None:
            from fleetfix.report.progress import LiveProgress  # noqa: PLC0415 (rich)

            self._progress = LiveProgress()
        return self._progress

    def __call__(self, event: Event) -> None:
        if self.live:
            self.progress(event)
            if self._live is None and not isinstance(event, RunFinished):
                self._start_live()
        handler = self._handlers.get(type(event))
        if handler is not None:
            handler(event)

    def _start_live(self) -> None:
        from rich.live import Live  # noqa: PLC0415 (see the module docstring)

        self._live = Live(
            get_renderable=self._live_view,
            console=self.console,
            transient=True,
            refresh_per_second=4,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._live.start()

    def _live_view(self) -> RenderableType:
        return self.progress.renderable(self._clock())

    def _stop_live(self) -> None:
        if self._live is not None:
            self._live.stop()
            self._live = None

    def _make_handlers(self) -> dict[type[Event], Any]:
        return {
            RunStarted: self._run_started,
            PlayStarted: self._play,
            BatchStarted: self._batch,
            TaskStarted: self._task,
            HostStepFinished: lambda e: self._host(e.result),
            LoopItemFinished: self._item,
            CommandRan: self._command,
            StepRetry: self._retry,
            Reconnecting: self._reconnecting,
            SafetyStop: lambda e: self._say(f"\nSAFETY STOP: {e.reason}", "bold red"),
            FindingRaised: self._finding,
            HostOutOfService: self._out_of_service,
            HostLeft: self._left,
            OwnershipOverridden: self._override,
            RunFinished: lambda e: self._finish(e.result),
        }

    def _left(self, event: HostLeft) -> None:
        # Unhealthy hosts are listed once, at the end. So are deferred ones: the drain step's
        # `parked: ...` line said it live, and the deferral comes at the wait's deadline.
        if event.kind not in (LeftKind.UNHEALTHY, LeftKind.DEFERRED):
            self._say(f"  [{event.host}] {event.reason}", "bold yellow")

    def _override(self, event: OwnershipOverridden) -> None:
        self._say(
            f"  [{event.host}] OWNERSHIP OVERRIDDEN by {event.by}: {event.owner} had it"
            f" ({event.reason})",
            "bold red",
        )

    def _finding(self, event: FindingRaised) -> None:
        hold = " Disruptive actions there are held." if event.hold else ""
        self._say(f"\nFINDING: {event.message}.{hold}", "bold magenta")

    def _out_of_service(self, event: HostOutOfService) -> None:
        if self.verbosity > 0:
            where = f" ({', '.join(event.domains)})" if event.domains else ""
            self._say(f"  [{event.host}] out of service{where}", "dim")

    def _run_started(self, event: RunStarted) -> None:
        self._run_id = event.run_id
        if event.check:
            self._say("CHECK MODE: probes run; mutating steps are planned, not run", "bold")

    def _play(self, event: PlayStarted) -> None:
        if not self.streaming:
            return
        self._say("\n" + banner(f"PLAY [{event.name}]"), "bold")
        if not event.hosts:
            self._say("skipping: no hosts matched", "cyan")

    def _batch(self, event: BatchStarted) -> None:
        if not self.streaming:
            return
        if event.revisit:
            self._say(f"revisit: {', '.join(event.hosts)}", "dim")
        elif event.count > 1:
            self._say(f"batch {event.index}/{event.count}: {', '.join(event.hosts)}", "dim")

    def _retry(self, event: StepRetry) -> None:
        if not self.streaming:
            return
        left = event.retries - event.attempt
        self._say(
            f"FAILED - RETRYING: [{event.host}]: {event.step} ({left} retries left).", "yellow"
        )

    def _reconnecting(self, event: Reconnecting) -> None:
        if self.verbosity > 0:
            self._say(
                f"  [{event.host}] {event.why}; reconnecting in {event.delay:g}s"
                f" (try {event.tries + 1}) for a read-only command",
                "yellow",
            )

    def _say(self, text: str, style: str | None = None) -> None:
        if self.live:
            from rich.text import Text  # noqa: PLC0415 (see the module docstring)

            self.console.print(Text(text, style=style or ""))
        else:
            # Not a terminal: rich would print the same plain line (no styles, no wrapping),
            # at about a millisecond a line; 50,000 host lines in a 10,000-host run.
            # Flushed per line, as rich does: `fleetfix run ... | tee` shows progress live.
            out = self._out()
            out.write(text.translate(_CONTROL_CODES) + "\n")
            out.flush()

    def _out(self) -> IO[str]:
        """Where plain lines go: the stream given, else sys.stdout as it is now (as rich's
        console writes to the sys.stdout of the moment: a test's capture)."""
        if self._console is not None:
            return self._console.file
        return self._stream if self._stream is not None else sys.stdout

    def _task(self, event: TaskStarted) -> None:
        if event.block or not self.streaming:
            return  # Ansible prints no banner for a block, only for the steps in it
        kind = "RUNNING HANDLER" if event.handler else "TASK"
        title = f"{kind} [{event.name}]"
        self._titles[event.key] = title
        self._shown_key = event.key
        self._say("\n" + banner(title), "bold")

    def _host(self, result: StepResult) -> None:
        if not self.streaming:
            return
        self._under_banner(result.key)
        for warning in warning_lines(result):
            self._say(warning, "bold magenta")
        line: str | None = host_line(result, self.verbosity)
        if (result.host, result.key) in self._itemized:
            self._itemized.discard((result.host, result.key))
            line = looped_line(result, self.verbosity)
        if line is not None:
            self._say(line, STYLES.get(result.status))

    def _item(self, event: LoopItemFinished) -> None:
        if not self.streaming:
            return
        result = event.result
        step_key = _step_key(result.key)
        self._under_banner(step_key)
        self._itemized.add((result.host, step_key))
        for warning in warning_lines(result):
            self._say(warning, "bold magenta")
        self._say(item_line(result, event.label, self.verbosity), STYLES.get(result.status))

    def _under_banner(self, key: str) -> None:
        """Show a result under its own step's banner, as Ansible's default callback does: hosts
        walk blocks on their own, so a result may come after another step's banner."""
        if key != self._shown_key and key in self._titles:
            self._shown_key = key
            self._say("\n" + banner(self._titles[key]), "bold")

    def _command(self, event: CommandRan) -> None:
        if event.planned_only:
            self._say(f"  [{event.host}] would run: {event.result.command}", "yellow")
        elif self.verbosity >= 2 or (self.diff and event.result.rc is not None):
            self._say(f"  [{event.host}] ran: {event.result.command} (rc={event.result.rc})", "dim")

    def _finish(self, result: RunResult) -> None:
        self._stop_live()
        if result.interrupted:
            self._say("\nINTERRUPTED: stopped cleanly; finished steps are kept.", "bold red")
        if not self.streaming:
            return  # the summary after the reports says it all
        self._say("\n" + banner("PLAY RECAP"), "bold")
        for host in sorted(result.stats):
            stats = result.stats[host]
            style = (
                "red"
                if stats.failed or stats.unreachable
                else ("yellow" if stats.changed else "green")
            )
            self._say(recap_line(host, stats), style)
        from fleetfix.report.summary import left_lines  # noqa: PLC0415 (rich: the end)

        left = left_lines(result.verdicts.values(), self._run_id)
        if left:
            self._say("\nLEFT UNHEALTHY OR UNTOUCHED (the run exits non-zero for these):", "bold")
            for line in left:
                self._say(line.plain, "yellow")
        self._say("")


def _plain(stream: TextIO | None) -> bool:
    """Whether rich would certainly not take `stream` (None: sys.stdout) for a terminal: it is
    not a tty and no variable says otherwise. In doubt, False: rich decides."""
    if any(name in os.environ for name in _TERMINAL_ENV):
        return False
    isatty = getattr(stream if stream is not None else sys.stdout, "isatty", None)
    try:
        return isatty is None or not isatty()
    except ValueError:  # a closed file: rich says no terminal too
        return True


__all__ = ["ConsoleView", "banner", "host_line", "item_line", "recap_line", "recap_lines"]
