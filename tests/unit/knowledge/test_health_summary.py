"""The per-probe verdicts `fleetfix probe` and the reports show (knowledge/health.py), on the
kernel log: a GPU the driver could not bring up is bad with no Xid line; a clean real boot log
(the H200 VM) is ok; a tool the node lacks is ok, "not installed"."""

from __future__ import annotations

from pathlib import Path

from fleetfix.knowledge.health import Level, summarize
from fleetfix.probes import probe_registry
from fleetfix.probes.base import to_data

H200 = Path(__file__).parents[2] / "fixtures" / "samples" / "real-nodes" / "h200-sxm-vm-580.159.04"
XID = probe_registry().get("xid")


def test_a_gpu_that_failed_to_initialise_is_bad_without_an_xid() -> None:
    facts = to_data(XID.read("NVRM: GPU 0000:3b:00.0: RmInitAdapter failed! (0x24:0x65:1426)\n"))
    health = summarize("xid", facts)
    assert health.level is Level.BAD
    assert "3b:00.0" in health.text and "init failed" in health.text


def test_the_real_h200_boot_log_is_clean() -> None:
    facts = to_data(XID.read((H200 / "probe-xid.txt").read_text(encoding="utf-8")))
    assert summarize("xid", facts).level is Level.OK


def test_a_missing_tool_is_ok_not_installed() -> None:
    health = summarize("ib", None, "", absent="ibstat")
    assert health.level is Level.OK and health.absent


def test_the_pci_bus_cell_counts_and_flags_a_gpu_that_fell_off() -> None:
    facts = {"count": 2, "gpus": [{"slot": "0000:1b:00.0", "lost": False}, {"lost": True}]}
    health = summarize("pci_gpus", facts)
    assert health.level is Level.BAD and health.text == "2 on the bus, 1 fallen off"
    assert summarize("pci_gpus", {"count": 8, "gpus": [{"lost": False}] * 8}).level is Level.OK
