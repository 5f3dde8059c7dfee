"""The nvidia_smi probe against every real nvidia-smi sample (XML, -q text, CSV, table)."""

from __future__ import annotations

import dataclasses
import re

import pytest

from fleetfix.errors import PlaybookError, ProbeParseError
from fleetfix.probes.base import to_data
from fleetfix.probes.gpu_facts import Format, NvidiaSmiFacts, normalize_bus_id
from fleetfix.probes.nvidia_smi import PROBE
from fleetfix.probes.nvidia_smi_csv import BASIC_FIELDS, FULL_FIELDS
from tests.probes.cases import SAMPLES

FAMILIES = ("nvidia-smi-xml", "nvidia-smi-q", "nvidia-smi-table", "query-gpu-csv")


def _text(sample: str) -> str:
    return (SAMPLES / sample).read_text(encoding="utf-8")


def _parse(sample: str) -> NvidiaSmiFacts:
    return PROBE.parse(_text(sample))


# --- -q text -------------------------------------------------------------------------------


def test_q_text_8xrtx4090_two_busy_gpus() -> None:
    facts = _parse("nvidia-smi-q/gpud-8xrtx4090-535.154.05-q-full-2busy.txt")
    assert facts.format is Format.TEXT
    assert (facts.complete, facts.attached_gpus, facts.gpu_count) == (True, 8, 8)
    assert facts.driver_version == "535.154.05"
    assert [gpu.index for gpu in facts.gpus] == list(range(8))
    assert facts.gpus[0].bus_id == "00000000:01:00.0"
    assert facts.gpus[1].uuid == "GPU-8f4d1755-9c8a-3a19-b71e-c190b3801dec"
    assert facts.gpus_with_processes == (1, 4)
    busy = facts.gpus[1]
    assert busy.processes is not None
    assert [(p.pid, p.name, p.type, p.used_memory_mib) for p in busy.processes] == [
        (1285135, "/usr/bin/python", "C", 21602)
    ]
    assert busy.throttle_reasons == ("sw_power_cap",)
    assert busy.performance_state == "P2"
    assert facts.gpus[0].throttle_reasons == ("gpu_idle",)
    assert facts.gpus[0].processes == ()
    # T.Limit offsets are kept apart from absolute thresholds, negative as printed.
    assert busy.temperature.shutdown_tlimit == -7
    assert busy.temperature.shutdown is None
    # ECC is disabled on GeForce: counters are unknown, never zero.
    assert busy.ecc.enabled is False
    assert busy.ecc.volatile.dbe is None
    assert busy.retired_pages.pending is None
    assert busy.remapped_rows.pending is False


def test_q_text_h100_new_fields() -> None:
    facts = _parse("nvidia-smi-q/nvgpuexp-h100-vm-590.48.01-idle-q.txt")
    gpu = facts.gpus[0]
    assert gpu.bus_id == "00000000:00:09.0"
    assert gpu.recovery_action == "none"
    assert facts.recovery_action_gpus == ()
    assert gpu.fabric is not None
    assert (gpu.fabric.state, gpu.fabric.status, gpu.fabric.clique_id) == (
        "Completed",
        "Success",
        "0",
    )
    assert gpu.ecc.volatile.sram_uncorrectable_secded == 0
    assert gpu.ecc.volatile.sram_uncorrectable == 0  # parity + SEC-DED
    assert gpu.ecc.aggregate.sram_threshold_exceeded is False
    assert dict(gpu.ecc.aggregate_uncorrectable_sram_sources) == {
        "l2": 0,
        "sm": 0,
        "microcontroller": 0,
        "pcie": 0,
        "other": 0,
    }
    assert gpu.remapped_rows.histogram["max"] == 2560
    assert (gpu.power.draw, gpu.power.draw_instant, gpu.power.limit) == (69.85, 69.62, 700.0)
    assert gpu.memory.total == 81559


def test_q_text_single_gpu_query_has_no_index() -> None:
    facts = _parse("nvidia-smi-q/llmaction-h800-525.105.17-q-i0.txt")
    assert (facts.attached_gpus, facts.gpu_count, facts.complete) == (8, 1, False)
    # `-q -i N` shows one of 8 GPUs: its position says nothing about its index.
    assert facts.gpus[0].index is None
    assert facts.gpus[0].key == "00000000:18:00.0"
    assert facts.gpus[0].name == "NVIDIA H800"
    assert facts.gpus[0].ecc.enabled is False  # old "Ecc Mode" label


