"""The task graph of one training iteration, from the estimator's own costs.

Every duration comes from `estimate_training` for the same configuration: a layer's passes, recomputation
and exposed TP / CP / EP collectives (`LayerCost`; an overlapped TP or ring-CP exchange runs whole beside
the compute that hides it), the embedding and LM head (`EndsCost`), the pipeline send and the DP / ZeRO /
FSDP calls (`CommCall`), the optimizer step and the offload stall. What the simulation adds is the
structure: the pipeline schedule pass by pass, layer by layer, integer layer counts per stage, DP buckets
issued as the backward reaches each layer, and links shared by transfers in flight. With `symmetric`, one
rank stands for each pipeline stage (its tp x cp x dp peers do the same work and its collectives are costed
for the whole group); without, every rank is simulated and collectives gather their groups.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from armillary.errors import SpecError
from armillary.estimate.layer_comm import TP_OPERATIONS, tp_calls_per_pass
from armillary.estimate.result import CommCall, LayerCost, ParallelDimension, StepEstimate
from armillary.numerics import Array
from armillary.plan.layout import chunk_size, data_parallel, stage_layer_kinds
from armillary.plan.rules import chunk_share
from armillary.simulate.data_parallel import DataParallelTasks
from armillary.simulate.graph import Category, GraphBuilder, Stream, TaskGraph, TaskKind, Tier
from armillary.simulate.pipeline import Send, build_pipeline
from armillary.simulate.schedules import Kind, Pass
from armillary.specs.communication import Collective
from armillary.specs.model import Model
from armillary.specs.strategy import ContextParallel, RankOrder, Recompute, Schedule, Strategy
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


class _Exchange(NamedTuple):
    """A layer's exchange within its TP x CP group: what it is, where it runs, which operation, and the bytes
    of one forward (also a recomputed forward) and one backward pass: calls x message bytes."""

    name: str
    category: Category
    stream: Stream
    tier: Tier
    collective: Collective
    forward_bytes: float = 0.0
    backward_bytes: float = 0.0
    forward_s: float = 0.0  # what overlaps compute of one forward pass, alone on its links (TP; CP's ring)
    backward_s: float = 0.0


def _first(est: StepEstimate, dim: ParallelDimension, op: Collective, nth: int = 0, seconds: bool = False) -> float:
    """Message bytes (or seconds) of the `nth` call of `dim` and `op` (dense layers' calls come first), 0 if
    none."""
    found = [c for c in est.communication if c.dimension is dim and c.operation is op]
    if len(found) <= nth:
        return 0.0
    return float(found[nth].time_each_s if seconds else found[nth].message_bytes)


def _exchanges(est: StepEstimate, strategy: Strategy) -> tuple[_Exchange, _Exchange, _Exchange]:
    """The TP (or SP), CP and EP exchanges of a layer, their tiers, operations and bytes per pass from the
    estimate's calls. Calls per pass as the estimator counts them (estimate/layer.py): TP/SP
    `tp_calls_per_pass`; ring CP cp - 1 K/V hops forward, twice that backward; Ulysses CP one all-to-all in
    and one out per pass; EP a dispatch and a combine all-to-all per pass."""
    tp = _call(est, (ParallelDimension.TP, ParallelDimension.SP))
    cp, ep = _call(est, (ParallelDimension.CP,)), _call(est, (ParallelDimension.EP,))
    forward_calls, backward_calls = tp_calls_per_pass(float(strategy.sequence_parallel))
    tp_ops = [_first(est, d, op) for d, op in TP_OPERATIONS]
    tp_times = [_first(est, d, op, seconds=True) for d, op in TP_OPERATIONS]

    def per_pass(calls: tuple[Array, ...], each: list[float]) -> float:
        return sum(float(k) * n for k, n in zip(calls, each, strict=True))

    hops = (strategy.cp - 1) * _first(est, ParallelDimension.CP, Collective.SEND_RECV)
    hops_s = (strategy.cp - 1) * _first(est, ParallelDimension.CP, Collective.SEND_RECV, seconds=True)
    a2a = sum(_first(est, ParallelDimension.CP, Collective.ALL_TO_ALL, i) for i in (0, 1))
    cp_f, cp_b = hops + a2a, 2 * hops + a2a
    ep_pass = sum(_first(est, ParallelDimension.EP, Collective.ALL_TO_ALL, i) for i in (0, 1))
    return (_Exchange("tp", Category.TP, Stream.TP, _tier(tp), tp.operation if tp else Collective.ALL_REDUCE,
                      per_pass(forward_calls, tp_ops), per_pass(backward_calls, tp_ops),
                      per_pass(forward_calls, tp_times), per_pass(backward_calls, tp_times)),
            _Exchange("cp", Category.CP, Stream.CP, _tier(cp), cp.operation if cp else Collective.SEND_RECV,
                      cp_f, cp_b, hops_s, 2 * hops_s),
            _Exchange("ep", Category.EP, Stream.EP, _tier(ep), Collective.ALL_TO_ALL, ep_pass, ep_pass))


def _pipeline_send(est: StepEstimate) -> Send:
    """The activation (or gradient) a stage hands to the next: the send, and with sequence parallelism
    the all-gather that rebuilds the full activation."""
    send_call = _call(est, (ParallelDimension.PP,), Collective.SEND_RECV)
    gather_call = _call(est, (ParallelDimension.PP,), Collective.ALL_GATHER)
    seconds = sum(float(c.time_each_s) for c in (send_call, gather_call) if c is not None)
    return Send(seconds, float(send_call.message_bytes) if send_call else 0.0, _tier(send_call))


def training_graph(model: Model, system: System, strategy: Strategy, workload: Training, est: StepEstimate,
                   schedule: Schedule, symmetric: bool = True, ranks: Layout | None = None) -> TaskGraph:
    """One iteration's task graph. `est`: the estimate of the same configuration (its costs); `ranks`: the
    simulated ranks and their groups when not one per stage (`symmetric`) or every rank (rank classes,
    `classes.py`)."""
    m = round(float(est.microbatches))
    if m != float(est.microbatches) or m < 1:
        dp = data_parallel(strategy, system)
        raise SpecError(f"simulate: workload.global_batch {workload.global_batch} over {dp} data-parallel ranks "
                        f"(gpus / tp cp pp) of strategy.micro_batch {strategy.micro_batch} makes "
                        f"{float(est.microbatches):g} micro-batches per pipeline; it must be a whole number")
    if schedule is Schedule.INTERLEAVED and strategy.vpp < 2:
        raise SpecError("simulate: the interleaved schedule needs vpp >= 2")
    lay = ranks or layout(strategy, data_parallel(strategy, system), symmetric)
    b = GraphBuilder()
    share = float(chunk_share(strategy.recompute_layers or 0, chunk_size(model.layers, strategy)))
    kinds = stage_layer_kinds(model, strategy)
    if workload.mtp:  # the MTP modules' layers, of the last layer's kind, end the last chunk (estimate/mtp.py)
        kinds[-1] = [*kinds[-1], *[model.moe is not None] * model.mtp_layers]
    passes = _Passes(b, est, strategy, lay, kinds, schedule is Schedule.ZB_H1, m, share,
                     model.mtp_layers if workload.mtp else 0)
    last_pass = build_pipeline(b, schedule, strategy.pp, m, strategy.vpp, lay.lanes, passes.emit,
                               _pipeline_send(est))
    passes.finish(last_pass)
    return b.graph(len(lay.labels), lay.labels, lay.weights)


class _Passes:
    """Fills a pipeline pass of a stage with its tasks, for every lane of the stage: the layers of its
    model chunk (forward; recompute and backward; or the weight gradients of zero-bubble), each with its
    TP / CP / EP exchanges and data-parallel calls, and the embedding / LM head at the ends."""

    def __init__(self, b: GraphBuilder, est: StepEstimate, strategy: Strategy, lay: Layout,
                 kinds: list[list[bool]], zero_bubble: bool, microbatches: int, recompute_share: float,
                 mtp_depth: int = 0) -> None:
        self.b, self.est, self.lay, self.kinds, self.zb, self.m = b, est, lay, kinds, zero_bubble, microbatches
        self.pp, self.vpp = strategy.pp, strategy.vpp
        self.mtp_depth = mtp_depth  # multi-token-prediction modules at the end of the last chunk
        self.tp, self.cp, self.ep = _exchanges(est, strategy)
        self.overlap_tp = strategy.overlap.tp_comm and strategy.tp > 1
        self.ring_cp = strategy.cp > 1 and strategy.cp_comm is ContextParallel.RING  # always beside attention
        self.full_recompute = strategy.recompute is Recompute.FULL  # a recomputed forward repeats its exchanges
        # the share of the layers full recomputation re-runs: every layer re-runs that share of its forward,
        # GEMMs and exchanges included, as the estimator prices the average layer (`plan.rules.chunk_share`)
        self.recompute_share = recompute_share
        # the embedding's and the LM head's all-reduce: one call of the layers' TP message each
        tp_ar = _first(est, ParallelDimension.TP, Collective.ALL_REDUCE)
        self.ends_tp = self.tp._replace(collective=Collective.ALL_REDUCE, forward_bytes=tp_ar, backward_bytes=tp_ar)
        self.dp = DataParallelTasks(b, est, strategy, max(max(len(k) for k in kinds) * strategy.vpp, 1), lay.dp_groups)
        self.lanes: list[int] = []
        self.deps: list[list[int]] = []
        self.tag = ""

    def emit(self, s: int, p: Pass, deps: list[list[int]]) -> list[int]:
        """The tasks of pass `p` on stage `s`, after `deps` per lane; returns each lane's last task."""
        self.lanes, self.deps = self.lay.lanes[s], deps
        self.tag = f"{p.kind}{p.microbatch}" + (f".{p.chunk}" if self.vpp > 1 else "")
        virtual = p.chunk * self.pp + s
        first, last = virtual == 0, virtual == self.pp * self.vpp - 1
        layers = [self._cost(moe) for moe in self.kinds[virtual]]
        if p.kind is Kind.F:
            self._forward(s, p, layers, first, last)
        elif p.kind is Kind.B:
            self._backward(s, p, layers, first, last)
        else:
            self._weight_gradients(s, p, layers)
        if any(len(d) > 1 for d in self.deps):  # an overlapped exchange may end after the compute beside it
            self.deps = self.b.on_lanes(f"pass done {self.tag}", Category.COMPUTE, Stream.COMPUTE, 0.0,
                                        self.lanes, self.deps, [])
        return [d[-1] for d in self.deps]

    def _cost(self, moe: bool) -> LayerCost:
        return self.est.moe_layer if moe and self.est.moe_layer is not None else self.est.layer

    def _forward(self, s: int, p: Pass, layers: list[LayerCost], first: bool, last: bool) -> None:
        ends = self.est.ends
        if first and ends is not None:
            self._compute("embedding", float(ends.embedding_forward_s))
            self._exchange("embedding all-reduce", float(ends.tp.time), self.ends_tp)
        for i, lc in enumerate(layers):
            self.deps = self.dp.before_forward(s, i, p, self.lanes, self.deps)
            self._layer_pass(f"layer {i}", float(lc.forward.time_s), float(lc.forward.flop), Category.COMPUTE,
                             self._windows(float(lc.gemms_s), float(lc.attention_core.time_s),
                                           (lc.tp_forward_s, lc.cp_forward_s)))
            self._exchanges(f"layer {i}", lc.tp_forward_s, lc.cp_forward_s, lc.ep_forward_s)
        if last and ends is not None:
            self._compute("lm head", float(ends.head_forward_s))
            if ends.mtp_forward_s:  # the MTP modules' embedding, projection, LM head and loss
                self._compute("mtp head", float(ends.mtp_forward_s))
                for _ in range(2 * self.mtp_depth):  # the embedding's all-reduce, the projection's (estimate/mtp.py)
                    self._exchange("mtp all-reduce", float(ends.tp.time), self.ends_tp)

    def _backward(self, s: int, p: Pass, layers: list[LayerCost], first: bool, last: bool) -> None:
        """Input and (except under zero-bubble) weight gradients, each layer recomputed first as the
        strategy says; a layer's gradient bucket once its backward is done."""
        ends = self.est.ends
        if last and ends is not None:
            if ends.mtp_s:
                self._compute("mtp head backward", float(ends.mtp_s - ends.mtp_forward_s))
                for _ in range(2 * self.mtp_depth):  # the LM head's input-gradient all-reduce, the projection's
                    self._exchange("mtp all-reduce", float(ends.tp.time), self.ends_tp, backward=True)
            self._compute("lm head backward", float(ends.head_s - ends.head_forward_s))
            self._exchange("lm head all-reduce", float(ends.tp.time), self.ends_tp, backward=True)
        weight = 0.0 if self.zb else 1.0
        for i in reversed(range(len(layers))):
            lc = layers[i]
            gemms = float(lc.gemms_s)  # the forward's weight GEMMs (as long as the weight gradients' unless frozen)
            if self.full_recompute:
                self._layer_pass(f"recompute layer {i}", float(lc.recompute.time_s), float(lc.recompute.flop),
                                 Category.RECOMPUTE, self._windows(gemms, float(lc.attention_core.time_s),
                                                                   (lc.tp_recompute_s, lc.cp_recompute_s),
                                                                   share=self.recompute_share))
            else:
                self._compute(f"recompute layer {i}", float(lc.recompute.time_s), Category.RECOMPUTE,
                              float(lc.recompute.flop))
            self._exchanges(f"recompute layer {i}", lc.tp_recompute_s, lc.cp_recompute_s, lc.ep_recompute_s)
            self.deps = self.dp.before_backward(s, i, p, self.lanes, self.deps)
            grads = (lc.backward_input.time_s + weight * lc.backward_weight.time_s,
                     lc.backward_input.flop + weight * lc.backward_weight.flop)
            self._layer_pass(f"backward layer {i}", float(grads[0]), float(grads[1]), Category.COMPUTE,
                             self._windows(2 * gemms, float(lc.attention_core_backward.time_s),
                                           (lc.tp_backward_s, lc.cp_backward_s), backward=True), backward=True)
            self._exchanges(f"backward layer {i}", lc.tp_backward_s, lc.cp_backward_s, lc.ep_backward_s, backward=True)
            if not self.zb:
                self.deps = self.dp.after_backward(s, i, p, self.m, self.lanes, self.deps)
        if first and ends is not None:
            self._compute("embedding backward", float(ends.embedding_s - ends.embedding_forward_s))

    def _weight_gradients(self, s: int, p: Pass, layers: list[LayerCost]) -> None:
        """W passes of zero-bubble schedules: the weight gradients, then the layer's gradient bucket."""
        for i in reversed(range(len(layers))):
            lc = layers[i]
            self._compute(f"weight gradient layer {i}", float(lc.backward_weight.time_s),
                          flop=float(lc.backward_weight.flop))
            self.deps = self.dp.after_backward(s, i, p, self.m, self.lanes, self.deps)

    def _windows(self, gemms: float, core: float, exposed: tuple[Array, Array], backward: bool = False,
                 share: float = 1.0) -> list[tuple[float, float, float, _Exchange]]:
        """What of a pass overlaps communication, as (compute it hides behind, the whole exchange alone on its
        links, the estimator's exposed part, the exchange): TP with `overlap.tp_comm` beside the GEMMs (the
        forward's; twice as many in backward), ring CP beside the attention core. `share`: of a recomputed
        forward, the share of the layers re-run (its GEMMs, core and exchanges that share of the forward's)."""
        out = []
        if self.overlap_tp:
            link = self.tp.backward_s if backward else self.tp.forward_s
            out.append((share * gemms, share * link, float(exposed[0]), self.tp))
        if self.ring_cp:
            link = self.cp.backward_s if backward else self.cp.forward_s
            out.append((share * core, share * link, float(exposed[1]), self.cp))
        return [w for w in out if w[1] > 0]

    def _layer_pass(self, name: str, seconds: float, flop: float, category: Category,
                    windows: list[tuple[float, float, float, _Exchange]], backward: bool = False) -> None:
        """A layer's kernels, its overlapped exchanges tile by tile beside the compute that hides them (Wang et
        al., ASPLOS'23; TE userbuffers; ring attention, Liu et al. 2023 §3): the other kernels first, then per
        window its compute stretched by the estimator's exposed time (the tiles' schedule, estimate/layer.py)
        side by side with the whole exchange on its links, each window done when both are. On idle links the
        compute side is the longer, so the pass takes the estimator's time; the traffic is on the links all
        along, sharing them with what else is in flight, and sets the pace when that slows it. The exposed
        exchanges (`_exchanges`) then add no TP or ring CP time."""
        left, hidden = seconds, []
        for window, *_ in windows:
            hidden.append(min(window, left))
            left -= hidden[-1]
        share = flop / seconds if seconds > 0 else 0.0
        self._compute(name, left, category, share * left)
        for (_, link_s, exposed_s, how), h in zip(windows, hidden, strict=True):
            before = self.deps
            stretched = h + exposed_s
            self._compute(f"{name} {how.name} overlap", stretched, category, share * h)
            computed, self.deps = self.deps, before
            self._exchange(f"{how.name} {name}", link_s, how, backward)
            if stretched > 0:
                self.deps = [c + t for c, t in zip(computed, self.deps, strict=True)]

    def _compute(self, name: str, seconds: float, category: Category = Category.COMPUTE, flop: float = 0.0) -> None:
        if seconds > 0:
            self.deps = self.b.on_lanes(f"{name} {self.tag}", category, Stream.COMPUTE, seconds, self.lanes,
                                        self.deps, [], flop=flop)

    def _exchange(self, name: str, seconds: float, how: _Exchange, backward: bool = False) -> None:
        if seconds > 0:
            self.deps = self.b.on_lanes(f"{name} {self.tag}", how.category, how.stream, seconds, self.lanes,
                                        self.deps, self.lay.tp_groups, how.tier,
                                        how.backward_bytes if backward else how.forward_bytes,
                                        collective=how.collective)

    def _exchanges(self, what: str, tp: Array, cp: Array, ep: Array, backward: bool = False) -> None:
        tp = 0.0 if self.overlap_tp else tp  # already on the links beside the compute (`_layer_pass`)
        cp = 0.0 if self.ring_cp else cp
        for how, seconds in ((self.tp, tp), (self.cp, cp), (self.ep, ep)):
            self._exchange(f"{how.name} {what}", float(seconds), how, backward)

    def finish(self, last_pass: list[list[int]]) -> None:
        """After each stage's last pass: the gradient reductions (in flight, or all of them now without
        overlap), then the optimizer step, which also waits for the offload path's transfers (the device's
        second tier, or its share of the memory pool: `System.offload_path`, with the traffic of a network
        dimension the pool is reached over): they run on their own link from the step's start, as the
        estimator's offload stall counts them."""
        breakdown, offload = self.est.breakdown, float(self.est.offload_s)
        # the word embedding's gradient all-reduce between the first and the last stage (estimate/embedding_sync.py)
        embedding = _call(self.est, (ParallelDimension.PP,), Collective.ALL_REDUCE) if self.pp > 1 else None
        if embedding is not None and not float(embedding.per_step) > 0:
            embedding = None
        first: list[list[int]] = []

        def optimizer(lanes: list[int], deps: list[list[int]]) -> None:
            if offload > 0:
                deps = [[*d, self.b.add("offload", TaskKind.MEMORY, Category.OFFLOAD, (r,), Stream.OFFLOAD, offload,
                                        (), Tier.MEMORY)] for d, r in zip(deps, lanes, strict=True)]
            self.b.on_lanes("optimizer step", Category.OPTIMIZER, Stream.COMPUTE, float(breakdown.optimizer), lanes,
                            deps, [])

        for s in range(self.pp):
            lanes = self.lay.lanes[s]
            self.dp.unoverlapped(s, lanes, [[t] for t in last_pass[s]])
            deps = [[last_pass[s][i], *self.dp.pending(s, i)] for i in range(len(lanes))]
            if embedding is not None and s == 0:  # the first stage's optimizer waits for the last stage's reduction
                first = deps
                continue
            if embedding is not None and s == self.pp - 1:  # (the offload's transfers run beside it, as estimated)
                first, deps = self._embedding_sync(embedding, first, deps)
                optimizer(self.lay.lanes[0], first)
            optimizer(lanes, deps)

    def _embedding_sync(self, call: CommCall, first: list[list[int]],
                        last: list[list[int]]) -> tuple[list[list[int]], list[list[int]]]:
        """The embedding all-reduce on the data-parallel stream (after the gradient reductions, as Megatron-Core's
        finalize_model_grads runs it) of each pair of lanes, lane i of the first stage and of the last, after both
        lanes' `first` / `last` dependencies; each lane's dependencies for its optimizer step."""
        lanes, n = [*self.lay.lanes[0], *self.lay.lanes[-1]], len(self.lay.lanes[0])
        out = self.b.on_lanes("embedding grad all-reduce", Category.DP, Stream.DP, float(call.time_each_s), lanes,
                              [*first, *last], [[i, n + i] for i in range(n)], _tier(call), float(call.message_bytes),
                              collective=Collective.ALL_REDUCE)
        return out[:n], out[n:]
