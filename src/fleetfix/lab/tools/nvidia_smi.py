"""Emulated `nvidia-smi`: queries in every format, topo/nvlink, and -pm / -r / -p changes.

Failure modes follow the real tool: driver not loaded -> the "couldn't communicate with the
NVIDIA driver" message and exit 9; a GPU that fell off the bus -> "Unable to determine the
device handle" and exit 15; a hung GPU (scenario `hung_nvidia_smi`) -> no answer at all.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

from fleetfix.lab.state import FM_UNIT, GpuState
from fleetfix.lab.tools import gpu_reset, smi_links, smi_query, smi_text, smi_xml
from fleetfix.lab.tools.base import ToolContext, ToolReply, lines
from fleetfix.lab.tools.gpu_view import GpuView, gpu_view

NO_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running.\n"
)
INVALID = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n"

_FLAGS = MappingProxyType(
    {
        "-q": "query",
        "--query": "query",
        "-x": "xml",
        "--xml-format": "xml",
        "-L": "list",
        "--list-gpus": "list",
        "-r": "reset",
        "--gpu-reset": "reset",
        "-h": "help",
        "--help": "help",
        "--version": "version",
    }
)
_VALUED = MappingProxyType(
    {
        "-i": "id",
        "--id": "id",
        "-d": "display",
        "--display": "display",
        "-pm": "pm",
        "--persistence-mode": "pm",
        "-p": "reset_ecc",
        "--reset-ecc-errors": "reset_ecc",
        "--query-gpu": "query_gpu",
        "--query-compute-apps": "query_apps",
        "--format": "format",
    }
)


@dataclass(slots=True)
class SmiArgs:
    flags: set[str] = field(default_factory=set)
    values: dict[str, str] = field(default_factory=dict)


def parse_args(argv: Sequence[str]) -> SmiArgs | None:
    """nvidia-smi's options, `-i 0`, `-i=0`, `--id=0` and `--id 0` forms alike; None if bad."""
    args = SmiArgs()
    items = list(argv)
    while items:
        token = items.pop(0)
        name, eq, inline = token.partition("=")
        if token in _FLAGS:
            args.flags.add(_FLAGS[token])
        elif name in _VALUED:
            if not eq and not items:
                return None
            args.values[_VALUED[name]] = inline if eq else items.pop(0)
        else:
            return None
    return args


def nvidia_smi(ctx: ToolContext, argv: Sequence[str]) -> ToolReply:
    node = ctx.node
    if node.has_fault("hung_nvidia_smi"):
        return ToolReply(hang=True)
    if not node.driver_loaded():
        return ToolReply(stdout=NO_DRIVER, rc=9)
    if argv and argv[0] in ("topo", "nvlink"):
        links = smi_links.topo if argv[0] == "topo" else smi_links.nvlink
        return links(ctx, argv[1:], enumerated(ctx), _select)
    args = parse_args(argv)
    if args is None:
        return ToolReply(stdout=INVALID, rc=2)
    return _dispatch(ctx, args)


def _dispatch(ctx: ToolContext, args: SmiArgs) -> ToolReply:
    if "help" in args.flags:
        return ToolReply(
            stdout=lines(
                f"NVIDIA System Management Interface -- v{ctx.driver}",
                "",
                "Usage: nvidia-smi [OPTION1 [ARG1]] [OPTION2 [ARG2]] ...",
            )
        )
    if "version" in args.flags:
        return ToolReply(stdout=_version(ctx))
    selected = _select(ctx, args.values.get("id"))
    if selected is None:
        return ToolReply(stdout="No devices were found\n", rc=6)
    if "pm" in args.values:
        return _persistence(ctx, selected, args.values["pm"])
    if "reset_ecc" in args.values:
        return _reset_ecc(ctx, selected, args.values["reset_ecc"])
    if "reset" in args.flags:
        return gpu_reset.reset(ctx, selected, enumerated(ctx))
    return _read(ctx, args, selected)


def _version(ctx: ToolContext) -> str:
    return lines(
        f"NVIDIA-SMI version  : {ctx.driver}",
        "NVML version        : " + ".".join(ctx.driver.split(".")[:2]),
        f"DRIVER version      : {ctx.driver}",
        f"CUDA Version        : {ctx.fleet.scenario.fleet.cuda_version}",
    )


def enumerated(ctx: ToolContext) -> list[tuple[int, GpuState]]:
    """(nvidia-smi index, GPU) for every GPU the driver enumerates, in PCI order."""
    return list(enumerate(ctx.node.visible_gpus()))


def _select(ctx: ToolContext, ident: str | None) -> list[tuple[int, GpuState]] | None:
    gpus = enumerated(ctx)
    if ident is None:
        return gpus
    wanted = [part.strip() for part in ident.split(",")]
    chosen = [(i, g) for i, g in gpus if _matches(i, g, wanted)]
    return chosen or None


def _matches(index: int, gpu: GpuState, wanted: list[str]) -> bool:
    for item in wanted:
        lowered = item.lower()
        if item == str(index) or lowered == gpu.uuid.lower():
            return True
        if lowered in (gpu.bus_id.lower(), gpu.bus_id[4:].lower(), gpu.pci_short + ".0"):
            return True
    return False


def _views(ctx: ToolContext, gpus: list[tuple[int, GpuState]]) -> list[GpuView]:
    model = ctx.node.spec.gpu_model
    out = []
    for index, gpu in gpus:
        view = gpu_view(ctx.node, gpu, model)
        out.append(_reindexed(view, index))
    return out


