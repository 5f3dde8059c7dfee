"""Read nvidia-smi's `-q` report (XML, or the same tree built from `-q` text) into GPU facts.

`nvidia-smi -q -x` and `nvidia-smi -q` print one report in two renderings. Both become a
`Node` tree whose keys are normalised (`ECC Errors` and `<ecc_errors>` are both `ecc_errors`),
so one extractor reads both; where the two renderings name a field differently (or a driver
generation renamed it), each fact lists the alternative paths it accepts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from types import MappingProxyType
from typing import Protocol
from xml.etree.ElementTree import Element, ParseError

import defusedxml.ElementTree as SafeET
from defusedxml import DefusedXmlException

from fleetfix.errors import ProbeParseError
from fleetfix.probes.gpu_facts import (
    Clocks,
    EccCounters,
    EccFacts,
    Fabric,
    Format,
    GpuFacts,
    GpuProcess,
    MemoryUsage,
    MigDevice,
    MigFacts,
    Power,
    Reading,
    RemappedRows,
    RetiredPages,
    Temperatures,
    Utilization,
    ValueReader,
    frozen_map,
    normalize_bus_id,
    recovery_action_name,
    sram_source_name,
    sum_known,
)

PROBE = "nvidia_smi"


_KEY_JUNK = re.compile(r"[^a-z0-9]+")
_NORMAL_KEY = re.compile(r"[a-z0-9]+(?:_[a-z0-9]+)*")


def normalize_key(label: str) -> str:
    """`ECC Errors` -> `ecc_errors`, `SEC-DED` -> `sec_ded`, `cliqueId` -> `cliqueid`."""
    if _NORMAL_KEY.fullmatch(label):
        return label  # most XML tags already are keys: skip the rewrite
    return _KEY_JUNK.sub("_", label.strip().lower()).strip("_")


class ReportNode(Protocol):
    """What the report reader needs of a tree node: `Node`, or the fast path's lxml view."""

    @property
    def value(self) -> str | None: ...

    @property
    def children(self) -> Sequence[tuple[str, ReportNode]]: ...

    @property
    def line(self) -> int | None: ...

    def get(self, path: str) -> ReportNode | None: ...

    def first(self, *paths: str) -> ReportNode | None: ...

    def all(self, key: str) -> Sequence[ReportNode]: ...


@dataclass(frozen=True, slots=True)
class Node:
    """One report entry: its value (None for a pure section), children in order (keys may
    repeat, e.g. processes), and its source line where known."""

    value: str | None
    children: tuple[tuple[str, Node], ...] = ()
    line: int | None = None

    def get(self, path: str) -> Node | None:
        """The first node at `a/b/c`, or None."""
        node = self
        for key in path.split("/"):
            for name, child in node.children:
                if name == key:
                    node = child
                    break
            else:
                return None
        return node

    def first(self, *paths: str) -> Node | None:
        """The node at the first of `paths` that exists."""
        return next((node for node in map(self.get, paths) if node is not None), None)

    def all(self, key: str) -> tuple[Node, ...]:
        """Every direct child named `key`."""
        return tuple(child for name, child in self.children if name == key)


def _element_node(element: Element) -> Node:
    children = tuple((normalize_key(child.tag), _element_node(child)) for child in element)
    value = element.get("id") if element.tag == "gpu" else (element.text or "").strip()
    return Node(None if children and element.tag != "gpu" else value, children)


def read_xml(xml: str, text: str, *, line_numbers: tuple[int, ...] = ()) -> Reading:
    """Facts from `nvidia-smi -q -x`; truncated or malformed XML raises ProbeParseError.

    `line_numbers[i]` is the original line of line i+1 of `xml` (after paste cleaning).
    """
    try:
        root = SafeET.fromstring(xml)
    except ParseError as exc:
        row = exc.position[0]
        line = line_numbers[row - 1] if 0 < row <= len(line_numbers) else row
        raise ProbeParseError(
            PROBE, f"malformed or truncated XML ({exc})", text, line=line
        ) from exc
    except DefusedXmlException as exc:
        raise ProbeParseError(PROBE, f"XML with forbidden constructs ({exc})", text) from exc
    if root.tag != "nvidia_smi_log":
        raise ProbeParseError(PROBE, f"XML root is <{root.tag}>, not <nvidia_smi_log>", text)
    try:
        tree = _element_node(root)
    except RecursionError:
        raise ProbeParseError(
            PROBE, "XML nested too deeply to be nvidia-smi output", text
        ) from None
    return read_report(tree, Format.XML, text)


