"""A GPU's facts read from the nvidia_smi scan's verified sections, by the tree reader's rules.

nvidia_smi_scan cuts the document at its elements' children, each proven complete, into
sections (`Section`); `GpuScan` reads one GPU's facts from them with nvidia_smi_xml's paths,
alternatives and fallbacks, and `Values` converts each raw value as ValueReader does, once
per document. A value ValueReader would refuse or record as an error, or a layout only the
tree reader judges, raises `Unsure`: the scan then declines and the tree reader words the
error, with its line. `FACTS_OF` names the facts that read each child of a GPU, so a GPU
whose children repeat the previous GPU's reads again only the facts of those that differ.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from types import MappingProxyType
from typing import Any, Protocol, TypeVar

from fleetfix.errors import ProbeParseError
from fleetfix.probes.gpu_facts import (
    Clocks,
    EccCounters,
    EccFacts,
    Fabric,
    GpuProcess,
    MemoryUsage,
    MigDevice,
    MigFacts,
    Power,
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
from fleetfix.probes.nvidia_smi_xml import (
    CLOCK_PATHS,
    PENDING_RETIREMENT,
    PROBE,
    TEMPERATURE_PATHS,
    reason_name,
)

_COMPLETE = (("uuid", "gpu_uuid"), ("product_name",), ("ecc_errors",), ("processes",))
T = TypeVar("T")


class Unsure(Exception):
    """The scan cannot vouch for what it read: the tree reader takes the document."""


class Section:
    """One element's children in order (key, tag, content, value), and the first content and
    value of each key. The path names the tags from the root down to the element."""

    __slots__ = ("_index", "child_values", "contents", "keys", "path", "tags", "values")

    def __init__(
        self,
        path: tuple[str, ...],
        tags: list[str],
        contents: list[str],
        values: list[str | None],
        keys: list[str],
        *,
        first: tuple[dict[str, str] | None, dict[str, str | None]] | None = None,
    ) -> None:
        self.path = path
        self.tags = tags
        self.keys = keys
        self.contents = contents
        self.child_values = values
        if first is None:
            first = None, dict(zip(reversed(self.keys), reversed(values), strict=True))
        self._index, self.values = first

    @property
    def index(self) -> dict[str, str]:
        """The content of the first child of each key."""
        if self._index is None:
            self._index = dict(zip(reversed(self.keys), reversed(self.contents), strict=True))
        return self._index

    @property
    def children(self) -> Iterator[tuple[str, str, str]]:
        return zip(self.keys, self.tags, self.contents, strict=True)

    def tag(self, key: str) -> str:
        """The tag of the first child `key`."""
        if self.keys is self.tags:
            return key
        return next(tag for name, tag in zip(self.keys, self.tags, strict=True) if name == key)

    def replaced(
        self, tags: list[str], changed: list[int], contents: list[str], values: list[str | None]
    ) -> Section:
        """The section of an element with the same children, whose `changed` differ."""
        keys = tags if self.keys is self.tags else self.keys
        if len(self.values) < len(keys):  # a repeated key: which child is first matters
            return Section(self.path, tags, contents, values, keys)
        index, first_values = self.index.copy(), self.values.copy()
        for at in changed:
            index[keys[at]], first_values[keys[at]] = contents[at], values[at]
        return Section(self.path, tags, contents, values, keys, first=(index, first_values))


class Sections(Protocol):
    """What a GPU's reader asks of the document's scan (nvidia_smi_scan._Scan)."""

    @property
    def values(self) -> Values: ...

    def section(self, path: tuple[str, ...], content: str) -> Section: ...


def _seeds(
    convert: Callable[[ValueReader, str, str], T], words: tuple[str, ...]
) -> Mapping[str, T]:
    reader = ValueReader(PROBE, "")
    return MappingProxyType({word: convert(reader, word, PROBE) for word in words})


_NOT_AVAILABLE = ("", "N/A", "[N/A]", "Not Supported", "[Not Supported]", "Unknown")
_ZEROS = ("0", "0 %", "0 MiB", "0 MHz", "0 C", "0.00 W")
_WORDS = ("Yes", "No", "Enabled", "Disabled", "Active", "Not Active", "None", "Default")
# What nvidia-smi prints most, converted by ValueReader itself: seeds for each document.
_SEEDED_STRINGS = _seeds(ValueReader.string, _NOT_AVAILABLE + _ZEROS + _WORDS)
_SEEDED_INTEGERS = _seeds(ValueReader.integer, _NOT_AVAILABLE + _ZEROS)
_SEEDED_NUMBERS = _seeds(ValueReader.number, _NOT_AVAILABLE + _ZEROS)
_SEEDED_FLAGS = _seeds(ValueReader.flag, _NOT_AVAILABLE + _WORDS[:6])


class Values:
    """ValueReader's conversions, each raw value converted once per document. A value it
    would refuse or record as an error makes the scan unsure: the tree reader words it."""

    def __init__(self, reader: ValueReader) -> None:
        self._reader = reader
        self._strings = dict(_SEEDED_STRINGS)
        self._integers = dict(_SEEDED_INTEGERS)
        self._numbers = dict(_SEEDED_NUMBERS)
        self._flags = dict(_SEEDED_FLAGS)

    def _convert(self, cache: dict[str, T], convert: Callable[[str, str], T], raw: str) -> T:
        try:
            value = convert(raw, PROBE)
        except ProbeParseError:
            raise Unsure from None
        if self._reader.error_fields:
            raise Unsure
        cache[raw] = value
        return value

    def string(self, raw: str | None) -> str | None:
        if raw is None:
            return None
        if raw in self._strings:
            return self._strings[raw]
        return self._convert(self._strings, self._reader.string, raw)

    def integer(self, raw: str | None) -> int | None:
        if raw is None:
            return None
        if raw in self._integers:
            return self._integers[raw]
        digits, space, unit = raw.partition(" ")
        if _plain_number(digits, space, unit) and "." not in digits:
            value = self._integers[raw] = int(digits)
            return value
        return self._convert(self._integers, self._reader.integer, raw)

    def number(self, raw: str | None) -> float | None:
        if raw is None:
            return None
        if raw in self._numbers:
            return self._numbers[raw]
        digits, space, unit = raw.partition(" ")
        if _plain_number(digits, space, unit):
            value = self._numbers[raw] = float(digits)
            return value
        return self._convert(self._numbers, self._reader.number, raw)

    def flag(self, raw: str | None) -> bool | None:
        if raw is None:
            return None
        if raw in self._flags:
            return self._flags[raw]
        return self._convert(self._flags, self._reader.flag, raw)


def _plain_number(digits: str, space: str, unit: str) -> bool:
    """Whether `digits space unit` is a number ValueReader reads as float(digits): ASCII
    digits, maybe one `.` between digits, few enough for a float to hold them exactly, and
    no unit or a common one."""
    whole, dot, fraction = digits.partition(".")
    return (
        len(digits) <= 15
        and digits.isascii()
        and whole.isdigit()
        and (not dot or fraction.isdigit())
        and (not space or unit in _UNITS)
    )


_UNITS = frozenset({"C", "%", "MiB", "KiB", "GiB", "MHz", "W", "V", "mV"})


class GpuScan:
    """One GPU read from its verified children by nvidia_smi_xml._GpuReader's rules: the same
    paths, alternatives and fallbacks (_FACTS lists what each fact reads)."""

    def __init__(self, scan: Sections, gpu: Section) -> None:
        self.scan = scan
        self.gpu = gpu
        self.string = scan.values.string
        self.integer = scan.values.integer
        self.number = scan.values.number
        self.flag = scan.values.flag
        self.sections: dict[str, Section | None] = {}

    def looks_complete(self) -> bool:
        return all(any(name in self.gpu.values for name in names) for names in _COMPLETE)

    def read(self, ident: str, index: int | None) -> dict[str, Any]:
        """GpuFacts' fields."""
        return {**self.identity(ident, index), **{f: read(self) for f, (_, read) in _FACTS.items()}}

    def read_like(
        self, like: dict[str, Any], fields: set[str], ident: str, index: int | None
    ) -> dict[str, Any]:
        """GpuFacts' fields of a GPU whose facts but `fields` are those of the GPU `like`."""
        again = {field: _FACTS[field][1](self) for field in fields}
        return {**like, **self.identity(ident, index), **again}

    def identity(self, ident: str, index: int | None) -> dict[str, Any]:
        reported = ident or self.string(self.below("pci", "pci_bus_id", "bus_id"))
        bus_id = normalize_bus_id(reported) if reported else None
        return {"index": index, "bus_id": bus_id, "bus_id_reported": reported}

    def sub(self, base: Section | None, name: str) -> Section | None:
        """The first child `name` of `base`, split into its own children."""
        if base is None or (content := base.index.get(name)) is None:
            return None
        return self.scan.section((*base.path, base.tag(name)), content)

    def at(self, name: str) -> Section | None:
        """The GPU's first child `name`, split (once per reader)."""
        if name not in self.sections:
            self.sections[name] = self.sub(self.gpu, name)
        return self.sections[name]

    def all(self, base: Section, name: str) -> list[Section]:
        section = self.scan.section
        return [section((*base.path, tag), c) for key, tag, c in base.children if key == name]

    def own(self, *names: str) -> str | None:
        """The value of the GPU's first child named one of `names` (the first that exists)."""
        return _pick(self.gpu.values, names)

    def below(self, parent: str, *names: str) -> str | None:
        """The value of the first of `names` in the GPU's first child `parent`."""
        section = self.at(parent)
        return None if section is None else _pick(section.values, names)

    def path(self, base: Section, *paths: str) -> str | None:
        """The value at the first of `paths` (`a/b/c` below `base`) that exists."""
        for path in paths:
            *parents, name = path.split("/")
            section: Section | None = base
            for parent in parents:
                section = self.sub(section, parent)
            if section is not None and name in section.values:
                return section.values[name]
        return None

    def mig(self) -> MigFacts:
        section = self.at("mig_devices")
        devices = None
        if section is not None:
            devices = tuple(self.mig_device(node) for node in self.all(section, "mig_device"))
        return MigFacts(
            enabled=self.flag(self.below("mig_mode", "current_mig", "current")),
            pending_enabled=self.flag(self.below("mig_mode", "pending_mig", "pending")),
            devices=devices,
        )

    def mig_device(self, node: Section) -> MigDevice:
        values, integer = node.values, self.integer
        return MigDevice(
            index=integer(values.get("index")),
            gpu_instance_id=integer(values.get("gpu_instance_id")),
            compute_instance_id=integer(values.get("compute_instance_id")),
            multiprocessors=integer(
                self.path(node, "device_attributes/shared/multiprocessor_count")
            ),
            memory_total=integer(self.path(node, "fb_memory_usage/total")),
            memory_used=integer(self.path(node, "fb_memory_usage/used")),
            sram_uncorrectable=integer(
                self.path(
                    node,
                    "ecc_error_count/volatile_count/sram_uncorrectable",
                    "ecc_errors/volatile/sram_uncorrectable",
                )
            ),
        )

    def ecc(self) -> EccFacts:
        errors = self.at("ecc_errors")
        sources = self.counts(self.sub(errors, "aggregate_uncorrectable_sram_sources"))
        return EccFacts(
            enabled=self.flag(self.below("ecc_mode", "current_ecc", "current")),
            pending_enabled=self.flag(self.below("ecc_mode", "pending_ecc", "pending")),
            volatile=self.ecc_counters(self.sub(errors, "volatile")),
            aggregate=self.ecc_counters(self.sub(errors, "aggregate")),
            aggregate_uncorrectable_sram_sources=frozen_map(
                {sram_source_name(key): count for key, count in sources.items()}
            ),
            channel_repair_pending=self.flag(self.below("ecc_errors", "channel_repair_pending")),
            tpc_repair_pending=self.flag(self.below("ecc_errors", "tpc_repair_pending")),
            unrepairable_memory=self.flag(self.below("ecc_errors", "unrepairable_memory")),
        )

    def counts(self, section: Section | None, skip: str = "") -> dict[str, int | None]:
        """Every `key: count` child of a section (a section child counts as None)."""
        if section is None:
            return {}
        integer = self.integer
        pairs = zip(section.keys, section.child_values, strict=True)
        return {key: integer(value) for key, value in pairs if key != skip}

    def ecc_counters(self, base: Section | None) -> EccCounters:
        if base is None:
            return EccCounters()
        values, integer = base.values, self.integer
        parity = integer(values.get("sram_uncorrectable_parity"))
        secded = integer(_pick(values, ("sram_uncorrectable_secded", "sram_uncorrectable_sec_ded")))
        sram_unc = integer(values.get("sram_uncorrectable"))
        if sram_unc is None:
            sram_unc = sum_known(parity, secded)
        sram_corr = integer(values.get("sram_correctable"))
        dram_corr = integer(values.get("dram_correctable"))
        dram_unc = integer(values.get("dram_uncorrectable"))
        single, double = self.sub(base, "single_bit"), self.sub(base, "double_bit")
        return EccCounters(
            sbe=sum_known(sram_corr, dram_corr)
            if single is None
            else integer(single.values.get("total")),
            dbe=sum_known(sram_unc, dram_unc)
            if double is None
            else integer(double.values.get("total")),
            sram_correctable=sram_corr,
            sram_uncorrectable=sram_unc,
            sram_uncorrectable_parity=parity,
            sram_uncorrectable_secded=secded,
            dram_correctable=dram_corr,
            dram_uncorrectable=dram_unc,
            sram_threshold_exceeded=self.flag(values.get("sram_threshold_exceeded")),
            sbe_by_location=frozen_map(self.counts(single, skip="total")),
            dbe_by_location=frozen_map(self.counts(double, skip="total")),
        )

    def retired_pages(self) -> RetiredPages:
        base = self.at("retired_pages")
        if base is None:
            return RetiredPages()
        pending = [self.flag(base.values.get(path)) for path in PENDING_RETIREMENT]
        known = [flag for flag in pending if flag is not None]
        return RetiredPages(
            sbe=self.integer(
                self.path(base, "multiple_single_bit_retirement/retired_count", "single_bit_ecc")
            ),
            dbe=self.integer(
                self.path(base, "double_bit_retirement/retired_count", "double_bit_ecc")
            ),
            pending=any(known) if known else None,
        )

    def remapped_rows(self) -> RemappedRows:
        base = self.at("remapped_rows")
        if base is None:
            return RemappedRows()
        histogram = self.sub(base, "row_remapper_histogram") or self.sub(
            base, "bank_remap_availability_histogram"
        )
        bins = {
            key.removeprefix("row_remapper_histogram_"): count
            for key, count in self.counts(histogram).items()
        }
        values = base.values
        return RemappedRows(
            correctable=self.integer(_pick(values, ("remapped_row_corr", "correctable_error"))),
            uncorrectable=self.integer(_pick(values, ("remapped_row_unc", "uncorrectable_error"))),
            pending=self.flag(_pick(values, ("remapped_row_pending", "pending"))),
            failure=self.flag(
                _pick(values, ("remapped_row_failure", "remapping_failure_occurred"))
            ),
            histogram=frozen_map(bins),
        )

    def temperature(self) -> Temperatures:
        base = self.at("temperature")
        if base is None:
            return Temperatures()
        values, integer = base.values, self.integer
        paths = TEMPERATURE_PATHS.items()
        return Temperatures(**{field: integer(_pick(values, alts)) for field, alts in paths})

    def power(self) -> Power:
        base = self.at("gpu_power_readings") or self.at("power_readings")
        if base is None:
            return Power()
        values, number = base.values, self.number
        instant = number(_pick(values, ("instant_power_draw", "instantaneous_power_draw")))
        draw = number(_pick(values, ("power_draw", "average_power_draw")))
        return Power(
            draw=instant if draw is None else draw,
            draw_instant=instant,
            limit=number(
                _pick(values, ("current_power_limit", "enforced_power_limit", "power_limit"))
            ),
            default_limit=number(values.get("default_power_limit")),
            max_limit=number(values.get("max_power_limit")),
        )

    def memory(self) -> MemoryUsage:
        base = self.at("fb_memory_usage")
        if base is None:
            return MemoryUsage()
        values, integer = base.values, self.integer
        return MemoryUsage(
            total=integer(values.get("total")),
            used=integer(values.get("used")),
            free=integer(values.get("free")),
            reserved=integer(values.get("reserved")),
        )

    def utilization(self) -> Utilization:
        return Utilization(
            gpu=self.integer(self.below("utilization", "gpu_util", "gpu")),
            memory=self.integer(self.below("utilization", "memory_util", "memory")),
        )

    def clocks(self) -> Clocks:
        integer, below = self.integer, self.below
        return Clocks(
            **{field: integer(below(parent, *names)) for field, (parent, names) in _CLOCKS.items()}
        )

    def throttle_reasons(self) -> tuple[str, ...] | None:
        base = self.at("clocks_event_reasons") or self.at("clocks_throttle_reasons")
        if base is None or not base.keys:
            return None
        flag = self.flag
        states = {reason_name(key): flag(value) for key, value in self.descendants(base)}
        if all(state is None for state in states.values()):
            return None
        return tuple(reason for reason, state in states.items() if state)

    def descendants(self, base: Section) -> list[tuple[str, str]]:
        """Every (key, value) below `base`, depth first, as nvidia_smi_xml._descendants."""
        found: list[tuple[str, str]] = []
        for (key, tag, content), value in zip(base.children, base.child_values, strict=True):
            if value is not None:
                found.append((key, value))
            else:
                found.extend(self.descendants(self.scan.section((*base.path, tag), content)))
        return found

    def processes(self) -> tuple[GpuProcess, ...] | None:
        base = self.at("processes")
        if base is None:
            return None
        if infos := self.all(base, "process_info"):
            return tuple(self.process(info) for info in infos)
        if base.keys:
            raise Unsure  # -q text's process layout: the tree reader judges it
        if (self.gpu.values["processes"] or "").lower() not in ("none", ""):
            raise Unsure  # a word the tree reader refuses
        return ()

    def process(self, node: Section) -> GpuProcess:
        values, integer = node.values, self.integer
        pid = integer(values.get("pid"))
        if pid is None:
            raise Unsure  # the tree reader refuses it, with its line
        return GpuProcess(
            pid=pid,
            name=self.string(values.get("process_name")),
            type=self.string(values.get("type")),
            used_memory_mib=integer(values.get("used_memory")),
            gpu_instance_id=integer(values.get("gpu_instance_id")),
            compute_instance_id=integer(values.get("compute_instance_id")),
        )

    def fabric(self) -> Fabric | None:
        base = self.at("fabric")
        if base is None:
            return None
        values, string = base.values, self.string
        return Fabric(
            state=string(values.get("state")),
            status=string(values.get("status")),
            clique_id=string(values.get("cliqueid")),
            cluster_uuid=string(values.get("clusteruuid")),
            health=string(self.path(base, "health/summary")),
        )


