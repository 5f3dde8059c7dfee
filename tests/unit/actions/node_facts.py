"""Node facts for the action tests: GPUs from real nvidia-smi captures, copied to a whole node,
and `services` facts from unit states."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from fleetfix.probes import nvidia_smi, services
from fleetfix.probes.gpu_facts import Format, GpuFacts, NvidiaSmiFacts, Reading, summarize

SAMPLES = Path(__file__).resolve().parents[2] / "fixtures" / "samples"
A100 = "nvidia-smi-xml/telegraf-a100-sxm4-80gb-mig-v12.xml"
H100 = "nvidia-smi-q/nvgpuexp-h100-vm-590.48.01-idle-q.txt"
BLACKWELL_PCIE = "nvidia-smi-xml/telegraf-rtx-pro-6000-maxq-blackwell-v13.xml"
P100 = "nvidia-smi-xml/netdata-tesla-p100-v11-510.xml"


def node(sample: str, gpus: int = 8, **changes: object) -> NvidiaSmiFacts:
    """`gpus` copies of the sample's GPU, indexed 0.., with `changes` applied to each."""
    gpu: GpuFacts = nvidia_smi.parse((SAMPLES / sample).read_text()).gpus[0]
    copies = tuple(replace(gpu, index=i, **changes) for i in range(gpus))  # type: ignore[arg-type]
    return summarize(Reading(format=Format.XML, complete=True, gpus=copies))


def flag(smi: NvidiaSmiFacts, index: int, **changes: object) -> NvidiaSmiFacts:
    """The same node with one GPU changed (e.g. the driver asking for its reset)."""
    gpus = tuple(
        replace(g, **changes) if g.index == index else g  # type: ignore[arg-type]
        for g in smi.gpus
    )
    return summarize(Reading(format=smi.format, complete=True, gpus=gpus))


def units(**states: str) -> services.ServicesFacts:
    """`services` facts: unit=state (active, inactive, not-found); unnamed units not found."""
    lines = []
    for unit in (*services.DEFAULT_UNITS, services.MPS_CONTROL):
        state = states.get(unit.replace("-", "_"), "not-found")
        load = "not-found" if state == "not-found" else "loaded"
        lines.append(f"{unit} {load} {'inactive' if state == 'not-found' else state}")
    return services.parse("\n".join(lines) + "\n")
