"""Serving simulation: the scheduler on hand-checkable traces, agreement with the analytical prefill at low
load, disaggregation, traces, the rate search and the CLI."""

import json

import numpy as np
import pytest
from conftest import hand_trace, one_second_per_iteration
from typer.testing import CliRunner

from armillary.api import estimate, simulate_serving
from armillary.cli import app
from armillary.errors import SpecError
from armillary.serving.simulate import SchedulerLimits, simulate_replica
from armillary.serving.trace import load_trace, poisson_trace
from armillary.specs.workload import LengthDistribution

FLASH = {"precision": "bf16", "attention": "flash"}
WORKLOAD = {"kind": "inference", "input_len": 512, "output_len": 64}


def test_continuous_batching_by_hand():
    # A arrives at 0 (4 prompt tokens, 3 out), B at 0.5 (4, 2); one second per iteration:
    # [0,1] A's prompt -> A's first token; [1,2] A decodes while B's prompt joins -> B's first token;
    # [2,3] both decode: A's third and B's second token, both finish
    limits = SchedulerLimits(max_batch=8, max_batched_tokens=8, chunked_prefill=True, kv_blocks=100, block_tokens=4)
    run = simulate_replica(hand_trace((0.0, 4, 3), (0.5, 4, 2)), one_second_per_iteration, limits)
    assert run.times.first_token_s.tolist() == [1.0, 2.0]
    assert run.times.finish_s.tolist() == [3.0, 3.0]
    assert run.iterations == 3 and run.batched_sequences == 5


def test_chunked_prefill_splits_a_prompt_over_iterations():
    limits = SchedulerLimits(max_batch=8, max_batched_tokens=3, chunked_prefill=True, kv_blocks=100, block_tokens=4)
    run = simulate_replica(hand_trace((0.0, 7, 2)), one_second_per_iteration, limits)
    assert run.times.first_token_s[0] == 3.0  # chunks of 3, 3, 1 tokens
    assert run.times.finish_s[0] == 4.0


def test_without_chunking_prompts_run_in_iterations_of_their_own():
    limits = SchedulerLimits(max_batch=8, max_batched_tokens=8, chunked_prefill=False, kv_blocks=100, block_tokens=4)
    run = simulate_replica(hand_trace((0.0, 4, 3), (0.5, 4, 2)), one_second_per_iteration, limits)
    # [1,2] B's prompt alone (A waits), then both decode
    assert run.times.first_token_s.tolist() == [1.0, 2.0]
    assert run.times.finish_s.tolist() == [4.0, 3.0]


def test_full_cache_preempts_the_newest_sequence_and_recomputes_it():
    # 3 pages of 4 tokens: both prompts fit (a page each), the next token of each needs a page more
    limits = SchedulerLimits(max_batch=8, max_batched_tokens=16, chunked_prefill=True, kv_blocks=3, block_tokens=4)
    run = simulate_replica(hand_trace((0.0, 4, 4), (0.0, 4, 4)), one_second_per_iteration, limits)
    assert run.times.preemptions.tolist() == [0, 1]
    assert np.isfinite(run.times.finish_s).all() and run.times.finish_s[1] > run.times.finish_s[0]


def test_a_watermark_keeps_a_prompt_waiting_instead_of_evicting_it_later():
    # 3 pages of 4 tokens, one second per iteration. Without a watermark both prompts run at once and B is
    # evicted when A needs its second page; with 2 pages kept free (vLLM V0's block-manager watermark) B
    # waits for A to finish: A [0,1] prompt, [1,3] decodes; B [3,4] prompt, [4,5] its last token
    trace = hand_trace((0.0, 4, 3), (0.0, 4, 2))
    eager = SchedulerLimits(max_batch=8, max_batched_tokens=8, chunked_prefill=False, kv_blocks=3, block_tokens=4)
    run = simulate_replica(trace, one_second_per_iteration, eager)
    assert run.times.preemptions.tolist() == [0, 1] and run.times.first_token_s.tolist() == [1.0, 1.0]
    held = SchedulerLimits(max_batch=8, max_batched_tokens=8, chunked_prefill=False, kv_blocks=3, block_tokens=4,
                           watermark_blocks=2)
    run = simulate_replica(trace, one_second_per_iteration, held)
    assert run.times.preemptions.tolist() == [0, 0]
    assert run.times.first_token_s.tolist() == [1.0, 4.0] and run.times.finish_s.tolist() == [3.0, 5.0]
    # a request that needs the watermark's pages runs once the cache is empty, rather than wait forever
    run = simulate_replica(hand_trace((0.0, 8, 1), (0.0, 8, 1)), one_second_per_iteration, held)
    assert run.times.finish_s.tolist() == [1.0, 2.0]


