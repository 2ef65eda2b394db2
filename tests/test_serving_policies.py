"""Capacity policies on hand-checked traces, closed-loop clients, prefix reuse, engine profiles, and
properties of the scheduler (hypothesis)."""

import numpy as np
import pytest
from conftest import hand_trace, one_second_per_iteration
from hypothesis import given, settings
from hypothesis import strategies as st

from armillary.errors import SpecError
from armillary.presets.registry import preset_names
from armillary.serving.engine import OPTIONAL_RULES, Engine, load_engine
from armillary.serving.launch import with_engine
from armillary.serving.simulate import SchedulerLimits, simulate_replica
from armillary.serving.trace import arrival_times, benchmark_trace, scaled
from armillary.specs.workload import Arrivals, Inference, Policy


def _limits(policy, blocks, block_tokens=4, **kw):
    return SchedulerLimits(max_batch=8, max_batched_tokens=16, chunked_prefill=True, kv_blocks=blocks,
                           block_tokens=block_tokens, policy=policy, **kw)


TWO = ((0.0, 4, 4), (0.0, 4, 4))  # two requests of 4 prompt and 4 output tokens: 8 tokens = 2 pages each


def test_no_evict_reserves_the_whole_request_and_the_second_waits():
    # 3 pages: A reserves 2 (prompt + output) at t=0; B needs 2, 1 is free: it waits for A.
    # [0,1] A's prompt (token 1), [1,2] [2,3] [3,4] A's tokens 2-4: A done at 4, its pages free;
    # [4,5] B's prompt, then B's tokens 2-4 at 6, 7, 8
    run = simulate_replica(hand_trace(*TWO), one_second_per_iteration, _limits(Policy.GUARANTEED_NO_EVICT, 3))
    assert run.times.first_token_s.tolist() == [1.0, 5.0]
    assert run.times.finish_s.tolist() == [4.0, 8.0]
    assert run.times.preemptions.tolist() == [0, 0]
    assert run.iterations == 8 and run.batched_sequences == 8  # one sequence per iteration throughout


@pytest.mark.parametrize("policy", [Policy.RECOMPUTE, Policy.MAX_UTILIZATION])
def test_recompute_admits_both_and_evicts_the_newest(policy):
    # both prompts fit (a page each): [0,1] both prefill, first tokens at 1. At 1 each needs a second page,
    # 1 is free: A takes it, B (newest) is evicted. A's tokens 2-4 at 2, 3, 4; its 2 pages free at 4.
    # B recomputes prompt + its 1 token (5 tokens, 2 pages) in [4,5] -> token 2; tokens 3, 4 at 6, 7
    run = simulate_replica(hand_trace(*TWO), one_second_per_iteration, _limits(policy, 3))
    assert run.times.first_token_s.tolist() == [1.0, 1.0]
    assert run.times.finish_s.tolist() == [4.0, 7.0]
    assert run.times.preemptions.tolist() == [0, 1]


def test_swap_moves_the_evicted_cache_out_and_back():
    # as recompute, but B's 4 cached tokens go to the second tier at 0.25 s per token (1 s) within the
    # iteration [1,3]; A's tokens 3, 4 at 4, 5; B's cache comes back (1 s) with its token 2 in [5,7],
    # tokens 3, 4 at 8, 9
    limits = _limits(Policy.SWAP, 3, swap_s_per_token=0.25)
    run = simulate_replica(hand_trace(*TWO), one_second_per_iteration, limits)
    assert run.times.first_token_s.tolist() == [1.0, 1.0]
    assert run.times.finish_s.tolist() == [5.0, 9.0]
    assert run.times.preemptions.tolist() == [0, 1]


def test_long_prompts_no_evict_runs_a_smaller_batch_without_preemptions():
    # 20K-token prompts, 2K outputs, pages of 16: a request needs 1375 pages to finish; 4000 pages hold
    # three prompts (3750) but only two whole requests (2750)
    trace = hand_trace(*[(0.0, 20_000, 2_000)] * 6)
    base = dict(max_batch=64, max_batched_tokens=8192, chunked_prefill=True, kv_blocks=4000, block_tokens=16)
    safe = simulate_replica(trace, one_second_per_iteration, SchedulerLimits(**base,
                                                                              policy=Policy.GUARANTEED_NO_EVICT))
    greedy = simulate_replica(trace, one_second_per_iteration, SchedulerLimits(**base, policy=Policy.RECOMPUTE))
    assert safe.times.preemptions.sum() == 0 and greedy.times.preemptions.sum() > 0
    # no-evict: two at a time. A's prompt takes chunks 8192, 8192, 3616 (first token at 3), B's the rest
    # of iteration 3 and iterations 4-5 beside A's decodes (first token at 5); 1999 decodes each: A done
    # at 2002, B at 2004. C takes A's pages at 2002: chunks of 8191 beside B's decode, first token at 2005,
    # done at 4004; D at 2004 likewise: 4006; then E and F: 6006, 6008
    np.testing.assert_array_equal(safe.times.finish_s, [2002, 2004, 4004, 4006, 6006, 6008])
    assert safe.batched_sequences / safe.iterations <= 2


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 20), st.integers(1, 40), st.integers(1, 30)), min_size=1, max_size=25),
       st.integers(12, 60), st.booleans())
