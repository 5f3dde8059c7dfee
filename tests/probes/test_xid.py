"""The xid probe against every real dmesg sample, plus the shapes and failures it must handle."""

from __future__ import annotations

import pytest

from fleetfix.errors import FleetfixError, ProbeParseError
from fleetfix.probes.base import verdict
from fleetfix.probes.gpu_facts import normalize_bus_id
from fleetfix.probes.xid import (
    PROBE,
    Clock,
    EventSource,
    GpuFailureKind,
    LogFormat,
    SxidSeverity,
    UnparsedLine,
    XidFacts,
    bus_to_index,
    group_bursts,
)
from tests.probes.cases import SAMPLES

# Synthetic fixtures (no shared sample holds these wordings; each line's shape is from the source
# named, the values are made up):
# - dmesg-xid/synthetic-xid154-recovery-wordings-570-595.txt, -610.txt: Xid 154 messages as
#   quoted from kernel logs in public issue threads ("GPU Reset Required" on 575/580, "Node Reboot
#   Required" on 595.71.05 in NVIDIA/open-gpu-kernel-modules#1134, "PF FLR" and "OS Reboot" on
#   610.43.02 in #1353 and user reports; "Drain P2P" / "Drain and Reset" as NVIDIA's Xid catalog
#   and a GB200 journal quoted in a public test name them); codes per NVML nvml.h.
# - dmesg-xid/synthetic-xid79-bus-off-without-xid-line.txt: the probe-time block is the format
#   string in the open kernel module (`NVRM: The NVIDIA GPU %04x:%02x:%02x.%x` / `(PCI ID: ...)
#   installed in this system has` / `fallen off the bus and is not responding to commands.`),
#   its two-line variant as users paste it; the one-line `NVRM: GPU 0000:3b:00.0: GPU has fallen
#   off the bus.` follows Xid 79 in real logs (the lab prints it too); the `GPU at PCI` + serial +
#   bus-off tail combination is the shape named in issue 9, not one seen in a real log.
# - dmesg-xid/synthetic-xid-unreadable-lines-keep-the-rest.txt: `NVRM: Xid (62): ...` (no PCI) is
#   a malformed shape found in a public parser test; the 0x9 / unknown wordings are invented.
# - dmesg-other/synthetic-sxid-nvswitch-nonfatal-fatal-with-details.txt: SXid lines per the
#   nvswitch driver's NVSWITCH_PRINT_SXID / NVSWITCH_REPORT_* format strings (`%05d`, `Non-fatal,
#   Link %02d`, `Correctable, Link %02d`), with the `Severity ... Engine instance` and `Data {...}`
#   follow-up lines as a public HGX note quotes them (20034 LTSSM Fault Up, 22013 Minion DLREQ).
# - dmesg-xid/synthetic-gpu-init-failures-power-rminitadapter-unsupported-open.txt and
#   synthetic-gpu-init-failed-legacy-no-bus-unsupported-release.txt, synthetic-probe-routine-
#   failed-no-gpu-named.txt: every line is a format string of the driver with made-up values:
#   NVIDIA/open-gpu-kernel-modules 595.45.04 (commit df1c9a3de2be4b130f4fc7680f7198193d8ac6ad)
#   `src/nvidia/arch/nvalloc/unix/src/osinit.c` (`RmInitAdapter failed! (0x%x:0x%x:%d)` and `GPU
#   does not have the necessary power cables connected.` through NV_DEV_PRINTF, which prefixes
#   `NVRM: GPU %04x:%02x:%02x.%x: `), `osapi.c` (the `The NVIDIA GPU ... is not supported by open
#   nvidia.ko because ...` block), `kernel-open/nvidia/nv.c` (`rm_init_adapter failed, device minor
#   number %d`, `The NVIDIA probe routine failed for %d device(s).`, `None of the NVIDIA devices
#   were initialized.`) and `nv-msi.c` (`Failed to enable MSI; falling back ...`, not a failure).
#   The same wordings in real logs: GPU 0000:0a:00.0 `RmInitAdapter failed! (0x24:0x72:1568)`
#   repeated in NVIDIA/gpu-operator#1146, two GPUs failing in turn in NVIDIA/gpu-operator#649, the
#   GSP form in NVIDIA/open-gpu-kernel-modules#789; the bus-less older form `NVRM: RmInitAdapter
#   failed! (0x26:0xffff:1375)` / `rm_init_adapter failed for device bearing minor number 0` in
#   Bumblebee-Project/Bumblebee#722; the indented `not supported by the NVIDIA 535.104.05 driver
#   release` block in flatcar/Flatcar#1283; the older per-line-stamped `installed` / `in this
#   system is not supported by the 280.13 NVIDIA Linux` form in MrMEEE/bumblebee-Old-and-
#   abbandoned#583; the power-cable line is quoted in homelab notes (Tesla M40/P40, driver 580).
# - dmesg-other/synthetic-xid-probe-dmesg-not-permitted-no-journalctl.txt: what the probe's
#   command prints where dmesg is refused (its stderr goes to /dev/null) and journalctl is missing
#   (bash's `command not found`, then the probe's own marker); synthetic-dmesg-not-permitted-
#   container.txt: util-linux dmesg's refusal in a container (dmesg_restrict); synthetic-journalctl-
#   k-b-no-entries-container.txt and -non-root-hint-no-entries.txt: journalctl's `-- No entries --`
#   and its notice to a user outside adm/systemd-journal.


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
    # A window of the last minutes may hold no kernel message; the whole boot never does.
    assert PROBE.read("-- No entries --\n", {"since": "30m"}).count == 0
    with pytest.raises(ProbeParseError, match="no kernel message for this boot"):
        PROBE.read("-- No entries --\n")


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
    assert facts.recovery_actions == {"00000000:3b:00.0": "reboot"}
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


