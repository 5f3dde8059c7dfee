"""Operator tools around the engine: `parse` saved output, explain an `xid`, `probe` a fleet."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from pathlib import Path
from typing import Any

from fleetfix.errors import FleetfixError, UsageError
from fleetfix.knowledge.sxid import SxidCatalog, SxidInfo, sxid_catalog
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
    parse.add_argument("probe", help="probe name (fleetfix parse --list shows them)")
    parse.add_argument("file", help="saved tool output, or - for standard input")
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

    probes = sub.add_parser("probes", help="list the built-in probes")
    probes.set_defaults(handler=probes_command)


def _probe(name: str) -> Probe[Any]:
    try:
        return probe_registry().get(name)
    except UnknownPluginError as exc:
        raise UsageError(str(exc)) from None


def parse_command(args: argparse.Namespace) -> int:
    probe = _probe(args.probe)
    if args.file == "-":
        text = sys.stdin.read()
    else:
        try:
            text = Path(args.file).read_text(encoding="utf-8", errors="surrogateescape")
        except OSError as exc:
            raise UsageError(f"cannot read {args.file}: {exc.strerror}") from None
    facts = probe.parse(text)  # ProbeParseError -> exit 1 with the excerpt, via the CLI
    print(json.dumps(to_data(facts), indent=2, default=str))
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
_LABEL = 18  # width of the label column in `fleetfix xid`


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
            f" {catalog.version}: codes {first}-{last}); fleetfix treats it as CONTACT_SUPPORT"
        )
    try:
        advice = catalog.recommended_action(code, recovery_action)
    except FleetfixError as exc:
        raise UsageError(str(exc)) from None
    print("\n".join(xid_lines(catalog, info, advice)))
    return Outcome.OK


def xid_lines(catalog: XidCatalog, info: XidInfo, advice: Recommendation) -> list[str]:
    """`fleetfix xid CODE` for a catalogued code, in operator words."""
    lines = [f"Xid {info.code}: {info.mnemonic}"]
    lines += _field("NVIDIA says", info.description)
    lines += _field("when", info.trigger)
    lines += _field("severity", f"{info.severity} ({_SEVERITY_WORDS[info.severity]})")
    lines += _field("do now", _bucket_words(catalog, info))
    if info.investigatory_action and info.investigatory_action == info.immediate_action:
        lines += _field("if it recurs", f"{info.investigatory_action}, as above")
    elif info.investigatory_action:
        text = catalog.bucket_text(info.investigatory_action)
        lines += _field("if it recurs", _named(info.investigatory_action, text))
    lines += _field("Xid 154", _xid154_words(info))
    lines += _field("fleetfix does", _advice_words(advice))
    lines += _field("playbook", _playbook_words(catalog, info.fleetfix_playbook))
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
            "this is the driver's recovery action report itself: fleetfix follows the action it"
            " names for the Xids it summarises (pass it with --recovery-action)"
        )
    if info.links_to_154:
        return (
            f"linked ({info.xid154_since}): the driver derives a recovery action for this Xid"
            ' (Xid 154, nvidia-smi "GPU Recovery Action"); when it reports one, fleetfix'
            ' follows it instead of this table, even "None"'
        )
    return (
        "not linked: the driver's recovery action does not summarise this Xid; a reported"
        " action other than None still overrides this table, a reported None does not"
    )


def _advice_words(advice: Recommendation) -> str:
    if advice.source is RecommendationSource.RECOVERY_ACTION:
        return f"{_named(advice.action, advice.action_text)} ({advice.reason})"
    if advice.action != advice.catalog_action:  # a workflow bucket, resolved
        reason = advice.reason.removeprefix("catalog: ")
        return f"{_named(advice.action, advice.action_text)} ({reason})"
    return f"{advice.action}, as above"


def _playbook_words(catalog: XidCatalog, playbook: str | None) -> str:
    if playbook is None:
        return "none: fleetfix reports it, no shipped playbook acts on it"
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
    lines += _field("note", info.note)
    lines += _field("NVIDIA recovery", info.recovery)
    lines += _field("other VMs", info.other)
    lines += _field("severity", f"{info.severity} ({_SEVERITY_WORDS[info.severity]})")
    action = catalog.action_text(info.fleetfix_action)
    lines += _field("fleetfix does", _named(info.fleetfix_action, action))
    playbook = info.fleetfix_playbook
    words = _playbook_words(xids, playbook)
    if playbook is not None:
        words += (
            " (it finds and drains nodes whose NVLink fabric fails; the recovery above is manual)"
        )
    lines += _field("playbook", words)
    lines += _field("table", f"fleetfix SXid table {catalog.version} ({catalog.source})")
    return lines


def _named(name: str, text: str | None) -> str:
    return f"{name}: {text}" if text and text != name else name


def _field(label: str, text: str | None) -> list[str]:
    if not text:
        return []
    head = f"  {label + ':':<{_LABEL}}"
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
