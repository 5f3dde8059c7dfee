"""Emulated `dcgmi diag -r N [-j]` (DCGM 3.3): the result table, or the JSON document.

The table follows shared/samples/dcgmi/ (DCGM 3.3.x: Metadata and Deployment sections, then
Integration/Hardware/Stress by level; Error/Warning texts wrapped every 45 characters). The
JSON follows the "DCGM GPU Diagnostic" document DCGM 3.x writes (jsoncpp styled: tabs,
`"key" : value`, deployment tests with one result for all GPUs, `null` between them). No real
JSON capture is in shared/samples, so the JSON's details (error ids) are best effort. A GPU
CUDA cannot use yet (lab/fabric.py) fails every CUDA test (level 2 and up) with DCGM's "Error
using CUDA API" and CUDA's reason; that wording is the lab's (no capture of it exists).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from fleetfix.lab import fabric
from fleetfix.lab.state import NodeState
from fleetfix.lab.tools.base import ToolContext, ToolReply, lines

DCGM_VERSION = "3.3.9"
WRAP = 45
NO_HOST_ENGINE = (
    "Error: unable to establish a connection to the specified host: localhost\n"
    "Error: Unable to connect to host engine. Host engine connection invalid/disconnected.\n"
)
DEPLOYMENT = (
    "Denylist",
    "NVML Library",
    "CUDA Main Library",
    "Permissions and OS Blocks",
    "Persistence Mode",
    "Environment Variables",
    "Page Retirement/Row Remap",
    "Graphics Processes",
    "Inforom",
)
_LEVEL_TESTS = (
    (2, "Integration", "PCIe"),
    (2, "Hardware", "GPU Memory"),
    (4, "Hardware", "Pulse Test"),
    (3, "Stress", "Targeted Stress"),
    (3, "Stress", "Targeted Power"),
    (3, "Stress", "Memory Bandwidth"),
    (3, "Stress", "EUD Test"),
    (4, "Stress", "Memtest"),
)
_SKIPPED = frozenset({"EUD Test"})


@dataclass(frozen=True, slots=True)
class Outcome:
    """One test's verdict: failing GPUs (empty = pass) and the messages to print."""

    category: str
    name: str
    failed: tuple[int, ...] = ()
    messages: tuple[tuple[str, str], ...] = ()
    skipped: bool = False

    @property
    def table_result(self) -> str:
        if self.skipped:
            return "Skip - All"
        if not self.failed:
            return "Pass - All" if self.category != "Deployment" else "Pass"
        if self.category == "Deployment":
            return "Fail"
        noun = "GPU" if len(self.failed) == 1 else "GPUs"
        return f"Fail - {noun}: {', '.join(str(g) for g in self.failed)}"


def dcgmi(ctx: ToolContext, argv: Sequence[str]) -> ToolReply:
    args = list(argv)
    if not args or args[0] != "diag":
        return ToolReply(stdout="Error: the fleetfix lab emulates only `dcgmi diag`.\n", rc=1)
    level = _level(args)
    if level is None:
        return ToolReply(
            stdout="Error: Invalid value for -r. Valid values are 1, 2, 3 and 4.\n", rc=1
        )
    node = ctx.node
    if node.has_fault("hung_nvidia_smi"):
        return ToolReply(hang=True)
    if not node.driver_loaded() or not node.services["nvidia-dcgm"].active:
        return ToolReply(stdout=NO_HOST_ENGINE, rc=255)
    if any(node.gpu_lost(g.index) for g in node.gpus):
        text = (
            "Error: Unable to complete diagnostic for group 2147483647. Return: (-36) GPU is lost."
        )
        return ToolReply(stdout=text + "\n", rc=1)
    outcomes = _outcomes(node, level)
    failed = any(o.failed for o in outcomes)
    text = _json(ctx, outcomes) if "-j" in args or "--json" in args else _table(ctx, outcomes)
    delay = ctx.fleet.scenario.timing.nccl * level
    return ToolReply(stdout=text, rc=1 if failed else 0, delay=delay)


def _level(args: list[str]) -> int | None:
    for index, arg in enumerate(args):
        if arg in ("-r", "--run") and index + 1 < len(args):
            value = args[index + 1]
            return int(value) if value in ("1", "2", "3", "4") else None
        if arg.startswith("--run="):
            value = arg.split("=", 1)[1]
            return int(value) if value in ("1", "2", "3", "4") else None
    return 1


def _outcomes(node: NodeState, level: int) -> list[Outcome]:
    outcomes = [_deployment(node, name) for name in DEPLOYMENT]
    for needed, category, name in _LEVEL_TESTS:
        if level >= needed:
            outcomes.append(_hardware(node, category, name))
    return outcomes


def _deployment(node: NodeState, name: str) -> Outcome:
    visible = node.visible_gpus()
    if name == "Persistence Mode":
        off = [i for i, g in enumerate(visible) if not g.persistence]
        if off:
            text = (
                f"Persistence mode for GPU {off[0]} is currently disabled. The DCGM diagnostic "
                "requires peristence mode to be enabled. Enable persistence mode by running "
                '"nvidia-smi -i <gpuId> -pm 1 " as root.'
            )
            return Outcome("Deployment", name, tuple(off), (("Error", text),))
    if name == "Page Retirement/Row Remap":
        return _remap(visible, name)
    return Outcome("Deployment", name)