def test_q_display_section_is_incomplete() -> None:
    facts = _parse("nvidia-smi-q/issue-mangohud-636-q-d-performance-495.44-complete.txt")
    assert facts.complete is False
    assert facts.gpus[0].throttle_reasons == ("gpu_idle",)
    assert facts.gpus[0].uuid is None


def test_synthetic_row_remap_pending_fills_the_summaries() -> None:
    facts = _parse("nvidia-smi-q/synthetic-h100-590.48.01-row-remap-pending-dbe-recovery-reset.txt")
    gpu = facts.gpus[0]
    assert (gpu.ecc.volatile.dbe, gpu.ecc.volatile.dram_uncorrectable) == (2, 2)
    assert gpu.remapped_rows.uncorrectable == 2
    assert facts.gpus_with_dbe == (0,)
    assert facts.gpus_with_aggregate_dbe == (0,)
    assert facts.row_remap_pending_gpus == (0,)
    assert facts.row_remap_failure_gpus == ()
    assert gpu.recovery_action == "reset"
    assert facts.recovery_action_gpus == (0,)
    assert (facts.expected_gpus, facts.count_ok) == (1, True)


@pytest.mark.parametrize(
    "fragment",
    [
        "nvidia-smi-q/stas-mleng-ecc-block-sram-uncorrectable-volatile1-aggregate5.txt",
        "nvidia-smi-q/stas-mleng-grep-correctable-sram-uncorrectable.txt",
        "nvidia-smi-q/issue-kubeflow-68-grep-clocks-throttle-2018-narrow-key-col.txt",
    ],
)
def test_q_fragments_without_a_gpu_are_refused(fragment: str) -> None:
    with pytest.raises(ProbeParseError, match="no 'GPU <bus id>' section"):
        _parse(fragment)


def test_q_text_error_values_are_reported() -> None:
    text = _text("nvidia-smi-q/gpud-e2e-a10-550.127.05-q-full.txt").replace(
        "GPU Current Temp                  : 33 C",
        "GPU Current Temp                  : Unknown Error",
    )
    facts = PROBE.parse(text)
    assert facts.gpus[0].temperature.gpu is None
    assert facts.gpus[0].error_fields == ("temperature",)
    assert facts.gpus_reporting_errors == (0,)


def test_q_text_bad_number_points_at_the_line() -> None:
    text = _text("nvidia-smi-q/gpud-e2e-a10-550.127.05-q-full.txt").replace(
        "Used                              : 1 MiB", "Used                              : lots MiB"
    )
    with pytest.raises(ProbeParseError, match="expected a number") as info:
        PROBE.parse(text)
    assert info.value.line is not None
    assert "lots" in text.splitlines()[info.value.line - 1]


# --- XML -----------------------------------------------------------------------------------


def test_xml_p100_old_ecc_layout_with_aggregate_sbe() -> None:
    facts = _parse("nvidia-smi-xml/netdata-tesla-p100-v11-510.xml")
    assert facts.format is Format.XML
    gpu = facts.gpus[0]
    assert gpu.index == 0
    assert (gpu.ecc.aggregate.sbe, gpu.ecc.aggregate.dbe) == (3, 0)
    assert gpu.ecc.aggregate.sbe_by_location["device_memory"] == 3
    assert gpu.ecc.aggregate.sbe_by_location["l1_cache"] is None  # N/A, not 0
    assert gpu.ecc.volatile.sbe == 0
    assert facts.gpus_with_sbe == ()  # volatile is what gates; aggregate is history
    assert (gpu.retired_pages.sbe, gpu.retired_pages.pending) == (0, False)
    assert gpu.remapped_rows.pending is None  # Pascal has no row remapper
    assert facts.persistence_off_gpus == (0,)


