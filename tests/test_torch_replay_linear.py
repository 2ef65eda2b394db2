"""The torch replay's wait lookup (issue 47): the sorted-index lookup of `_waited` gives what the scan of every
collective per idle gap gave, on generated traces with ties in end time, and so the same replay."""

from __future__ import annotations

import random

import pytest

from armillary.ingest import torch_replay
from armillary.ingest.torch_replay import WAIT_US, _EndIndex, _segments, _waited, replay
from armillary.ingest.torch_trace import RankTrace, TorchTraces, TraceCollective, TraceOp
from armillary.specs.communication import Collective
from armillary.specs.loading import load_system


def _scanned(gap_start: float, gap_end: float, ends: list[float]) -> int | None:
    """The lookup before issue 47 (every collective scanned per gap), kept here as the reference."""
    if gap_end - gap_start < WAIT_US:
        return None
    inside = [i for i, e in enumerate(ends) if gap_start < e <= gap_end + WAIT_US]
    return max(inside, key=lambda i: ends[i]) if inside else None


def _rank(rank: int, events: int, seed: int) -> RankTrace:
    """Operators in time order, a collective issued after about one in six (on whole microseconds, so that
    end times tie), idle gaps: most short, some ending as the last collective ends, some plain idle."""
    rng = random.Random(seed)
    ops: list[TraceOp] = []
    collectives: list[TraceCollective] = []
    t = 0.0
    while len(ops) + len(collectives) < events:
        d = float(rng.randint(10, 300))
        ops.append(TraceOp("aten::mm", t, d))
        t += d
        if rng.random() < 1 / 6:
            op = rng.choice((Collective.ALL_REDUCE, Collective.ALL_GATHER, Collective.REDUCE_SCATTER))
            end = t + rng.choice((600.0, 900.0, float(rng.randint(600, 3000))))
            collectives.append(TraceCollective(op, t, t + 5, end, float(rng.choice((1e5, 1e6, 2.5e7))), 2))
        draw = rng.random()
        if draw < 0.7:
            t += float(rng.randint(0, 2))
        elif draw < 0.9 and collectives and collectives[-1].end_us > t:
            t = collectives[-1].end_us + rng.choice((0.0, 10.0, -100.0))
        else:
            t += float(rng.randint(400, 3000))
    return RankTrace(rank, 0.0, t + 10, tuple(ops), tuple(collectives))


def _traces(events: int, seed: int) -> TorchTraces:
    ranks = [_rank(r, events // 2, seed) for r in range(2)]  # same program, so both issue the same collectives
    return TorchTraces(tuple(ranks))


def test_lookup_equals_the_scan():
    rng = random.Random(7)
    for _ in range(200):
        ends = [float(rng.randint(0, 100) * 50) for _ in range(rng.randint(0, 40))]  # many ties
        index = _EndIndex.of(ends)
        for _ in range(50):
            a = float(rng.randint(-1000, 6000))
            b = a + rng.choice((0.0, 499.0, 500.0, float(rng.randint(0, 3000))))
            assert _waited(a, b, index) == _scanned(a, b, ends)


@pytest.mark.parametrize("seed", range(4))
def test_replay_equals_the_scan(seed, monkeypatch):
    traces = _traces(4000, seed)
    system = load_system("dgx-a100", 8)
    fast = replay(traces, system)

    def scan(gap_start: float, gap_end: float, index: _EndIndex) -> int | None:
        ends = [0.0] * len(index.ends)
        for e, i in zip(index.ends, index.index, strict=True):
            ends[i] = e
        return _scanned(gap_start, gap_end, ends)

    monkeypatch.setattr(torch_replay, "_waited", scan)
    slow = replay(traces, system)
    assert sum(s[1] is not None for s in _segments(traces.ranks[0])) > 100  # many waits
    assert fast.step_time_s == slow.step_time_s
    assert (fast.compute_s, fast.communication_s) == (slow.compute_s, slow.communication_s)
    assert [(t.name, t.duration_ns, tuple(t.deps)) for t in fast.graph.tasks] == \
        [(t.name, t.duration_ns, tuple(t.deps)) for t in slow.graph.tasks]
