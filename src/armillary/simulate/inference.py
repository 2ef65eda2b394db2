"""A static inference batch as a task graph: the prefill, then decode steps with micro-batches in flight.

One rank per pipeline stage (its tp peers do the same work). Costs come from the estimator's replica
model (`estimate.inference.ReplicaModel`): a stage takes its share of the layers' kernels, attention and
TP / EP collectives; the first stage embeds, the last runs the LM head and sampling; stages hand the
activations on with a send. The prefill runs the whole batch through the stages; decode keeps up to pp
micro-batches of ceil(batch / pp) sequences in flight, and a micro-batch's next token starts on the first
stage once the last stage has sampled its previous one. The estimator takes a decode step as one
micro-batch's trip through all stages; the simulation also shows when one stage's load over all
micro-batches in flight exceeds that trip (the last stage's LM head, uneven layer counts) and how busy
each stage is.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace

from armillary.display import Displayed, Headline, seconds
from armillary.estimate.inference import replica_model
from armillary.estimate.inference_phases import decode_steps, prefill_pass
from armillary.estimate.inference_result import InferenceEstimate, PassTime
from armillary.estimate.run import estimate_inference_run
from armillary.plan.arrays import ModelArrays
from armillary.plan.layout import whole_layers
from armillary.simulate.engine import paused_gc, run
from armillary.simulate.graph import Category, GraphBuilder, Stream, TaskGraph, TaskKind, Tier
from armillary.simulate.timeline import Timeline
from armillary.specs.communication import Collective
from armillary.specs.model import Model
from armillary.specs.strategy import Strategy
from armillary.specs.system import System
from armillary.specs.workload import Inference


@dataclass(frozen=True, repr=False)
class InferenceSimulation(Displayed):
    graph: TaskGraph
    timeline: Timeline
    estimate: InferenceEstimate  # the analytical estimate of the same batch
    ttft_s: float  # the prefill: the last stage samples every sequence's first token
    tpot_s: float  # mean time per output token after the first
    wall_s: float

    @property
    def e2e_s(self) -> float:
        return self.timeline.makespan_s

    def headline(self) -> Headline:
        return [("ttft", seconds(self.ttft_s)), ("tpot", seconds(self.tpot_s)), ("e2e", seconds(self.e2e_s)),
                ("analytical_e2e", seconds(self.estimate.e2e_s))]


def simulate_inference(model: Model, system: System, strategy: Strategy, workload: Inference,
                       stragglers: Mapping[int, float] | None = None, jitter: float = 0.0,
                       seed: int = 0) -> InferenceSimulation:
    started = time.perf_counter()
    est = estimate_inference_run(model, system, strategy, workload)
    r = replica_model(ModelArrays.of(model), strategy, workload, system)
    pp, steps = strategy.pp, workload.output_len - 1
    share = [n / model.layers for n in whole_layers(model.layers, pp)]
    tier = Tier.SCALE_OUT if r.stages_cross_nodes else Tier.SCALE_UP
    cp_tier = Tier.SCALE_OUT if r.cp_group is not None and r.cp_group.outermost > 0 else Tier.SCALE_UP
    g = GraphBuilder()

    def through_stages(name: str, p: PassTime, head: float, first: list[int]) -> int:
        """One pass (`prefill_pass` or a decode step) stage by stage: a stage's share of the layers,
        attention and collectives, the embedding first, the LM head (`head`, part of `p.ends`) last."""
        deps = first
        for s in range(pp):
            ends = float(p.ends) - head if s == 0 else 0.0
            last = g.add(f"{name} stage {s}", TaskKind.COMPUTE, Category.COMPUTE, (s,), Stream.COMPUTE,
                         share[s] * float(p.layers + p.attention + p.tier2) + ends, deps)
            comm = share[s] * float(p.tp + p.ep)
            if comm > 0:
                last = g.add(f"{name} tp stage {s}", TaskKind.COLLECTIVE, Category.TP, (s,), Stream.TP, comm,
                             (last,), Tier.SCALE_UP)
            ring = share[s] * float(p.cp)  # context parallelism: the exposed K/V ring, the decode merge
            if ring > 0:
                last = g.add(f"{name} cp stage {s}", TaskKind.COLLECTIVE, Category.CP, (s,), Stream.CP, ring,
                             (last,), cp_tier)
            if s == pp - 1 and head > 0:
                last = g.add(f"{name} head", TaskKind.COMPUTE, Category.COMPUTE, (s,), Stream.COMPUTE, head, (last,))
            if s < pp - 1:
                deps = [g.add(f"{name} send {s}->{s + 1}", TaskKind.SEND, Category.PP, (s, s + 1), None,
                              float(p.pp) / (pp - 1), (last,), tier, collective=Collective.SEND_RECV)]
        return last

    with paused_gc():
        prefill_end = through_stages("prefill", prefill_pass(r, workload), float(r.head_time(workload.batch)), [])
        d = decode_steps(r, workload)
        head = float(d.head)
        previous = [prefill_end] * math.ceil(workload.batch / d.micro)  # micro-batches in flight
        for k in range(steps):
            step = replace(d.tokens, attention=d.attention[k], tier2=d.tier2[k], ends=d.tokens.ends + head)
            for j in range(len(previous)):
                previous[j] = through_stages(f"decode {k} mb {j}", step, head, [previous[j]])
        graph = g.graph(pp, tuple(f"stage {s}" for s in range(pp)), (strategy.tp * strategy.cp,) * pp)
    timeline = run(graph, stragglers, jitter, seed)
    ttft = timeline.end_ns[prefill_end] / 1e9
    tpot = (timeline.makespan_s - ttft) / steps if steps > 0 else 0.0
    return InferenceSimulation(graph, timeline, est, ttft, tpot, time.perf_counter() - started)
