"""The HTML report's hosts table: failing hosts first, each headed by its verdict (label,
reason, evidence, next step) before its steps behind a click; every other host folded into one
`<details>`; every long or repeated command and output written once at the end of the page.

The bytes of a fleet's report are here: 64 hosts running the same steps repeat the same
commands 64 times. So what is the same on every host is written once (the commands a step
runs everywhere, above the table; long or repeated texts, at the end) and each host's evidence
holds what is its own: verdicts, times, messages, its own commands, the output of what failed.
"""

from __future__ import annotations

import operator
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from functools import reduce

from fleetfix.report.model import CommandRecord, HostReport, Report, StepRecord
from fleetfix.report.svg import esc, esc_text
from fleetfix.report.text import excerpt

SHARED_ABOVE = 160
"""Commands and outputs longer than this are written once and linked (see `_Texts`)."""
INLINE_UP_TO = 40
"""A command or output of at most this many characters is written in place even when several
steps show it: a link would cost as much."""
HTML_OUTPUT_CHARS = 1200
"""Output shown per command, head and tail (the JSON report keeps the full excerpt)."""
OUTPUT_SHOWN_FOR = frozenset({"failed", "ignored", "unreachable", "rescued"})
"""Step statuses whose command output the page shows."""
HOST_MARK = "\x00"
"""Where a host's own name stood in one of its commands (see `_keys`)."""
RECAP_KEYS = ("ok", "changed", "failed", "unreachable", "skipped", "rescued", "ignored")


def host_reason(host: HostReport) -> str | None:
    """Why a host needs a look, in one line: its verdict's reason (None for a good one)."""
    if not host.verdict.failing:
        return None
    return host.verdict.reason or host.verdict.kind.meaning


@dataclass(frozen=True, slots=True)
class HostsHtml:
    """The hosts section and the section of shared texts it links to (written last)."""

    hosts: str
    texts: str


def hosts_html(report: Report, anchors: Mapping[str, str]) -> HostsHtml:
    """The hosts table, worst first (`anchors`: host -> its row's id), and its shared texts:
    the failing hosts in sight, the others in one closed `<details>` that counts them."""
    common = _Common(_usual_commands(report), _skipped_by_all(report))
    texts = _Texts(_shown_texts(report, common))
    ordered = sorted(report.hosts, key=lambda h: h.status.rank)
    failing = [h for h in ordered if h.verdict.failing]
    fine = [h for h in ordered if not h.verdict.failing]
    shown = _table("hosts failing", failing, anchors, texts, common) if failing else _NONE_FAILING
    folded = _folded(fine, anchors, texts, common)
    section = (
        '<section id="hosts"><h2>Hosts</h2><p class="muted">Failing hosts first, worst first, '
        "each with its verdict, evidence and next step; open a host for its steps and commands "
        "(output for failed steps; the JSON report has all of it).</p>"
        f"{_common_steps(common, texts)}{shown}{folded}</section>"
    )
    return HostsHtml(section, texts.section())


_HEAD = "".join(
    f"<th>{name}</th>"
    for name in ("Host", "Verdict", "Why", *RECAP_KEYS, "Leaf", "Rack", "busbw GB/s")
)
_NONE_FAILING = '<p class="muted">No host is failing.</p>'


def _table(
    css: str, hosts: list[HostReport], anchors: Mapping[str, str], texts: _Texts, common: _Common
) -> str:
    rows = "".join(_host_rows(h, anchors[h.name], texts, common) for h in hosts)
    return f'<table class="{css}"><thead><tr>{_HEAD}</tr></thead><tbody>{rows}</tbody></table>'


def _folded(
    hosts: list[HostReport], anchors: Mapping[str, str], texts: _Texts, common: _Common
) -> str:
    """The hosts that do not fail the run, in one closed `<details>` whose summary counts them
    by verdict."""
    if not hosts:
        return ""
    counts = Counter(h.status for h in hosts)
    words = " ".join(
        f'<span class="n v-{kind.value}">{counts[kind]} {esc_text(kind.label)}</span>'
        for kind in sorted(counts, key=lambda k: k.rank)
    )
    return (
        f'<details class="fine-hosts"><summary>{len(hosts)} hosts not failing: {words}</summary>'
        f"{_table('hosts', hosts, anchors, texts, common)}</details>"
    )


