"""Operator tools around the engine: `parse` saved output, explain an `xid`, `probe` a fleet."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from fleetfix.errors import FleetfixError, UsageError
from fleetfix.knowledge import remedy
from fleetfix.knowledge.recovery import RecoveryAction, parse_recovery_action
from fleetfix.knowledge.sxid import SxidCatalog, SxidInfo, sxid_catalog

if TYPE_CHECKING:
    from fleetfix.knowledge.ib_counters import CounterInfo
from fleetfix.knowledge.xid import (
    Recommendation,
    RecommendationSource,
    Severity,
    XidCatalog,
    XidInfo,
    xid_catalog,
)
from fleetfix.plugins import UnknownPluginError
from fleetfix.probes import probe_registry
from fleetfix.probes.base import Probe, to_data
from fleetfix.results import Outcome


def add_parsers(sub: Any) -> None:
    parse = sub.add_parser("parse", help="run a probe's parser on saved output, print JSON")
    parse.add_argument("probe", nargs="?", help="probe name (fleetfix parse --list shows them)")
    parse.add_argument("file", nargs="?", help="saved tool output, or - for standard input")
    parse.add_argument(
        "--list", action="store_true", help="list the probes whose parsers can be run, and exit"
    )
    parse.set_defaults(handler=parse_command)

    xid = sub.add_parser(
        "xid",
        help="explain an Xid (or, with --sxid, an NVSwitch SXid) and what fleetfix does about it",
    )
    xid.add_argument("code", type=int, help="the Xid code (with --sxid: the SXid code)")
    xid.add_argument("--recovery-action", help="the driver's reported recovery action, if any")
    xid.add_argument(
        "--sxid", action="store_true", help="CODE is an NVSwitch SXid (Fabric Manager guide)"
    )
    xid.set_defaults(handler=xid_command)

    counter = sub.add_parser(
        "ib-counter",
        help="explain an InfiniBand port counter (sysfs or perfquery name) and its threshold",
    )
    counter.add_argument("name", help="symbol_error, SymbolErrorCounter, link_downed, ...")
    counter.set_defaults(handler=ib_counter_command)

    probes = sub.add_parser("probes", help="list the built-in probes")
    probes.set_defaults(handler=probes_command)


def _probe(name: str) -> Probe[Any]:
    try:
        return probe_registry().get(name)
    except UnknownPluginError as exc:
        raise UsageError(str(exc)) from None


def parse_command(args: argparse.Namespace) -> int:
    if args.list:
        if args.probe is not None:
            raise UsageError("parse --list takes no probe or file")
        return _list_parsers()
    if args.probe is None or args.file is None:
        raise UsageError("parse needs a probe and a file (fleetfix parse --list shows the probes)")
    probe = _probe(args.probe)
    if args.file == "-":
        text = sys.stdin.read() if sys.stdin is not None else ""  # None: stdin closed
    else:
        try:
            text = Path(args.file).read_text(encoding="utf-8", errors="surrogateescape")
        except OSError as exc:
            raise UsageError(f"cannot read {args.file}: {exc.strerror}") from None
    facts = probe.read(text)  # ProbeParseError -> exit 1 with the excerpt, via the CLI
    print(json.dumps(to_data(facts), indent=2, default=str))
    return Outcome.OK


def _list_parsers() -> int:
    """One line per probe: its name and the first line of its summary."""
    for probe in sorted(probe_registry(), key=lambda p: p.name):
        summary = probe.summary.strip().splitlines()[0] if probe.summary.strip() else ""
        print(f"{probe.name:<16} {summary}".rstrip())
    return Outcome.OK


def probes_command(args: argparse.Namespace) -> int:
    for probe in sorted(probe_registry(), key=lambda p: p.name):
        print(f"{probe.name:<16} {probe.summary}")
        for param, meaning in sorted(probe.params.items()):
            print(f"{'':<18}{param}: {meaning}")
    return Outcome.OK


_SEVERITY_WORDS = {
    Severity.INFO: "no action needed",
    Severity.WARNING: "application-level, or to investigate; the GPU keeps serving",
    Severity.CRITICAL: "the GPU or node must be recovered or serviced",
}
_LABEL = 24  # width of the label column in `fleetfix xid`


def xid_command(args: argparse.Namespace) -> int:
    if args.sxid:
        if args.recovery_action is not None:
            raise UsageError("--recovery-action applies to Xids, not to SXids (--sxid)")
        return _explain_sxid(sxid_catalog(), xid_catalog(), args.code)
    return _explain_xid(xid_catalog(), args.code, args.recovery_action)


def _explain_xid(catalog: XidCatalog, code: int, recovery_action: str | None) -> int:
    info = catalog.get(code)
    if info is None:
        first, last = catalog.codes[0], catalog.codes[-1]
        return _unknown(
            f"Xid {code} is not in NVIDIA's Xid catalog as fleetfix ships it (table"
            f" {catalog.version}: codes {first}-{last}); NVIDIA's advice for an unknown code is"
            " CONTACT_SUPPORT, and fleetfix acts on what the GPUs report, not on the code"
        )
    try:
        reported = parse_recovery_action(recovery_action)
    except FleetfixError as exc:
        raise UsageError(str(exc)) from None
    advice = catalog.recommended_action(code, reported)
    print("\n".join(xid_lines(catalog, info, advice, remedy.for_xid(code, reported))))
    return Outcome.OK


def xid_lines(
    catalog: XidCatalog, info: XidInfo, advice: Recommendation, does: remedy.XidRemedy
) -> list[str]:
    """`fleetfix xid CODE` for a catalogued code, in operator words: NVIDIA's catalog, labelled
    as NVIDIA's, then what fleetfix does (knowledge/remedy.py) and with which playbooks."""
    lines = [f"Xid {info.code}: {info.mnemonic}"]
    lines += _field("NVIDIA says", info.description)
    lines += _field("when (NVIDIA)", info.trigger)
    lines += _field("do now (NVIDIA)", _bucket_words(catalog, info))
    if info.investigatory_action and info.investigatory_action == info.immediate_action:
        lines += _field("if it recurs (NVIDIA)", f"{info.investigatory_action}, as above")
    elif info.investigatory_action:
        text = catalog.bucket_text(info.investigatory_action)
        lines += _field("if it recurs (NVIDIA)", _named(info.investigatory_action, text))
    lines += _field("Xid 154 (NVIDIA)", _xid154_words(info))
    if advice.recovery_action is not None:
        lines += _field("reported (NVIDIA)", _reported_words(advice))
    lines += _field("severity", f"{info.severity} (fleetfix's: {_SEVERITY_WORDS[info.severity]})")
    lines += _field("fleetfix does", _does_words(does))
    lines += _playbook_lines(catalog, info.fleetfix_playbooks, "Xid")
    lines += _field("table", f"fleetfix Xid table {catalog.version} ({catalog.source})")
    return lines


