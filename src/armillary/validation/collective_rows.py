"""Collective rows of the validation CSV (nccl-tests sweeps): predicted vs measured bus bandwidth."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from armillary.comm.algorithms import dimension_cost
from armillary.comm.collectives import collective, send_recv
from armillary.comm.sweep import bus_factor, group_of
from armillary.numerics import Array
from armillary.plan.placement import Placement
from armillary.specs.communication import Algorithm, Collective, Composition
from armillary.specs.system import System
from armillary.units import MIB
from armillary.validation.collective_reading import (
    bandwidth_scale,
    channel_settings,
    message_bytes,
    pinned_algorithm,
    read_op,
    row_unit,
    time_scale,
)
from armillary.validation.collective_system import (
    read_system,
    system_of,
)
from armillary.validation.flagged_sweeps import flagged_rows
from armillary.validation.row_columns import Unsupported, int_column
from armillary.validation.vocabulary import clean

SMALL_MESSAGE_BYTES = MIB  # below this, collectives are latency-bound: reported as their own group


@dataclass(frozen=True)
class _Modelled:
    """A collective row as the model runs it: the op, its bytes, the system sized to the row and its group."""

    op: Collective
    size: float
    system: System
    group: Placement
    algorithm: Algorithm
    notes: tuple[str, ...]


def _modelled(row: dict[str, str], trial: Mapping[str, object] | None = None,
              domain: Mapping[str, object] | None = None) -> _Modelled:
    """What `predict_collective` and `row_latency_share` run for a row (Unsupported where it cannot run)."""
    if (caveat := flagged_rows().get(row.get("id", ""))) is not None:
        raise Unsupported(f"value left out: slower than a larger message of its sweep, and {caveat}")
    op_text = clean(row.get("op"))
    op = read_op(op_text)
    n_gpus = int_column(row, "n_gpus")
    if n_gpus is None:
        raise Unsupported(f"n_gpus: not stated ({row.get('n_gpus')!r})")
    size = float(message_bytes(row))
    reading = read_system(row)
    settings = channel_settings(f"{op_text} {clean(row.get('framework'))}")
    system = system_of(reading, n_gpus, settings, trial, domain)
    algorithm = pinned_algorithm(op_text, clean(row.get("metric")))
    notes = (f"system {reading.preset}", *reading.assumptions, f"algorithm {algorithm.value}") + (
        (f"ring channels {max(d.channels or 0 for d in system.network)} (NCCL settings)",) if settings.any else ())
    return _Modelled(op, size, system, group_of(system, n_gpus), algorithm, notes)


def latency_share(op: Collective, n_bytes: Array, group: Placement, system: System,
                  algorithm: Algorithm = Algorithm.AUTO, composition: Composition = Composition.AUTO) -> Array:
    """The share of the modelled time of `op` that is latency: the fixed part of each dimension's phase (its
    protocol's base cost and per-step latencies, `DimensionCost.fixed`) summed, over the collective's time
    (at most 1: a pipelined composition overlaps transfers, not fixed costs). Near 1 the collective is
    latency-bound (LL's regime), near 0 bandwidth-bound (Simple's): the size regime the model itself is in,
    which NCCL's tuner also picks its protocol by (tuning.cc: time = latency + bytes / bandwidth)."""
    if op is Collective.SEND_RECV:  # one phase on the outermost dimension the group spans (`send_recv`)
        net = system.network[int(np.max(group.outermost))]
        cost = dimension_cost(op, n_bytes, 2.0, net, system.device.hbm.rate)
        fixed, time = np.asarray(cost.fixed, float), np.asarray(cost.time, float)
    else:
        result = collective(op, n_bytes, group, system, algorithm, composition=composition)
        fixed = np.asarray(sum(np.asarray(d.fixed, float) for d in result.dimensions), float)
        time = np.asarray(result.cost.time, float)
    share = np.clip(np.divide(fixed, time, out=np.ones_like(time), where=time > 0), 0.0, 1.0)
    return float(share) if share.ndim == 0 else share


def row_latency_share(row: dict[str, str]) -> float:
    """`latency_share` of the collective a row measured, as the harness models it (Unsupported where the row
    does not run): the regime its error band is drawn from (`validation/collective_bands.py`)."""
    m = _modelled(row)
    return float(latency_share(m.op, m.size, m.group, m.system, m.algorithm))


def predict_collective(row: dict[str, str], trial: Mapping[str, object] | None = None,
                       domain: Mapping[str, object] | None = None) -> tuple[str, float, tuple[str, ...]]:
    """(what is compared, the predicted value in the row's unit, what was assumed) for a collective row:
    nccl-tests bus bandwidth in GB/s, or its time (us, ms, s)."""
    m = _modelled(row, trial, domain)
    metric = clean(row.get("metric"))
    size, group = m.size, m.group
    if m.op is Collective.SEND_RECV:
        time = float(send_recv(size, group, m.system).time)
    else:
        time = float(collective(m.op, size, group, m.system, m.algorithm).cost.time)
    notes = m.notes
    # nccl-tests' closing "# Avg bus bandwidth" averages the busbw of every size of the sweep: not one size's
    if re.search(r"\b(avg|average|mean)\b[^;]*\b(bus ?bw|bus bandwidth)", metric):
        raise Unsupported(f"metric {row.get('metric')!r}: nccl-tests' average over the sweep's sizes, not the busbw of "
                          "one message size")
    # "Bus BW", "bus-bw", "Alg BW": nccl-tests' busbw / algbw written apart
    metric = re.sub(r"\b(bus|alg)[\s_-]+bw\b", r"\1bw", metric)
    if re.search(r"\bbi-?dir", f"{metric} {clean(row.get('unit'))}"):
        # nccl-tests' busbw and algbw count one direction; a bidirectional figure is twice that
        raise Unsupported(f"metric {row.get('metric')!r} / unit {row.get('unit')!r}: a bidirectional bandwidth; "
                          "nccl-tests' busbw / algbw count one direction")
    if metric.startswith("busbw") or "bus bandwidth" in metric:
        scale = bandwidth_scale(row)  # in the row's unit: Gb/s is 8x the GB/s figure (bits)
        label = "busbw [GB/s]" if scale == 1e9 else f"busbw [{row_unit(row)}]"
        return label, size / time * float(bus_factor(m.op, group.size)) / scale, notes
    if metric.startswith("algbw") or "algorithm bandwidth" in metric:  # nccl-tests' header / spelled out
        scale = bandwidth_scale(row)
        return ("algbw [GB/s]" if scale == 1e9 else f"algbw [{row_unit(row)}]"), size / time / scale, notes
    if metric.startswith("time") or "latency" in metric:
        unit, seconds = time_scale(row)
        return f"time [{unit}]", time / seconds, notes
    raise Unsupported(f"metric {row.get('metric')!r}: not predicted (busbw, algbw or time of one collective)")
