"""The data-parallel tasks of a simulated training step: DP / ZeRO / FSDP gradient reductions and parameter
gathers, with the estimator's calls (estimate/data_parallel.py) as their durations and messages."""

from __future__ import annotations

from armillary.estimate.result import ParallelDimension, StepEstimate
from armillary.simulate.graph import Category, GraphBuilder, Stream, Tier
from armillary.simulate.schedules import Kind, Pass
from armillary.specs.communication import Collective
from armillary.specs.strategy import Strategy, ZeroStage


class DataParallelTasks:
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
        self.reduce_op = next((c.operation for c in calls if c.operation is Collective.REDUCE_SCATTER),
                              Collective.ALL_REDUCE)
        self.tier = Tier.SCALE_OUT if any(float(c.scale_out_bytes_each) > 0 for c in calls) else Tier.SCALE_UP
        # each task its own operation's message: the reductions' (all-reduce or reduce-scatter) or the gathers'
        self.reduce_bytes = sum(float(c.message_bytes) / per_layer for c in calls
                                if c.operation in (Collective.ALL_REDUCE, Collective.REDUCE_SCATTER))
        self.gather_bytes = sum(float(c.message_bytes) / per_layer for c in calls
                                if c.operation is Collective.ALL_GATHER)
        self._pending: dict[tuple[int, int], list[int]] = {}
        self._ahead: dict[tuple[int, int], list[int]] = {}  # what the previous gathered pass waited for

    def pending(self, s: int, lane: int) -> list[int]:
        return self._pending.get((s, lane), [])

    def _add(self, name: str, seconds: float, s: int, lanes: list[int], deps: list[list[int]],
             stream: Stream = Stream.DP, buckets: int = 1) -> list[list[int]]:
        gather = stream is Stream.DP_GATHER
        out = self.b.on_lanes(name, Category.DP, stream, seconds, lanes, deps, self.groups, self.tier,
                              buckets * (self.gather_bytes if gather else self.reduce_bytes),
                              collective=Collective.ALL_GATHER if gather else self.reduce_op)
        for i, d in enumerate(out):
            self._pending.setdefault((s, i), []).extend(d)
        return out

    def before_forward(self, s: int, layer: int, p: Pass, lanes: list[int],
                       deps: list[list[int]]) -> list[list[int]]:
        """Parameter gathers a layer's pass waits for."""
        once = p.microbatch == 0 and p.kind is Kind.F and self.zero in (ZeroStage.OPTIMIZER, ZeroStage.GRADIENTS)
        if self.gather <= 0 or not (once or self.zero is ZeroStage.PARAMETERS):
            return deps
        # prefetched one pass ahead: issued when the previous pass could start (FSDP's forward / backward
        # prefetch, Zhao et al. 2023 §3.3.2), else when this pass could
        issue = [self._ahead.get((s, i), []) for i in range(len(lanes))] if self.prefetch else deps
        for i, d in enumerate(deps):
            self._ahead[(s, i)] = d
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
            self._add("dp reduce (all layers)", self.reduce * self.layers, s, lanes, deps, buckets=self.layers)