def test_xml_trimmed_mig_a100_keeps_bus_id_as_key() -> None:
    facts = _parse("nvidia-smi-xml/telegraf-a100-sxm4-80gb-mig-v12.xml")
    assert (facts.attached_gpus, facts.gpu_count, facts.complete) == (4, 1, False)
    gpu = facts.gpus[0]
    assert gpu.index is None
    assert facts.persistence_off_gpus == ("00000000:01:00.0",)
    assert (gpu.mig.enabled, gpu.mig.pending_enabled) == (True, True)
    assert gpu.mig.devices is not None
    assert [d.gpu_instance_id for d in gpu.mig.devices] == [3, 4, 5, 6]
    assert gpu.mig.devices[0].memory_total == 19968
    assert gpu.utilization.gpu is None  # N/A under MIG
    assert gpu.throttle_reasons == ()


def test_xml_v13_blackwell() -> None:
    facts = _parse("nvidia-smi-xml/telegraf-rtx-pro-6000-maxq-blackwell-v13.xml")
    gpu = facts.gpus[0]
    assert gpu.architecture == "Blackwell"
    assert gpu.recovery_action == "none"
    assert gpu.remapped_rows.histogram["max"] == 512
    assert gpu.processes is not None
    assert gpu.processes[0].pid == 116860
    assert gpu.processes[0].used_memory_mib == 65710


def test_xml_vgpu_processes_without_names() -> None:
    facts = _parse("nvidia-smi-xml/telegraf-grid-p4-1q-vgpu-windows-v11-513.xml")
    gpu = facts.gpus[0]
    assert gpu.persistence_mode is None
    assert gpu.throttle_reasons is None  # the whole section is N/A
    assert gpu.processes is not None
    assert len(gpu.processes) == 13
    assert {(p.type, p.used_memory_mib) for p in gpu.processes} == {("C+G", None)}
    named = {p.pid: p.name for p in gpu.processes if p.name is not None}
    assert named == {15104: "C:\\Windows\\explorer.exe"}  # the other 12 have empty names