def _bucket_words(catalog: XidCatalog, info: XidInfo) -> str:
    if info.immediate_action is not None:
        return _named(info.immediate_action, info.immediate_action_text)
    why = f" ({info.fleetfix_note})" if info.fleetfix_note else ""
    return (
        "NVIDIA's catalog gives no action for this code; fleetfix's choice is "
        + _named(info.action, catalog.bucket_text(info.action))
        + why
    )


def _xid154_words(info: XidInfo) -> str:
    if info.code == 154:
        return (
            "this is the driver's recovery action report itself: NVIDIA says to follow the action"
            " it names for the Xids it summarises"
        )
    if info.links_to_154:
        return (
            f"linked ({info.xid154_since}): the driver derives a recovery action for this Xid"
            ' (Xid 154, nvidia-smi "GPU Recovery Action"); NVIDIA: a reported one replaces the'
            ' buckets above, even "None"'
        )
    return (
        "not linked: the driver's recovery action does not summarise this Xid; NVIDIA: a reported"
        " action other than None still replaces the buckets above, a reported None does not"
    )


def _reported_words(advice: Recommendation) -> str:
    reported = advice.recovery_action
    if advice.source is RecommendationSource.RECOVERY_ACTION:
        return (
            f"{reported}: replaces the buckets above: {_named(advice.action, advice.action_text)}"
        )
    return f"{reported}: does not replace the buckets above (this Xid is not linked to Xid 154)"


def _does_words(does: remedy.XidRemedy) -> str:
    if does.remedy is not None:
        return f"{does.remedy.doing} ({does.why})"
    return f"{does.why}. By recovery action: {_by_action(does)}"


def _by_action(does: remedy.XidRemedy) -> str:
    grouped: dict[remedy.Remedy, list[str]] = {}
    for action, need in does.by_action:
        name = "one it cannot name" if action is RecoveryAction.UNKNOWN else str(action)
        grouped.setdefault(need, []).append(name)
    return "; ".join(f"{', '.join(names)}: {need.doing}" for need, names in grouped.items())