def _pick(values: Mapping[str, str | None], names: tuple[str, ...]) -> str | None:
    """The value of the first of `names` that is a child (None for a section)."""
    for name in names:
        if name in values:
            return values[name]
    return None


def _parent_and_names(paths: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """`("clocks/sm_clock", "clocks/sm")` -> `("clocks", ("sm_clock", "sm"))`."""
    parents, names = zip(*(path.split("/") for path in paths), strict=True)
    if len(set(parents)) != 1:
        raise ValueError(f"alternatives under different parents: {paths}")
    return parents[0], names


_CLOCKS = MappingProxyType(
    {field: _parent_and_names(paths) for field, paths in CLOCK_PATHS.items()}
)

_Fact = tuple[frozenset[str], Callable[[GpuScan], Any]]


def _leaf_fact(convert: Callable[[GpuScan, str | None], Any], path: str) -> _Fact:
    parent, _, name = path.rpartition("/")
    if parent:
        return frozenset({parent}), lambda gpu: convert(gpu, gpu.below(parent, name))
    return frozenset({name}), lambda gpu: convert(gpu, gpu.own(name))


def _own_fact(convert: Callable[[GpuScan, str | None], Any], *names: str) -> _Fact:
    return frozenset(names), lambda gpu: convert(gpu, gpu.own(*names))


def _section_fact(read: Callable[[GpuScan], Any], *children: str) -> _Fact:
    return frozenset(children), read


def _text(gpu: GpuScan, raw: str | None) -> str | None:
    return gpu.string(raw)


def _flag(gpu: GpuScan, raw: str | None) -> bool | None:
    return gpu.flag(raw)


def _recovery(gpu: GpuScan, raw: str | None) -> str | None:
    return recovery_action_name(gpu.string(raw))


# Each fact of a GPU (but its index and bus id), the GPU's children it reads, and how.
_FACTS: Mapping[str, _Fact] = MappingProxyType(
    {
        "uuid": _own_fact(_text, "uuid", "gpu_uuid"),
        "name": _own_fact(_text, "product_name"),
        "architecture": _own_fact(_text, "product_architecture"),
        "serial": _own_fact(_text, "serial", "serial_number"),
        "vbios": _own_fact(_text, "vbios_version"),
        "persistence_mode": _own_fact(_flag, "persistence_mode"),
        "compute_mode": _own_fact(_text, "compute_mode"),
        "performance_state": _own_fact(_text, "performance_state"),
        "mig": _section_fact(GpuScan.mig, "mig_mode", "mig_devices"),
        "ecc": _section_fact(GpuScan.ecc, "ecc_mode", "ecc_errors"),
        "retired_pages": _section_fact(GpuScan.retired_pages, "retired_pages"),
        "remapped_rows": _section_fact(GpuScan.remapped_rows, "remapped_rows"),
        "temperature": _section_fact(GpuScan.temperature, "temperature"),
        "power": _section_fact(GpuScan.power, "gpu_power_readings", "power_readings"),
        "memory": _section_fact(GpuScan.memory, "fb_memory_usage"),
        "utilization": _section_fact(GpuScan.utilization, "utilization"),
        "clocks": _section_fact(GpuScan.clocks, *(parent for parent, _ in _CLOCKS.values())),
        "throttle_reasons": _section_fact(
            GpuScan.throttle_reasons, "clocks_event_reasons", "clocks_throttle_reasons"
        ),
        "processes": _section_fact(GpuScan.processes, "processes"),
        "fabric": _section_fact(GpuScan.fabric, "fabric"),
        "recovery_action": _own_fact(_recovery, "gpu_recovery_action"),
        "reset_required": _leaf_fact(_flag, "gpu_reset_status/reset_required"),
        "drain_and_reset_recommended": _leaf_fact(
            _flag, "gpu_reset_status/drain_and_reset_recommended"
        ),
    }
)
# The facts that read each child of a GPU.
FACTS_OF: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        child: tuple(field for field, (sources, _) in _FACTS.items() if child in sources)
        for child in frozenset().union(*(sources for sources, _ in _FACTS.values()))
    }
)