def test_vllm_v0_keeps_one_percent_of_its_pages_free_when_admitting():
    from armillary.estimate.inference import replica_model
    from armillary.plan.arrays import ModelArrays
    from armillary.serving.engine import load_engine
    from armillary.serving.launch import with_engine
    from armillary.serving.run import _limits
    from armillary.specs.loading import load_model, load_system
    from armillary.specs.strategy import Strategy
    from armillary.specs.workload import Inference

    w, engine = with_engine(Inference.model_validate(WORKLOAD), load_engine("vllm-0.6"))
    r = replica_model(ModelArrays.of(load_model("llama2-7b")), Strategy.model_validate(FLASH), w,
                      load_system("dgx-h100", 1))
    limits = _limits(r, w, 512, engine)
    assert limits.watermark_blocks == int(0.01 * limits.kv_blocks) > 0
    assert _limits(r, w, 512, load_engine("vllm-0.8")).watermark_blocks == 0


def test_a_request_larger_than_the_cache_is_rejected():
    limits = SchedulerLimits(max_batch=8, max_batched_tokens=16, chunked_prefill=True, kv_blocks=2, block_tokens=4)
    run = simulate_replica(hand_trace((0.0, 8, 4), (1.0, 2, 2)), one_second_per_iteration, limits)
    assert np.isnan(run.times.first_token_s[0]) and np.isfinite(run.times.finish_s[1])


def test_low_load_ttft_is_the_analytical_prefill_and_tpot_the_decode_step():
    static = estimate("llama2-7b", "dgx-h100", FLASH, WORKLOAD, gpus=1)
    trace = hand_trace((0.0, 512, 64), (100.0, 512, 64), (200.0, 512, 64))
    served = simulate_serving("llama2-7b", "dgx-h100", FLASH, WORKLOAD, gpus=1, trace=trace)
    ttft = served.times.first_token_s - served.times.arrival_s
    np.testing.assert_allclose(ttft, static.ttft_s, rtol=1e-9)
    assert served.tpot_s.mean == pytest.approx(static.tpot_s, rel=1e-9)
    assert served.completed == 3 and served.preemptions == 0


def test_same_seed_same_result_and_load_raises_latency():
    quiet = simulate_serving("llama2-7b", "dgx-h100", FLASH, WORKLOAD, rate=1, duration_s=30, gpus=1)
    again = simulate_serving("llama2-7b", "dgx-h100", FLASH, WORKLOAD, rate=1, duration_s=30, gpus=1)
    busy = simulate_serving("llama2-7b", "dgx-h100", FLASH, WORKLOAD, rate=40, duration_s=30, gpus=1)
    assert quiet.to_dict() == again.to_dict()
    assert busy.ttft_s.p90 > quiet.ttft_s.p90 and busy.tpot_s.p99 > quiet.tpot_s.p99
    assert busy.mean_batch > quiet.mean_batch and busy.output_tokens_per_s > quiet.output_tokens_per_s


def test_replicas_share_the_load():
    one = simulate_serving("llama2-7b", "dgx-h100", FLASH, WORKLOAD, rate=40, duration_s=20, gpus=1)
    two = simulate_serving("llama2-7b", "dgx-h100", FLASH, WORKLOAD, rate=40, duration_s=20, gpus=2)
    assert two.replicas == 2 and two.devices == 2
    assert two.ttft_s.p90 < one.ttft_s.p90 and two.mean_batch < one.mean_batch