def _playbook_lines(catalog: XidCatalog, playbooks: Sequence[str], what: str) -> list[str]:
    if not playbooks:
        return _field(
            "playbook",
            f"none for this {what} itself: fleetfix reports it; playbooks/recover.yml acts on"
            " what the GPUs report, whatever they logged",
        )
    label = "playbook" if len(playbooks) == 1 else "playbooks"
    lines: list[str] = []
    for playbook in playbooks:
        lines += _field(label, _playbook_words(catalog, playbook))
        label = ""
    return lines


def _playbook_words(catalog: XidCatalog, playbook: str) -> str:
    what = catalog.playbook_text(playbook)
    return f"playbooks/{playbook}" + (f": {what}" if what else "")


def _explain_sxid(catalog: SxidCatalog, xids: XidCatalog, code: int) -> int:
    info = catalog.get(code)
    if info is None:
        return _unknown(
            f"SXid {code} is not in fleetfix's SXid table {catalog.version} (the SXids NVIDIA's"
            " Fabric Manager guide lists; the guide points to open-gpu-kernel-modules"
            " ctrl_dev_nvswitch.h for the others)"
        )
    print("\n".join(sxid_lines(catalog, info, xids)))
    return Outcome.OK


def sxid_lines(catalog: SxidCatalog, info: SxidInfo, xids: XidCatalog) -> list[str]:
    """`fleetfix xid --sxid CODE`, in operator words (`xids` describes the playbooks)."""
    kind = catalog.kinds[info.kind]
    lines = [f"SXid {info.code}: {info.name or '(NVIDIA gives no error string)'}"]
    lines += _field("NVIDIA lists it", f"{kind.title}, Fabric Manager user guide")
    lines += _field("NVIDIA says", kind.text if info.impact is None else info.impact)
    lines += _field("note (NVIDIA)", info.note)
    lines += _field("recovery (NVIDIA)", info.recovery)
    lines += _field("other VMs (NVIDIA)", info.other)
    lines += _field("severity", f"{info.severity} (fleetfix's: {_SEVERITY_WORDS[info.severity]})")
    action = catalog.action_text(info.fleetfix_action)
    lines += _field(
        "for an operator",
        _named(info.fleetfix_action, action) + " (fleetfix's reading of the guide for one"
        " bare-metal node; fleetfix does not do this itself)",
    )
    lines += _field("fleetfix does", remedy.AFTER_SXID)
    playbooks = ["recover.yml", info.fleetfix_playbook] if info.fleetfix_playbook else []
    lines += _playbook_lines(xids, playbooks, "SXid")
    lines += _field("table", f"fleetfix SXid table {catalog.version} ({catalog.source})")
    return lines


def ib_counter_command(args: argparse.Namespace) -> int:
    from fleetfix.knowledge.ib_counters import ib_counter_catalog  # noqa: PLC0415

    catalog = ib_counter_catalog()
    info = catalog.get(args.name)
    if info is None:
        known = ", ".join(sorted(catalog.entries))
        return _unknown(f"{args.name!r} is not a counter fleetfix knows (sysfs names: {known})")
    print("\n".join(ib_counter_lines(info, f"{catalog.version}: {catalog.source}")))
    return Outcome.OK


def ib_counter_lines(info: CounterInfo, table: str) -> list[str]:
    """`fleetfix ib-counter NAME`, in operator words."""
    limit = info.threshold
    rules = [
        f"a rise of {limit.per_read} between two reads" if limit.per_read is not None else "",
        f"more than {limit.per_hour:g} an hour" if limit.per_hour is not None else "",
    ]
    threshold = " or ".join(rule for rule in rules if rule) or "none: not an error on its own"
    lines = [f"{info.name} ({info.perfquery}): {info.title}"]
    lines += _field("means", info.meaning)
    lines += _field("do", info.action)
    lines += _field("severity", str(info.severity))
    lines += _field("threshold", threshold)
    lines += _field(
        "fleetfix does",
        "reads it with the ib_counters probe (sysfs, else perfquery); fleetfix triage reads it"
        " twice and names the link when it rises past the threshold while it looks",
    )
    lines += _field("sources", f"{info.source} (fleetfix counter table {table})")
    return lines


def _named(name: str, text: str | None) -> str:
    return f"{name}: {text}" if text and text != name else name


def _field(label: str, text: str | None) -> list[str]:
    """`label: text` wrapped at 100 columns; an empty label continues the field above."""
    if not text:
        return []
    head = f"  {label + ':' if label else '':<{_LABEL}}"
    return textwrap.wrap(
        text,
        width=100,
        initial_indent=head,
        subsequent_indent=" " * len(head),
        break_on_hyphens=False,
    ) or [head]


def _unknown(message: str) -> int:
    print(f"ERROR: {message}", file=sys.stderr)
    return Outcome.ERROR
