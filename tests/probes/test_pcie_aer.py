"""PCIe AER reports read from real kernel logs (tests/fixtures/kernel-aer/MANIFEST.md), alone
and through the xid probe, which reads them from the same log, and the verdict on them."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetfix.knowledge.health import AER_CORRECTED_WARN, Level, summarize
from fleetfix.plain import to_data
from fleetfix.probes import xid
from fleetfix.probes.kernel_log import LogFormat
from fleetfix.probes.pcie_aer import Severity, parse_aer

AER = Path(__file__).resolve().parents[1] / "fixtures" / "kernel-aer"


def _read(name: str) -> str:
    return (AER / name).read_text(encoding="utf-8")


def test_a_gpus_root_port_with_a_fatal_error_and_a_driver_that_cannot_recover() -> None:
    facts = parse_aer(_read("issue-returnn-1500-gpu-root-port-uncorrected-fatal-relative.txt"))
    (report,) = facts.reports
    assert report.bus_id == "0000:00:03.0" and report.driver == "pcieport"
    assert report.severity is Severity.FATAL and report.uncorrected
    assert (report.layer, report.agent) == ("Transaction Layer", "Requester ID")
    assert (report.ids, report.status) == ("8086:6f08", "00004020")
    assert report.errors == ("SDES", "CmpltTO") and report.first == "CmpltTO"
    assert facts.uncorrected_devices == ("0000:00:03.0",)
    assert facts.cannot_recover == ("0000:03:00.0", "0000:03:00.1")  # nvidia, its audio
    assert facts.recovery_failed == ("0000:00:03.0",)


def test_correctable_errors_are_counted_per_device_not_faults() -> None:
    facts = parse_aer(_read("issue-pop-3363-correctable-syslog-dmesg-time.txt"))
    assert [r.severity for r in facts.reports] == [Severity.CORRECTED, Severity.CORRECTED]
    assert [r.agent for r in facts.reports] == ["Transmitter ID", "Receiver ID"]
    seen = facts.devices["0000:00:03.1"]
    assert (seen.corrected, seen.uncorrected) == (2, 0)
    assert seen.errors == ("Timeout", "BadTLP")
    assert facts.uncorrected_devices == ()


def test_the_5x_layout_names_the_device_below_the_port_apart() -> None:
    facts = parse_aer(_read("issue-pop-751-new-style-nvme-corrected.txt"))
    assert [(r.bus_id, r.driver) for r in facts.reports] == [
        ("0000:00:1d.0", "pcieport"),
        ("0000:00:1d.0", "pcieport"),
        ("0000:03:00.0", "nvme"),
    ]
    assert facts.reports[2].ids == "144d:a808" and facts.reports[2].errors == ("RxErr",)
    assert facts.devices["0000:00:1d.0"].corrected == 2


def test_uncorrectable_non_fatal_in_the_newest_wording() -> None:
    facts = parse_aer(_read("issue-minisforum-ms02-10-uncorrectable-nonfatal-journal.txt"))
    (report,) = facts.reports
    assert report.severity is Severity.NONFATAL
    assert report.errors == ("ACSViol",) and report.first == "ACSViol"  # not the TLP Header
    assert facts.devices["0000:80:1b.4"].uncorrected_nonfatal == 1
    assert facts.cannot_recover == ("0000:97:00.0", "0000:84:00.0")


def test_the_old_wording_with_an_id_and_spelt_out_bits() -> None:
    facts = parse_aer(_read("issue-nbfc-181-old-style-id-receiver.txt"))
    (report,) = facts.reports
    assert (report.severity, report.agent) == (Severity.CORRECTED, "Receiver ID")
    assert report.errors == ("Receiver Error",) and report.ids == "8086:9d15"


def test_repeated_reports_of_one_device_each_count() -> None:
    facts = parse_aer(_read("issue-coreboot-archfan-2-data-link-timeout.txt"))
    assert [r.line for r in facts.reports] == [2, 6]
    assert facts.devices["0000:00:1c.1"].corrected == 2


def test_a_log_without_aer_gives_nothing_and_details_of_another_device_are_not_taken() -> None:
    assert parse_aer("[  1.0] NVRM: loading NVIDIA UNIX x86_64 Kernel Module\n").reports == ()
    # A detail line naming another device than the report before it is not that report's.
    text = (
        "[ 9.1] pcieport 0000:00:01.0: AER: PCIe Bus Error: severity=Corrected,"
        " type=Physical Layer, (Receiver ID)\n"
        "[ 9.2] nvidia 0000:3b:00.0: AER:   device [10de:2330] error status/mask=00000001/0\n"
        "[ 9.3] pcieport 0000:00:01.0: AER:    [ 0] RxErr\n"
    )
    (report,) = parse_aer(text).reports
    assert report.ids is None and report.errors == ("RxErr",)


def test_the_xid_probe_reads_a_gpu_root_ports_fatal_error_and_judges_the_gpu_lost() -> None:
    # dmesg -H's relative stamps ([  +0.000844]) are a kernel log too.
    facts = xid.parse(_read("issue-returnn-1500-gpu-root-port-uncorrected-fatal-relative.txt"))
    assert facts.source_format is LogFormat.DMESG_RELATIVE and facts.count == 0
    port = facts.aer.devices["0000:00:03.0"]
    assert (port.driver, port.ids, port.gpu, port.uncorrected_fatal) == (
        "pcieport",
        "8086:6f08",
        False,
        1,
    )
    assert facts.aer.cannot_recover_gpus == ("0000:03:00.0",)
    health = summarize("xid", to_data(facts))
    assert health.level is Level.BAD
    assert health.text == (
        "PCIe fatal AER x1 on 0000:00:03.0 (pcieport); AER recovery failed below 0000:00:03.0; "
        "GPU 0000:03:00.0 cannot recover"
    )


@pytest.mark.parametrize(
    ("name", "level"),
    [
        ("issue-pop-3363-correctable-syslog-dmesg-time.txt", Level.OK),  # 2 corrected
        ("issue-coreboot-archfan-2-data-link-timeout.txt", Level.OK),
        ("issue-nbfc-181-old-style-id-receiver.txt", Level.OK),  # a localized syslog month
        ("issue-pop-751-new-style-nvme-corrected.txt", Level.OK),  # no time prefix at all
        ("issue-minisforum-ms02-10-uncorrectable-nonfatal-journal.txt", Level.BAD),
    ],
)
def test_corrected_errors_alone_are_no_fault_a_failed_recovery_is(name: str, level: Level) -> None:
    facts = xid.parse(_read(name))
    assert facts.aer.reports, "the xid probe reads the AER reports of every capture"
    assert summarize("xid", to_data(facts)).level is level


def test_a_stream_of_corrected_errors_warns_and_an_uncorrected_one_on_a_gpu_is_a_fault() -> None:
    line = (
        "[ {n}.0] nvidia 0000:17:00.0: AER: PCIe Bus Error: severity={severity}, "
        "type=Data Link Layer, (Receiver ID)\n"
    )
    many = "".join(line.format(n=n, severity="Corrected") for n in range(AER_CORRECTED_WARN))
    corrected = summarize("xid", to_data(xid.parse(many)))
    assert (corrected.level, corrected.text) == (
        Level.WARN,
        f"PCIe corrected AER x{AER_CORRECTED_WARN} on GPU 0000:17:00.0",
    )
    one = line.format(n=1, severity="Uncorrected (Non-Fatal)")
    assert summarize("xid", to_data(xid.parse(one))).level is Level.BAD
