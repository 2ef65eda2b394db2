"""The bandwidth optimizer's workload from the estimator: compute time and, for every communication call of
the step, the bytes one device sends on each network dimension (LIBRA §IV-A's per-dimension traffic).

A call over a group spanning s_i positions on dimension i is decomposed hierarchically
(`comm.phase_net.phase_message`: dimension i carries a message of n / inner_i): all-reduce sends
2 (s_i - 1)/s_i of it on dimension i, reduce-scatter, all-gather and all-to-all (s_i - 1)/s_i, broadcast and
reduce all of it (ring costs, docs/formulas.md §1.2); a point-to-point transfer crosses the innermost
dimension its group spans.
"""

from __future__ import annotations

import numpy as np

from armillary.comm.phase_net import phase_message
from armillary.estimate.embedding_sync import embedding_pair
from armillary.estimate.result import ParallelDimension, StepEstimate
from armillary.plan.placement import Placement, place_expert_groups, place_groups
from armillary.search.network_bandwidth import BandwidthWorkload
from armillary.specs.communication import Collective
from armillary.specs.strategy import Strategy
from armillary.specs.system import System


def _groups(system: System, strategy: Strategy) -> dict[ParallelDimension, Placement]:
    devices = int(np.prod(system.sizes))
    dp = strategy.dp or devices // (strategy.tp * strategy.cp * strategy.pp)
    g = place_groups(strategy.tp, dp, strategy.pp, system.sizes, strategy.cp, 0.0)
    edp = max(strategy.tp * strategy.cp * dp // (strategy.etp * strategy.ep), 1)
    etp, ep, edp_group = place_expert_groups(strategy.etp, strategy.ep, edp, system.sizes)
    return {ParallelDimension.TP: g.tp, ParallelDimension.SP: g.tp, ParallelDimension.CP: g.cp,
            ParallelDimension.PP: g.pp, ParallelDimension.DP: g.gradient, ParallelDimension.EP: ep,
            ParallelDimension.ETP: etp, ParallelDimension.EDP: edp_group}


def dimension_bytes(op: Collective, n: float, group: Placement) -> np.ndarray:
    """Bytes one device sends on each dimension for one call of `op` of `n` bytes over `group`."""
    out = np.zeros(len(group.spans))
    spanned = [i for i, s in enumerate(group.spans) if float(s) > 1]
    if op is Collective.SEND_RECV:
        if spanned:
            out[spanned[0]] = n
        return out
    for i in spanned:
        s = float(group.spans[i])
        m = float(phase_message(op, n, group, i))
        if op is Collective.ALL_REDUCE:
            out[i] = 2 * (s - 1) / s * m
        elif op in (Collective.BROADCAST, Collective.REDUCE):
            out[i] = m
        else:
            out[i] = (s - 1) / s * m
    return out


def workload_from_estimate(result: StepEstimate, system: System, strategy: Strategy,
                           pipelined: bool = True) -> BandwidthWorkload:
    """The step's compute (everything but exposed communication) and per-call traffic divided by each
    dimension's efficiency, so that traffic / bandwidth is the time at the achievable rate."""
    b = result.breakdown
    compute = float(b.forward_backward + b.recompute + b.bubble + b.optimizer + b.offload_stall)
    groups = _groups(system, strategy)
    efficiency = np.array([d.efficiency for d in system.network])
    rows, names = [], []
    for call in result.communication:
        group = groups[call.dimension]
        if call.dimension is ParallelDimension.PP and call.operation is Collective.ALL_REDUCE:
            group = embedding_pair(group)  # the embedding gradient's: the first and last stage only
        per_dim = dimension_bytes(call.operation, float(call.message_bytes), group)
        if per_dim.any() and float(call.per_step) > 0:
            rows.append(float(call.per_step) * per_dim / efficiency)
            names.append(f"{call.dimension.value} {call.operation.value}")
    traffic = np.array(rows) if rows else np.zeros((0, len(system.network)))
    return BandwidthWorkload(compute, traffic, pipelined, tuple(names))