def test_a_jobs_window_reads_every_boot_the_journal_keeps() -> None:
    # A node that crashed during the job and rebooted holds its errors in the boot before.
    window = PROBE.command({"since": "2026-12-07T03:10:00", "until": "2026-12-07 04:00"})
    assert window.startswith(
        "journalctl _TRANSPORT=kernel -o short-iso --no-pager "
        "--since '2026-12-07 03:10:00' --until '2026-12-07 04:00' 2>&1 || dmesg -T --since"
    )
    assert " -b" not in window and "fleetfix-xid: no readable kernel log" in window
    open_ended = PROBE.command({"since": "2026-12-07T03:10:00"})
    assert "--until" not in open_ended
    with pytest.raises(FleetfixError, match="until"):
        PROBE.command({"since": "2026-12-07T03:10:00", "until": "now'; reboot; '"})


def test_xid154_wordings_of_drivers_570_to_595() -> None:
    facts = _sample("dmesg-xid/synthetic-xid154-recovery-wordings-570-595.txt")
    xid154 = [(e.bus_id, e.recovery_code, e.recovery_text) for e in facts.events if e.code == 154]
    assert xid154 == [
        ("00000000:18:00.0", 4, "Drain and Reset"),
        ("00000000:2a:00.0", 1, "GPU Reset Required"),
        ("00000000:3a:00.0", 2, "Node Reboot Required"),
        ("00000000:5d:00.0", 3, "Drain P2P"),
        ("00000000:5d:00.0", 1, "GPU Reset Required"),
    ]
    assert facts.recovery_actions == {
        "00000000:18:00.0": "drain_and_reset",
        "00000000:2a:00.0": "reset",
        "00000000:3a:00.0": "reboot",
        "00000000:5d:00.0": "reset",  # the latest 154 of that GPU
    }
    by_code = {(e.bus_id, e.code): e.recommended_action for e in facts.events}
    assert by_code[("00000000:18:00.0", 48)] == "DRAIN_AND_RESET"
    assert by_code[("00000000:2a:00.0", 31)] == "RESET_GPU"
    assert facts.reboot_required is True
    assert facts.counts[79] == 1  # the bus-off line under the Xid 79 line is the same fault


def test_xid154_wordings_of_driver_610() -> None:
    facts = _sample("dmesg-xid/synthetic-xid154-recovery-wordings-610.txt")
    assert facts.recovery_actions == {"00000000:9a:00.0": "reset", "00000000:ab:00.0": "reboot"}
    gsp, pf_flr, bus, os_reboot = facts.events
    assert (pf_flr.recovery_code, pf_flr.recovery_text) == (1, "PF FLR")
    assert (os_reboot.recovery_code, os_reboot.recovery_text) == (2, "OS Reboot")
    assert gsp.recommended_action == pf_flr.recommended_action == "RESET_GPU"
    assert bus.recommended_action == os_reboot.recommended_action == "RESTART_BM"
    assert facts.reset_required_gpus == ("00000000:9a:00.0",)