def _reindexed(view: GpuView, index: int) -> GpuView:
    if view.index == index:
        return view
    fields = {name: getattr(view, name) for name in GpuView.__dataclass_fields__}
    fields["index"] = index
    return GpuView(**fields)


def _lost_message(gpus: list[tuple[int, GpuState]]) -> str:
    return "".join(
        f"Unable to determine the device handle for GPU{gpu.bus_id[4:]}: Unknown Error\n"
        for _, gpu in gpus
    )


def _split_lost(
    ctx: ToolContext, gpus: list[tuple[int, GpuState]]
) -> tuple[list[tuple[int, GpuState]], list[tuple[int, GpuState]]]:
    lost = [(i, g) for i, g in gpus if ctx.node.gpu_lost(g.index)]
    return [(i, g) for i, g in gpus if (i, g) not in lost], lost


def _read(ctx: ToolContext, args: SmiArgs, selected: list[tuple[int, GpuState]]) -> ToolReply:
    healthy, lost = _split_lost(ctx, selected)
    views = _views(ctx, healthy)
    reply = _render(ctx, args, views)
    if not lost or reply.rc != 0:
        return reply
    return ToolReply(stdout=reply.stdout, stderr=_lost_message(lost), rc=15)


def _render(ctx: ToolContext, args: SmiArgs, views: list[GpuView]) -> ToolReply:
    scenario = ctx.fleet.scenario
    attached = len(enumerated(ctx))
    cuda = scenario.fleet.cuda_version
    if "query_gpu" in args.values or "query_apps" in args.values:
        return _csv(ctx, args, views, attached)
    if "list" in args.flags:
        return ToolReply(
            stdout="".join(f"GPU {v.index}: {v.name} (UUID: {v.uuid})\n" for v in views)
        )
    if "query" in args.flags and "xml" in args.flags:
        fabric = bool(ctx.node.unit_active(FM_UNIT))
        return ToolReply(
            stdout=smi_xml.render_xml(
                views, attached, driver=ctx.driver, cuda=cuda, now=ctx.now, fabric_ok=fabric
            )
        )
    if "query" in args.flags:
        sections = [
            s.strip().upper() for s in args.values.get("display", "").split(",") if s.strip()
        ]
        if any(s not in smi_text.DISPLAY_SECTIONS for s in sections):
            return ToolReply(stdout=INVALID, rc=2)
        text = smi_text.render_query(
            views, attached, driver=ctx.driver, cuda=cuda, now=ctx.now, sections=sections
        )
        return ToolReply(stdout=text)
    if args.flags or args.values.keys() - {"id"}:
        return ToolReply(stdout=INVALID, rc=2)
    return ToolReply(stdout=smi_text.render_table(views, ctx.driver, cuda, ctx.now))


def _csv(ctx: ToolContext, args: SmiArgs, views: list[GpuView], attached: int) -> ToolReply:
    fmt = smi_query.parse_format(args.values.get("format", ""))
    if fmt is None:
        return ToolReply(stdout=INVALID, rc=2)
    apps = "query_apps" in args.values
    spec = args.values["query_apps" if apps else "query_gpu"]
    names = [name.strip() for name in spec.split(",") if name.strip()]
    table = smi_query.app_fields() if apps else smi_query.gpu_fields()
    bad = smi_query.unknown_field(names, table) if names else spec
    if bad is not None:
        return ToolReply(stdout=f'Field "{bad}" is not a valid field to query.\n\n', rc=2)
    env = smi_query.Env(driver=ctx.driver, now=ctx.now, count=attached)
    render = smi_query.render_apps_csv if apps else smi_query.render_gpu_csv
    return ToolReply(stdout=render(views, names, fmt, env))


def _persistence(ctx: ToolContext, gpus: list[tuple[int, GpuState]], value: str) -> ToolReply:
    if value not in ("0", "1", "ENABLED", "DISABLED"):
        return ToolReply(stdout=INVALID, rc=2)
    enable = value in ("1", "ENABLED")
    word = "Enabled" if enable else "Disabled"
    out, err, rc = [], [], 0
    for _, gpu in gpus:
        if ctx.node.gpu_lost(gpu.index):
            err.append(f"Unable to set persistence mode for GPU {gpu.bus_id}: Unknown Error")
            rc = 15
        elif gpu.persistence == enable:
            out.append(f"Persistence mode is already {word} for GPU {gpu.bus_id}.")
        else:
            gpu.persistence = enable
            out.append(f"{word} persistence mode for GPU {gpu.bus_id}.")
    out.append("All done.")
    return ToolReply(stdout=lines(*out), stderr=lines(*err) if err else "", rc=rc)


def _reset_ecc(ctx: ToolContext, gpus: list[tuple[int, GpuState]], value: str) -> ToolReply:
    if value not in ("0", "1", "VOLATILE", "AGGREGATE"):
        return ToolReply(stdout=INVALID, rc=2)
    aggregate = value in ("1", "AGGREGATE")
    out = []
    for _, gpu in gpus:
        if aggregate:
            gpu.aggregate_sbe = gpu.aggregate_dbe = 0
        else:
            gpu.volatile_sbe = gpu.volatile_dbe = 0
        scope = "aggregate" if aggregate else "volatile"
        out.append(f"Reset {scope} ECC errors to zero for GPU {gpu.bus_id}.")
    out.append("All done.")
    return ToolReply(stdout=lines(*out))
