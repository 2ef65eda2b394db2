"""Collective rows of the validation CSV (nccl-tests sweeps): predicted vs measured bus bandwidth."""

from __future__ import annotations

from armillary.comm.collectives import collective
from armillary.comm.sweep import bus_factor, group_of
from armillary.specs.communication import Algorithm, Collective
from armillary.specs.loading import load_system
from armillary.units import MIB
from armillary.validation.rows import Unsupported, system_preset_for

SMALL_MESSAGE_BYTES = MIB  # below this, collectives are latency-bound: reported as their own group


def predict_busbw(row: dict[str, str]) -> tuple[float, tuple[str, ...]]:
    """Predicted busbw in GB/s of a collective row, and what was assumed."""
    metric = row.get("metric", "").lower()
    if not metric.startswith("busbw"):
        raise Unsupported(f"metric {row.get('metric')!r} is not predicted (only nccl-tests busbw)")
    try:
        op = Collective(row.get("op", "").strip())
    except ValueError:
        raise Unsupported(f"op {row.get('op')!r} is not a collective") from None
    n_gpus, size = int(float(row["n_gpus"])), float(row["msg_bytes"])
    preset = system_preset_for(row.get("gpu", ""))
    system = load_system(preset, n_gpus)
    algorithm = Algorithm.AUTO
    if "nvls" in metric and "off" not in metric:
        algorithm = Algorithm.IN_NETWORK
    elif "ring" in metric:
        algorithm = Algorithm.RING
    group = group_of(system, n_gpus)
    time = float(collective(op, size, group, system, algorithm).cost.time)
    busbw = size / time * float(bus_factor(op, group.size))
    return busbw / 1e9, (f"system {preset}", f"algorithm {algorithm.value}")