def read_report(root: ReportNode, fmt: Format, text: str, *, elided: bool = False) -> Reading:
    """Facts from a report tree (the XML root, or the tree of `-q` text)."""
    header = ValueReader(PROBE, text)
    attached = header.integer(_value(root, "attached_gpus"), "attached_gpus")
    gpu_nodes = root.all("gpu")
    # nvidia-smi lists GPUs in index order; a partial listing (-i N, a trimmed file) hides
    # which index each one has, so the position only counts when every GPU is there.
    positional = attached == len(gpu_nodes) and not elided
    gpus = tuple(
        _GpuReader(node, ValueReader(PROBE, text)).read(index if positional else None)
        for index, node in enumerate(gpu_nodes)
    )
    complete = positional and all(_looks_complete(node) for node in gpu_nodes)
    return Reading(
        format=fmt,
        complete=complete,
        gpus=gpus,
        timestamp=header.string(_value(root, "timestamp"), "timestamp"),
        driver_version=header.string(_value(root, "driver_version"), "driver_version"),
        cuda_version=header.string(_value(root, "cuda_version"), "cuda_version"),
        attached_gpus=attached,
    )


def _looks_complete(gpu: ReportNode) -> bool:
    """A full report (not `-q -d SECTION`) names the GPU and lists ECC and processes."""
    required = (("uuid", "gpu_uuid"), ("product_name",), ("ecc_errors",), ("processes",))
    return all(gpu.first(*paths) is not None for paths in required)


def _value(node: ReportNode | None, *paths: str) -> str | None:
    if node is None:
        return None
    found = node.first(*paths) if paths else node
    return None if found is None else found.value


_REASON_NAMES = {"idle": "gpu_idle", "display_clock_setting": "display_clocks_setting"}
_REASON_PREFIXES = ("clocks_event_reason_", "clocks_throttle_reason_")

# Paths some facts read, each with its alternatives (XML tag first, then the -q label); kept
# here once for both readers of the XML (this one and nvidia_smi_fast's scan).
TEMPERATURE_PATHS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "gpu": ("gpu_temp", "gpu_current_temp"),
        "memory": ("memory_temp", "memory_current_temp"),
        "shutdown": ("gpu_temp_max_threshold", "gpu_shutdown_temp"),
        "slowdown": ("gpu_temp_slow_threshold", "gpu_slowdown_temp"),
        "max_operating": ("gpu_temp_max_gpu_threshold", "gpu_max_operating_temp"),
        "target": ("gpu_target_temperature",),
        "tlimit": ("gpu_temp_tlimit", "gpu_t_limit_temp"),
        "shutdown_tlimit": ("gpu_temp_max_tlimit_threshold", "gpu_shutdown_t_limit_temp"),
        "slowdown_tlimit": ("gpu_temp_slow_tlimit_threshold", "gpu_slowdown_t_limit_temp"),
        "max_operating_tlimit": (
            "gpu_temp_max_gpu_tlimit_threshold",
            "gpu_max_operating_t_limit_temp",
        ),
    }
)
CLOCK_PATHS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "graphics": ("clocks/graphics_clock", "clocks/graphics"),
        "sm": ("clocks/sm_clock", "clocks/sm"),
        "memory": ("clocks/mem_clock", "clocks/memory"),
        "video": ("clocks/video_clock", "clocks/video"),
        "max_graphics": ("max_clocks/graphics_clock", "max_clocks/graphics"),
        "max_sm": ("max_clocks/sm_clock", "max_clocks/sm"),
        "max_memory": ("max_clocks/mem_clock", "max_clocks/memory"),
    }
)
PENDING_RETIREMENT = (
    "pending_blacklist",
    "pending_retirement",
    "pending_page_blacklist",
    "pending_page_retirement",
    "pending",
)


