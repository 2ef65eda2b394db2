"""Labels of the report's tables and pictures: numbers never in scientific notation, the search's overlap
column naming each overlap once, a co-design naming the axes it varied, the timeline's bars covering every
task."""

from __future__ import annotations

import itertools
import math
import re

import numpy as np
import pytest

from armillary.report.formatting import fixed
from armillary.report.records import design_label, overlap_label, varied_axes
from armillary.specs.strategy import TpOverlap


@pytest.mark.parametrize(("value", "shown"), [(12345.6, "12,346"), (0.0001234, "0.0001234"), (1.5, "1.5"),
                                              (2.0, "2"), (194.08, "194.1"), (1234567.0, "1,234,567"),
                                              (-3.14159, "-3.142"), (math.nan, "-"), (0.0, "0")])
def test_fixed_is_positional(value, shown):
    assert fixed(value) == shown and not re.search(r"\de[+-]\d", fixed(value))


def test_latency_table_has_no_scientific_notation():
    """A stream whose requests wait tens of seconds: 12,500 ms, not 1.25e+04."""
    from types import SimpleNamespace

    from rich.console import Console

    from armillary.report.tables import serving_tables
    from armillary.serving.run import Percentiles

    slow = Percentiles.of(np.array([12.5, 40.0, 75.25]))  # seconds
    served = SimpleNamespace(requests=3, completed=3, rejected=0, offered_rate=0.1, replicas=1, prefill_replicas=0,
                             devices=8, output_tokens_per_s=10.0, output_tokens_per_s_per_device=1.25,
                             error_band=None, goodput_requests_per_s=0.0, slo_attainment=0.0, mean_batch=1.0,
                             iterations=10, eager_steps=0, preemptions=0, kv_blocks_per_device=100, ttft_s=slow,
                             tpot_s=slow, e2e_s=slow)
    console = Console(record=True, width=200)
    for t in serving_tables(served, "slow"):  # type: ignore[arg-type]
        console.print(t)
    text = console.export_text()
    assert not re.search(r"\de[+-]\d", text) and "│ 42,583 │ 40,000 │" in text


def test_overlap_column_names_each_overlap_once():
    overlap = {"dp_grad_reduce": True, "tp_comm": True, "tp_comm_method": TpOverlap.USERBUFFERS,
               "param_gather": True, "ep_comm": False}
    assert overlap_label(overlap, compact=True) == "dp,gather,tp-ub"  # was "dp,tp,tp,param"
    assert overlap_label(overlap) == "dp grads, param gathers, tp userbuffers"
    assert overlap_label({**overlap, "tp_comm": False, "tp_comm_method": TpOverlap.RING}) == "dp grads, param gathers"
    assert overlap_label({k: False for k in overlap if k != "tp_comm_method"}) == "-"


def test_codesign_names_the_axes_it_varied():
    from armillary.search.space import StrategySpace
    from armillary.search.systems import SystemSpace, codesign
    from armillary.specs.loading import load_model, load_strategy, load_system, load_workload

    space = SystemSpace.model_validate({"gpus": [16, 32], "scale_out_bandwidth": ["25 GB/s", "50 GB/s"],
                                        "prices": {"device": 10000, "hbm_per_gib": 100}})
    designs = codesign(load_model("llama2-7b"), load_system("dgx-a100", 8), load_workload(
        {"seq_len": 2048, "global_batch": 64}), space, load_strategy({"attention": "flash"}),
        StrategySpace(tp=(2, 4), micro_batch=(1,)))
    assert varied_axes(designs) == ["gpus", "scale_out_bandwidth"]  # HBM stayed the base system's: not named
    labels = {design_label(p, varied_axes(designs)) for p in designs.points}
    assert labels == {f"{g} GPUs, {b} GB/s scale-out" for g in (16, 32) for b in (25, 50)}
    assert design_label(designs.points[0], []) == "16 GPUs, 80 GiB HBM"  # nothing varied: GPUs and HBM


def test_occupancy_by_hand():
    from armillary.report.timeline_bars import occupancy

    edges = np.array([0.0, 1.0, 2.0, 3.0, 4.0])  # tasks [0, 1.5) and [3, 4): 1, 0.5, 0 and 1 s per slice
    assert occupancy(edges, np.array([3.0, 0.0]), np.array([4.0, 1.5])).tolist() == [1.0, 0.5, 0.0, 1.0]


def test_timeline_bars_cover_the_whole_step():
    """On every rank and lane, a bar covers exactly the slices where a task ran (the last ends with the
    step); bars do not overlap and their shade is half or full."""
    from armillary import api
    from armillary.report.timeline_bars import COMMUNICATION, EMPTY, occupancy, timeline_bars

    sim = api.simulate("llama3-8b", "dgx-h100", {"tp": 2, "pp": 2}, {"seq_len": 4096, "global_batch": 16}, gpus=16)
    tb = timeline_bars(sim.graph, sim.timeline, resolution=400)
    t, edges = sim.timeline, np.linspace(0, tb.makespan_s, 401)
    spans: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for i, task in enumerate(sim.graph.tasks):
        if task.stream is not None and t.end_ns[i] > t.start_ns[i]:
            for r in task.ranks:
                key = (sim.graph.rank_labels[r], int(task.category in COMMUNICATION))
                spans.setdefault(key, []).append((t.start_ns[i] / 1e9, t.end_ns[i] / 1e9))
    drawn: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for b in tb.bars:
        assert set(b.busy) <= {0.5, 1.0}
        for row, lane, start, end in zip(b.rows, b.lanes, b.start_s, b.end_s, strict=True):
            drawn.setdefault((row, lane), []).append((start, end))
    assert drawn.keys() == spans.keys() and max(e for v in drawn.values() for _, e in v) == tb.makespan_s
    for key, intervals in spans.items():
        start, end = np.array(intervals).T
        busy_slices = int((occupancy(edges, start, end) > EMPTY * tb.slice_s).sum())
        bars = sorted(drawn[key])
        assert all(a[1] <= b[0] + 1e-12 for a, b in itertools.pairwise(bars))
        assert sum(e - s for s, e in bars) == pytest.approx(busy_slices * tb.slice_s)
    assert tb.drawn < tb.tasks


def test_log_tick_labels_pick_the_ticks_they_name():
    """Minor ticks of a log axis are labelled by their multiple of a power of ten: 0.2, 20 and 5 are 2 and 5;
    1.6 (which rounds to 2) and 25 are no such tick, so no label lands on them."""
    from armillary.report.figures import leading

    assert [leading(y) for y in (0.2, 20.0, 0.05, 30.0)] == [2, 2, 5, 3]
    assert [leading(y) for y in (1.6, 1.8, 25.0, 0.0)] == [0, 0, 0, 0]


def test_a_chart_specification_cannot_end_its_script_or_hold_nan():
    import json

    from armillary.report.html_page import chart

    block = chart(3, {"data": [{"x": [1.0, float("nan"), float("inf")], "name": "a</script><b>"}]}, "note")
    body = block.split('id="chart3-spec">', 1)[1].rsplit("</script>", 1)[0]
    assert "</" not in body and json.loads(body)["data"][0] == {"x": [1.0, None, None], "name": "a</script><b>"}