def test_disaggregated_prefill_hands_the_cache_to_a_decode_replica():
    workload = {**WORKLOAD, "serving": {"prefill_replicas": 1}}
    static = estimate("llama2-7b", "dgx-h100", FLASH, WORKLOAD, gpus=1)
    trace = hand_trace((0.0, 512, 64), (100.0, 512, 64))
    split = simulate_serving("llama2-7b", "dgx-h100", FLASH, workload, gpus=2, trace=trace)
    np.testing.assert_allclose(split.times.first_token_s - trace.arrival_s, static.ttft_s, rtol=1e-9)
    # the decode replica starts after the handover: end to end exceeds the colocated one
    assert split.e2e_s.mean > static.e2e_s
    assert split.tpot_s.mean > static.tpot_s  # the handover sits between the first and second token
    with pytest.raises(SpecError, match="prefill_replicas"):
        simulate_serving("llama2-7b", "dgx-h100", FLASH, workload, gpus=1, trace=trace)


def test_traces_generated_and_loaded(tmp_path):
    t = poisson_trace(10, 100, 256, 32, LengthDistribution.LOGNORMAL, 0.5, seed=3)
    assert 800 < len(t) < 1200 and (np.diff(t.arrival_s) >= 0).all()
    assert t.input_len.mean() == pytest.approx(256, rel=0.1) and t.output_len.min() >= 1
    same = poisson_trace(10, 100, 256, 32, seed=3).arrival_s
    assert (same == poisson_trace(10, 100, 256, 32, seed=3).arrival_s).all()
    path = tmp_path / "trace.csv"
    path.write_text("arrival_s,input_len,output_len\n2.0,10,5\n0.5,20,3\n")
    loaded = load_trace(path)
    assert loaded.arrival_s.tolist() == [0.5, 2.0] and loaded.input_len.tolist() == [20, 10]
    path.write_text("when,input_len\n1,2\n")
    with pytest.raises(SpecError, match="arrival_s"):
        load_trace(path)


def test_a_run_meets_its_slos_at_a_low_rate_and_not_past_capacity():
    workload = {**WORKLOAD, "serving": {"ttft_slo_s": 0.2, "tpot_slo_s": 0.02}}

    def serve(rate):
        return simulate_serving("llama2-7b", "dgx-h100", FLASH, workload, rate=rate, duration_s=20, gpus=1)

    light = serve(1.0)
    assert light.meets() and light.ttft_s.p90 <= 0.2 and light.tpot_s.p99 <= 0.02
    assert not serve(1000.0).meets()


def test_serve_cli(tmp_path):
    run = tmp_path / "run.yaml"
    run.write_text("model: llama2-7b\nsystem: dgx-h100\ngpus: 1\nstrategy: {attention: flash}\n"
                   "workload: {kind: inference, input_len: 256, output_len: 32}\n")
    out = CliRunner().invoke(app, ["serve", str(run), "--rate", "5", "--duration", "10", "--json",
                                   "--csv", str(tmp_path / "times.csv")])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["completed"] == data["requests"] > 20 and data["ttft_s"]["p90"] > 0
    assert len((tmp_path / "times.csv").read_text().splitlines()) == data["requests"] + 1
    table = CliRunner().invoke(app, ["serve", str(run), "--rate", "5", "--duration", "5"])
    assert "time to first token" in table.output
    missing = CliRunner().invoke(app, ["serve", str(run)])
    assert missing.exit_code == 2 and "--rate" in missing.output
    training = tmp_path / "train.yaml"
    training.write_text("model: llama2-7b\nsystem: dgx-h100\ngpus: 1\nworkload: {seq_len: 128, global_batch: 8}\n")
    wrong = CliRunner().invoke(app, ["serve", str(training), "--rate", "1"])
    assert wrong.exit_code == 2 and "inference workload" in wrong.output


def test_estimate_with_a_trace_file_serves_it(tmp_path):
    (tmp_path / "requests.csv").write_text("arrival_s,input_len,output_len\n0,128,16\n0.5,256,8\n30,64,4\n")
    run = tmp_path / "run.yaml"
    run.write_text("model: llama2-7b\nsystem: dgx-h100\ngpus: 1\nstrategy: {attention: flash}\n"
                   "workload: {kind: inference, input_len: 1, output_len: 1, serving: {trace: requests.csv}}\n")
    out = CliRunner().invoke(app, ["estimate", str(run), "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["requests"] == data["completed"] == 3