def test_lines_it_cannot_read_are_listed_and_the_rest_stands() -> None:
    facts = _sample("dmesg-xid/synthetic-xid-unreadable-lines-keep-the-rest.txt")
    assert facts.codes == (13, 79, 154)
    assert [(u.line, u.reason) for u in facts.unparsed] == [
        (3, "malformed Xid line"),
        (7, "malformed SXid line"),
        (9, "cut off mid-line"),
    ]
    assert facts.unparsed[0].text.endswith("NVRM: Xid (62): GPU has fallen off the bus")
    assert facts.complete is False
    unknown_code, new_wording, no_change = (e for e in facts.events if e.code == 154)
    assert (unknown_code.recovery_action, unknown_code.recovery_code) == ("unknown", 9)
    assert unknown_code.recommended_action == "CONTACT_SUPPORT"
    assert (new_wording.recovery_action, new_wording.recovery_text) == ("reboot", "Reboot The Rack")
    assert (no_change.recovery_action, no_change.recovery_code) == ("unknown", None)
    xid13 = facts.events[0]
    assert (xid13.code, xid13.recommended_action) == (
        13,
        "RESTART_APP",
    )  # unknown overrides nothing


def test_bus_off_reports_without_an_xid_line_are_xid79() -> None:
    facts = _sample("dmesg-xid/synthetic-xid79-bus-off-without-xid-line.txt")
    assert facts.codes == (79,)
    assert {e.source for e in facts.events} == {EventSource.BUS_OFF}
    assert [(e.bus_id, e.line) for e in facts.events] == [
        ("00000000:05:00.0", 2),  # three-line block; its repeat at 6.09 s is the same fault
        ("00000000:06:00.0", 7),  # two-line block
        ("00000000:3b:00.0", 13),  # one-line form
        ("00000000:91:00.0", 17),  # tail after `GPU at PCI` and the serial line
    ]
    assert facts.events[0].seconds == 5.913455
    assert facts.events[3].uuid == "GPU-b6c3b2be-0a1b-4c2d-8e3f-d464e4c7e08b"
    assert {e.recommended_action for e in facts.events} == {"RESTART_BM"}
    assert facts.reboot_required is True


def test_a_bus_off_line_is_its_own_fault_only_away_from_an_xid79_of_that_gpu() -> None:
    text = (
        "[ 10.000000] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n"
        "[ 10.000004] NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.\n"
        "[ 10.000009] NVRM: GPU 0000:5e:00.0: GPU has fallen off the bus.\n"
        "[ 5000.000000] NVRM: GPU 0000:3b:00.0: GPU has fallen off the bus.\n"
    )
    facts = PROBE.parse(text)
    assert [(e.bus_id, e.line, e.source) for e in facts.events] == [
        ("00000000:3b:00.0", 1, EventSource.XID),
        ("00000000:5e:00.0", 3, EventSource.BUS_OFF),
        ("00000000:3b:00.0", 4, EventSource.BUS_OFF),
    ]
    assert facts.counts == {79: 3}


def test_nvswitch_sxids_are_their_own_facts() -> None:
    facts = _sample("dmesg-other/synthetic-sxid-nvswitch-nonfatal-fatal-with-details.txt")
    assert facts.count == 0
    assert [(e.code, e.severity, e.switch, e.link, e.line) for e in facts.sxid_events] == [
        (12028, SxidSeverity.NON_FATAL, "nvswitch3", 32, 1),
        (20034, SxidSeverity.FATAL, "nvswitch1", 48, 4),
        (20034, SxidSeverity.FATAL, "nvswitch0", 37, 7),
        (22013, SxidSeverity.NON_FATAL, "nvswitch2", 60, 8),
        (22013, SxidSeverity.CORRECTABLE, "nvswitch2", 5, 9),
    ]
    assert facts.sxid_counts == {12028: 1, 20034: 2, 22013: 2}
    assert facts.sxid_fatal_codes == (20034,)
    assert facts.sxid_switches[0] == "00000000:c5:00.0"
    assert facts.sxid_events[0].message == "egress non-posted PRIV error (First)"
    assert facts.unparsed == ()


def test_fabric_manager_log_gives_its_nvswitch_error() -> None:
    facts = _sample("misc/gpud-fabricmanager-nvswitch-nonfatal-12028.log")
    assert facts.source_format is LogFormat.FABRIC_MANAGER
    (sxid,) = facts.sxid_events
    assert (sxid.code, sxid.severity, sxid.fatal) == (12028, SxidSeverity.NON_FATAL, False)
    assert (sxid.bus_id, sxid.physical_id, sxid.link) == ("00000000:86:00.0", 3, 61)
    assert sxid.timestamp == "Feb 27 2025 15:10:02"
    assert sxid.clock is Clock.WALL and sxid.seconds == 1740669002.0
    assert (facts.count, facts.sxid_fatal_codes) == (0, ())