class _GpuReader:
    """Reads one GPU's node; every fact names the paths (XML tag first, then -q label)."""

    def __init__(self, node: ReportNode, values: ValueReader) -> None:
        self.node = node
        self.values = values

    def text(self, name: str, *paths: str) -> str | None:
        return self.values.string(_value(self.node, *paths), name)

    def integer(self, name: str, *paths: str, base: ReportNode | None = None) -> int | None:
        found = (base or self.node).first(*paths)
        if found is None:
            return None
        return self.values.integer(found.value, name, found.line)

    def number(self, name: str, *paths: str, base: ReportNode | None = None) -> float | None:
        found = (base or self.node).first(*paths)
        if found is None:
            return None
        return self.values.number(found.value, name, found.line)

    def flag(self, name: str, *paths: str, base: ReportNode | None = None) -> bool | None:
        found = (base or self.node).first(*paths)
        if found is None:
            return None
        return self.values.flag(found.value, name, found.line)

    def read(self, index: int | None) -> GpuFacts:
        reported = self.node.value or self.text("bus_id", "pci/pci_bus_id", "pci/bus_id")
        gpu = GpuFacts(
            index=index,
            bus_id=normalize_bus_id(reported) if reported else None,
            bus_id_reported=reported,
            uuid=self.text("uuid", "uuid", "gpu_uuid"),
            name=self.text("name", "product_name"),
            architecture=self.text("architecture", "product_architecture"),
            serial=self.text("serial", "serial", "serial_number"),
            vbios=self.text("vbios", "vbios_version"),
            persistence_mode=self.flag("persistence_mode", "persistence_mode"),
            compute_mode=self.text("compute_mode", "compute_mode"),
            performance_state=self.text("performance_state", "performance_state"),
            mig=self.mig(),
            ecc=self.ecc(),
            retired_pages=self.retired_pages(),
            remapped_rows=self.remapped_rows(),
            temperature=self.temperature(),
            power=self.power(),
            memory=self.memory(),
            utilization=Utilization(
                gpu=self.integer("utilization.gpu", "utilization/gpu_util", "utilization/gpu"),
                memory=self.integer(
                    "utilization.memory", "utilization/memory_util", "utilization/memory"
                ),
            ),
            clocks=self.clocks(),
            throttle_reasons=self.throttle_reasons(),
            processes=self.processes(),
            fabric=self.fabric(),
            recovery_action=self.recovery_action(),
            reset_required=self.flag("reset_required", "gpu_reset_status/reset_required"),
            drain_and_reset_recommended=self.flag(
                "drain_and_reset_recommended", "gpu_reset_status/drain_and_reset_recommended"
            ),
        )
        return _with_errors(gpu, self.values.error_fields)

    def mig(self) -> MigFacts:
        section = self.node.get("mig_devices")
        devices = None
        if section is not None:
            devices = tuple(self.mig_device(node) for node in section.all("mig_device"))
        return MigFacts(
            enabled=self.flag("mig.current", "mig_mode/current_mig", "mig_mode/current"),
            pending_enabled=self.flag("mig.pending", "mig_mode/pending_mig", "mig_mode/pending"),
            devices=devices,
        )

    def mig_device(self, node: ReportNode) -> MigDevice:
        return MigDevice(
            index=self.integer("mig.index", "index", base=node),
            gpu_instance_id=self.integer("mig.gpu_instance_id", "gpu_instance_id", base=node),
            compute_instance_id=self.integer(
                "mig.compute_instance_id", "compute_instance_id", base=node
            ),
            multiprocessors=self.integer(
                "mig.multiprocessors", "device_attributes/shared/multiprocessor_count", base=node
            ),
            memory_total=self.integer("mig.memory.total", "fb_memory_usage/total", base=node),
            memory_used=self.integer("mig.memory.used", "fb_memory_usage/used", base=node),
            sram_uncorrectable=self.integer(
                "mig.sram_uncorrectable",
                "ecc_error_count/volatile_count/sram_uncorrectable",
                "ecc_errors/volatile/sram_uncorrectable",
                base=node,
            ),
        )

    def ecc(self) -> EccFacts:
        errors = self.node.get("ecc_errors")
        sources = errors.get("aggregate_uncorrectable_sram_sources") if errors else None
        return EccFacts(
            enabled=self.flag("ecc.current", "ecc_mode/current_ecc", "ecc_mode/current"),
            pending_enabled=self.flag("ecc.pending", "ecc_mode/pending_ecc", "ecc_mode/pending"),
            volatile=self.ecc_counters("volatile"),
            aggregate=self.ecc_counters("aggregate"),
            aggregate_uncorrectable_sram_sources=frozen_map(
                {
                    sram_source_name(key): count
                    for key, count in self.counts(sources, "ecc.sram_sources").items()
                }
            ),
            channel_repair_pending=self.flag("ecc", "ecc_errors/channel_repair_pending"),
            tpc_repair_pending=self.flag("ecc", "ecc_errors/tpc_repair_pending"),
            unrepairable_memory=self.flag("ecc", "ecc_errors/unrepairable_memory"),
        )

    def counts(
        self, section: ReportNode | None, name: str, skip: str = ""
    ) -> dict[str, int | None]:
        """Every `key: count` child of a section (per-location ECC, SRAM sources)."""
        if section is None:
            return {}
        return {
            key: self.values.integer(child.value, f"{name}.{key}", child.line)
            for key, child in section.children
            if key != skip
        }

    def ecc_counters(self, kind: str) -> EccCounters:
        base = self.node.get(f"ecc_errors/{kind}")
        if base is None:
            return EccCounters()
        name = f"ecc.{kind}"
        parity = self.integer(name, "sram_uncorrectable_parity", base=base)
        secded = self.integer(
            name, "sram_uncorrectable_secded", "sram_uncorrectable_sec_ded", base=base
        )
        sram_unc = self.integer(name, "sram_uncorrectable", base=base)
        if sram_unc is None:
            sram_unc = sum_known(parity, secded)
        sram_corr = self.integer(name, "sram_correctable", base=base)
        dram_corr = self.integer(name, "dram_correctable", base=base)
        dram_unc = self.integer(name, "dram_uncorrectable", base=base)
        single, double = base.get("single_bit"), base.get("double_bit")
        sbe_total = self.integer(name, "single_bit/total", base=base)
        dbe_total = self.integer(name, "double_bit/total", base=base)
        return EccCounters(
            sbe=sbe_total if single is not None else sum_known(sram_corr, dram_corr),
            dbe=dbe_total if double is not None else sum_known(sram_unc, dram_unc),
            sram_correctable=sram_corr,
            sram_uncorrectable=sram_unc,
            sram_uncorrectable_parity=parity,
            sram_uncorrectable_secded=secded,
            dram_correctable=dram_corr,
            dram_uncorrectable=dram_unc,
            sram_threshold_exceeded=self.flag(name, "sram_threshold_exceeded", base=base),
            sbe_by_location=frozen_map(self.counts(single, f"{name}.sbe", skip="total")),
            dbe_by_location=frozen_map(self.counts(double, f"{name}.dbe", skip="total")),
        )

    def retired_pages(self) -> RetiredPages:
        base = self.node.get("retired_pages")
        if base is None:
            return RetiredPages()
        pending = [
            self.flag("retired_pages.pending", path, base=base) for path in PENDING_RETIREMENT
        ]
        known = [flag for flag in pending if flag is not None]
        return RetiredPages(
            sbe=self.integer(
                "retired_pages.sbe",
                "multiple_single_bit_retirement/retired_count",
                "single_bit_ecc",
                base=base,
            ),
            dbe=self.integer(
                "retired_pages.dbe",
                "double_bit_retirement/retired_count",
                "double_bit_ecc",
                base=base,
            ),
            pending=any(known) if known else None,
        )

    def remapped_rows(self) -> RemappedRows:
        base = self.node.get("remapped_rows")
        if base is None:
            return RemappedRows()
        histogram = base.first("row_remapper_histogram", "bank_remap_availability_histogram")
        bins = {
            key.removeprefix("row_remapper_histogram_"): count
            for key, count in self.counts(histogram, "remapped_rows.histogram").items()
        }
        name = "remapped_rows"
        return RemappedRows(
            correctable=self.integer(name, "remapped_row_corr", "correctable_error", base=base),
            uncorrectable=self.integer(name, "remapped_row_unc", "uncorrectable_error", base=base),
            pending=self.flag(name, "remapped_row_pending", "pending", base=base),
            failure=self.flag(
                name, "remapped_row_failure", "remapping_failure_occurred", base=base
            ),
            histogram=frozen_map(bins),
        )

    def temperature(self) -> Temperatures:
        base = self.node.get("temperature")
        if base is None:
            return Temperatures()
        return Temperatures(
            **{
                field: self.integer("temperature", *paths, base=base)
                for field, paths in TEMPERATURE_PATHS.items()
            }
        )

    def power(self) -> Power:
        base = self.node.first("gpu_power_readings", "power_readings")
        if base is None:
            return Power()

        def watts(*paths: str) -> float | None:
            return self.number("power", *paths, base=base)

        instant = watts("instant_power_draw", "instantaneous_power_draw")
        draw = watts("power_draw", "average_power_draw")
        return Power(
            draw=instant if draw is None else draw,
            draw_instant=instant,
            limit=watts("current_power_limit", "enforced_power_limit", "power_limit"),
            default_limit=watts("default_power_limit"),
            max_limit=watts("max_power_limit"),
        )

    def memory(self) -> MemoryUsage:
        base = self.node.get("fb_memory_usage")
        if base is None:
            return MemoryUsage()
        return MemoryUsage(
            total=self.integer("memory.total", "total", base=base),
            used=self.integer("memory.used", "used", base=base),
            free=self.integer("memory.free", "free", base=base),
            reserved=self.integer("memory.reserved", "reserved", base=base),
        )

    def clocks(self) -> Clocks:
        return Clocks(
            **{field: self.integer("clocks", *paths) for field, paths in CLOCK_PATHS.items()}
        )

    def throttle_reasons(self) -> tuple[str, ...] | None:
        base = self.node.first("clocks_event_reasons", "clocks_throttle_reasons")
        if base is None or not base.children:
            return None
        states = {
            reason_name(key): self.values.flag(node.value, "throttle_reasons", node.line)
            for key, node in _descendants(base)
        }
        if all(state is None for state in states.values()):
            return None
        return tuple(reason for reason, state in states.items() if state)

    def processes(self) -> tuple[GpuProcess, ...] | None:
        base = self.node.get("processes")
        if base is None:
            return None
        if base.all("process_info"):
            return tuple(self.xml_process(node) for node in base.all("process_info"))
        return self.text_processes(base)

    def xml_process(self, node: ReportNode) -> GpuProcess:
        pid = self.integer("processes.pid", "pid", base=node)
        if pid is None:
            raise self.values.fail("a process without a pid", node.line)
        return GpuProcess(
            pid=pid,
            name=self.values.string(_value(node, "process_name"), "processes.name"),
            type=self.values.string(_value(node, "type"), "processes.type"),
            used_memory_mib=self.integer("processes.used_memory", "used_memory", base=node),
            gpu_instance_id=self.integer("processes.gi", "gpu_instance_id", base=node),
            compute_instance_id=self.integer("processes.ci", "compute_instance_id", base=node),
        )

    def text_processes(self, base: ReportNode) -> tuple[GpuProcess, ...]:
        """`-q` text lists each process as GI, CI, then `Process ID` with nested details."""
        found: list[GpuProcess] = []
        instance: dict[str, int | None] = {}
        for key, node in base.children:
            if key in ("gpu_instance_id", "compute_instance_id"):
                instance[key] = self.values.integer(node.value, f"processes.{key}", node.line)
            elif key == "process_id":
                pid = self.values.integer(node.value, "processes.pid", node.line)
                if pid is None:
                    raise self.values.fail("a process without a pid", node.line)
                found.append(self.text_process(pid, node, instance))
                instance = {}
        if not found and base.children:
            raise self.values.fail("a process list without 'Process ID' entries", base.line)
        if not found and (base.value or "").strip().lower() not in ("none", ""):
            raise self.values.fail(f"processes: unexpected value {base.value!r}", base.line)
        return tuple(found)

    def text_process(
        self, pid: int, node: ReportNode, instance: dict[str, int | None]
    ) -> GpuProcess:
        return GpuProcess(
            pid=pid,
            name=self.values.string(_value(node, "name", "process_name"), "processes.name"),
            type=self.values.string(_value(node, "type"), "processes.type"),
            used_memory_mib=self.integer("processes.used_memory", "used_gpu_memory", base=node),
            gpu_instance_id=instance.get("gpu_instance_id"),
            compute_instance_id=instance.get("compute_instance_id"),
        )

    def fabric(self) -> Fabric | None:
        base = self.node.get("fabric")
        if base is None:
            return None
        return Fabric(
            state=self.text("fabric.state", "fabric/state"),
            status=self.text("fabric.status", "fabric/status"),
            clique_id=self.text("fabric.clique_id", "fabric/cliqueid"),
            cluster_uuid=self.text("fabric.cluster_uuid", "fabric/clusteruuid"),
            health=self.text("fabric.health", "fabric/health/summary"),
        )

    def recovery_action(self) -> str | None:
        return recovery_action_name(self.text("recovery_action", "gpu_recovery_action"))


def _descendants(node: ReportNode) -> list[tuple[str, ReportNode]]:
    """All valued entries below `node` (-q text nests `HW Thermal Slowdown` under `HW Slowdown`)."""
    found: list[tuple[str, ReportNode]] = []
    for key, child in node.children:
        if child.value is not None:
            found.append((key, child))
        found.extend(_descendants(child))
    return found


def reason_name(key: str) -> str:
    """A throttle reason's fact name: `clocks_event_reason_sw_power_cap` -> `sw_power_cap`."""
    for prefix in _REASON_PREFIXES:
        key = key.removeprefix(prefix)
    return _REASON_NAMES.get(key, key)


def _with_errors(gpu: GpuFacts, error_fields: list[str]) -> GpuFacts:
    if not error_fields:
        return gpu
    return replace(gpu, error_fields=tuple(dict.fromkeys(error_fields)))
