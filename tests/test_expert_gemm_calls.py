"""Grouped expert GEMMs run as one library call per expert (Transformer Engine's multi-stream cuBLASLt
GroupedLinear): each local expert adds at least one call's host and launch time to each grouped GEMM,
however few tokens it gets. Checked by hand on the kernels and on a whole step."""

from __future__ import annotations

import pytest

from armillary.api import estimate
from armillary.estimate.kernels import layer_kernels
from armillary.plan.arrays import ModelArrays
from armillary.specs.loading import load_model, load_system, load_workload
from armillary.specs.strategy import Strategy
from armillary.workload.experts import experts_forward
from armillary.workload.transformer import ends_forward, layer_forward

QWEN = load_model("qwen3-30b-a3b")
B200 = load_system("dgx-b200", 8)


def _kernels(tokens: float, call: float):
    m = ModelArrays.of(QWEN)
    ex = experts_forward(m, tokens, 8.0, 1.0, 1.0, 2.0, 2.0)  # ep 8: 16 local experts
    kt = layer_kernels(layer_forward(m, 1.0, tokens, 1.0, 0.0, 2.0), ends_forward(m, 1.0, tokens, 1.0, 2.0), ex,
                       B200.device, 0, 2.0, call)
    return ex, kt


def test_each_local_expert_costs_a_call_when_its_gemm_is_shorter():
    """Qwen3-30B-A3B on 8 ranks of EP: 128 experts, 16 per rank. 64 tokens per rank x top-8 reach a rank's
    experts as 32 tokens each: their GEMMs take a few microseconds, so 16 calls of 30 us bound each grouped
    GEMM."""
    call = 30e-6
    ex, plain = _kernels(64.0, 0.0)
    _, called = _kernels(64.0, call)
    assert float(ex.experts_in.group) == pytest.approx(16.0, rel=1e-3)  # every local expert gets tokens
    assert float(plain.experts_in) < 16 * call and float(plain.experts_out) < 16 * call
    assert float(called.experts_in) == pytest.approx(float(ex.experts_in.group) * call, rel=1e-12)
    assert float(called.experts_out) == pytest.approx(float(ex.experts_out.group) * call, rel=1e-12)
    assert float(called.qkv) == float(plain.qkv)  # only the routed experts' GEMMs


def test_large_experts_hide_their_calls():
    """With 64K tokens per rank each expert's GEMM outlasts a 30 us call: nothing changes."""
    _, plain = _kernels(65536.0, 0.0)
    _, called = _kernels(65536.0, 30e-6)
    assert float(called.experts_in) == float(plain.experts_in)
    assert float(called.experts_out) == float(plain.experts_out)


def _step(call: float) -> float:
    strategy = Strategy(tp=1, pp=1, ep=8, micro_batch=1, attention="flash", recompute="none",
                        expert_gemm_call=call, overlap={"dp_grad_reduce": True, "ep_comm": False})
    work = load_workload({"seq_len": 4096, "global_batch": 64})
    return float(estimate(QWEN, B200, strategy, work).step_time_s)


def test_the_step_pays_six_grouped_gemms_per_layer_and_micro_batch_by_hand():
    """Where the calls bound every grouped GEMM, one more microsecond per call costs forward (fc1, fc2),
    input gradient and weight gradient (two each): 6 x 16 local experts x 48 layers x 8 micro-batches."""
    a, b = _step(1e-3), _step(1.001e-3)
    assert b - a == pytest.approx(6 * 16 * 48 * 8 * 1e-6, rel=1e-6)
    assert _step(0.0) < _step(30e-6) < a  # never faster with a slower call


def test_the_estimate_says_how_long_the_experts_wait_on_their_calls():
    """The MoE layer's kernels grow by exactly what it reports as the wait on per-expert calls (forward,
    input and weight gradients), and the estimate table prints it."""
    from rich.console import Console

    from armillary.report.tables import estimate_tables

    def run(call: float):
        strategy = Strategy(tp=1, pp=1, ep=8, micro_batch=1, attention="flash", recompute="none",
                            expert_gemm_call=call)
        return estimate(QWEN, B200, strategy, load_workload({"seq_len": 4096, "global_batch": 64}))

    plain, called = run(0.0), run(30e-6)
    assert float(plain.moe_layer.expert_calls_s) == 0.0
    grown = float(called.moe_layer.compute_s) - float(plain.moe_layer.compute_s)
    assert float(called.moe_layer.expert_calls_s) == pytest.approx(grown, rel=1e-9)
    assert 0 < grown <= 6 * 16 * 30e-6  # never more than the calls themselves
    def printed(est) -> str:
        console = Console(record=True, width=200)
        console.print(estimate_tables(est, "t")[0])
        return console.export_text()

    assert "waiting on per-expert GEMM calls" in printed(called)
    assert "MoE layer kernels" not in printed(plain)
