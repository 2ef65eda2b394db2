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
from dataclasses import dataclass

import numpy as np

from armillary.estimate.inference import estimate_inference, replica_model
from armillary.estimate.inference_result import InferenceEstimate
from armillary.simulate.engine import Timeline, paused_gc, run
from armillary.simulate.graph import Category, GraphBuilder, Stream, TaskGraph, TaskKind, Tier
from armillary.specs.arrays import ModelArrays
from armillary.specs.model import Model
from armillary.specs.strategy import Strategy
from armillary.specs.system import System
from armillary.specs.workload import Inference


@dataclass(frozen=True)
class InferenceSimulation:
    graph: TaskGraph
    timeline: Timeline
    estimate: InferenceEstimate  # the analytical estimate of the same batch
    ttft_s: float  # the prefill: the last stage samples every sequence's first token
    tpot_s: float  # mean time per output token after the first
    wall_s: float

    @property
    def e2e_s(self) -> float:
        return self.timeline.makespan_ns / 1e9


def simulate_inference(model: Model, system: System, strategy: Strategy, workload: Inference) -> InferenceSimulation:
    started = time.perf_counter()
    m = ModelArrays.of(model)
    replicas = max(system.devices // (strategy.tp * strategy.pp), 1)
    est = estimate_inference(m, strategy, workload, system, replicas)
    r = replica_model(m, strategy, workload, system)
    pp, b, n_in, steps = strategy.pp, workload.batch, workload.input_len, workload.output_len - 1
    share = [n / model.layers for n in _stage_layers(model.layers, pp)]
    micro = math.ceil(b / pp)
    in_flight = math.ceil(b / micro)
    tier = Tier.SCALE_OUT if strategy.tp * pp > system.devices_per_node else Tier.SCALE_UP
    g = GraphBuilder()

    def stage_pass(s: int, name: str, tokens, sequences: float, attention: float, remote: float,
                   deps: list[int]) -> int:
        """One stage's share of a pass; returns its last task."""
        layers = float(tokens.layers) + attention + remote
        ends = float(tokens.ends) if s == 0 else 0.0
        head = float(r.head_time(sequences)) if s == pp - 1 else 0.0
        last = g.add(f"{name} stage {s}", TaskKind.COMPUTE, Category.COMPUTE, (s,), Stream.COMPUTE,
                     share[s] * layers + ends, deps)
        comm = share[s] * float(tokens.tp + tokens.ep)
        if comm > 0:
            last = g.add(f"{name} tp stage {s}", TaskKind.COLLECTIVE, Category.TP, (s,), Stream.TP, comm, (last,),
                         Tier.SCALE_UP)
        if head > 0:
            last = g.add(f"{name} head", TaskKind.COMPUTE, Category.COMPUTE, (s,), Stream.COMPUTE, head, (last,))
        return last

    def through_stages(name: str, tokens, sequences: float, attention: float, remote: float,
                       first: list[int]) -> int:
        deps = first
        for s in range(pp):
            last = stage_pass(s, name, tokens, sequences, attention, remote, deps)
            if s < pp - 1:
                hop = float(tokens.pp) / (pp - 1)
                deps = [g.add(f"{name} send {s}->{s + 1}", TaskKind.SEND, Category.PP, (s, s + 1), None, hop, (last,),
                              tier, collective="send_recv")]
        return last

    with paused_gc():
        prompt = r.tokens_time(float(b * n_in))
        core, remote = r.attention_time(r.attention(float(n_in), 0.0, float(b)), 0.0)
        prefill_end = through_stages("prefill", prompt, float(b), float(core), float(remote), [])
        per_step = r.tokens_time(float(micro))
        past = n_in + np.arange(steps, dtype=float)
        cores, remotes = r.attention_time(r.attention(1.0, past, float(micro)), micro * past)
        cores, remotes = np.broadcast_to(cores, past.shape), np.broadcast_to(remotes, past.shape)
        previous = [prefill_end] * in_flight
        for k in range(steps):
            for j in range(in_flight):
                previous[j] = through_stages(f"decode {k} mb {j}", per_step, float(micro), float(cores[k]),
                                             float(remotes[k]), [previous[j]])
        graph = g.graph(pp, tuple(f"stage {s}" for s in range(pp)), (strategy.tp,) * pp)
    timeline = run(graph)
    ttft = timeline.end_ns[prefill_end] / 1e9
    tpot = (timeline.makespan_ns / 1e9 - ttft) / steps if steps > 0 else 0.0
    return InferenceSimulation(graph, timeline, est, ttft, tpot, time.perf_counter() - started)


def _stage_layers(layers: int, pp: int) -> list[int]:
    """Whole layers per stage, a remainder on the last stages."""
    return [layers // pp + (1 if s >= pp - layers % pp else 0) for s in range(pp)]