def test_a_corrupt_time_stamp_costs_the_time_not_the_event() -> None:
    text = (
        "[Mon Feb 31 10:00:00 2025] NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus.\n"
    )
    (event,) = PROBE.parse(text).events
    assert (event.code, event.timestamp, event.seconds) == (79, "Mon Feb 31 10:00:00 2025", None)


def test_unparsed_line_shape() -> None:
    facts = PROBE.parse("[ 1.0] NVRM: Xid (PCI:0000:3b:00): seventy-nine\n[ 2.0] ok\n")
    assert (facts.count, facts.complete) == (0, True)
    assert facts.unparsed == (
        UnparsedLine(1, "[ 1.0] NVRM: Xid (PCI:0000:3b:00): seventy-nine", "malformed Xid line"),
    )


GPU_INIT = "dmesg-xid/synthetic-gpu-init-failures-power-rminitadapter-unsupported-open.txt"
GPU_INIT_OLD = "dmesg-xid/synthetic-gpu-init-failed-legacy-no-bus-unsupported-release.txt"


def test_gpus_that_did_not_initialise_are_reported_without_an_xid() -> None:
    facts = _sample(GPU_INIT)
    assert facts.codes == ()  # no Xid line at all, and still an unhealthy kernel log
    assert [(f.kind, f.bus_id, f.count, f.line) for f in facts.gpu_failures] == [
        (GpuFailureKind.NO_POWER, "00000000:3b:00.0", 1, 5),
        (GpuFailureKind.INIT_FAILED, "00000000:3b:00.0", 1, 6),
        (GpuFailureKind.INIT_FAILED, "00000000:5e:00.0", 2, 8),  # opened again, failed again
        (GpuFailureKind.UNSUPPORTED, "00000000:86:00.0", 1, 10),
    ]
    assert facts.failed_gpus == ("00000000:3b:00.0", "00000000:5e:00.0", "00000000:86:00.0")
    init = facts.gpu_failures[2]
    assert (init.message, init.last_line, init.timestamp) == (
        "RmInitAdapter failed! (0x24:0x65:1426)",
        19,
        "11.770152",
    )
    assert facts.gpu_failures[3].message == (
        "The NVIDIA GPU 0000:86:00.0 (PCI ID: 10de:1db6) installed in this system is not"
        " supported by open nvidia.ko because it does not include the required GPU System"
        " Processor (GSP)."
    )
    # `Failed to enable MSI` names GPU 0000:1b:00.0 but is no failure; the probe failure for
    # 0000:86:00.0 is the unsupported GPU already reported.
    assert "00000000:1b:00.0" not in facts.failed_gpus
    assert GpuFailureKind.PROBE_FAILED not in {f.kind for f in facts.gpu_failures}


def test_older_drivers_name_the_gpu_on_the_lines_before() -> None:
    facts = _sample(GPU_INIT_OLD)
    assert [(f.kind, f.bus_id, f.pci, f.line) for f in facts.gpu_failures] == [
        (GpuFailureKind.UNSUPPORTED, "00000000:01:00.0", "0000:01:00.0", 1),
        # `GPU at PCI:0000:13:00` two lines up, at the same time
        (GpuFailureKind.INIT_FAILED, "00000000:13:00.0", "0000:13:00", 11),
        # nothing names a GPU near it (the last naming line is a day earlier): no bus id
        (GpuFailureKind.INIT_FAILED, None, "", 13),
    ]
    assert facts.gpu_failures[0].message.endswith(
        "not supported by the 280.13 NVIDIA Linux graphics driver release."
    )
    assert facts.failed_gpus == ("00000000:01:00.0", "00000000:13:00.0")


def test_a_probe_failure_naming_no_gpu_still_counts() -> None:
    facts = _sample("dmesg-xid/synthetic-probe-routine-failed-no-gpu-named.txt")
    (failure,) = facts.gpu_failures
    assert (failure.kind, failure.bus_id, failure.line) == (GpuFailureKind.PROBE_FAILED, None, 3)
    assert facts.failed_gpus == ()


