"""nccl-tests bandwidth floors per GPU model and count (knowledge/nccl.yml)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib import resources

import yaml

from fleetfix.errors import KnowledgeError


@dataclass(frozen=True, slots=True)
class Floor:
    model: str
    gpus: int
    min_busbw: float
    multi_node: bool = False


@cache
def floors() -> tuple[Floor, ...]:
    try:
        text = resources.files("fleetfix.knowledge").joinpath("nccl.yml").read_text()
        data = yaml.safe_load(text)
        return tuple(
            Floor(str(f["model"]), int(f["gpus"]), float(f["min_busbw"]), bool(f.get("multi_node")))
            for f in data["floors"]
        )
    except (OSError, yaml.YAMLError, KeyError, TypeError, ValueError) as exc:
        raise KnowledgeError(f"nccl floors: cannot read packaged nccl.yml: {exc}") from exc


def floor_for(model: str | None, gpus: int | None, *, multi_node: bool = False) -> float | None:
    """The floor whose model name is contained in `model` (nvidia-smi's product name)."""
    if not model:
        return None
    for floor in floors():
        same_kind = floor.multi_node == multi_node
        if same_kind and floor.model.lower() in model.lower() and gpus in (None, floor.gpus):
            return floor.min_busbw
    return None
