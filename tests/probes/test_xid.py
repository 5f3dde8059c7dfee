"""The xid probe against every real dmesg sample, plus the shapes and failures it must handle."""

from __future__ import annotations

import pytest

from fleetfix.errors import FleetfixError, ProbeParseError
from fleetfix.probes.gpu_facts import normalize_bus_id
from fleetfix.probes.xid import (
    PROBE,
    Clock,
    LogFormat,
    XidFacts,
    bus_to_index,
    group_bursts,
)
from tests.probes.cases import SAMPLES


def _sample(name: str) -> XidFacts:
    return PROBE.parse((SAMPLES / name).read_text(encoding="utf-8"))


def test_xid79_short_form_asks_for_a_reboot() -> None:
    facts = _sample("dmesg-xid/nvsentinel-155-comment-xid79-line.txt")
    (event,) = facts.events
    assert (event.code, event.bus_id, event.pid) == (79, "00000000:44:00.0", None)
    assert event.mnemonic == "ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS"
    assert event.immediate_action == "RESTART_BM"
    assert facts.reboot_required is True
    assert facts.source_format is LogFormat.BARE


def test_gsp_timeouts_group_into_bursts_by_the_three_minute_gap() -> None:
    facts = _sample("dmesg-xid/gpud-xid-119-gsp-timeout-h100-xe9680.log")
    assert facts.counts == {119: 5}
    assert [e.line for e in facts.events] == [3, 38, 40, 42, 43]
    assert [(b.count, b.span_s) for b in facts.bursts] == [(4, 174.0), (1, 0.0)]
    assert facts.events[0].uuid == "GPU-509665ad-b600-ac93-3616-d754b23d636d"
    assert facts.events[3].process == "cache_mgr_main"
    assert facts.reset_required_gpus == ("00000000:9b:00.0",)
    assert facts.complete is False  # the fixture lacks a final newline


def test_diff_quoted_ctime_log_reads_unknown_pid_as_none() -> None:
    facts = _sample("dmesg-xid/gpud-pr46-xid13-109-dmesg-ctime-diffquoted.txt")
    assert facts.codes == (13, 109)
    first, last = facts.events[0], facts.events[-1]
    assert (first.pid, first.process, first.clock) == (None, None, Clock.WALL)
    assert first.timestamp == "Fri Aug 30 11:43:09 2024"
    assert (last.pid, last.process, last.channel) == (1797828, "pt_main_thread", 8)
    assert last.seconds is not None and first.seconds is not None
    assert last.seconds - first.seconds == 5.0


def test_legacy_engmask_and_channel_id_forms() -> None:
    facts = _sample("dmesg-xid/bumblebee-677-xid32-31-legacy-engmask.txt")
    assert [(e.code, e.channel) for e in facts.events] == [(32, 0), (32, 0), (31, 3)]
    assert facts.events[0].seconds == 24128.828315
    assert facts.events[0].clock is Clock.MONOTONIC


def test_domain_0009_bus_id_and_new_channel_form() -> None:
    (event,) = _sample("dmesg-xid/dradriver-904-xid43-channel-gb200-domain0009.txt").events
    assert (event.bus_id, event.pid, event.process) == ("00000009:01:00.0", 3188489, "trigger_xid")
    assert event.channel == 0x0B00000A
    assert event.recommended_action == "IGNORE"


def test_nvlink5_subfields() -> None:
    facts = _sample("dmesg-xid/gpud-pr1160-xid144-149-nvlink5-quoted.txt")
    saw, netir, _ = facts.events
    assert saw.nvlink is not None and netir.nvlink is not None
    assert (saw.nvlink.unit, saw.nvlink.fatal, saw.nvlink.link) == ("SAW_MVB", False, 0)
    assert (saw.nvlink.intr_info, saw.nvlink.error_status) == (0x1, 0x8)
    assert (netir.nvlink.unit, netir.nvlink.fatal) == ("NETIR_LINK_EVT", True)
    assert netir.nvlink.intr_info == 0x026001C6


def test_elided_pci_keeps_the_event_without_a_bus_id() -> None:
    facts = _sample("dmesg-xid/nccl-2241-xid145-137-b200-pci-elided.txt")
    assert facts.codes == (137, 145)
    assert all(e.bus_id is None and e.pci == "PCI:..." for e in facts.events)
    assert facts.events[0].nvlink is not None
    assert facts.events[0].nvlink.registers == ()
    assert facts.gpus == ()