class _Texts:
    """Long or repeated commands and outputs, each written once at the end of the page and
    linked from every step that shows it. `shown` counts how often each text would appear:
    one shown more than once is shared even when short (a 200-character nccl-tests command
    on every host)."""

    def __init__(self, shown: Counter[str]) -> None:
        self._shown = shown
        self._ids: dict[str, int] = {}

    def ref(self, text: str, label: str, *, short: bool = False) -> str:
        """A link to the text's one copy (`short`: just its number); a short text, or one
        shown once that is not long, is written in place."""
        if len(text) <= INLINE_UP_TO or (len(text) <= SHARED_ABOVE and self._shown[text] < 2):
            return f"<pre>{esc_text(text)}</pre>" if label else f"<code>$ {esc_text(text)}</code>"
        number = self._ids.setdefault(text, len(self._ids) + 1)
        preview = text.strip().splitlines()[0][:40] if text.strip() else ""
        words = f"{label} #{number}" if label else f"$ {preview}… #{number}"
        return f'<a href="#t{number}">{esc_text(f"#{number}" if short else words)}</a>'

    def section(self) -> str:
        if not self._ids:
            return ""
        items = "".join(
            f'<div id="t{number}"><span class="muted">#{number}</span>'
            f"<pre>{esc_text(text)}</pre></div>"
            for text, number in self._ids.items()
        )
        return (
            '<section id="texts"><h2>Commands and output</h2><p class="muted">Each long or '
            f"repeated command or output once; the steps above link here.</p>{items}</section>"
        )


def _passes(step: StepRecord) -> bool:
    """A step shown in one line: not failed, ignored, unreachable or rescued, and every one of
    its commands ran and exited 0."""
    unusual = any(c.rc != 0 or c.timed_out or c.planned_only for c in step.commands)
    return step.status not in OUTPUT_SHOWN_FOR and not unusual


@dataclass(frozen=True, slots=True)
class _Usual:
    """A command a step runs on every host: `key` is it with the host's own name taken out,
    `example` as one host (`host`) ran it."""

    key: str
    example: str
    host: str


@dataclass(frozen=True, slots=True)
class _Common:
    """What every host's evidence would repeat, said once above the table: the commands each
    step runs everywhere (step name -> them) and the steps every host skipped."""

    usual: Mapping[str, tuple[_Usual, ...]]
    skipped: frozenset[str]


def _usual_commands(report: Report) -> dict[str, tuple[_Usual, ...]]:
    """Step name -> the commands it ran every time it passed, on at least two hosts, in the
    order of its first run; a command that differs only by the host's own name (a reservation
    named after the node) counts as the same. A passing step's line on a host then shows only
    its own commands; the usual ones are listed once, above the table."""
    runs: dict[str, list[StepRecord]] = {}
    for host in report.hosts:
        for step in host.steps:
            if step.status != "skipped" and _passes(step):
                runs.setdefault(step.step, []).append(step)
    usual: dict[str, tuple[_Usual, ...]] = {}
    for name, seen in runs.items():
        common = reduce(operator.and_, (Counter(_keys(step)) for step in seen))
        if len(seen) > 1 and common:
            first = seen[0]
            kept = _in_order(_keys(first), common)
            examples = dict(zip(_keys(first), (c.command for c in first.commands), strict=True))
            usual[name] = tuple(_Usual(key, examples[key], first.host) for key in kept)
    return usual


def _keys(step: StepRecord) -> list[str]:
    """The step's commands with the host's own name, as a whole word, replaced by a NUL (which
    no command holds: the collector replaced control characters)."""
    own = re.compile(rf"(?<![A-Za-z0-9]){re.escape(step.host)}(?![A-Za-z0-9])")
    return [own.sub(HOST_MARK, c.command) if step.host else c.command for c in step.commands]


def _in_order(keys: Iterable[str], wanted: Counter[str]) -> list[str]:
    """The keys that `wanted` counts, in their order, each as many times as `wanted` says."""
    left = wanted.copy()
    kept = []
    for key in keys:
        if left[key] > 0:
            left[key] -= 1
            kept.append(key)
    return kept


