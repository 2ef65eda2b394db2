"""The communication profile of a step: every call counted as the papers count them (docs/formulas.md §2.2)."""

import json
from pathlib import Path

import pytest
from conftest import gpt
from typer.testing import CliRunner

from armillary import Strategy, Training, estimate
from armillary.cli import app
from armillary.estimate.result import ParallelDimension
from armillary.specs.communication import Collective

MODEL = gpt(32, 4096, 32)
W = Training(seq_len=2048, global_batch=256)


def calls_of(r, dim, op):
    return [c for c in r.communication if c.dimension is dim and c.operation is op]


def test_tensor_parallel_all_reduces_per_layer():
    """SC'21 §3.2: 2 all-reduces forward and 2 backward per layer and micro-batch (+2 with full recompute)."""
    for recompute, per_layer in (("none", 4), ("full", 6)):
        r = estimate(MODEL, "dgx-a100", Strategy(tp=8, pp=2, recompute=recompute), W, gpus=64)
        (layers,) = [c for c in calls_of(r, ParallelDimension.TP, Collective.ALL_REDUCE) if c.message_bytes
                     and float(c.per_step) > 100]
        m = float(r.microbatches)
        assert float(layers.per_step) == pytest.approx(per_layer * 16 * m)  # 16 layers per stage
        assert float(layers.message_bytes) == pytest.approx(1 * 2048 * 4096 * 2)  # b s h, 16-bit


def test_sequence_parallel_turns_all_reduces_into_gathers_and_scatters():
    r = estimate(MODEL, "dgx-a100", Strategy(tp=8, pp=2, sequence_parallel=True), W, gpus=64)
    m = float(r.microbatches)
    (ag,) = calls_of(r, ParallelDimension.SP, Collective.ALL_GATHER)
    (rs,) = calls_of(r, ParallelDimension.SP, Collective.REDUCE_SCATTER)
    assert float(ag.per_step) == pytest.approx(6 * 16 * m)  # 2 fwd, 2 bwd, 2 re-gathered for weight grads
    assert float(rs.per_step) == pytest.approx(4 * 16 * m)


def test_pipeline_sends_two_per_microbatch_and_chunk():
    r = estimate(MODEL, "dgx-a100", Strategy(tp=2, pp=4, vpp=2), W, gpus=64)
    (send,) = calls_of(r, ParallelDimension.PP, Collective.SEND_RECV)
    assert float(send.per_step) == pytest.approx(2 * 2 * float(r.microbatches))


@pytest.mark.parametrize(("zero", "expected"), [
    (0, {Collective.ALL_REDUCE: 1}),
    (1, {Collective.REDUCE_SCATTER: 1, Collective.ALL_GATHER: 1}),
])
def test_data_parallel_calls_per_zero_stage(zero, expected):
    r = estimate(MODEL, "dgx-a100", Strategy(tp=8, zero=zero), W, gpus=64)
    got = {c.operation: float(c.per_step) for c in r.communication if c.dimension is ParallelDimension.DP}
    assert got == expected


def test_calls_add_up_to_the_traffic():
    r = estimate(MODEL, "dgx-a100", Strategy(tp=4, pp=2, zero=3, sequence_parallel=True), W, gpus=64)
    up = sum(float(c.per_step * c.scale_up_bytes_each) for c in r.communication)
    out = sum(float(c.per_step * c.scale_out_bytes_each) for c in r.communication)
    assert up == pytest.approx(float(r.traffic.scale_up_bytes))
    assert out == pytest.approx(float(r.traffic.scale_out_bytes))


def test_comm_profile_command(tmp_path):
    example = Path(__file__).parent.parent / "examples" / "gpt3-175b-a100.yaml"
    runner = CliRunner()
    table = runner.invoke(app, ["comm-profile", str(example), "--plot", str(tmp_path / "h.png")])
    assert table.exit_code == 0, table.output
    assert (tmp_path / "h.png").stat().st_size > 5000
    data = json.loads(runner.invoke(app, ["comm-profile", str(example), "--json"]).output)
    assert {d["dimension"] for d in data} == {"TP", "SP", "PP", "DP"}  # the example runs sequence parallel
    assert all(d["per_step"] > 0 and d["time_each_s"] > 0 for d in data)


def test_comm_profile_drops_the_calls_of_a_one_rank_dimension(tmp_path):
    # tp = 1: the estimator lists the embedding / LM-head TP all-reduces at no time and no bytes; the profile
    # prints only what communicates (issue 48)
    example = Path(__file__).parent.parent / "examples" / "mixtral-8x7b-h100.yaml"
    text = example.read_text().replace("  tp: 2\n", "  tp: 1\n").replace("sequence_parallel: true",
                                                                       "sequence_parallel: false")
    run = tmp_path / "tp1.yaml"
    run.write_text(text)
    runner = CliRunner()
    data = json.loads(runner.invoke(app, ["comm-profile", str(run), "--json"]).output)
    assert {d["dimension"] for d in data} == {"EP", "PP", "DP", "EDP"}
    table = runner.invoke(app, ["comm-profile", str(run)])
    assert table.exit_code == 0 and "TP " not in table.output and "EP " in table.output