def test_truncated_xml_is_refused_with_its_line() -> None:
    text = _text("nvidia-smi-xml/telegraf-tesla-t4-v11-515.xml")
    cut = text[: len(text) // 2]
    with pytest.raises(ProbeParseError, match="malformed or truncated XML") as info:
        PROBE.parse(cut)
    assert info.value.line is not None


def test_xml_of_another_tool_is_refused() -> None:
    with pytest.raises(ProbeParseError, match="not <nvidia_smi_log>"):
        PROBE.parse('<?xml version="1.0"?>\n<dcgm><gpu/></dcgm>\n')


def test_xml_entities_are_refused() -> None:
    bomb = '<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "b">]><nvidia_smi_log>&a;</nvidia_smi_log>'
    with pytest.raises(ProbeParseError, match="forbidden"):
        PROBE.parse(bomb)


# --- default table -------------------------------------------------------------------------


def test_table_8xh100_without_process_list() -> None:
    facts = _parse("nvidia-smi-table/bitdeer-8xh100-550.90.07.txt")
    assert facts.format is Format.TABLE
    assert facts.gpu_count == 8
    assert facts.gpus[7].bus_id == "00000000:df:00.0"
    assert facts.gpus[0].ecc.volatile.dbe == 0
    assert facts.gpus[0].temperature.gpu == 25
    assert (facts.gpus[0].power.draw, facts.gpus[0].power.limit) == (69.0, 700.0)
    # No process table in the paste: processes are unknown and the facts incomplete.
    assert facts.gpus[0].processes is None
    assert facts.complete is False


def test_table_with_processes() -> None:
    facts = _parse("nvidia-smi-table/nvgpuexp-h100-vm-590.48.01-load.txt")
    assert facts.complete is True
    processes = facts.gpus[0].processes
    assert processes is not None
    assert [(p.pid, p.name, p.used_memory_mib) for p in processes] == [
        (11327, "/root/tools/memhog", 2566),
        (11328, "/root/tools/memhog", 1542),
        (11345, "./gpu_burn", 15690),
    ]
    idle = _parse("nvidia-smi-table/gpud-e2e-a10-550.127.05-passthrough-idle.txt")
    assert idle.gpus[0].processes == ()
    assert idle.complete is True


def test_table_with_its_process_list_cut_off_has_unknown_processes() -> None:
    text = _text("nvidia-smi-table/nvgpuexp-h100-vm-590.48.01-load.txt")
    cut = text[: text.index("11328")]  # mid-way through the second process row
    facts = PROBE.parse(cut)
    assert facts.complete is False
    assert facts.gpus[0].processes is None  # not a partial list that looks like "idle"
    assert facts.gpus_with_processes == ()


def test_table_legacy_layout_cut_off() -> None:
    facts = _parse("nvidia-smi-table/issue-chtc-24-3xa100-sxm-515.48.07-legacy-layout-trunc.txt")
    assert facts.complete is False
    assert [gpu.index for gpu in facts.gpus] == [0, 1, 2]
    assert facts.gpus[2].utilization.gpu == 99
    assert facts.gpus[2].mig.enabled is None  # its MIG row was cut off
    assert facts.gpus[0].name == "NVIDIA A100-SXM..."


def test_table_err_values_are_reported() -> None:
    text = _text("nvidia-smi-table/gpud-e2e-a10-550.127.05-passthrough-idle.txt").replace(
        "|  0%   32C    P8             21W /  150W |", "|  0%  ERR!   P8            ERR! /  150W |"
    )
    facts = PROBE.parse(text)
    gpu = facts.gpus[0]
    assert (gpu.temperature.gpu, gpu.power.draw) == (None, None)
    assert gpu.error_fields == ("temperature.gpu", "power.draw")
    assert facts.gpus_reporting_errors == (0,)


def test_table_garbage_in_the_middle_is_refused() -> None:
    lines = _text("nvidia-smi-table/ssbandjl-s114-2xv100-sxm2-570.133.20.txt").splitlines()
    lines.insert(12, "| this is not a gpu row |")
    with pytest.raises(ProbeParseError) as info:
        PROBE.parse("\n".join(lines))
    assert info.value.line == 13


def test_markdown_quoted_table_reads_like_the_original() -> None:
    text = _text("nvidia-smi-table/gpud-e2e-a10-550.127.05-passthrough-idle.txt")
    quoted = "\n".join(f"> {line}" for line in text.splitlines())
    assert to_data(PROBE.parse(quoted)) == to_data(PROBE.parse(text))


# --- --query-gpu CSV -----------------------------------------------------------------------


def test_csv_all_fields_h100() -> None:
    facts = _parse("query-gpu-csv/nvgpuexp-h100-590.48.01-idle-allfields.csv")
    assert facts.format is Format.CSV
    gpu = facts.gpus[0]
    assert (gpu.index, gpu.bus_id, facts.attached_gpus) == (0, "00000000:00:09.0", 1)
    assert gpu.throttle_reasons == ("gpu_idle",)
    assert gpu.ecc.volatile.dbe == 0
    assert gpu.remapped_rows.histogram["max"] == 2560
    assert gpu.fabric is not None
    assert gpu.fabric.state == "Completed"
    assert gpu.recovery_action == "none"
    assert gpu.memory.total == 81559
    assert gpu.temperature.tlimit == 46


def test_csv_nounits_header_with_units() -> None:
    facts = _parse("query-gpu-csv/netdata-tesla-p100-nounits.csv")
    gpu = facts.gpus[0]
    assert gpu.index is None  # no index column
    assert gpu.key == "GPU-ef1b2c9b-38d8-2090-2bd1-f567a3eb42a6"
    assert (gpu.memory.used, gpu.memory.free, gpu.power.draw) == (0, 16280, 28.16)


def test_csv_elided_paste() -> None:
    facts = _parse("query-gpu-csv/stas-mleng-h100-name-busid-vbios-elided.csv")
    assert facts.complete is False
    assert [gpu.bus_id for gpu in facts.gpus] == ["00000000:04:00.0", "00000000:8b:00.0"]


def _noheader_row(fields: tuple[str, ...], values: dict[str, str]) -> str:
    return ", ".join(values.get(field, "[N/A]") for field in fields)


def test_csv_noheader_in_the_probe_field_order() -> None:
    values = {
        "index": "3",
        "pci.bus_id": "00000009:01:00.0",
        "persistence_mode": "Disabled",
        "ecc.errors.uncorrected.volatile.total": "4",
        "remapped_rows.pending": "Yes",
        "clocks_throttle_reasons.active": "0x0000000000000048",
    }
    facts = PROBE.parse(_noheader_row(FULL_FIELDS, values) + "\n")
    gpu = facts.gpus[0]
    assert (gpu.index, gpu.bus_id) == (3, "00000009:01:00.0")
    assert gpu.throttle_reasons == ("hw_slowdown", "hw_thermal_slowdown")
    assert (facts.gpus_with_dbe, facts.row_remap_pending_gpus) == ((3,), (3,))
    assert facts.persistence_off_gpus == (3,)
    assert facts.hw_slowdown_gpus == (3,)
    basic = PROBE.parse(_noheader_row(BASIC_FIELDS, {"index": "0", "memory.used": "5 MiB"}))
    assert basic.gpus[0].memory.used == 5


def test_csv_noheader_of_unknown_width_is_refused() -> None:
    with pytest.raises(ProbeParseError, match="without a header"):
        PROBE.parse("0, NVIDIA H100, 42\n")


def test_csv_short_row_in_the_middle_is_refused() -> None:
    text = "index, name, temperature.gpu\n0, NVIDIA H100, 40\n1, NVIDIA H100\n2, NVIDIA H100, 41\n"
    with pytest.raises(ProbeParseError, match="2 values for 3 columns"):
        PROBE.parse(text)


# --- tool failures, expected count, garbage ------------------------------------------------


def test_driver_not_loaded_is_a_fact_not_health() -> None:
    text = (
        "### fleetfix nvidia_smi expected_gpus=8\n"
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
        "Make sure that the latest NVIDIA driver is installed and running.\n"
    )
    facts = PROBE.parse(text)
    assert facts.format is Format.ERROR
    assert (facts.gpu_count, facts.complete, facts.count_ok) == (0, False, False)
    assert facts.errors[0].startswith("NVIDIA-SMI has failed")


def test_lost_gpu_next_to_a_readable_table() -> None:
    table = _text("nvidia-smi-table/gpud-e2e-a10-550.127.05-passthrough-idle.txt")
    text = (
        "### fleetfix nvidia_smi expected_gpus=2\n"
        "Unable to determine the device handle for GPU0000:3B:00.0: Unknown Error\n" + table
    )
    facts = PROBE.parse(text)
    assert facts.gpu_count == 1
    assert facts.lost_gpus[0].bus_id == "00000000:3b:00.0"
    assert facts.count_ok is False


def test_expected_count_matches() -> None:
    text = "### fleetfix nvidia_smi expected_gpus=8\n" + _text(
        "nvidia-smi-q/gpud-8xrtx4090-535.154.05-q-full-2busy.txt"
    )
    assert PROBE.parse(text).count_ok is True
    assert _parse("nvidia-smi-q/gpud-8xrtx4090-535.154.05-q-full-2busy.txt").count_ok is None


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty output"),
        ("\n\n   \n", "empty output"),
        ("hello world\n", "not nvidia-smi output"),
        ("Segmentation fault (core dumped)\n", "not nvidia-smi output"),
        ("GPU 00000000:01:00.0\n    Product Name : X\n  %%garbage%%\n", "not 'Key : value'"),
    ],
)
def test_garbage_is_refused(text: str, reason: str) -> None:
    with pytest.raises(ProbeParseError, match=re.escape(reason)):
        PROBE.parse(text)