def test_no_evict_never_preempts(requests, blocks, chunked):
    trace = hand_trace(*sorted(requests))
    limits = SchedulerLimits(8, 16, chunked, blocks, 4, policy=Policy.GUARANTEED_NO_EVICT)
    run = simulate_replica(trace, one_second_per_iteration, limits)
    assert run.times.preemptions.sum() == 0
    fits = -(-(trace.input_len + trace.output_len) // 4) <= blocks
    assert np.isfinite(run.times.finish_s[fits]).all()


def _makespan(n_in, n_out, count, blocks, policy):
    trace = hand_trace(*[(0.0, n_in, n_out)] * count)
    run = simulate_replica(trace, one_second_per_iteration, SchedulerLimits(8, 16, True, blocks, 4, policy=policy))
    return np.nanmax(run.times.finish_s)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 40), st.integers(1, 30), st.integers(2, 20), st.integers(20, 80), st.integers(0, 60))
def test_no_evict_throughput_never_falls_when_kv_capacity_grows(n_in, n_out, count, blocks, more):
    if -(-(n_in + n_out) // 4) <= blocks:
        assert (_makespan(n_in, n_out, count, blocks + more, Policy.GUARANTEED_NO_EVICT)
                <= _makespan(n_in, n_out, count, blocks, Policy.GUARANTEED_NO_EVICT))


def test_recompute_can_lose_throughput_with_more_kv():
    # the greedy policy is not monotone (found by hypothesis): one page more admits a third sequence
    # whose eviction and recompute cost more than it gains; no-evict on the same requests is monotone
    assert _makespan(19, 11, 4, 21, Policy.RECOMPUTE) > _makespan(19, 11, 4, 20, Policy.RECOMPUTE)
    assert (_makespan(19, 11, 4, 21, Policy.GUARANTEED_NO_EVICT)
            <= _makespan(19, 11, 4, 20, Policy.GUARANTEED_NO_EVICT))


def test_closed_loop_keeps_at_most_the_concurrency_outstanding():
    trace = hand_trace(*[(0.0, 8, 5)] * 10)
    limits = SchedulerLimits(8, 64, True, 1000, 4, concurrency=3)
    run = simulate_replica(trace, one_second_per_iteration, limits)
    sent, finish = run.times.arrival_s, run.times.finish_s
    for t in np.unique(np.concatenate([sent, finish])):
        assert ((sent <= t) & (finish > t)).sum() <= 3
    # three at 0 finish together at 5 (prompt, then 4 decodes); the next three are sent at 5
    assert sent.tolist()[:6] == [0, 0, 0, 5, 5, 5] and finish[:3].tolist() == [5, 5, 5]


def test_prefix_hits_skip_their_tokens_and_request_overhead_delays_the_queue():
    limits = SchedulerLimits(8, 4, True, 1000, 4, prefix_hit_rate=0.5, request_overhead_s=0.5)
    run = simulate_replica(hand_trace((0.0, 16, 2)), one_second_per_iteration, limits)
    # 8 of 16 prompt tokens cached: 2 chunks of 4 from t=0.5, first token at 2.5, second at 3.5
    assert run.times.first_token_s[0] == 2.5 and run.times.finish_s[0] == 3.5


def test_prefix_hits_share_their_pages():
    # 2 requests of 8 prompt + 4 output tokens, half of each prompt a cached prefix (1 page of 4 tokens),
    # 5 pages: without sharing each holds 3 pages (12 tokens) and the second is evicted; with the prefix
    # page the cache's, each owns 2 and both run to the end together
    trace = hand_trace((0.0, 8, 4), (0.0, 8, 4))
    shared = simulate_replica(trace, one_second_per_iteration, _limits(Policy.RECOMPUTE, 5, prefix_hit_rate=0.5))
    alone = simulate_replica(trace, one_second_per_iteration, _limits(Policy.RECOMPUTE, 5))
    assert shared.times.preemptions.tolist() == [0, 0] and shared.times.finish_s.tolist() == [4.0, 4.0]
    assert alone.times.preemptions.sum() == 1


def test_prefix_hits_need_an_engine_that_caches_prefixes():
    w = Inference.model_validate({"input_len": 100, "output_len": 10,
                                  "serving": {"engine": "vllm-0.6", "prefix_hit_rate": 0.5}})
    with pytest.raises(SpecError, match=r"prefix_hit_rate.*does not cache prefixes"):
        with_engine(w)
    caching = with_engine(w, load_engine("vllm-0.6").model_copy(update={"prefix_caching": True}))[0]
    assert caching.serving.prefix_hit_rate == 0.5
    assert with_engine(w.model_copy(update={"serving": w.serving.model_copy(update={"engine": "sglang-0.4"})}))[
        0].serving.prefix_hit_rate == 0.5


def test_arrival_modes():
    rng = np.random.default_rng(0)
    poisson = np.diff(arrival_times(rng, 20_000, 10.0, Arrivals.POISSON))
    bursty = np.diff(arrival_times(rng, 20_000, 10.0, Arrivals.GAMMA, burstiness=0.25))
    assert poisson.mean() == pytest.approx(0.1, rel=0.03) and bursty.mean() == pytest.approx(0.1, rel=0.05)
    assert poisson.std() / poisson.mean() == pytest.approx(1.0, rel=0.05)
    assert bursty.std() / bursty.mean() == pytest.approx(2.0, rel=0.1)  # 1 / sqrt(shape)
    assert (benchmark_trace(50, 5.0, 10, 10, Arrivals.OFFLINE).arrival_s == 0).all()
    t = benchmark_trace(101, 5.0, 10, 10)
    assert (len(t) - 1) / np.ptp(scaled(t, 20.0).arrival_s) == pytest.approx(20.0)


def test_engine_profiles_load_with_a_source_for_every_number():
    names = preset_names("engines")
    assert {"tensorrt-llm-0.6", "vllm-0.6", "vllm-0.8", "sglang-0.4"} <= set(names)
    numbers = [k for k, f in Engine.model_fields.items() if k not in ("name", "matches", "sources", *OPTIONAL_RULES)]
    for name in names:
        engine = load_engine(name)
        stated = set(numbers) | (engine.model_fields_set & set(OPTIONAL_RULES) - {"releases"})  # left out: none
        assert stated <= set(engine.sources), (name, stated - set(engine.sources))
        for tier in engine.releases:  # each release range sources what it sets
            assert tier.model_fields_set - {"since", "before", "sources"} <= set(tier.sources), (name, tier.since)
    with pytest.raises(SpecError, match="presets"):
        load_engine("no-such-engine")


def test_an_engine_fills_only_what_the_workload_leaves_unset():
    w = Inference.model_validate({"input_len": 10, "output_len": 10,
                                  "serving": {"engine": "tensorrt-llm-0.6", "max_batch": 64}})
    filled, engine = with_engine(w)
    assert engine is not None and filled.serving.policy is Policy.GUARANTEED_NO_EVICT
    assert filled.serving.max_batch == 64 and filled.serving.chunked_prefill is False
    assert filled.kv_cache.block_tokens == 64 and filled.decode_attention.value == "per_query_head"


def test_serve_cli_with_an_engine_a_closed_loop_and_a_bad_policy(tmp_path):
    import json

    from typer.testing import CliRunner

    from armillary.cli import app

    run = tmp_path / "run.yaml"
    run.write_text("model: llama2-7b\nsystem: dgx-h100\ngpus: 1\nstrategy: {attention: flash}\n"
                   "workload: {kind: inference, input_len: 256, output_len: 32}\n")
    sets = ["--set", "workload.serving.engine=tensorrt-llm-1.0", "--set", "workload.serving.arrivals=offline",
            "--set", "workload.serving.concurrency=4"]
    out = CliRunner().invoke(app, ["serve", str(run), "--rate", "5", "--duration", "8", "--json", *sets])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["requests"] == data["completed"] == 40 and data["preemptions"] == 0
    assert data["mean_batch"] <= 4  # never more than the client's 4 outstanding requests
    bad = CliRunner().invoke(app, ["serve", str(run), "--rate", "5", "--set", "workload.serving.policy=evict"])
    assert bad.exit_code == 2 and "policy" in bad.output
    swap = CliRunner().invoke(app, ["serve", str(run), "--rate", "5", "--duration", "4", "--set",
                                    "workload.serving.policy=swap"])
    assert swap.exit_code == 0, swap.output  # the H100 has host memory behind PCIe for the swapped cache


def test_swap_needs_a_second_memory_tier():
    from armillary.api import simulate_serving

    workload = {"kind": "inference", "input_len": 64, "output_len": 8, "serving": {"policy": "swap"}}
    with pytest.raises(SpecError, match="second memory tier"):
        simulate_serving("llama2-7b", "tpu-v4-pod-slice", {"attention": "flash"}, workload, rate=1.0,
                         duration_s=2.0, gpus=1)
