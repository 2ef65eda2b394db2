"""The task graph of one training iteration, from the estimator's own costs.

Every duration comes from `estimate_training` for the same configuration: a layer's passes, recomputation
and exposed TP / CP / EP collectives (`LayerCost`), the embedding and LM head (`EndsCost`), the pipeline
send and the DP / ZeRO / FSDP calls (`CommCall`), the optimizer step and the offload stall. What the
simulation adds is the structure: the pipeline schedule pass by pass, layer by layer, integer layer
counts per stage, DP buckets issued as the backward reaches each layer, and links shared by transfers in
flight. With `symmetric`, one rank stands for each pipeline stage (its tp x cp x dp peers do the same work
and its collectives are costed for the whole group); without, every rank is simulated and collectives
gather their groups.
"""

from __future__ import annotations

from dataclasses import dataclass

from armillary.errors import SpecError
from armillary.estimate.result import CommCall, ParallelDimension, StepEstimate
from armillary.plan.layout import data_parallel, stage_layer_kinds
from armillary.simulate.graph import Category, GraphBuilder, Stream, TaskGraph, TaskKind, Tier
from armillary.simulate.pipeline import Send, build_pipeline
from armillary.simulate.schedules import Kind, Pass, PipelineSchedule
from armillary.specs.communication import Collective
from armillary.specs.model import Model
from armillary.specs.strategy import RankOrder, Strategy, ZeroStage
from armillary.specs.system import System
from armillary.specs.workload import Training


@dataclass(frozen=True)
class Layout:
    """The simulated ranks: per stage its lanes (ranks), and groups of lanes that communicate together."""

    lanes: list[list[int]]  # per stage, the rank of each lane
    tp_groups: list[list[int]]  # lanes (indices into a stage's lanes) of each TP x CP group
    dp_groups: list[list[int]]  # lanes of each data-parallel (gradient) group
    labels: tuple[str, ...]
    weights: tuple[int, ...]


def layout(strategy: Strategy, dp: int, symmetric: bool) -> Layout:
    """Ranks numbered in the strategy's rank order (tp fastest); lanes of a stage in (dp, cp, tp) order."""
    tp, cp, pp = strategy.tp, strategy.cp, strategy.pp
    devices = tp * cp * pp * dp
    if symmetric:
        return Layout([[s] for s in range(pp)], [[0]], [[0]], tuple(f"stage {s}" for s in range(pp)),
                      (tp * cp * dp,) * pp)
    pp_inner = strategy.rank_order is RankOrder.PP_INNER

    def rank(s: int, d: int, c: int, t: int) -> int:
        return t + tp * (c + cp * (s + pp * d)) if pp_inner else t + tp * (c + cp * (d + dp * s))

    lanes = [[rank(s, d, c, t) for d in range(dp) for c in range(cp) for t in range(tp)] for s in range(pp)]
    tp_groups = [[(d * cp + c) * tp + t for c in range(cp) for t in range(tp)] for d in range(dp)]
    dp_groups = [[(d * cp + c) * tp + t for d in range(dp) for c in range(cp)] for t in range(tp)]
    labels = [""] * devices
    for s in range(pp):
        for d in range(dp):
            for c in range(cp):
                for t in range(tp):
                    labels[rank(s, d, c, t)] = f"pp{s} dp{d} cp{c} tp{t}"
    return Layout(lanes, tp_groups, dp_groups, tuple(labels), (1,) * devices)


def _tier(call: CommCall | None) -> Tier:
    return Tier.SCALE_OUT if call is not None and float(call.scale_out_bytes_each) > 0 else Tier.SCALE_UP


def _call(est: StepEstimate, dims: tuple[ParallelDimension, ...], op: Collective | None = None) -> CommCall | None:
    return next((c for c in est.communication if c.dimension in dims and (op is None or c.operation is op)), None)


