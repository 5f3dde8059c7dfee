"""A notification as a webhook body: fleetfix's versioned JSON, or a Slack incoming-webhook
message (`text` plus mrkdwn section blocks). docs/notifications.md shows both."""

from __future__ import annotations

import datetime
import enum
import json
from collections.abc import Callable, Iterable
from typing import Any

from fleetfix.knowledge import remedy
from fleetfix.notify.model import (
    Attempt,
    BudgetRefused,
    Gpu,
    Hold,
    Notification,
    Rma,
    RunEnd,
    XidSeen,
)
from fleetfix.probes.base import to_data
from fleetfix.verdicts import VerdictKind

SCHEMA_VERSION = 1
"""`"fleetfix": 1` in every JSON body. Added fields keep it; a renamed, removed or retyped
field makes it 2 (docs/notifications.md)."""
SLACK_SECTION_CHARS = 3000
"""Slack refuses a section block whose text is longer."""
SLACK_LIST_LINES = 20


class Format(enum.StrEnum):
    """The body a webhook receives; the prefix of `--webhook` (`slack:URL`, `json:URL`)."""

    JSON = "json"
    SLACK = "slack"


def iso_time(epoch: float) -> str:
    """UTC, milliseconds, `Z`: the report's time format."""
    moment = datetime.datetime.fromtimestamp(epoch, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def json_body(note: Notification) -> dict[str, Any]:
    """The generic JSON body: the common fields, then the kind's own."""
    return {
        "fleetfix": SCHEMA_VERSION,
        "kind": str(note.kind),
        "run_id": note.run.run_id,
        "playbook": note.run.playbook,
        "controller": note.run.controller,
        "check": note.run.check,
        "at": iso_time(note.at),
        "idempotency_key": note.key,
        **_kind_fields(note.body),
    }


def _kind_fields(body: Any) -> dict[str, Any]:
    fields: dict[str, Any] = to_data(body)  # tuples become lists: plain JSON data
    if isinstance(body, Rma):
        fields["tried"] = [{**t, "at": iso_time(t["at"])} for t in fields["tried"]]
    return fields


def render(note: Notification, form: Format) -> bytes:
    """The request body for a webhook of format `form`."""
    body = json_body(note) if form is Format.JSON else slack_body(note)
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode()


# --- Slack --------------------------------------------------------------------------------


def slack_body(note: Notification) -> dict[str, Any]:
    """`{"text": fallback, "blocks": [mrkdwn sections]}` for a Slack incoming webhook."""
    title, sections = _SLACK[type(note.body)](note.body)
    footer = (
        f"run `{_esc(note.run.run_id)}` · `{_esc(note.run.playbook)}` · "
        f"controller `{_esc(note.run.controller)}`" + (" · dry run" if note.run.check else "")
    )
    blocks = [_section(f"*{_esc(title)}*"), *(_section(s) for s in sections if s)]
    blocks.append(_section(footer))
    return {"text": f"fleetfix: {title}", "blocks": blocks}


def _section(text: str) -> dict[str, Any]:
    if len(text) > SLACK_SECTION_CHARS:
        text = text[: SLACK_SECTION_CHARS - 3] + "..."
    return {"type": "section", "text": {"type": "mrkdwn", "text": text}}


def _esc(text: object) -> str:
    """Slack's three control characters escaped: a node name or message stays literal."""
    return str(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _code(text: str) -> str:
    return "```" + _esc(text).replace("```", "'''") + "```"


def _bullets(title: str, lines: Iterable[str]) -> str:
    shown = list(lines)
    if not shown:
        return ""
    more = len(shown) - SLACK_LIST_LINES
    body = "\n".join(f"• {line}" for line in shown[:SLACK_LIST_LINES])
    return f"*{title}*\n{body}" + (f"\n… and {more} more" if more > 0 else "")


def _slack_rma(rma: Rma) -> tuple[str, list[str]]:
    title = "is an RMA candidate" if remedy.RMA_CANDIDATE in rma.reason else "needs RMA"
    return f"{rma.node} {title}", [
        _esc(rma.reason),
        _bullets("GPUs", (_gpu_line(g) for g in rma.gpus)),
        _bullets("Xids seen", (_xid_line(x) for x in rma.xids)),
        _bullets("What was tried", (_tried_line(t) for t in rma.tried)),
        f"*Evidence*\n{_code(rma.evidence)}" if rma.evidence else "",
    ]


def _gpu_line(gpu: Gpu) -> str:
    index = f"GPU {gpu.index}" if gpu.index is not None else "GPU"
    parts = [f"{index} `{_esc(gpu.bus_id or '?')}`"]
    parts.append(f"serial `{_esc(gpu.serial)}`" if gpu.serial else "serial unknown")
    parts.append(f"`{_esc(gpu.uuid)}`" if gpu.uuid else "UUID unknown")
    notes = [f"Xid {', '.join(map(str, gpu.xids))}"] if gpu.xids else []
    notes += ["*lost*"] if gpu.lost else []
    return " ".join(parts) + (f" — {'; '.join(notes)}" if notes else "")


def _xid_line(seen: XidSeen) -> str:
    name = f" {_esc(seen.mnemonic)}" if seen.mnemonic else ""
    gpus = ", ".join(f"`{_esc(g)}`" for g in seen.gpus)
    last = f", last {_esc(seen.last_seen)}" if seen.last_seen else ""
    return f"Xid {seen.code}{name} x{seen.count}" + (f" on {gpus}" if gpus else "") + last


def _tried_line(tried: Attempt) -> str:
    message = f": {_esc(tried.message)}" if tried.message else ""
    return f"`{_esc(tried.action)}` ({_esc(tried.step)}): *{_esc(tried.outcome)}*{message}"


def _slack_hold(hold: Hold) -> tuple[str, list[str]]:
    if hold.cause == "finding":
        title = f"holding disruptive actions under {hold.domain_kind} {hold.domain}"
    else:
        title = "a safety gate stopped the play"
    hosts = ", ".join(f"`{_esc(h)}`" for h in hold.hosts)
    more = hold.hosts_total - len(hold.hosts)
    listed = f"*Hosts* ({hold.hosts_total}): {hosts}" + (f" … and {more} more" if more else "")
    return title, [_esc(hold.reason), listed if hold.hosts else ""]


def _slack_budget(refused: BudgetRefused) -> tuple[str, list[str]]:
    hosts = ", ".join(f"`{_esc(h)}`" for h in refused.hosts)
    more = refused.hosts_total - len(refused.hosts)
    title = f"repair budget refused {refused.hosts_total} host(s)"
    return title, [
        _esc(refused.reason),
        f"*Held*: {hosts}" + (f" … and {more} more" if more else ""),
    ]


def _slack_end(end: RunEnd) -> tuple[str, list[str]]:
    counts = end.host_counts
    title = f"run finished: {end.outcome} (exit {end.exit_code})"
    summary = (
        f"{counts.total} hosts: {counts.ok} ok, {counts.changed} changed, "
        f"{counts.failed} failed, {counts.unreachable} unreachable"
    )
    if end.duration_s is not None:
        summary += f" in {end.duration_s:.0f}s"
    if end.holds:
        summary += f"; {end.holds} disruptive action(s) held"
    notes = [summary]
    if end.interrupted:
        notes.append("*interrupted*")
    if end.safety_stop:
        notes.append(f"*safety stop*: {_esc(end.safety_stop)}")
    if end.journal_lost:
        notes.append(f"*stopped: it lost its journal*: {_esc(end.journal_lost)}")
    left = (f"`{_esc(h.host)}` {_label(h.verdict)}: {_esc(h.reason)}" for h in end.left)
    return title, [
        "\n".join(notes),
        _bullets(f"Left unhealthy or untouched ({end.left_total})", left),
    ]


def _label(verdict: str) -> str:
    """A verdict's words (`needs RMA`) for a LeftHost; nothing for one without."""
    return f"*{_esc(VerdictKind(verdict).label)}*" if verdict in set(VerdictKind) else ""


_SLACK: dict[type, Callable[[Any], tuple[str, list[str]]]] = {
    Rma: _slack_rma,
    Hold: _slack_hold,
    BudgetRefused: _slack_budget,
    RunEnd: _slack_end,
}