def test_command_prefers_xml_and_falls_back_to_csv() -> None:
    plain = PROBE.command({})
    assert plain.startswith("{ out=$(nvidia-smi -q -x 2>/dev/null)")
    assert f"--query-gpu={','.join(FULL_FIELDS)} --format=csv" in plain
    assert plain.endswith(f"--query-gpu={','.join(BASIC_FIELDS)} --format=csv 2>&1")
    # The expected count reaches the parser as a parameter: nothing is echoed on the node.
    assert PROBE.command({"expected_gpus": 8}) == plain
    assert set(PROBE.params) == {"expected_gpus"}


def test_expected_count_reaches_the_parser_as_a_parameter() -> None:
    xml = _text("nvidia-smi-xml/lab-healthy-1000-8xh100-550.90.07.xml")
    table = _text("nvidia-smi-table/bitdeer-8xh100-550.90.07.txt")
    for text in (xml, table):  # the fast XML path and a pasted form
        assert PROBE.read(text, {"expected_gpus": 8}).count_ok is True
        short = PROBE.read(text, {"expected_gpus": 9})
        assert (short.expected_gpus, short.count_ok) == (9, False)
        assert PROBE.read(text, {}).count_ok is None
        assert PROBE.bind({"expected_gpus": 8}).read(text).count_ok is True
    # An older output's marker still reads; a parameter given with it wins.
    marked = "### fleetfix nvidia_smi expected_gpus=9\n" + xml
    assert PROBE.read(marked).expected_gpus == 9
    assert PROBE.read(marked, {"expected_gpus": 8}).count_ok is True


