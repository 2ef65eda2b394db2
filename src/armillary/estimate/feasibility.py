"""Is a configuration runnable? Degrees that do not divide, and memory that does not fit.

Returns a boolean (array) and, for a single configuration, the reasons in words.
"""

from __future__ import annotations

import functools

import numpy as np

from armillary.estimate.pipeline import microbatch_count, stage_layers
from armillary.numerics import Array, where
from armillary.plan.arrays import ModelArrays, StrategyArrays, TrainingArrays
from armillary.plan.codes import SCHEDULE_INTERLEAVED
from armillary.specs.system import System
from armillary.units import GIB


def _divides(a: Array, b: Array) -> Array:
    if not isinstance(a, np.ndarray) and not isinstance(b, np.ndarray):
        return bool(b % a < 1e-9 and a <= b)
    return np.asarray((np.abs(np.mod(b, a)) < 1e-9) & (a <= b))


def memory_fits(system: System, hbm_bytes: Array, tier2_bytes: Array) -> tuple[Array, Array]:
    """(the HBM holds `hbm_bytes`, the second tier holds `tier2_bytes`: a device without one holds none)."""
    tier2 = system.device.second_tier
    return hbm_bytes <= system.device.hbm.capacity, tier2_bytes <= (tier2.capacity if tier2 is not None else 0.0)


def check(m: ModelArrays, st: StrategyArrays, w: TrainingArrays, system: System,
          hbm_bytes: Array, tier2_bytes: Array) -> tuple[Array, tuple[str, ...]]:
    t, p, d, v = st.tp, st.pp, st.dp, st.vpp
    n_first, n_mid, n_last = stage_layers(m.layers, p, st.first_stage_layers, st.last_stage_layers)

    def whole(x: Array) -> Array:
        if not isinstance(x, np.ndarray):
            return bool(abs(x - round(x)) < 1e-9)
        return np.abs(x - np.round(x)) < 1e-9

    def both(*masks: Array) -> Array:
        if not any(isinstance(k, np.ndarray) for k in masks):
            return all(bool(k) for k in masks)
        return functools.reduce(np.logical_and, masks)

    tier2 = system.device.second_tier
    hbm_fits, tier2_fits = memory_fits(system, hbm_bytes, tier2_bytes)
    conditions: list[tuple[Array, str]] = [
        (np.abs(t * st.cp * p * d - system.devices) < 0.5, f"tp*cp*pp*dp must equal the {system.devices} devices"),
        (where(st.cp > 1, _divides(2 * st.cp, w.seq_len), True),
         "2*cp must divide the sequence (context parallelism balances causal chunks)"),
        (_divides(t, m.heads), "tp must divide the attention heads"),
        (np.logical_or(_divides(t, m.kv_heads), _divides(m.kv_heads, t)) if isinstance(t, np.ndarray)
         else bool(_divides(t, m.kv_heads) or _divides(m.kv_heads, t)), "tp and kv_heads must divide one another"),
        (_divides(t, m.ffn), "tp must divide the MLP size"),
        (where(m.experts > 0, _divides(st.ep, m.experts), st.ep == 1),
         "ep must divide the routed experts (and needs an MoE model)"),
        (_divides(st.ep * st.etp, t * st.cp * d),
         "ep*expert_tp must divide tp*cp*dp (expert layers regroup those ranks)"),
        (where(m.experts > 0, _divides(st.etp, m.expert_ffn), True), "expert_tp must divide expert_ffn"),
        (both(whole(n_first), whole(n_mid), whole(n_last), n_mid >= 1, n_last >= 1, _divides(v, n_mid)),
         "pp*vpp must divide the layers (or the layers left by first/last_stage_layers)"),
        (_divides(st.micro_batch * d, w.global_batch), "micro_batch*dp must divide the global batch"),
        (where(st.schedule == SCHEDULE_INTERLEAVED,
               _divides(p, microbatch_count(w.global_batch, st.micro_batch, d)), True),
         "the interleaved schedule needs the micro-batch count to be a multiple of pp"),
        (hbm_fits, "out of memory: the HBM needs more than its capacity"),
        (tier2_fits,
         "offload needs a second memory tier: the device has none" if tier2 is None else
         "out of memory: the second tier needs more than its capacity"),
    ]
    feasible = both(*(c for c, _ in conditions))
    reasons: tuple[str, ...] = ()
    if not isinstance(feasible, np.ndarray):
        reasons = tuple(text for ok, text in conditions if not bool(ok))
        if not bool(hbm_fits):
            reasons += (f"HBM: {float(hbm_bytes) / GIB:.1f} GiB needed of "
                        f"{system.device.hbm.capacity / GIB:.1f} GiB",)
    return feasible, reasons