def test_xid45_follows_the_xid_that_caused_it() -> None:
    facts = _sample("dmesg-xid/ogkm-1150-xid45-caused-by-149-145-590.48.01.txt")
    assert facts.count == 8
    assert [e.caused_by for e in facts.events[:2]] == [149, 145]
    assert {e.recommended_action for e in facts.events} == {"IGNORE"}
    assert len(facts.gpus) == 4


def test_row_remap_xid63_is_no_action() -> None:
    (event,) = _sample("dmesg-xid/stas-mleng-xid63-row-remapper-a100.txt").events
    assert (event.code, event.bus_id, event.pid) == (63, "00000000:10:1c.0", 1896)
    assert event.recommended_action == "IGNORE"


def test_non_xid_kernel_logs_give_no_events() -> None:
    for name, fmt in (
        ("dmesg-other/gpud-kmsg-raw-format-nvswitch-no-xid.log", LogFormat.KMSG),
        ("dmesg-other/gpud-dmesg-decode-iso-libnccl-segfault-fixture.txt", LogFormat.DMESG_ISO),
        (
            "dmesg-other/stas-mleng-dmesg-pcie-limited-by-gen4-switch-h100.txt",
            LogFormat.DMESG_MONOTONIC,
        ),
    ):
        facts = _sample(name)
        assert (facts.count, facts.codes, facts.source_format) == (0, (), fmt)


def test_empty_dmesg_is_valid_and_empty() -> None:
    facts = PROBE.parse("")
    assert (facts.count, facts.source_format, facts.complete) == (0, LogFormat.EMPTY, True)


def test_journalctl_short_iso_and_no_entries() -> None:
    text = (
        "-- Logs begin at Mon 2024-11-18 10:00:00 UTC. --\n"
        "2024-11-22T03:01:02+0000 gpu042 kernel: NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, "
        "name=python, GPU has fallen off the bus.\n"
        "2024-11-22T03:01:02+0000 gpu042 kernel: NVRM: GPU 0000:3b:00.0: GPU has fallen off "
        "the bus.\n"
    )
    facts = PROBE.parse(text)
    (event,) = facts.events
    assert facts.source_format is LogFormat.JOURNAL_ISO
    assert (event.pid, event.process, event.message) == (
        1234,
        "python",
        "GPU has fallen off the bus.",
    )
    assert event.seconds == 1732244462.0
    assert PROBE.parse("-- No entries --\n").count == 0


def test_syslog_with_embedded_printk_time() -> None:
    text = (
        "Nov 22 03:01:02 gpu042 kernel: [ 1234.567890] NVRM: Xid (PCI:0000:3b:00): 48, pid=9, "
        "name=x, An uncorrectable double bit error\n"
    )
    (event,) = PROBE.parse(text).events
    assert (event.code, event.timestamp, event.seconds) == (48, "Nov 22 03:01:02", None)
    assert event.message.startswith("An uncorrectable")
    assert event.recommended_action == "RESET_GPU"  # Xid 48 solo


def test_xid154_recovery_action_overrides_the_catalog_for_that_gpu() -> None:
    text = (
        "[ 10.000000] NVRM: Xid (PCI:0000:3b:00): 48, pid=9, name=x, DBE\n"
        "[ 10.000100] NVRM: Xid (PCI:0000:3b:00): 63, pid=9, name=x, Row Remapper\n"
        "[ 10.000200] NVRM: Xid (PCI:0000:3b:00): 154, GPU recovery action changed from "
        "0x0 (None) to 0x2 (Node Reboot Required)\n"
        "[ 11.000000] NVRM: Xid (PCI:0000:5e:00): 48, pid=9, name=x, DBE\n"
        "[ 11.000001] NVRM: Xid (PCI:0000:86:00): 48, pid=9, name=x, DBE\n"
        "[ 11.000002] NVRM: Xid (PCI:0000:86:00): 64, pid=9, name=x, remap failed\n"
    )
    facts = PROBE.parse(text)
    actions = [(e.bus_id, e.code, e.recommended_action) for e in facts.events]
    assert actions == [
        ("00000000:3b:00.0", 48, "RESTART_BM"),
        ("00000000:3b:00.0", 63, "RESTART_BM"),
        ("00000000:3b:00.0", 154, "RESTART_BM"),
        ("00000000:5e:00.0", 48, "RESET_GPU"),
        ("00000000:86:00.0", 48, "DRAIN_AND_RESET"),
        ("00000000:86:00.0", 64, "RESET_GPU"),
    ]
    assert facts.recovery_actions == {"00000000:3b:00.0": "Reboot"}
    assert facts.reboot_required is True
    assert facts.reset_required_gpus == ("00000000:5e:00.0", "00000000:86:00.0")
    assert facts.critical_codes == (48, 64)