@pytest.mark.parametrize("bad", ["8", -1, True])
def test_parser_refuses_a_bad_expected_count(bad: object) -> None:
    with pytest.raises(PlaybookError, match="expected_gpus"):
        PROBE.read(
            _text("nvidia-smi-xml/lab-healthy-1000-8xh100-550.90.07.xml"), {"expected_gpus": bad}
        )


@pytest.mark.parametrize("bad", ["8", -1, True, 2.5])
def test_command_refuses_a_bad_expected_count(bad: object) -> None:
    with pytest.raises(PlaybookError, match="expected_gpus"):
        PROBE.command({"expected_gpus": bad})


@pytest.mark.parametrize(
    ("raw", "normalised"),
    [
        ("00000000:1B:00.0", "00000000:1b:00.0"),
        ("00000009:01:00.0", "00000009:01:00.0"),
        ("0009:01:00", "00000009:01:00.0"),
        ("3b:00.0", "00000000:3b:00.0"),
        ("not-a-bus", None),
    ],
)
def test_normalize_bus_id(raw: str, normalised: str | None) -> None:
    assert normalize_bus_id(raw) == normalised


def test_facts_are_immutable() -> None:
    facts = _parse("nvidia-smi-xml/netdata-tesla-p100-v11-510.xml")
    with pytest.raises(dataclasses.FrozenInstanceError):
        facts.gpus[0].index = 5  # type: ignore[misc]
    with pytest.raises(TypeError):
        facts.gpus[0].ecc.aggregate.sbe_by_location["device_memory"] = 0  # type: ignore[index]


H200 = "real-nodes/h200-sxm-vm-580.159.04"


@pytest.mark.parametrize(
    ("sample", "form"),
    [
        ("nvidia-smi-q.txt", Format.TEXT),
        ("nvidia-smi-q-x.txt", Format.XML),
        ("probe-nvidia_smi.txt", Format.XML),  # what the probe's command printed
        ("nvidia-smi.txt", Format.TABLE),
        ("nvidia-smi-query-gpu.txt", Format.CSV),
    ],
)
def test_every_real_h200_form_reads_the_same_gpu(sample: str, form: Format) -> None:
    """One H200 in a VM, 580.159.04, captured in each form nvidia-smi prints: each reads
    through `fleetfix parse`'s way in (Probe.read) to the same GPU."""
    facts = PROBE.read(_text(f"{H200}/{sample}"), {"expected_gpus": 1})
    assert (facts.format, facts.complete, facts.count_ok) == (form, True, True)
    (gpu,) = facts.gpus
    assert (gpu.name, gpu.bus_id, facts.driver_version) == (
        "NVIDIA H200",
        "00000000:00:06.0",
        "580.159.04",
    )
    assert (gpu.persistence_mode, gpu.temperature.gpu) == (True, 39)
    assert gpu.ecc is not None and gpu.ecc.enabled is True


def test_a_pasted_q_with_comments_reads_like_the_capture() -> None:
    """A poster's whole-line `# ...` comments (and a root prompt) are not output."""
    capture = _text(f"{H200}/nvidia-smi-q.txt")
    lines = capture.splitlines(keepends=True)
    pasted = (
        "# on gpu042, after the reboot\n"
        "root@gpu042:~# nvidia-smi -q\n"
        + "".join(lines[:10])
        + "    # ECC below is what we care about\n"
        + "".join(lines[10:])
        + "#\n"
    )
    assert PROBE.read(pasted) == PROBE.read(capture)
    quoted = "".join(f"> {line}" if line.strip() else ">\n" for line in pasted.splitlines(True))
    assert PROBE.read(quoted) == PROBE.read(capture)


def test_a_comment_is_not_output_of_any_form() -> None:
    table = _text(f"{H200}/nvidia-smi.txt")
    assert PROBE.read("# nvidia-smi on gpu042\n" + table) == PROBE.read(table)
    with pytest.raises(ProbeParseError, match="empty output"):
        PROBE.read("# nothing was printed\n#\n")