def _own_commands(step: StepRecord, common: _Common) -> list[str]:
    """A passing step's commands without the ones it runs on every host."""
    everywhere = Counter(u.key for u in common.usual.get(step.step, ()))
    own = []
    for key, command in zip(_keys(step), step.commands, strict=True):
        if everywhere[key] > 0:
            everywhere[key] -= 1
        else:
            own.append(command.command)
    return own


def _shown_texts(report: Report, common: _Common) -> Counter[str]:
    """How many times each command and each shown output excerpt would appear on the page."""
    shown: Counter[str] = Counter(u.example for run in common.usual.values() for u in run)
    for host in report.hosts:
        for step in host.steps:
            if step.status == "skipped":
                continue
            if _passes(step):
                shown.update(_own_commands(step, common))
                continue
            with_output = _output_shown(step)
            for index, command in enumerate(step.commands):
                shown[command.command] += 1
                if index in with_output:
                    shown.update(text for _, text in _outputs(command))
    return shown


def _skipped_by_all(report: Report) -> frozenset[str]:
    """The steps every host (of at least two that ran any step) skipped."""
    skipped = [
        {s.step for s in host.steps if s.status == "skipped"} for host in report.hosts if host.steps
    ]
    return frozenset(set.intersection(*skipped)) if len(skipped) > 1 else frozenset()


def _common_steps(common: _Common, texts: _Texts) -> str:
    """What is the same in every host's evidence, said once."""
    said = []
    if common.usual:
        items = " · ".join(
            f"<b>{esc_text(name)}</b> {' '.join(_usual_ref(u, texts) for u in run)}"
            for name, run in common.usual.items()
        )
        said.append(
            "What each step ran on every host where it passed (a host's steps list only their "
            f"own commands): {items}."
        )
    if common.skipped:
        said.append(f"Skipped on every host: {esc_text(', '.join(sorted(common.skipped)))}.")
    return f'<p class="muted">{" ".join(said)}</p>' if said else ""


def _usual_ref(usual: _Usual, texts: _Texts) -> str:
    link = texts.ref(usual.example, "", short=True)
    if HOST_MARK not in usual.key:
        return link
    return f"{link} (as {esc_text(usual.host)} ran it; each host with its own name)"


def _host_rows(host: HostReport, anchor: str, texts: _Texts, common: _Common) -> str:
    """The host's row (its verdict and reason), the verdict's evidence and next step under it,
    then its steps behind a click."""
    # The counters are right-aligned by the stylesheet (table.hosts), not a class on each of
    # 64 x 8 cells.
    counts = "".join(f"<td>{host.recap.get(key, 0)}</td>" for key in RECAP_KEYS)
    busbw = f"{host.busbw:.1f}" if host.busbw is not None else "-"
    kind = host.verdict.kind
    why = host.verdict.reason or kind.meaning
    return (
        f'<tr class="host-row" id="{esc(anchor)}"><td><strong>{esc_text(host.name)}</strong>'
        f'</td><td class="status {kind.value}"><span class="v v-{kind.value}">'
        f'{esc_text(kind.label)}</span></td><td class="why">{esc_text(why)}</td>{counts}'
        f"<td>{esc_text(host.domains.get('leaf', '-'))}</td>"
        f"<td>{esc_text(host.domains.get('rack', '-'))}</td><td>{busbw}</td></tr>"
        f"{_verdict_row(host)}"
        f'<tr class="evidence"><td colspan="13"><details><summary>evidence: '
        f"{len(host.steps)} steps</summary>{_steps(host.steps, texts, common)}</details></td></tr>"
    )


def _verdict_row(host: HostReport) -> str:
    """The verdict's evidence, one line each and whole (they wrap, never cut), and its next
    step; nothing when it has neither."""
    verdict = host.verdict
    if not verdict.evidence and not verdict.next_step:
        return ""
    lines = "".join(f"<li>{esc_text(line)}</li>" for line in verdict.evidence)
    evidence = f'<ul class="evidence-lines">{lines}</ul>' if lines else ""
    step = (
        f'<p class="next"><b>Next step:</b> {esc_text(verdict.next_step)}</p>'
        if verdict.next_step
        else ""
    )
    return f'<tr class="judged"><td colspan="13">{evidence}{step}</td></tr>'