def training_graph(model: Model, system: System, strategy: Strategy, workload: Training, est: StepEstimate,
                   schedule: PipelineSchedule, symmetric: bool = True) -> TaskGraph:
    """One iteration's task graph. `est`: the estimate of the same configuration (its costs)."""
    pp, vpp = strategy.pp, strategy.vpp
    m = round(float(est.microbatches))
    if m != float(est.microbatches) or m < 1:
        raise SpecError(f"simulate: the global batch makes {float(est.microbatches)} micro-batches per pipeline; "
                        "it must be a whole number")
    if schedule is PipelineSchedule.INTERLEAVED and vpp < 2:
        raise SpecError("simulate: the interleaved schedule needs vpp >= 2")
    lay = layout(strategy, data_parallel(strategy, system), symmetric)
    kinds = stage_layer_kinds(model, strategy)
    b = GraphBuilder()
    zb = schedule is PipelineSchedule.ZB_H1
    ends = est.ends
    tp_tier = _tier(_call(est, (ParallelDimension.TP, ParallelDimension.SP)))
    cp_tier, ep_tier = _tier(_call(est, (ParallelDimension.CP,))), _tier(_call(est, (ParallelDimension.EP,)))
    send_call = _call(est, (ParallelDimension.PP,), Collective.SEND_RECV)
    gather_call = _call(est, (ParallelDimension.PP,), Collective.ALL_GATHER)
    send_s = (float(send_call.time_each_s) if send_call else 0.0) + (float(gather_call.time_each_s)
                                                                       if gather_call else 0.0)
    send = Send(send_s, float(send_call.message_bytes) if send_call else 0.0, _tier(send_call))
    dp = _DataParallel(b, est, strategy, max(max(len(k) for k in kinds) * vpp, 1), lay.dp_groups)
    virtual = pp * vpp

    def op(name: str, category: Category, stream: Stream, seconds: float, lanes: list[int],
           deps: list[list[int]], groups: list[list[int]], tier: Tier = Tier.NONE,
           flop: float = 0.0) -> list[list[int]]:
        return _op(b, name, category, stream, seconds, lanes, deps, groups, tier, flop=flop)

    def emit(s: int, p: Pass, deps: list[list[int]]) -> list[int]:
        lanes = lay.lanes[s]
        vs = p.chunk * pp + s
        layers = kinds[vs]
        tag = f"{p.kind}{p.microbatch}" + (f".{p.chunk}" if vpp > 1 else "")

        def compute(name: str, seconds: float, category: Category = Category.COMPUTE, flop: float = 0.0) -> None:
            nonlocal deps
            if seconds > 0:
                deps = op(f"{name} {tag}", category, Stream.COMPUTE, seconds, lanes, deps, [], flop=flop)

        def comm(name: str, seconds: float, category: Category, stream: Stream, groups: list[list[int]],
                 tier: Tier) -> None:
            nonlocal deps
            if seconds > 0:
                deps = op(f"{name} {tag}", category, stream, seconds, lanes, deps, groups, tier)

        tpg = lay.tp_groups
        if p.kind is Kind.F:
            if vs == 0 and ends is not None:
                compute("embedding", float(ends.embedding_forward_s))
                comm("embedding all-reduce", float(ends.tp.time), Category.TP, Stream.TP, tpg, tp_tier)
            for i, moe in enumerate(layers):
                lc = est.moe_layer if moe and est.moe_layer is not None else est.layer
                deps = dp.before_forward(s, i, p, lanes, deps)
                compute(f"layer {i}", float(lc.forward.time_s), flop=float(lc.forward.flop))
                comm(f"tp layer {i}", float(lc.tp_forward_s), Category.TP, Stream.TP, tpg, tp_tier)
                comm(f"cp layer {i}", float(lc.cp_forward_s), Category.CP, Stream.CP, tpg, cp_tier)
                comm(f"ep layer {i}", float(lc.ep_forward_s), Category.EP, Stream.EP, tpg, ep_tier)
            if vs == virtual - 1 and ends is not None:
                compute("lm head", float(ends.head_forward_s))
            return [d[-1] for d in deps]
        if p.kind is Kind.B:
            if vs == virtual - 1 and ends is not None:
                compute("lm head backward", float(ends.head_s - ends.head_forward_s))
                comm("lm head all-reduce", float(ends.tp.time), Category.TP, Stream.TP, tpg, tp_tier)
            for i in reversed(range(len(layers))):
                lc = est.moe_layer if layers[i] and est.moe_layer is not None else est.layer
                compute(f"recompute layer {i}", float(lc.recompute.time_s), Category.RECOMPUTE,
                        float(lc.recompute.flop))
                comm(f"tp recompute layer {i}", float(lc.tp_recompute_s), Category.TP, Stream.TP, tpg, tp_tier)
                comm(f"cp recompute layer {i}", float(lc.cp_recompute_s), Category.CP, Stream.CP, tpg, cp_tier)
                comm(f"ep recompute layer {i}", float(lc.ep_recompute_s), Category.EP, Stream.EP, tpg, ep_tier)
                deps = dp.before_backward(s, i, p, lanes, deps)
                weight = 0.0 if zb else 1.0
                compute(f"backward layer {i}", float(lc.backward_input.time_s + weight * lc.backward_weight.time_s),
                        flop=float(lc.backward_input.flop + weight * lc.backward_weight.flop))
                comm(f"tp backward layer {i}", float(lc.tp_backward_s), Category.TP, Stream.TP, tpg, tp_tier)
                comm(f"cp backward layer {i}", float(lc.cp_backward_s), Category.CP, Stream.CP, tpg, cp_tier)
                comm(f"ep backward layer {i}", float(lc.ep_backward_s), Category.EP, Stream.EP, tpg, ep_tier)
                if not zb:
                    deps = dp.after_backward(s, i, p, m, lanes, deps)
            if vs == 0 and ends is not None:
                compute("embedding backward", float(ends.embedding_s - ends.embedding_forward_s))
            return [d[-1] for d in deps]
        for i in reversed(range(len(layers))):  # W: weight gradients (zero-bubble)
            lc = est.moe_layer if layers[i] and est.moe_layer is not None else est.layer
            compute(f"weight gradient layer {i}", float(lc.backward_weight.time_s), flop=float(lc.backward_weight.flop))
            deps = dp.after_backward(s, i, p, m, lanes, deps)
        return [d[-1] for d in deps]

    last_pass = build_pipeline(b, schedule, pp, m, vpp, lay.lanes, emit, send)
    # after the last pass: the gradient reductions (in flight, or all of them now without overlap), the
    # optimizer step, the offload stall
    for s in range(pp):
        lanes = lay.lanes[s]
        dp.unoverlapped(s, lanes, [[t] for t in last_pass[s]])
        deps = [[last_pass[s][i], *dp.pending(s, i)] for i in range(len(lanes))]
        deps = op("optimizer step", Category.OPTIMIZER, Stream.COMPUTE, float(est.breakdown.optimizer), lanes,
                  deps, [])
        if float(est.breakdown.offload_stall) > 0:
            op("offload stall", Category.OFFLOAD, Stream.COMPUTE, float(est.breakdown.offload_stall), lanes, deps, [])
    return b.graph(len(lay.labels), lay.labels, lay.weights)