def test_a_gpu_off_the_bus_is_one_failure_however_it_is_reported() -> None:
    facts = _sample("dmesg-xid/synthetic-xid79-bus-off-without-xid-line.txt")
    assert {f.kind for f in facts.gpu_failures} == {GpuFailureKind.FELL_OFF_BUS}
    assert facts.failed_gpus == tuple(sorted(e.bus_id or "" for e in facts.events))
    line = _sample("dmesg-xid/nvsentinel-155-comment-xid79-line.txt")
    assert [(f.kind, f.bus_id) for f in line.gpu_failures] == [
        (GpuFailureKind.FELL_OFF_BUS, "00000000:44:00.0")
    ]


def test_an_xid_the_catalog_does_not_know_is_critical() -> None:
    text = (
        "[ 100.0] NVRM: Xid (PCI:0000:3b:00): 176, pid=1234, name=python, PCIe correctable"
        " error fault\n"
        "[ 101.0] NVRM: Xid (PCI:0000:3b:00): 43, pid=1234, name=python, Ch 00000008\n"
    )
    facts = PROBE.read(text)
    unknown = facts.events[0]
    assert (unknown.severity, unknown.mnemonic, unknown.recommended_action) == (
        None,
        None,
        "CONTACT_SUPPORT",
    )
    assert facts.unknown_codes == (176,)
    assert facts.critical_codes == (176,)  # fails closed; 43 is a warning in the catalog


def test_the_real_h200_boot_log_is_clean_and_readable() -> None:
    text = (SAMPLES / "real-nodes/h200-sxm-vm-580.159.04/probe-xid.txt").read_text()
    facts = PROBE.read(text)
    assert (facts.count, facts.gpu_failures, facts.unparsed) == (0, (), ())
    assert (facts.source_format, facts.complete) == (LogFormat.DMESG_CTIME, True)


@pytest.mark.parametrize(
    "sample",
    [
        "synthetic-xid-probe-dmesg-not-permitted-no-journalctl.txt",
        "synthetic-dmesg-not-permitted-container.txt",
        "synthetic-journalctl-k-b-no-entries-container.txt",
        "synthetic-journalctl-k-non-root-hint-no-entries.txt",
    ],
)
def test_an_unreadable_kernel_log_is_never_no_xid(sample: str) -> None:
    """Whatever the gate reads it for (reboot, reset), it gets no facts: it refuses."""
    text = (SAMPLES / "dmesg-other" / sample).read_text()
    verdict_ = verdict(PROBE, text)
    assert verdict_.facts is None and verdict_.data is None
    assert verdict_.error is not None and "kernel log not readable" in verdict_.error


def test_a_code_the_catalog_lists_as_unused_takes_the_name_the_driver_printed() -> None:
    """610 drivers reuse Xid 51 and print BAD_TSG; NVIDIA's catalog sheet still has it as
    SILENT_RUNNING_STRESS_TEST_FAILURE, unused. A unit name leading another code's message
    (Xid 145's RLW_RXPIPE) is not the Xid's name."""
    text = (
        "[Sat Nov 28 03:01:02 2026] NVRM: Xid (PCI:0000:3b:00): 51, pid=2812, name=python3,"
        " BAD_TSG, channel 0x0000000f\n"
        "[Sat Nov 28 03:01:03 2026] NVRM: Xid (PCI:0000:3b:00): 145, RLW_RXPIPE Nonfatal XC0"
        " i0 Link 11\n"
    )
    bad_tsg, rlw = PROBE.read(text).events
    assert (bad_tsg.code, bad_tsg.mnemonic) == (51, "BAD_TSG")
    assert rlw.code == 145 and rlw.mnemonic != "RLW_RXPIPE"


def test_an_sxid_line_is_read_in_any_case_and_with_non_ascii_text() -> None:
    """The shortcut before sxid's own test skips only ASCII lines naming neither `SXid (` nor
    NVSwitch; the rest go to it as before."""
    base = "[Mon Feb  3 10:00:00 2025] nvidia-nvswitch2: SXid (PCI:0000:c5:00.0): 12028, "
    lines = [base + "Non-fatal, Link 36 egress non-posted PRIV error (First)", base.upper() + "X"]
    lines.append(base.replace("nvidia-nvswitch2", "nvidia-nvswitch2 é") + "Non-fatal, Link 1")
    facts = PROBE.parse("\n".join(lines) + "\n")
    assert [event.line for event in facts.sxid_events] == [1, 3]
    assert [(unread.line, unread.reason) for unread in facts.unparsed] == [
        (2, "malformed SXid line")
    ]
