"""Pipeline schedules as the order in which one pipeline rank runs its passes.

A pass is (kind, micro-batch, model chunk): F forward, B backward (with the weight gradient, except under
zero-bubble, which splits it off as W). The order alone defines a schedule: the simulator runs it against
the data dependencies between ranks, so fill, drain and bubbles follow, not formulas.
"""

from __future__ import annotations

from enum import StrEnum
from typing import NamedTuple

from armillary.specs.strategy import Schedule


class Kind(StrEnum):
    F = "F"
    B = "B"  # backward: input gradient (and weight gradient unless W is separate)
    W = "W"  # weight gradient (zero-bubble schedules)


class Pass(NamedTuple):
    kind: Kind
    microbatch: int
    chunk: int = 0


def gpipe(stages: int, stage: int, microbatches: int) -> list[Pass]:
    """All forwards, then all backwards (Huang et al. 2019)."""
    return [Pass(Kind.F, i) for i in range(microbatches)] + [Pass(Kind.B, i) for i in range(microbatches)]


def one_f_one_b(stages: int, stage: int, microbatches: int) -> list[Pass]:
    """PipeDream-flush 1F1B (Narayanan et al. SC'21 §2.2.1): p - s - 1 warm-up forwards, then one forward
    and one backward in turn, then the remaining backwards."""
    warmup = min(stages - stage - 1, microbatches)
    order = [Pass(Kind.F, i) for i in range(warmup)]
    for i in range(microbatches - warmup):
        order += [Pass(Kind.F, warmup + i), Pass(Kind.B, i)]
    return order + [Pass(Kind.B, i) for i in range(microbatches - warmup, microbatches)]


def interleaved(stages: int, stage: int, microbatches: int, chunks: int) -> list[Pass]:
    """Interleaved 1F1B with `chunks` model chunks per rank (SC'21 §2.2.2; Megatron-LM's
    forward_backward_pipelining_with_interleaving): virtual micro-batch k runs chunk (k // p) mod v of
    micro-batch (k // (p v)) p + k mod p forward; backwards take the chunks in reverse. Needs m % p == 0."""
    if microbatches % stages:
        raise ValueError(f"the interleaved schedule needs micro-batches ({microbatches}) divisible by the "
                         f"pipeline stages ({stages})")
    total = microbatches * chunks

    def unit(k: int, backward: bool) -> Pass:
        chunk = (k // stages) % chunks
        mb = (k // (stages * chunks)) * stages + k % stages
        return Pass(Kind.B, mb, chunks - 1 - chunk) if backward else Pass(Kind.F, mb, chunk)

    warmup = min((stages - stage - 1) * 2 + (chunks - 1) * stages, total)
    order = [unit(k, False) for k in range(warmup)]
    for k in range(total - warmup):
        order += [unit(warmup + k, False), unit(k, True)]
    return order + [unit(k, True) for k in range(total - warmup, total)]


def zb_h1(stages: int, stage: int, microbatches: int) -> list[Pass]:
    """ZB-H1 (Qi et al. 2024, §3.1, Fig. 3): 1F1B with each backward split into B (input gradient, on the
    critical path) and W (weight gradient). Stage s runs each W right after its B but holds back s of them
    (the later stages, which 1F1B leaves with fewer micro-batches in flight), so that the B's reach the
    first stage sooner and the held W's fill the drain: the bubble shrinks to (p - 1)(T_F + T_B - T_W),
    with no stage holding more activations than 1F1B's first stage."""
    held = stage
    order: list[Pass] = []
    deferred: list[int] = []
    for p in one_f_one_b(stages, stage, microbatches):
        order.append(p)
        if p.kind is Kind.B:
            deferred.append(p.microbatch)
            if len(deferred) > held:
                order.append(Pass(Kind.W, deferred.pop(0)))
    return order + [Pass(Kind.W, mb) for mb in deferred]


def passes(schedule: Schedule, stages: int, stage: int, microbatches: int, chunks: int = 1) -> list[Pass]:
    if schedule is Schedule.INTERLEAVED:
        return interleaved(stages, stage, microbatches, chunks)
    if chunks != 1:
        raise ValueError(f"schedule {schedule.value!r} runs one model chunk per rank, not {chunks}")
    return {Schedule.GPIPE: gpipe, Schedule.ONE_F_ONE_B: one_f_one_b,
            Schedule.ZB_H1: zb_h1}[schedule](stages, stage, microbatches)