def _op(b: GraphBuilder, name: str, category: Category, stream: Stream, seconds: float, lanes: list[int],
        deps: list[list[int]], groups: list[list[int]], tier: Tier = Tier.NONE, nbytes: float = 0.0,
        flop: float = 0.0) -> list[list[int]]:
    """A compute task per lane, or a collective per group of lanes (indices into `lanes`); returns each
    lane's dependencies for what follows."""
    if stream is Stream.COMPUTE:
        return [[b.add(name, TaskKind.COMPUTE, category, (r,), Stream.COMPUTE, seconds, deps[i], flop=flop)]
                for i, r in enumerate(lanes)]
    out: list[list[int]] = [[] for _ in lanes]
    for members in groups:
        t = b.add(name, TaskKind.COLLECTIVE, category, tuple(lanes[i] for i in members), stream, seconds,
                  sorted({d for i in members for d in deps[i]}), tier, nbytes, group=category.value)
        for i in members:
            out[i] = [t]
    return out


class _DataParallel:
    """DP / ZeRO / FSDP tasks of a stage, from the estimator's calls (data_parallel.py): gradient buckets
    (one per layer; the expert-DP calls of MoE models spread over the same buckets) reduced as the last
    micro-batch's backward passes each layer (ZeRO 0/1; every micro-batch's under ZeRO 2 and 3) or all
    after the backward without overlap; parameter gathers before the first forward (ZeRO 1/2) or before
    every layer's forward and backward (ZeRO 3), prefetched (issued without waiting for compute) or not."""

    def __init__(self, b: GraphBuilder, est: StepEstimate, strategy: Strategy, layers: int,
                 groups: list[list[int]]) -> None:
        calls = [c for c in est.communication if c.dimension in (ParallelDimension.DP, ParallelDimension.EDP)]
        self.b, self.groups, self.zero, self.layers = b, groups, strategy.zero, layers
        self.overlap_grad, self.prefetch = strategy.overlap.dp_grad_reduce, strategy.overlap.param_gather
        per_layer = 1 if self.zero is ZeroStage.PARAMETERS else layers  # ZeRO-3 calls are per layer already
        self.reduce = sum(float(c.time_each_s) / per_layer for c in calls
                          if c.operation in (Collective.ALL_REDUCE, Collective.REDUCE_SCATTER))
        self.gather = sum(float(c.time_each_s) / per_layer for c in calls if c.operation is Collective.ALL_GATHER)
        self.tier = Tier.SCALE_OUT if any(float(c.scale_out_bytes_each) > 0 for c in calls) else Tier.SCALE_UP
        self.bytes = sum(float(c.message_bytes) for c in calls) / per_layer
        self._pending: dict[tuple[int, int], list[int]] = {}

    def pending(self, s: int, lane: int) -> list[int]:
        return self._pending.get((s, lane), [])

    def _add(self, name: str, seconds: float, s: int, lanes: list[int], deps: list[list[int]],
             stream: Stream = Stream.DP) -> list[list[int]]:
        out = _op(self.b, name, Category.DP, stream, seconds, lanes, deps, self.groups, self.tier, self.bytes)
        for i, d in enumerate(out):
            self._pending.setdefault((s, i), []).extend(d)
        return out

    def before_forward(self, s: int, layer: int, p: Pass, lanes: list[int],
                       deps: list[list[int]]) -> list[list[int]]:
        """Parameter gathers a layer's pass waits for."""
        once = p.microbatch == 0 and p.kind is Kind.F and self.zero in (ZeroStage.OPTIMIZER, ZeroStage.GRADIENTS)
        if self.gather <= 0 or not (once or self.zero is ZeroStage.PARAMETERS):
            return deps
        issue: list[list[int]] = [[] for _ in lanes] if self.prefetch else deps
        gathered = self._add(f"dp gather layer {layer} {p.kind}{p.microbatch}", self.gather, s, lanes, issue,
                             Stream.DP_GATHER)
        return [d + g for d, g in zip(deps, gathered, strict=True)]

    def before_backward(self, s: int, layer: int, p: Pass, lanes: list[int],
                        deps: list[list[int]]) -> list[list[int]]:
        return self.before_forward(s, layer, p, lanes, deps) if self.zero is ZeroStage.PARAMETERS else deps

    def after_backward(self, s: int, layer: int, p: Pass, m: int, lanes: list[int],
                       deps: list[list[int]]) -> list[list[int]]:
        """The layer's gradient bucket, once its last micro-batch's backward is done (every micro-batch's
        under ZeRO 2/3, which the next kernel waits for without overlap)."""
        every = self.zero in (ZeroStage.GRADIENTS, ZeroStage.PARAMETERS)
        if self.reduce <= 0 or not (every or p.microbatch == m - 1) or not (self.overlap_grad or every):
            return deps
        reduced = self._add(f"dp reduce layer {layer} {p.kind}{p.microbatch}", self.reduce, s, lanes, deps)
        return deps if self.overlap_grad else reduced

    def unoverlapped(self, s: int, lanes: list[int], deps: list[list[int]]) -> None:
        """Without overlap, the whole reduction after the stage's last pass."""
        every = self.zero in (ZeroStage.GRADIENTS, ZeroStage.PARAMETERS)
        if self.reduce > 0 and not self.overlap_grad and not every:
            self._add("dp reduce (all layers)", self.reduce * self.layers, s, lanes, deps)
