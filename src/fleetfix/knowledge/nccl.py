"""nccl-tests bandwidth floors per GPU model and count (knowledge/nccl.yml)."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from fleetfix.errors import KnowledgeError
from fleetfix.knowledge.packaged import packaged_text, yaml_mapping


@dataclass(frozen=True, slots=True)
class Floor:
    model: str
    gpus: int
    min_busbw: float
    multi_node: bool = False


@cache
def floors() -> tuple[Floor, ...]:
    data = yaml_mapping(packaged_text("nccl.yml", "nccl floors"), "nccl floors")
    try:
        return tuple(
            Floor(str(f["model"]), int(f["gpus"]), float(f["min_busbw"]), bool(f.get("multi_node")))
            for f in data["floors"]
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise KnowledgeError(f"nccl floors: malformed packaged nccl.yml: {exc}") from exc


def floor_for(model: str | None, gpus: int | None, *, multi_node: bool = False) -> float | None:
    """The floor whose model name is contained in `model` (nvidia-smi's product name)."""
    if not model:
        return None
    for floor in floors():
        same_kind = floor.multi_node == multi_node
        if same_kind and floor.model.lower() in model.lower() and gpus in (None, floor.gpus):
            return floor.min_busbw
    return None