def _steps(steps: tuple[StepRecord, ...], texts: _Texts, common: _Common) -> str:
    """Passing steps one line each (runs of them in one list), the others with their
    commands and output; then the steps skipped (but for those every host skipped)."""
    if not steps:
        return '<p class="muted">No steps.</p>'
    shown: list[str] = []
    passing: list[str] = []
    for step in steps:
        if step.status == "skipped":
            continue
        if _passes(step):
            passing.append(_passing_step(step, texts, common))
            continue
        shown.append(_passing_list(passing) + _step(step, texts))
        passing = []
    shown.append(_passing_list(passing))
    skipped = [s.step for s in steps if s.status == "skipped" and s.step not in common.skipped]
    if skipped:
        shown.append(f'<p class="muted">skipped: {esc_text(", ".join(skipped))}</p>')
    return "".join(shown)


def _passing_list(items: list[str]) -> str:
    return f'<ul class="pass">{"".join(items)}</ul>' if items else ""


def _passing_step(step: StepRecord, texts: _Texts, common: _Common) -> str:
    """One line: a passing step's commands all exited 0 (their output is in the JSON report);
    only the ones it does not run on every host are linked."""
    message = f" · {esc_text(step.message)}" if step.message else ""
    links = "".join(f" {texts.ref(c, '', short=True)}" for c in _own_commands(step, common))
    changed = ' class="changed"' if step.status == "changed" else ""
    return (
        f"<li{changed}><b>{esc_text(step.step)}</b> {esc_text(step.status)} "
        f"{step.duration:.2f}s{message}{links}</li>"
    )


def _output_shown(step: StepRecord) -> frozenset[int]:
    """Indexes of the step's commands whose output the page shows: none for a passing step;
    for any other, the commands that failed or timed out, and the last (a step's verdict comes
    from its last command; the checks before it passed)."""
    if _passes(step):
        return frozenset()
    last = len(step.commands) - 1
    return frozenset(
        index for index, c in enumerate(step.commands) if index == last or c.rc != 0 or c.timed_out
    )


def _step(step: StepRecord, texts: _Texts) -> str:
    message = f"<div>{esc_text(step.message)}</div>" if step.message else ""
    retries = f", {step.attempts} attempts" if step.attempts > 1 else ""
    with_output = _output_shown(step)
    commands = "".join(
        _command(c, texts, index in with_output) for index, c in enumerate(step.commands)
    )
    return (
        f'<div class="step {esc(step.status)}"><strong>{esc_text(step.step)}</strong> '
        f'<span class="status {esc(step.status)}">{esc_text(step.status)}</span> '
        f'<span class="muted">{step.duration:.2f}s{retries}</span>{message}{commands}</div>'
    )


def _outputs(command: CommandRecord) -> list[tuple[str, str]]:
    """(label, excerpt) for each stream of `command` with something in it: head and tail, at
    most HTML_OUTPUT_CHARS."""
    return [
        (label, excerpt(text, HTML_OUTPUT_CHARS))
        for label, text in (("stdout", command.stdout), ("stderr", command.stderr))
        if text.strip()
    ]


def _command(command: CommandRecord, texts: _Texts, with_output: bool) -> str:
    if command.planned_only:
        verdict = "would run (check mode)"
    elif command.timed_out:
        verdict = "timed out and was killed"
    else:
        verdict = f"rc={command.rc}, {command.duration:.2f}s"
    # A command that passed and whose output is not shown (a check before the step's verdict)
    # is named by its number; the ones that tell why keep their first words.
    quiet = not with_output and command.rc == 0 and not command.timed_out
    ref = texts.ref(command.command, "", short=quiet)
    out = f"<div>{ref} <span class=muted>{esc_text(verdict)}</span>"
    for label, shown in _outputs(command) if with_output else ():
        out += f'<div class="muted">{label}</div>{texts.ref(shown, label)}'
    return out + "</div>"


__all__ = ["HostsHtml", "host_reason", "hosts_html"]
