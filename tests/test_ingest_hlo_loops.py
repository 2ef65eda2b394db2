"""Symbolic HLO while loops (issue 48): a loop too long to unroll is simulated as its warm-up iterations and
one repeated block of its steady-state period; where unrolling is feasible both agree."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from armillary.ingest.hlo_cost import cost_module
from armillary.ingest.hlo_graph import hlo_graph
from armillary.ingest.hlo_parse import parse_hlo
from armillary.ingest.hlo_run import simulate_hlo
from armillary.ingest.hlo_work import OpKind
from armillary.specs.loading import load_system


def dlrm_like(trips: int) -> str:
    """A DLRM-shaped training loop on 8 partitions: per iteration an embedding all-to-all, bottom and top MLP
    dots, and the gradient all-reduce started asynchronously and overlapped with the next dot."""
    return f"""HloModule loop, is_scheduled=true, num_partitions=8

%add (x: f32[], y: f32[]) -> f32[] {{
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %sum = f32[] add(%x, %y)
}}

%cond (s: (s32[], f32[256,512], f32[512,512], f32[64])) -> pred[] {{
  %s = (s32[], f32[256,512]{{1,0}}, f32[512,512]{{1,0}}, f32[64]{{0}}) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %n = s32[] constant({trips})
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}}

%body (b: (s32[], f32[256,512], f32[512,512], f32[64])) -> (s32[], f32[256,512], f32[512,512], f32[64]) {{
  %b = (s32[], f32[256,512]{{1,0}}, f32[512,512]{{1,0}}, f32[64]{{0}}) parameter(0)
  %i.1 = s32[] get-tuple-element(%b), index=0
  %act = f32[256,512]{{1,0}} get-tuple-element(%b), index=1
  %w = f32[512,512]{{1,0}} get-tuple-element(%b), index=2
  %bias = f32[64]{{0}} get-tuple-element(%b), index=3
  %one = s32[] constant(1)
  %next = s32[] add(%i.1, %one)
  %emb = f32[256,512]{{1,0}} all-to-all(%act), replica_groups={{{{0,1,2,3,4,5,6,7}}}}, dimensions={{0}}
  %bottom = f32[256,512]{{1,0}} dot(%emb, %w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  %grad = f32[512,512]{{1,0}} dot(%bottom, %emb), lhs_contracting_dims={{0}}, rhs_contracting_dims={{0}}
  %ars = f32[512,512]{{1,0}} all-reduce-start(%grad), replica_groups={{{{0,1,2,3,4,5,6,7}}}}, to_apply=%add
  %top = f32[256,512]{{1,0}} dot(%bottom, %w), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  %act.1 = f32[256,512]{{1,0}} tanh(%top)
  %ard = f32[512,512]{{1,0}} all-reduce-done(%ars)
  %w.1 = f32[512,512]{{1,0}} subtract(%w, %ard)
  ROOT %t = (s32[], f32[256,512]{{1,0}}, f32[512,512]{{1,0}}, f32[64]{{0}}) tuple(%next, %act.1, %w.1, %bias)
}}

ENTRY %main (a: f32[256,512], w0: f32[512,512], c: f32[64]) -> f32[64] {{
  %a = f32[256,512]{{1,0}} parameter(0)
  %w0 = f32[512,512]{{1,0}} parameter(1)
  %c = f32[64]{{0}} parameter(2)
  %zero = s32[] constant(0)
  %init = (s32[], f32[256,512]{{1,0}}, f32[512,512]{{1,0}}, f32[64]{{0}}) tuple(%zero, %a, %w0, %c)
  %loop = (s32[], f32[256,512]{{1,0}}, f32[512,512]{{1,0}}, f32[64]{{0}}) while(%init), condition=%cond, body=%body
  %out = f32[256,512]{{1,0}} get-tuple-element(%loop), index=1
  %kept = f32[64]{{0}} get-tuple-element(%loop), index=3
  %side = f32[64]{{0}} exponential(%c)
  %red = f32[64]{{0}} all-reduce(%kept), replica_groups={{{{0,1,2,3,4,5,6,7}}}}, to_apply=%add
  ROOT %fin = f32[64]{{0}} add(%red, %side)
}}
"""


@pytest.fixture(scope="module")
def h100():
    return load_system("dgx-h100", 8)


@pytest.mark.parametrize(("trips", "replicas"), [(8, 1), (12, 1), (20, 2), (9, 8)])
def test_symbolic_loop_equals_unrolled(h100, trips, replicas):
    module = parse_hlo(dlrm_like(trips))
    unrolled = simulate_hlo(module, h100, replicas, unroll_limit=float("inf"))
    folded = simulate_hlo(module, h100, replicas, unroll_limit=0)
    assert folded.step_time_s > 0
    assert folded.timeline.makespan_ns == unrolled.timeline.makespan_ns
    assert len(folded.graph.tasks) < len(unrolled.graph.tasks)
    # busy seconds per op kind: the repeated block splits its time over the kinds it stands for
    for a, b in zip(folded.kinds, unrolled.kinds, strict=True):
        assert a.kind is b.kind and a.count == b.count and a.flop == b.flop
        assert a.busy_s == pytest.approx(b.busy_s, rel=1e-6, abs=1e-9)
    assert sum(k.critical_s for k in folded.kinds) == pytest.approx(unrolled.step_time_s, rel=1e-6)


def test_loop_is_unrolled_below_the_limit(h100):
    cost = cost_module(parse_hlo(dlrm_like(12)), h100)
    assert not hlo_graph(cost).repeats  # 12 x 20 instructions: far below UNROLL_LIMIT
    assert hlo_graph(cost, unroll_limit=0).repeats
    # a loop of at most 3 x WARMUP_TRIPS + 1 iterations is always unrolled
    assert not hlo_graph(cost_module(parse_hlo(dlrm_like(7)), h100), unroll_limit=0).repeats


def test_what_the_loop_leaves_unchanged_keeps_its_producer(h100):
    # %kept passes through the loop untouched: the all-reduce on it waits for the entry's parameter, not for
    # the repeated block (as unrolled, where it names the same producer)
    result = simulate_hlo(parse_hlo(dlrm_like(1000)), h100, unroll_limit=0)
    tasks = result.graph.tasks
    red = next(i for i, t in enumerate(tasks) if t.name == "red")
    block = next(i for i, t in enumerate(tasks) if t.name.startswith("loop x"))
    assert tasks[block].name == "loop x998"  # 2 warm-up iterations in place, 998 repeated
    assert block not in tasks[red].deps


def test_64000_iterations_in_under_a_minute(h100):
    # ParaGraph's MLPerf DLRM program runs 64,000 iterations: unrolled, its graph passes the task limit
    started = time.perf_counter()
    result = simulate_hlo(parse_hlo(dlrm_like(64_000)), h100)
    elapsed = time.perf_counter() - started
    assert elapsed < 60
    assert result.cost.trips and max(result.cost.trips.values()) == 64_000
    short = simulate_hlo(parse_hlo(dlrm_like(12)), h100, unroll_limit=0)
    # 64,000 iterations take (64,000 - 12) / (12 - 2) more periods than 12... the same period per iteration
    period = (short.timeline.makespan_ns - simulate_hlo(parse_hlo(dlrm_like(11)), h100,
                                                        unroll_limit=0).timeline.makespan_ns)
    assert period > 0
    assert result.timeline.makespan_ns == short.timeline.makespan_ns + (64_000 - 12) * period
    dots = next(k for k in result.kinds if k.kind is OpKind.DOT)
    assert dots.count == 3 * 64_000


@pytest.mark.skipif(not os.environ.get("PARAGRAPH_REPO"), reason="set PARAGRAPH_REPO to a checkout of google/paragraph")
def test_paragraphs_dlrm_program_simulates_in_under_a_minute():
    # ParaGraph's MLPerf DLRM training program (paragraph/data/hlo_after_optimizations_dlrm_32_tpuv3.txt): an
    # outer loop of 20 around inner loops of 3,200 and 1,363 iterations, 28 million instructions unrolled
    # (past MAX_EXECUTED); folded, 1.44 million are built
    path = Path(os.environ["PARAGRAPH_REPO"]) / "paragraph" / "data" / "hlo_after_optimizations_dlrm_32_tpuv3.txt"
    started = time.perf_counter()
    result = simulate_hlo(path, load_system("dgx-h100", 8))
    assert time.perf_counter() - started < 60
    assert sorted(result.cost.trips.values()) == [20, 1363, 3200]
    assert result.step_time_s > 0 and len(result.graph.tasks) < 200_000
    assert next(k for k in result.kinds if k.kind is OpKind.ALL_REDUCE).count == 64_001
