"""The pipeline skeleton of a step: every stage's passes in schedule order, joined by sends.

Virtual stage c p + s holds model chunk c of pipeline rank s. A forward needs the previous virtual stage's
forward of the same micro-batch, a backward the next one's backward; between ranks the activation or its
gradient travels as a send on the pipeline link. Sends are eager: one starts when its tensor is ready, and
the sender waits for its sends before its next pass (Megatron's blocking point-to-point; SC'21 §2.2).
`emit` fills a pass with its tasks (layers, collectives) for every lane of a stage (the ranks of one stage:
one lane under symmetry, else every dp x cp x tp position).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from armillary.simulate.graph import Category, GraphBuilder, TaskKind, Tier
from armillary.simulate.schedules import Kind, Pass, passes
from armillary.specs.communication import Collective
from armillary.specs.strategy import Schedule

# emit(stage, pass, deps per lane) -> the task that completes the pass, per lane
Emit = Callable[[int, Pass, list[list[int]]], list[int]]


@dataclass(frozen=True)
class Send:
    seconds: float  # one activation (or gradient) from one rank to the next stage's, alone on the link
    bytes: float
    tier: Tier


def build_pipeline(b: GraphBuilder, schedule: Schedule, stages: int, microbatches: int, chunks: int,
                   lanes: list[list[int]], emit: Emit, send: Send) -> list[list[int]]:
    """Emit every stage's passes in schedule order (`lanes[s]`: the ranks of stage s, lane by lane); returns
    per stage and lane the task that completes its last pass."""
    orders = [passes(schedule, stages, s, microbatches, chunks) for s in range(stages)]
    virtual = stages * chunks
    done: dict[tuple[int, Pass], list[int]] = {}
    outgoing: dict[tuple[int, Pass], list[int]] = {}  # sends a pass issued, per lane
    arriving: dict[tuple[int, Pass], list[int]] = {}  # the send feeding a pass, per lane
    cursor = [0] * stages
    while any(cursor[s] < len(orders[s]) for s in range(stages)):
        progressed = False
        for s in range(stages):
            while cursor[s] < len(orders[s]):
                p = orders[s][cursor[s]]
                source = _source(p, s, stages, virtual)
                if source is not None and source not in done:
                    break  # its input is produced by a pass not emitted yet
                k = cursor[s]
                deps: list[list[int]] = [[] for _ in lanes[s]]
                for lane in range(len(lanes[s])):
                    if k > 0:
                        previous = (s, orders[s][k - 1])
                        deps[lane] += [done[previous][lane], *outgoing.get(previous, [])[lane:lane + 1]]
                    if (s, p) in arriving:
                        deps[lane].append(arriving[(s, p)][lane])
                done[(s, p)] = emit(s, p, deps)
                target = _target(p, s, stages, virtual)
                if target is not None:
                    sends = [b.add(f"send {p.kind}{p.microbatch}.{p.chunk} {s}->{target[0]}", TaskKind.SEND,
                                   Category.PP, (lanes[s][lane], lanes[target[0]][lane]), None, send.seconds,
                                   (done[(s, p)][lane],), send.tier, send.bytes, group=f"pp {s}->{target[0]}",
                                   collective=Collective.SEND_RECV) for lane in range(len(lanes[s]))]
                    outgoing[(s, p)] = sends
                    arriving[target] = sends
                cursor[s] += 1
                progressed = True
        if not progressed:
            raise ValueError(f"schedule {schedule.value!r} deadlocks with {stages} stages and {microbatches} "
                             "micro-batches")
    return [done[(s, orders[s][-1])] for s in range(stages)]


def _chunk_stage(vs: int, stages: int) -> tuple[int, int]:
    return vs % stages, vs // stages


def _source(p: Pass, s: int, stages: int, virtual: int) -> tuple[int, Pass] | None:
    """The pass on another rank whose output this pass needs (None: none, or on this rank)."""
    vs = p.chunk * stages + s
    if p.kind is Kind.F and vs > 0:
        rank, chunk = _chunk_stage(vs - 1, stages)
    elif p.kind is Kind.B and vs < virtual - 1:
        rank, chunk = _chunk_stage(vs + 1, stages)
    else:
        return None
    return (rank, Pass(p.kind, p.microbatch, chunk)) if rank != s else None


def _target(p: Pass, s: int, stages: int, virtual: int) -> tuple[int, Pass] | None:
    """The pass on another rank that consumes this pass's output."""
    vs = p.chunk * stages + s
    if p.kind is Kind.F and vs < virtual - 1:
        rank, chunk = _chunk_stage(vs + 1, stages)
    elif p.kind is Kind.B and vs > 0:
        rank, chunk = _chunk_stage(vs - 1, stages)
    else:
        return None
    return (rank, Pass(p.kind, p.microbatch, chunk)) if rank != s else None
