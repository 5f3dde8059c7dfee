"""Read and validate lab scenario YAML files, reporting mistakes with file, line and a hint."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from fleetfix.errors import LabError, SourcePosition
from fleetfix.lab import scenario_hw
from fleetfix.lab.boards import BOARDS, board
from fleetfix.lab.environments import environment
from fleetfix.lab.scenario import (
    NVIDIA_MODULES,
    EccFault,
    FleetShape,
    GpuProcessSpec,
    IbSymbolErrors,
    NcclHang,
    NodeChange,
    NodeFaults,
    NvlinkDown,
    PcieAer,
    RowRemapFault,
    Scenario,
    SlurmSpec,
    StaleShm,
    Timing,
    expand_selector,
    leaf_name,
    node_names,
    parse_duration,
)
from fleetfix.lab.scenario_changes import parse_change, parse_events


def scenario_dir() -> Path:
    """Where the shipped scenarios live (inside the installed package)."""
    return Path(str(resources.files("fleetfix.lab") / "scenarios"))


def shipped_scenarios() -> tuple[str, ...]:
    return tuple(sorted(p.stem for p in scenario_dir().glob("*.yml")))


def resolve_scenario(name_or_path: str | Path) -> Path:
    """A scenario file from a path or the name of a shipped scenario (`xid79`)."""
    path = Path(name_or_path)
    if path.suffix in (".yml", ".yaml") or path.exists():
        if not path.is_file():
            raise LabError(f"scenario file not found: {path}")
        return path
    shipped = scenario_dir() / f"{name_or_path}.yml"
    if shipped.is_file():
        return shipped
    raise LabError(
        f"unknown lab scenario {str(name_or_path)!r}",
        hint=_suggest(str(name_or_path), shipped_scenarios(), "shipped scenarios"),
    )


def load_scenario(name_or_path: str | Path, *, nodes: int | None = None) -> Scenario:
    """Read and validate a scenario; `nodes` overrides the fleet's node count.

    Raises:
        LabError: the file is missing, is not YAML, or names unknown keys, nodes or values.
    """
    path = resolve_scenario(name_or_path)
    text = path.read_text(encoding="utf-8")
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        position = SourcePosition(str(path), mark.line + 1, mark.column + 1) if mark else None
        raise LabError(f"scenario is not valid YAML: {exc}", position) from exc
    return _Builder(path, text).scenario(raw, nodes)


def _suggest(word: str, choices: Iterable[str], what: str) -> str:
    options = list(choices)
    close = difflib.get_close_matches(word, options, n=1)
    if close:
        return f"did you mean {close[0]!r}?"
    return f"{what}: {', '.join(options)}" if options else ""


class _Builder:
    """Turns the parsed YAML into a Scenario, reporting errors with file and line."""

    def __init__(self, path: Path, text: str) -> None:
        self.path = path
        self.lines = text.splitlines()

    def error(self, message: str, key: str | None = None, hint: str | None = None) -> LabError:
        position, line = self._locate(key)
        return LabError(message, position, source_line=line, hint=hint)

    def _locate(self, key: str | None) -> tuple[SourcePosition | None, str | None]:
        if key is None:
            return SourcePosition(str(self.path), 1), None
        for number, line in enumerate(self.lines, start=1):
            column = line.find(f"{key}:")
            if column >= 0 and line[:column].strip(" -'\"") == "":
                return SourcePosition(str(self.path), number, column + 1), line
        return SourcePosition(str(self.path), 1), None

    def mapping(self, value: object, where: str, allowed: Sequence[str]) -> dict[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, dict):
            raise self.error(f"{where}: expected a mapping, got {type(value).__name__}", where)
        for key in value:
            if str(key) not in allowed:
                hint = _suggest(str(key), allowed, "allowed keys")
                raise self.error(f"{where}: unknown key {key!r}", str(key), hint)
        return {str(k): v for k, v in value.items()}

    def integer(self, value: object, where: str, minimum: int = 0) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise self.error(f"{where}: expected an integer >= {minimum}, got {value!r}", where)
        return value

    def flag(self, value: object, where: str) -> bool:
        if not isinstance(value, bool):
            raise self.error(f"{where}: expected true or false, got {value!r}", where)
        return value

    def recovery(self, value: object, where: str) -> str:
        return scenario_hw.recovery(self, value, where)

    def scenario(self, raw: object, nodes: int | None) -> Scenario:
        top = self.mapping(
            raw,
            "scenario",
            (
                "name",
                "description",
                "fleet",
                "ssh",
                "inventory",
                "reboot_time",
                "timing",
                "leaves",
                "nodes",
                "bmc",
            ),
        )
        fleet = self.fleet(top.get("fleet"), nodes)
        names = node_names(fleet)
        ssh = self.mapping(top.get("ssh"), "ssh", ("port",))
        inventory = self.mapping(top.get("inventory"), "inventory", ("gpus",))
        return Scenario(
            name=str(top.get("name") or self.path.stem),
            description=str(top.get("description") or "").strip(),
            fleet=fleet,
            ssh_port=self.integer(ssh.get("port", 2222), "ssh.port"),
            reboot_time=parse_duration(top.get("reboot_time", 2.0), "reboot_time"),
            timing=self.timing(top.get("timing")),
            degraded_leaves=self.leaves(top.get("leaves"), fleet),
            faults=self.node_faults(top.get("nodes"), names, fleet),
            source=str(self.path),
            inventory_gpus=self.flag(inventory.get("gpus", True), "inventory.gpus"),
            bmc=scenario_hw.fleet_bmc(self, top.get("bmc")),
        )

    def fleet(self, value: object, nodes: int | None) -> FleetShape:
        allowed = FleetShape.__dataclass_fields__.keys()
        raw = self.mapping(value, "fleet", tuple(allowed))
        for name in ("spines", "leaves", "racks", "nodes_per_rack", "gpus_per_node", "nodes"):
            if name in raw:
                self.integer(raw[name], f"fleet.{name}", minimum=1)
        for name in ("gpu_model", "driver_version", "cuda_version", "node_name", "partition"):
            if name in raw:
                raw[name] = str(raw[name])
        if "persistence_at_boot" in raw:
            self.flag(raw["persistence_at_boot"], "fleet.persistence_at_boot")
        if "board" in raw:
            raw["board"] = scenario_hw.parse_board(self, raw["board"], "fleet")
            raw.setdefault("gpu_model", BOARDS[raw["board"]].gpu_model)
        if "environment" in raw:
            raw["environment"] = scenario_hw.parse_environment(self, raw["environment"], "fleet")
        shape = FleetShape(**raw)
        if shape.nodes_per_rack > 250 or shape.gpus_per_node > 8:
            raise self.error("fleet: at most 250 nodes per rack and 8 GPUs per node", "fleet")
        if shape.leaves > shape.racks or shape.spines > shape.leaves:
            raise self.error("fleet: need spines <= leaves <= racks", "fleet")
        if "{" not in shape.node_name:
            raise self.error("fleet.node_name: needs a {} placeholder, e.g. gpu{:03d}", "node_name")
        if nodes is not None:
            per_rack = shape.nodes_per_rack
            racks = max(shape.racks, -(-nodes // per_rack))
            leaves = max(shape.leaves, 1)
            shape = FleetShape(**{**raw, "racks": racks, "leaves": leaves, "nodes": nodes})
        return shape

    def timing(self, value: object) -> Timing:
        raw = self.mapping(value, "timing", tuple(Timing.__dataclass_fields__))
        return Timing(**{k: parse_duration(v, f"timing.{k}") for k, v in raw.items()})

    def leaves(self, value: object, fleet: FleetShape) -> dict[str, float]:
        known = tuple(leaf_name(i) for i in range(fleet.leaves))
        raw = self.mapping(value, "leaves", known)
        degraded: dict[str, float] = {}
        for leaf, setting in raw.items():
            if setting == "degraded":
                degraded[leaf] = 0.25
            elif setting == "healthy":
                continue
            else:
                spec = self.mapping(setting, f"leaves.{leaf}", ("busbw_factor",))
                degraded[leaf] = _factor(spec.get("busbw_factor", 0.25), self, f"leaves.{leaf}")
        return degraded

    def node_faults(
        self, value: object, names: tuple[str, ...], fleet: FleetShape
    ) -> dict[str, NodeFaults]:
        raw = self.mapping(value, "nodes", tuple(value) if isinstance(value, dict) else ())
        merged: dict[str, dict[str, Any]] = {}
        for selector, body in raw.items():
            targets = names if selector == "all" else expand_selector(selector)
            for name in targets:
                if name not in names:
                    hint = f"the fleet has {names[0]}..{names[-1]}" if names else None
                    raise self.error(f"nodes: {name!r} is not in the fleet", selector, hint)
                fields = self.mapping(body, f"nodes.{selector}", _FAULT_KEYS)
                merged[name] = _merge(merged.get(name, {}), fields)
        return {name: _FaultParser(self, fleet).parse(name, body) for name, body in merged.items()}


_FAULT_KEYS = (
    "xid",
    "ecc",
    "row_remap",
    "stale_shm",
    "persistence_off",
    "modules_unloaded",
    "hung_nvidia_smi",
    "missing_gpu",
    "gpu_missing_after_reboot",
    "gpu_processes",
    "slurm",
    "nvlink_down",
    "ib_port_down",
    "ib_symbol_errors",
    "pcie_aer",
    "nccl_hang",
    "slow_nccl",
    "unreachable",
    "flaky_ssh",
    "slow_ssh",
    "reboot_time",
    "events",
    "sram",
    "sxid",
    "nccl_wrong",
    "fabric_manager",
    "board",
    "driver_version",
    "gpu_model",
    "third_party_modules",
    "extra_units",
    "environment",
    "without",
    "gpu_init_failed",
    "bmc",
)
_LIST_KEYS = frozenset(
    {
        "xid",
        "gpu_init_failed",
        "sram",
        "sxid",
        "ecc",
        "row_remap",
        "gpu_processes",
        "nvlink_down",
        "ib_symbol_errors",
        "pcie_aer",
        "missing_gpu",
        "gpu_missing_after_reboot",
        "events",
    }
)


def _merge(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    """Later selectors add list faults and override the rest."""
    out = dict(old)
    for key, value in new.items():
        if key in _LIST_KEYS and key in out:
            out[key] = _as_list(out[key]) + _as_list(value)
        else:
            out[key] = value
    return out


def _as_list(value: object) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


def _factor(value: object, builder: _Builder, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise builder.error(f"{where}: expected a factor in (0, 1], got {value!r}", where)
    return float(value)


class _FaultParser:
    """Parses one node's fault keys into NodeFaults."""

    def __init__(self, builder: _Builder, fleet: FleetShape) -> None:
        self.b = builder
        self.fleet = fleet
        self.layout = board(fleet.board)
        self.place = environment(fleet.environment)

    @property
    def gpu_count(self) -> int:
        return min(self.fleet.gpus_per_node, self.layout.max_gpus, self.place.max_gpus)

    def gpu(self, value: object, where: str) -> int:
        index = self.b.integer(value, where)
        if index >= self.gpu_count:
            raise self.b.error(f"{where}: GPU {index} does not exist", "gpu")
        return index

    def parse(self, node: str, raw: dict[str, Any]) -> NodeFaults:
        where = f"nodes.{node}"
        own_board = raw.get("board")
        if own_board is not None:
            own_board = scenario_hw.parse_board(self.b, own_board, where)
        self.layout = board(own_board or self.fleet.board)
        own_place = raw.get("environment")
        if own_place is not None:
            own_place = scenario_hw.parse_environment(self.b, own_place, where)
        self.place = environment(own_place or self.fleet.environment)
        hung = raw.get("hung_nvidia_smi")
        slow_nccl, slow_nccl_recovery = self.slow_nccl(raw.get("slow_nccl"), where)
        persistence_off, at_boot = self.persistence(raw.get("persistence_off"), where)
        return NodeFaults(
            xids=tuple(
                scenario_hw.xid(self.b, v, f"{where}.xid", self.layout, self.gpu)
                for v in _items(raw.get("xid"))
            ),
            ecc=tuple(self.ecc(v, f"{where}.ecc") for v in _items(raw.get("ecc"))),
            row_remap=tuple(
                self.remap(v, f"{where}.row_remap") for v in _items(raw.get("row_remap"))
            ),
            stale_shm=self.stale_shm(raw.get("stale_shm"), f"{where}.stale_shm"),
            persistence_off=persistence_off,
            persistence_off_at_boot=at_boot,
            modules_unloaded=self.modules(raw.get("modules_unloaded"), where),
            hung_nvidia_smi=None if not hung else self.hung(hung, where),
            missing_gpus=tuple(
                self.gpu(v, f"{where}.missing_gpu") for v in _items(raw.get("missing_gpu"))
            ),
            gpu_processes=tuple(self.process(v, where) for v in _items(raw.get("gpu_processes"))),
            slurm=self.slurm(raw.get("slurm"), f"{where}.slurm"),
            nvlink_down=tuple(self.nvlink(v, where) for v in _items(raw.get("nvlink_down"))),
            ib_ports_down=tuple(self.ib_port(v, where) for v in _items(raw.get("ib_port_down"))),
            ib_symbol_errors=tuple(
                self.ib_symbol_errors(v, where) for v in _items(raw.get("ib_symbol_errors"))
            ),
            pcie_aer=tuple(self.pcie_aer(v, where) for v in _items(raw.get("pcie_aer"))),
            nccl_hang=self.nccl_hang(raw.get("nccl_hang"), where),
            slow_nccl=slow_nccl,
            slow_nccl_recovery=slow_nccl_recovery,
            unreachable=self.b.flag(raw.get("unreachable", False), f"{where}.unreachable"),
            flaky_ssh=self.flaky(raw.get("flaky_ssh"), where),
            slow_ssh_ms=self.slow_ssh(raw.get("slow_ssh"), where),
            reboot_time=_opt_duration(raw.get("reboot_time"), f"{where}.reboot_time"),
            missing_after_reboot=tuple(
                self.missing_after_reboot(v, f"{where}.gpu_missing_after_reboot")
                for v in _items(raw.get("gpu_missing_after_reboot"))
            ),
            events=parse_events(self.b, raw.get("events"), f"{where}.events", self.process),
            **self.hardware(raw, where, own_board),
        )

    def hardware(self, raw: dict[str, Any], where: str, own_board: str | None) -> dict[str, Any]:
        """The board-level keys (scenario_hw): SRAM, SXid, nccl, Fabric Manager, hardware."""
        b = self.b
        driver = raw.get("driver_version")
        model = raw.get("gpu_model")
        return {
            "sram": tuple(
                scenario_hw.sram(b, v, f"{where}.sram", self.gpu) for v in _items(raw.get("sram"))
            ),
            "sxids": tuple(
                scenario_hw.sxid(b, v, f"{where}.sxid", self.layout, self.gpu)
                for v in _items(raw.get("sxid"))
            ),
            "nccl_wrong": scenario_hw.nccl_wrong(
                b, raw.get("nccl_wrong"), f"{where}.nccl_wrong", self.gpu
            ),
            "fabric_manager": scenario_hw.fabric_manager(
                b, raw.get("fabric_manager"), f"{where}.fabric_manager", self.layout
            ),
            "board": own_board,
            "driver_version": None if driver is None else str(driver),
            "gpu_model": None if model is None else str(model),
            "third_party_modules": scenario_hw.third_party_modules(
                b, raw.get("third_party_modules"), where
            ),
            "extra_units": scenario_hw.extra_units(b, raw.get("extra_units"), where),
            "environment": None if raw.get("environment") is None else self.place.name,
            "without": scenario_hw.parse_without(b, raw.get("without"), where),
            "init_failed": tuple(
                scenario_hw.init_failed(b, v, f"{where}.gpu_init_failed", self.gpu)
                for v in _items(raw.get("gpu_init_failed"))
            ),
            "bmc": scenario_hw.node_bmc(b, raw.get("bmc"), where),
        }

    def missing_after_reboot(self, value: object, where: str) -> int:
        if isinstance(value, dict):
            value = self.b.mapping(value, where, ("gpu",)).get("gpu", 0)
        return self.gpu(value, where)

    def ecc(self, value: object, where: str) -> EccFault:
        raw = self.b.mapping(value, where, ("gpu", "volatile", "aggregate"))
        volatile = self.b.mapping(raw.get("volatile"), f"{where}.volatile", ("sbe", "dbe"))
        aggregate = self.b.mapping(raw.get("aggregate"), f"{where}.aggregate", ("sbe", "dbe"))
        return EccFault(
            gpu=self.gpu(raw.get("gpu", 0), f"{where}.gpu"),
            volatile_sbe=self.b.integer(volatile.get("sbe", 0), f"{where}.volatile.sbe"),
            volatile_dbe=self.b.integer(volatile.get("dbe", 0), f"{where}.volatile.dbe"),
            aggregate_sbe=self.b.integer(aggregate.get("sbe", 0), f"{where}.aggregate.sbe"),
            aggregate_dbe=self.b.integer(aggregate.get("dbe", 0), f"{where}.aggregate.dbe"),
        )

    def remap(self, value: object, where: str) -> RowRemapFault:
        keys = (
            "gpu",
            "pending",
            "failure",
            "correctable",
            "uncorrectable",
            "histogram",
            "unrepairable",
        )
        raw = self.b.mapping(value, where, keys)
        return RowRemapFault(
            gpu=self.gpu(raw.get("gpu", 0), f"{where}.gpu"),
            pending=self.b.flag(raw.get("pending", False), f"{where}.pending"),
            failure=self.b.flag(raw.get("failure", False), f"{where}.failure"),
            correctable=self.b.integer(raw.get("correctable", 0), f"{where}.correctable"),
            uncorrectable=self.b.integer(raw.get("uncorrectable", 1), f"{where}.uncorrectable"),
            histogram=self.histogram(raw.get("histogram"), f"{where}.histogram"),
            unrepairable=self.b.flag(raw.get("unrepairable", False), f"{where}.unrepairable"),
        )

    def histogram(self, value: object, where: str) -> tuple[int, int, int, int, int] | None:
        """Bank Remap Availability: {max, high, partial, low, none} bank counts."""
        if value is None:
            return None
        names = ("max", "high", "partial", "low", "none")
        raw = self.b.mapping(value, where, names)
        counts = [self.b.integer(raw.get(name, 0), f"{where}.{name}") for name in names]
        return counts[0], counts[1], counts[2], counts[3], counts[4]

    def stale_shm(self, value: object, where: str) -> StaleShm | None:
        if value is None or value is False:
            return None
        if isinstance(value, int) and not isinstance(value, bool):
            return StaleShm(count=self.b.integer(value, where, minimum=1))
        raw = self.b.mapping(value, where, ("count", "age", "size"))
        return StaleShm(
            count=self.b.integer(raw.get("count", 1), f"{where}.count", minimum=1),
            age=parse_duration(raw.get("age", 7200), f"{where}.age"),
            size=self.b.integer(raw.get("size", 33554432), f"{where}.size"),
        )

    def persistence(self, value: object, where: str) -> tuple[bool, bool]:
        if value is None or isinstance(value, bool):
            return bool(value), False
        raw = self.b.mapping(value, f"{where}.persistence_off", ("survives_reboot",))
        return True, self.b.flag(raw.get("survives_reboot", False), f"{where}.survives_reboot")

    def modules(self, value: object, where: str) -> tuple[str, ...]:
        if value is None or value is False:
            return ()
        if value is True:
            return NVIDIA_MODULES
        names = tuple(str(v) for v in _items(value))
        for name in names:
            if name not in NVIDIA_MODULES:
                hint = _suggest(name, NVIDIA_MODULES, "nvidia modules")
                raise self.b.error(f"{where}.modules_unloaded: unknown module {name!r}", name, hint)
        return names

    def hung(self, value: object, where: str) -> str:
        if value is True:
            return "reboot"
        raw = self.b.mapping(value, f"{where}.hung_nvidia_smi", ("recovery",))
        return self.b.recovery(raw.get("recovery", "reboot"), f"{where}.hung_nvidia_smi")

    def process(self, value: object, where: str) -> GpuProcessSpec:
        raw = self.b.mapping(
            value,
            f"{where}.gpu_processes",
            ("name", "gpu", "used_mib", "pid", "job_id", "user", "args", "ignores_term"),
        )
        job = raw.get("job_id")
        return GpuProcessSpec(
            name=str(raw.get("name", "python")),
            gpu=self.gpu(raw.get("gpu", 0), f"{where}.gpu_processes.gpu"),
            used_mib=self.b.integer(raw.get("used_mib", 1024), f"{where}.gpu_processes.used_mib"),
            job_id=None
            if job is None
            else self.b.integer(job, f"{where}.gpu_processes.job_id", minimum=1),
            user=None if raw.get("user") is None else str(raw["user"]),
            args=str(raw.get("args") or ""),
            ignores_term=self.b.flag(
                raw.get("ignores_term", False), f"{where}.gpu_processes.ignores_term"
            ),
        )

    def slurm(self, value: object, where: str) -> SlurmSpec:
        states = ("idle", "alloc", "drained", "down")
        raw = {"state": value} if isinstance(value, str) else value
        spec = self.b.mapping(raw, where, ("state", "job_id", "user", "reason", "unreadable"))
        state = str(spec.get("state", "idle"))
        if state not in states:
            raise self.b.error(
                f"{where}: unknown state {state!r}", "state", _suggest(state, states, "states")
            )
        job = spec.get("job_id")
        return SlurmSpec(
            state=state,
            job_id=None if job is None else self.b.integer(job, f"{where}.job_id", minimum=1),
            user=None if spec.get("user") is None else str(spec["user"]),
            reason=None if spec.get("reason") is None else str(spec["reason"]),
            unreadable=self.b.flag(spec.get("unreadable", False), f"{where}.unreadable"),
        )

    def nvlink(self, value: object, where: str) -> NvlinkDown:
        raw = self.b.mapping(value, f"{where}.nvlink_down", ("gpu", "link"))
        link = self.b.integer(raw.get("link", 0), f"{where}.nvlink_down.link")
        if link >= self.layout.nvlinks:
            raise self.b.error(f"{where}.nvlink_down: link {link} does not exist", "link")
        return NvlinkDown(gpu=self.gpu(raw.get("gpu", 0), f"{where}.nvlink_down.gpu"), link=link)

    def ib_port(self, value: object, where: str, key: str = "ib_port_down") -> int:
        text = str(value)
        index = int(text[5:]) if text.startswith("mlx5_") and text[5:].isdigit() else value
        if (
            isinstance(index, bool)
            or not isinstance(index, int)
            or not 0 <= index < self.layout.nics
        ):
            last = f"mlx5_{self.layout.nics - 1}"
            raise self.b.error(f"{where}.{key}: expected mlx5_0..{last}, got {value!r}", key)
        return index

    def ib_symbol_errors(self, value: object, where: str) -> IbSymbolErrors:
        """`mlx5_3`, `3` or `{port: mlx5_3, per_read: 50}`."""
        if not isinstance(value, dict):
            return IbSymbolErrors(port=self.ib_port(value, where, "ib_symbol_errors"))
        raw = self.b.mapping(value, f"{where}.ib_symbol_errors", ("port", "per_read"))
        per_read = raw.get("per_read", 50)
        return IbSymbolErrors(
            port=self.ib_port(raw.get("port", 0), where, "ib_symbol_errors"),
            per_read=self.b.integer(per_read, f"{where}.ib_symbol_errors.per_read", minimum=1),
        )

    def pcie_aer(self, value: object, where: str) -> PcieAer:
        """`3` or `{gpu: 3, fatal: true, ago: 20m}`."""
        if not isinstance(value, dict):
            return PcieAer(gpu=self.gpu(value, f"{where}.pcie_aer"))
        raw = self.b.mapping(value, f"{where}.pcie_aer", ("gpu", "fatal", "ago"))
        ago = _opt_duration(raw.get("ago"), f"{where}.pcie_aer.ago")
        return PcieAer(
            gpu=self.gpu(raw.get("gpu", 0), f"{where}.pcie_aer.gpu"),
            fatal=self.b.flag(raw.get("fatal", False), f"{where}.pcie_aer.fatal"),
            ago=1200.0 if ago is None else ago,
        )

    def nccl_hang(self, value: object, where: str) -> NcclHang | None:
        """`3` or `{gpu: 3, seq: 9001, op: ALLREDUCE}`."""
        if value is None:
            return None
        if not isinstance(value, dict):
            return NcclHang(gpu=self.gpu(value, f"{where}.nccl_hang"))
        raw = self.b.mapping(value, f"{where}.nccl_hang", ("gpu", "seq", "op"))
        op = str(raw.get("op", "ALLREDUCE")).upper()
        if not op.isalpha():
            raise self.b.error(f"{where}.nccl_hang.op: not an NCCL op type: {op!r}", "op")
        return NcclHang(
            gpu=self.gpu(raw.get("gpu", 0), f"{where}.nccl_hang.gpu"),
            seq=self.b.integer(raw.get("seq", 9001), f"{where}.nccl_hang.seq", minimum=2),
            op=op,
        )

    def slow_nccl(self, value: object, where: str) -> tuple[float | None, str]:
        if value is None:
            return None, "never"
        if isinstance(value, dict):
            raw = self.b.mapping(value, f"{where}.slow_nccl", ("busbw_factor", "recovery"))
            factor = _factor(raw.get("busbw_factor", 0.5), self.b, f"{where}.slow_nccl")
            return factor, self.b.recovery(raw.get("recovery", "never"), f"{where}.slow_nccl")
        return _factor(value, self.b, f"{where}.slow_nccl"), "never"

    def flaky(self, value: object, where: str) -> int | None:
        if value is None:
            return None
        if isinstance(value, dict):
            value = self.b.mapping(value, f"{where}.flaky_ssh", ("drop_after",)).get("drop_after")
        # 0: every connection drops at its first command (the link never carries one).
        return self.b.integer(value, f"{where}.flaky_ssh", minimum=0)

    def slow_ssh(self, value: object, where: str) -> int:
        if value is None:
            return 0
        if isinstance(value, dict):
            value = self.b.mapping(value, f"{where}.slow_ssh", ("latency_ms",)).get("latency_ms")
        return self.b.integer(value, f"{where}.slow_ssh")


def _items(value: object) -> list[Any]:
    if value is None or value is False:
        return []
    return list(value) if isinstance(value, list) else [value]


def _opt_duration(value: object, where: str) -> float | None:
    return None if value is None else parse_duration(value, where)


class _RequestBuilder(_Builder):
    """Validates a control request (no file behind it: errors carry no position)."""

    def __init__(self) -> None:
        super().__init__(Path("inject"), "")

    def error(self, message: str, key: str | None = None, hint: str | None = None) -> LabError:
        return LabError(message, hint=hint)


def parse_change_request(value: object, fleet: FleetShape) -> NodeChange:
    """The change of an `inject` control request, validated like a scenario event.

    Raises:
        LabError: unknown keys, wrong types or GPUs the node does not have.
    """
    builder = _RequestBuilder()
    return parse_change(builder, value, "change", _FaultParser(builder, fleet).process)
