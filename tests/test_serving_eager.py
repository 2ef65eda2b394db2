"""Eager decode steps: a decode batch replays its CUDA graph only while its longest sequence is within the
graphs' capture length (vLLM V0 max_seq_len_to_capture); past it, or without graphs, the host's time per
kernel is added to the step (`serving.engine.Overheads`). Checked by hand on one request, on the compiled
loops against the model's own functions, and on the harness's reading of the launch flags."""

from dataclasses import replace

import numpy as np
import pytest

from armillary.estimate.inference import replica_model
from armillary.plan.arrays import ModelArrays
from armillary.serving.engine import Overheads, load_engine, overheads, short_kernels
from armillary.serving.run import _limits, serve_trace
from armillary.serving.simulate import IterationCost, simulate_replica
from armillary.serving.trace import Trace, poisson_trace
from armillary.specs.loading import load_model, load_system
from armillary.specs.strategy import Strategy
from armillary.specs.workload import Inference
from armillary.validation.serving_launch import engine_of_row

FLASH = Strategy.model_validate({"precision": "bf16", "attention": "flash"})


def test_only_decode_steps_past_the_capture_length_run_eagerly() -> None:
    o = Overheads(eager_s=0.01, graph_context=100)
    decode_within, decode_past = (np.ones(2), np.array([50, 99])), (np.ones(2), np.array([50, 100]))
    assert float(o.eager(*decode_within)) == 0.0  # longest sequence 100 tokens, the new one included
    assert float(o.eager(*decode_past)) == 0.01
    assert float(o.eager(np.array([1, 300]), np.array([200, 0]))) == 0.0  # a prompt: host stays ahead
    # columns are iterations
    np.testing.assert_array_equal(o.eager(np.ones((2, 3)), np.array([[0, 100, 10], [0, 0, 500]])), [0, 0.01, 0.01])
    no_graphs = Overheads(eager_s=0.01, graph_context=0.0)
    assert float(no_graphs.eager(*decode_within)) == 0.01
    two = Overheads(eager_s=0.01, graph_batch=2)  # graphs captured for up to two sequences
    assert float(two.eager(*decode_within)) == 0.0 and float(two.eager(np.ones(3), np.zeros(3))) == 0.01


def test_short_kernels_of_a_decode_step_by_hand() -> None:
    # Llama: norm, RoPE, cache write, all-reduce + norm, activation, all-reduce, 2 residual adds = 9 a layer
    assert short_kernels(ModelArrays.of(load_model("llama2-7b")), 32) == 32 * 9
    # DeepSeek-V3: 58 MoE layers of 30 (MLA) + 35 (grouped top-k, shared expert), 3 dense of 30 + 5
    v3 = ModelArrays.of(load_model("deepseek-v3"))
    assert short_kernels(v3, 61) == pytest.approx(58 * 65 + 3 * 35)
    # Qwen3-30B-A3B: GQA attention, softmax top-k without a shared expert: 4 + 35 - 15 - 4 a layer
    assert short_kernels(ModelArrays.of(load_model("qwen3-30b-a3b")), 48) == pytest.approx(48 * 20)


def test_eager_host_time_is_the_short_kernels_of_the_stage_layers() -> None:
    llama = ModelArrays.of(load_model("llama2-7b"))
    engine = load_engine("vllm-0.6").model_copy(update={"eager_kernel_s": 1e-5})
    o = overheads(engine, llama, 32)
    assert o.eager_s == pytest.approx(32 * 9 * 1e-5) and o.graph_context == 8192 and o.graph_batch == np.inf
    assert overheads(engine.model_copy(update={"cuda_graphs": False}), llama, 32).graph_context == 0.0
    assert overheads(load_engine("sglang-0.4"), llama, 32).graph_batch == 160


