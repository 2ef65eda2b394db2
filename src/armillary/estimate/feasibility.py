"""Is a configuration runnable? Degrees that do not divide (`plan.rules`), and memory that does not fit.

Returns a boolean (array) and, for a single configuration, the reasons in words.
"""

from __future__ import annotations

import operator
from collections.abc import Callable

import numpy as np

from armillary.memo import IdentityCache, KeyedCache, derived, typed
from armillary.numerics import Array, all_of
from armillary.plan import rules
from armillary.plan.arrays import ModelArrays, StrategyArrays, TrainingArrays
from armillary.plan.codes import SCHEDULE_INTERLEAVED
from armillary.plan.layout import microbatch_count, stage_layers
from armillary.specs.memory import OffloadPath
from armillary.specs.system import System
from armillary.units import GIB

# the strategy's fields `training_checks` reads: with the workload and the devices, the key of one configuration's
# verdict kept per model (`shape_rules`; tests/test_estimate_memo.py checks the list)
CHECK_FIELDS = ("tp", "pp", "dp", "vpp", "cp", "ep", "etp", "first_stage_layers", "last_stage_layers", "micro_batch",
                "schedule", "sequence_parallel", "rank_order", "offload_gradients", "offload_optimizer")
check_fields: Callable[[StrategyArrays], tuple[Array, ...]] = operator.attrgetter(*CHECK_FIELDS)
_CHECKS: KeyedCache[ModelArrays, tuple[TrainingArrays, tuple[ModelArrays, Array, tuple[str, ...]]]] = KeyedCache(
    16, 1024)


def training_checks(m: ModelArrays, st: StrategyArrays, w: TrainingArrays, devices: int) -> tuple[rules.Check, ...]:
    """Every divisibility and shape rule of a training configuration (the search's mask, the estimator's
    feasibility): degrees against devices and shapes, experts, stages, the batch and the schedule."""
    t, p, d, v = st.tp, st.pp, st.dp, st.vpp
    n_first, n_mid, n_last = stage_layers(m.layers, p, st.first_stage_layers, st.last_stage_layers)
    return (
        rules.devices_match(t, st.cp, p, d, devices),
        rules.cp_balances_sequence(st.cp, w.seq_len),
        rules.tp_divides_heads(t, m.heads),
        rules.tp_and_kv_heads(t, m.kv_heads),
        rules.tp_divides_ffn(t, m.ffn),
        rules.ep_divides_experts(st.ep, m.experts),
        rules.expert_groups_fit(st.ep, st.etp, t * st.cp * d),
        rules.etp_divides_expert_ffn(st.etp, m.experts, m.expert_ffn),
        rules.stages_split(m.layers, n_first, n_mid, n_last, p, v),
        rules.interleaving_needs_stages(v, p),
        rules.batch_divides(st.micro_batch, d, w.global_batch),
        rules.interleaved_microbatches(st.schedule == SCHEDULE_INTERLEAVED, p,
                                       microbatch_count(w.global_batch, st.micro_batch, d)),
        rules.sequence_parallel_needs_tp(st.sequence_parallel, t),
        rules.rank_order_without_ep(st.rank_order, st.ep),
        rules.uneven_stages_supported(st.first_stage_layers, st.last_stage_layers, p, v),
        rules.Check(st.offload_gradients <= st.offload_optimizer, "offload.gradients needs offload.optimizer: the "
                    "gradients go where the optimizer step runs (ZeRO-Offload)"),
    )


def inference_checks(m: ModelArrays, tp: Array, cp: Array, pp: Array, ep: Array, replicas: Array,
                     devices: int) -> tuple[rules.Check, ...]:
    """The divisibility and shape rules of an inference deployment: `replicas` model replicas of
    tp x cp x pp devices each use every device; tp splits heads and the MLP; stages hold layers."""
    return (
        rules.devices_match(tp, cp, pp, replicas, devices),
        rules.tp_divides_heads(tp, m.heads),
        rules.tp_and_kv_heads(tp, m.kv_heads),
        rules.tp_divides_ffn(tp, m.ffn),
        rules.stages_hold_layers(m.layers, pp),
        rules.ep_divides_experts(ep, m.experts),
    )