def test_unknown_xid_code_is_contact_support_not_silence() -> None:
    (event,) = PROBE.parse("[ 1.0] NVRM: Xid (PCI:0000:3b:00): 999, something new\n").events
    assert (event.mnemonic, event.immediate_action) == (None, None)
    assert event.recommended_action == "CONTACT_SUPPORT"


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("<!DOCTYPE html>\n<html><body>502 Bad Gateway</body></html>\n", "HTML/XML"),
        ("\x7fELF\x02\x01\x01\x00\x00\x00binary\n", "binary"),
        ("hello world\nthis is not a kernel log\n", "no kernel log records"),
        ("fleetfix-xid: no readable kernel log (dmesg and journalctl failed)\n", "not readable"),
        ("No journal files were opened due to insufficient permissions.\n", "not readable"),
        ("[ 1.0] NVRM: Xid (PCI:0000:3b:00): seventy-nine\n[ 2.0] ok\n", "malformed Xid"),
        (
            "[ 1.0] kernel line\nrandom\nprose\nthat is\nnot a log\n",
            "most lines are not kernel log records",
        ),
    ],
)
def test_rejects_text_that_is_not_a_kernel_log(text: str, reason: str) -> None:
    with pytest.raises(ProbeParseError, match=reason):
        PROBE.parse(text)


def test_cut_inside_the_last_xid_line_keeps_earlier_events() -> None:
    text = (
        "[ 1.0] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n"
        "[ 2.0] NVRM: Xid (PCI:00"
    )
    facts = PROBE.parse(text)
    assert (facts.codes, facts.complete) == ((79,), False)


def test_group_bursts_with_a_custom_window() -> None:
    facts = _sample("dmesg-xid/gpud-xid-119-gsp-timeout-h100-xe9680.log")
    assert [b.count for b in group_bursts(facts.events, window_s=10)] == [3, 1, 1]
    assert [b.count for b in group_bursts(facts.events, window_s=3600)] == [5]


def test_bus_to_index_maps_nvidia_smi_bus_ids_and_flags_missing_gpus() -> None:
    facts = _sample("dmesg-xid/ogkm-1150-xid45-caused-by-149-145-590.48.01.txt")
    gpus = ((4, "00000000:97:00.0"), (5, "00000000:BA:00.0"), (6, "00000000:DC:00.0"))
    assert bus_to_index(facts.events, gpus) == {
        "00000000:dc:00.0": 6,
        "00000000:ed:00.0": None,
        "00000000:ba:00.0": 5,
        "00000000:97:00.0": 4,
    }


@pytest.mark.parametrize(
    ("raw", "normalised"),
    [
        ("PCI:0000:3b:00", "00000000:3b:00.0"),
        ("00000009:01:00.0", "00000009:01:00.0"),
        ("3B:00.0", "00000000:3b:00.0"),
        ("0000:10:1c", "00000000:10:1c.0"),
        ("PCI:...", None),
        ("GPU0", None),
    ],
)
def test_normalize_bus_id(raw: str, normalised: str | None) -> None:
    assert normalize_bus_id(raw) == normalised


def test_command_reads_dmesg_then_journal_and_never_passes_silently() -> None:
    boot = PROBE.command({})
    assert boot.startswith("dmesg -T 2>/dev/null || journalctl -k -b -o short-iso --no-pager")
    assert "fleetfix-xid: no readable kernel log" in boot
    assert "--since '-1800s'" in PROBE.command({"since": "30m"})
    assert "--since '-172800s'" in PROBE.command({"since": "2d"})
    with pytest.raises(FleetfixError, match="since"):
        PROBE.command({"since": "1h; rm -rf /"})