def _one_request(engine_update: dict) -> tuple[float, int]:
    """Finish time of one request (512 prompt tokens, 64 out) on one H100 under vLLM V0 without host overheads,
    and its eager decode steps."""
    engine = load_engine("vllm-0.6").model_copy(update={
        "iteration_overhead_s": 0.0, "sequence_overhead_s": 0.0, "request_overhead_s": 0.0,
        "eager_kernel_s": 1e-5, **engine_update})
    w = Inference.model_validate({"kind": "inference", "input_len": 512, "output_len": 64})
    trace = Trace(np.array([0.0]), np.array([512]), np.array([64]))
    served = serve_trace(ModelArrays.of(load_model("llama2-7b")), FLASH, w, load_system("dgx-h100", 1), 1, trace,
                         engine)
    return float(served.times.finish_s[0]), served.eager_steps


def test_decode_steps_past_the_capture_length_pay_the_host_time_by_hand() -> None:
    eager_s = 32 * 9 * 1e-5
    graphed, none = _one_request({"graph_max_context": None})
    assert none == 0
    # decode step j (0..62) runs over 512 + j cached tokens and its new one: past 540 from j = 28, 35 steps
    finish, steps = _one_request({"graph_max_context": 540})
    assert steps == 35 and finish - graphed == pytest.approx(35 * eager_s, rel=1e-9)
    # without graphs every decode step is eager, the prompt's pass is not
    finish, steps = _one_request({"cuda_graphs": False})
    assert steps == 63 and finish - graphed == pytest.approx(63 * eager_s, rel=1e-9)


@pytest.mark.parametrize("rate", [2.0, 40.0])
@pytest.mark.parametrize("graphs", [{"graph_context": 560}, {"graph_batch": 8}])
def test_compiled_stretches_add_the_eager_steps_as_the_model_does(rate: float, graphs: dict) -> None:
    w = Inference.model_validate({"kind": "inference", "input_len": 512, "output_len": 64})
    r = replica_model(ModelArrays.of(load_model("llama2-7b")), FLASH, w, load_system("dgx-h100", 1))
    # prompts of 512 +- and 64 output tokens: some decode steps cross 560 tokens; at 40 requests/s the
    # batches pass 8 sequences
    cost = IterationCost(r, 2048, 64, Overheads(eager_s=2e-3, **graphs))
    limits = replace(_limits(r, w, 2048, None), graph_context=cost.overheads.graph_context,
                     graph_batch=cost.overheads.graph_batch)
    trace = poisson_trace(rate, 20.0, 512, 64, seed=3)
    fast = simulate_replica(trace, cost, limits)
    slow = simulate_replica(trace, lambda new, past, emitting: cost.evaluated(new, past, emitting), limits)
    plain = simulate_replica(trace, IterationCost(r, 2048, 64), limits)
    assert (fast.iterations, fast.batched_sequences) == (slow.iterations, slow.batched_sequences)
    np.testing.assert_allclose(fast.times.finish_s, slow.times.finish_s, rtol=1e-12, atol=0)
    assert fast.eager_steps == slow.eager_steps
    later = np.nanmean(fast.times.finish_s - plain.times.finish_s)
    if rate > 2 or "graph_context" in graphs:  # light load: batches of a few sequences stay within 8
        assert later > 0 and fast.eager_steps > 0
    else:
        assert later == 0 and fast.eager_steps == 0


def test_launch_flags_set_the_graphs() -> None:
    row = {"framework": "vLLM 0.6.3 (ROCm): -tp 8 --max-seq-len-to-capture 16384", "other_reported": "",
           "notes": ""}
    assert engine_of_row(row, False, []).graph_max_context == 16384
    assert engine_of_row({**row, "framework": "vLLM 0.6.3: -tp 8"}, False, []).graph_max_context == 8192
    assert engine_of_row({**row, "framework": "vLLM 0.6.3: -tp 8 --enforce-eager"}, False, []).cuda_graphs is False
    assert engine_of_row({**row, "framework": "vLLM 0.6.3: -tp 8 enforce_eager=False"}, False, []).cuda_graphs is True