# per system: its network's sizes, its devices and its offload path (properties that build a tuple, a product and
# an OffloadPath on every read), taken once per frozen system
_SYSTEMS: IdentityCache[System, tuple[tuple[int, ...], int, OffloadPath | None]] = IdentityCache(256)


def system_shape(system: System) -> tuple[tuple[int, ...], int, OffloadPath | None]:
    """(`System.sizes`, `System.devices`, `System.offload_path`), read once per system object."""
    return _SYSTEMS.get(system, lambda s: (s.sizes, s.devices, s.offload_path))


def memory_fits(system: System, hbm_bytes: Array, tier2_bytes: Array) -> tuple[Array, Array]:
    """(the HBM holds `hbm_bytes`, the offload path holds `tier2_bytes`: the device's share of the memory pool,
    else its second tier; a system with neither holds none)."""
    path = system_shape(system)[2]
    return hbm_bytes <= system.device.hbm.capacity, tier2_bytes <= (path.capacity if path is not None else 0.0)


def check(m: ModelArrays, st: StrategyArrays, w: TrainingArrays, system: System,
          hbm_bytes: Array, tier2_bytes: Array) -> tuple[Array, tuple[str, ...]]:
    _, devices, path = system_shape(system)
    pool = system.memory_pool
    hbm_fits, tier2_fits = memory_fits(system, hbm_bytes, tier2_bytes)
    fits = (rules.Check(hbm_fits, "out of memory: the HBM needs more than its capacity"),
            rules.Check(tier2_fits, "offload needs a second memory tier or a memory pool: the system has neither"
                        if path is None else "out of memory: the second tier needs more than its capacity"
                        if pool is None else f"out of memory: the memory pool ({pool.kind.value}) needs more "
                        f"than this device's share of it"))
    shapes_ok, shapes_failed = shape_rules(m, st, w, devices)
    feasible = all_of(shapes_ok, *(c.ok for c in fits))
    reasons: tuple[str, ...] = ()
    if not isinstance(feasible, np.ndarray):
        reasons = (*shapes_failed, *rules.failed(fits))
        if not bool(hbm_fits):
            reasons += (f"HBM: {float(hbm_bytes) / GIB:.1f} GiB needed of "
                        f"{system.device.hbm.capacity / GIB:.1f} GiB",)
        if path is not None and not bool(tier2_fits):
            reasons += (f"{path.name}: {float(tier2_bytes) / GIB:.1f} GiB needed of the {path.capacity / GIB:.1f} "
                        "GiB each device may hold there",)
    return feasible, reasons


def shape_rules(m: ModelArrays, st: StrategyArrays, w: TrainingArrays, devices: int) -> tuple[Array, tuple[str, ...]]:
    """Whether `training_checks` all pass, and (one configuration) the messages of those that fail: taken once
    per strategy point, model, workload and device count (kept on the frozen point, `memo.derived`, with the
    model whose identity keys it): the search's mask and the estimator's feasibility take it once."""
    def verdict() -> tuple[ModelArrays, Array, tuple[str, ...]]:
        checks = training_checks(m, st, w, devices)
        ok = all_of(*(c.ok for c in checks))
        return m, ok, () if isinstance(ok, np.ndarray) else tuple(rules.failed(checks))

    def shared() -> tuple[ModelArrays, Array, tuple[str, ...]]:
        # one configuration's verdict, kept per model under the fields the rules read, the workload and the
        # devices: the points of a sweep with the same shape (e.g. over recomputation) take it once (the
        # workload held by the value, so that its id stays its own; arrays do not hash: made each time)
        return _CHECKS.get(m, (typed(*check_fields(st)), id(w), devices), lambda: (w, verdict()))[1]

    found = derived(st, ("training checks", id(m), w, devices), shared)
    if found[0] is not m:  # another model at a reused id: not this one's
        found = verdict()
    return found[1], found[2]