def _remap(visible: list[Any], name: str) -> Outcome:
    messages = []
    failed = []
    for index, gpu in enumerate(visible):
        if gpu.remap_pending:
            messages.append(
                (
                    "Error",
                    f"GPU {index} has uncorrectable memory errors and row remappings are pending",
                )
            )
            failed.append(index)
        elif gpu.remap_failure:
            messages.append(
                ("Error", f"GPU {index} had uncorrectable memory errors and row remapping failed")
            )
            failed.append(index)
    return Outcome("Deployment", name, tuple(failed), tuple(messages))


def _hardware(node: NodeState, category: str, name: str) -> Outcome:
    if name in _SKIPPED:
        return Outcome(category, name, skipped=True)
    visible = node.visible_gpus()
    messages: list[tuple[str, str]] = []
    failed: list[int] = []
    for index, gpu in enumerate(visible):
        blocker = fabric.cuda_blocker(node, gpu)
        if blocker is not None:
            messages.append(("Error", f"GPU {index}: Error using CUDA API cuInit: {blocker}"))
            failed.append(index)
            continue
        if name == "GPU Memory" and gpu.volatile_dbe:
            messages.append(
                (
                    "Warning",
                    f"Detected {gpu.volatile_dbe} volatile double-bit ECC error(s) in GPU {index}.",
                )
            )
            failed.append(index)
        if name == "PCIe":
            for link in sorted(node.links_down(gpu.index)):
                messages.append(("Warning", f"GPU {index}'s NvLink link {link} is currently down"))
                failed.append(index)
    return Outcome(category, name, tuple(sorted(set(failed))), tuple(messages))


def _row(name: str, value: str) -> str:
    return f"| {name:<25} | {value:<46} |"


def _section(name: str, first: bool) -> str:
    edge = "|" if first else "+"
    return f"{edge}{f'-----  {name}  ':-<27}+{'-' * 48}{edge}"


def _table(ctx: ToolContext, outcomes: list[Outcome]) -> str:
    ids = ",".join("2330" for _ in ctx.node.visible_gpus())
    rule = "+---------------------------+------------------------------------------------+"
    out = [
        "Successfully ran diagnostic for group.",
        rule,
        _row("Diagnostic", "Result"),
        rule.replace("-", "="),
        _section("Metadata", first=True),
        _row("DCGM Version", DCGM_VERSION),
        _row("Driver Version Detected", ctx.driver),
        _row("GPU Device IDs Detected", ids),
    ]
    category = None
    for outcome in outcomes:
        if outcome.category != category:
            category = outcome.category
            out.append(_section(category, first=category == "Deployment"))
        out.append(_row(outcome.name, outcome.table_result))
        for kind, text in outcome.messages:
            out.extend(_wrapped(kind, text))
    out.append(rule)
    return lines(*out)


def _wrapped(kind: str, text: str) -> list[str]:
    pieces = [text[i : i + WRAP] for i in range(0, len(text), WRAP)]
    return [_row(kind if n == 0 else "", piece) for n, piece in enumerate(pieces)]


def _json(ctx: ToolContext, outcomes: list[Outcome]) -> str:
    gpus = len(ctx.node.visible_gpus())
    categories: list[dict[str, Any]] = []
    for outcome in outcomes:
        if not categories or categories[-1]["category"] != outcome.category:
            categories.append({"category": outcome.category, "tests": []})
        tests = categories[-1]["tests"]
        if tests and outcome.category == "Deployment":
            tests.append(None)  # dcgmi really writes these
        tests.append({"name": outcome.name, "results": _json_results(outcome, gpus)})
    document = {"DCGM GPU Diagnostic": {"test_categories": categories, "version": DCGM_VERSION}}
    return styled(document) + "\n"


def _json_results(outcome: Outcome, gpus: int) -> list[dict[str, Any]]:
    def status(gpu: int | None) -> str:
        if outcome.skipped:
            return "SKIP"
        failing = outcome.failed if gpu is None else [g for g in outcome.failed if g == gpu]
        return "FAIL" if failing else "PASS"

    def warnings(gpu: int | None) -> list[dict[str, Any]]:
        texts = [t for _, t in outcome.messages if gpu is None or f"GPU {gpu}" in t]
        return [
            {"warning": t, "error_id": 45, "error_category": 1, "error_severity": 2} for t in texts
        ]

    if outcome.category == "Deployment":
        entry: dict[str, Any] = {
            "gpu_ids": ",".join(str(g) for g in range(gpus)),
            "status": status(None),
        }
        found = warnings(None)
        return [{**entry, "warnings": found} if found else entry]
    results = []
    for gpu in range(gpus):
        entry = {"gpu_ids": gpu, "status": status(gpu)}
        found = warnings(gpu)
        results.append({**entry, "warnings": found} if found else entry)
    return results


def styled(value: Any, depth: int = 0) -> str:
    """JSON laid out as dcgmi writes it: tab indents, `"key" : value`, and a container that
    is a member's value opening on its own line at the key's indentation."""
    pad = "\t" * depth
    if isinstance(value, dict) and value:
        items = [f"{pad}\t{json.dumps(k)} :{_after_colon(v, depth + 1)}" for k, v in value.items()]
        return "{\n" + ",\n".join(items) + f"\n{pad}}}"
    if isinstance(value, list) and value:
        items = [f"{pad}\t{styled(v, depth + 1)}" for v in value]
        return "[\n" + ",\n".join(items) + f"\n{pad}]"
    return json.dumps(value)


def _after_colon(value: Any, depth: int) -> str:
    if isinstance(value, dict | list) and value:
        return "\n" + "\t" * depth + styled(value, depth)
    return " " + styled(value, depth)
