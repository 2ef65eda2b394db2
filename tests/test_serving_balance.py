"""Balancing requests over replicas by the tokens they still have to compute, on hand-checked traces."""

import pytest
from conftest import hand_trace, one_second_per_iteration

from armillary.api import simulate_serving
from armillary.errors import SpecError
from armillary.serving.balance import serve_least_outstanding
from armillary.serving.scheduler import ReplicaState
from armillary.serving.simulate import SchedulerLimits, run_until, simulate_replica

LIMITS = SchedulerLimits(max_batch=8, max_batched_tokens=16, chunked_prefill=True, kv_blocks=1000, block_tokens=4)


def test_outstanding_tokens_are_the_prompt_not_yet_cached_and_the_output_not_yet_generated():
    s = ReplicaState.empty(4, LIMITS, prefilled=False, prefill_only=False)
    s.add(0.0, 40, 10)
    assert s.outstanding_tokens() == 50
    run_until(s, one_second_per_iteration, 1.0)  # [0, 1]: the first 16-token chunk of the prompt
    assert s.now == 1.0 and s.outstanding_tokens() == 50 - 16
    run_until(s, one_second_per_iteration, 3.0)  # [1, 2] 16 more, [2, 3] the last 8 and the first token
    assert s.outstanding_tokens() == 9
    run_until(s, one_second_per_iteration, 5.0)  # [3, 4] and [4, 5]: output tokens 2 and 3 (cached 42)
    assert s.outstanding_tokens() == 7
    s.add(5.0, 8, 2)
    assert s.outstanding_tokens() == 7 + 10
    run_until(s, one_second_per_iteration)
    assert s.outstanding_tokens() == 0 and s.done == 2


def test_a_short_request_goes_past_a_long_one_to_the_less_loaded_replica():
    # t=0 a long request (160 prompt + 20 output tokens) takes replica 0 (a tie: the lower number); at 0.5 a
    # short one (8 + 2) takes the idle replica 1; at 1.5 another short one finds replica 0 with 164 tokens
    # to go and replica 1 with 1 (its prompt done at 1, one output token at 2 still to come): replica 1.
    # Round robin would queue it on replica 0 behind the long prompt's chunks.
    trace = hand_trace((0.0, 160, 20), (0.5, 8, 2), (1.5, 8, 2))
    parts = serve_least_outstanding(trace, one_second_per_iteration, LIMITS, 2)
    assert [mine.tolist() for mine, _ in parts] == [[0], [1, 2]]
    (_, long_run), (_, short_run) = parts
    # replica 1: [0.5, 1.5] prompt of #1 and its first token, [1.5, 2.5] #1's last token with #2's prompt
    # chunk and first token, [2.5, 3.5] #2's last token
    assert short_run.times.first_token_s.tolist() == [1.5, 2.5]
    assert short_run.times.finish_s.tolist() == [2.5, 3.5]
    alone = simulate_replica(trace.subset(slice(0, 1)), one_second_per_iteration, LIMITS)
    assert long_run.times.finish_s.tolist() == alone.times.finish_s.tolist()  # untouched by the others


def test_requests_far_apart_are_served_as_alone_whichever_replica_takes_them():
    trace = hand_trace(*((100.0 * k, 30 + 7 * k, 5 + k) for k in range(6)))
    parts = serve_least_outstanding(trace, one_second_per_iteration, LIMITS, 3)
    assert [mine.tolist() for mine, _ in parts] == [[0, 1, 2, 3, 4, 5], [], []]  # always the first of equals
    alone = simulate_replica(trace, one_second_per_iteration, LIMITS)
    assert parts[0][1].times.finish_s.tolist() == alone.times.finish_s.tolist()


RUN = ("llama2-7b", "dgx-h100", {"tp": 1}, {"kind": "inference", "input_len": 512, "output_len": 64})


def test_balancing_by_tokens_shortens_the_ttft_tail_of_mixed_lengths_under_load():
    serving = {"lengths": "lognormal", "spread": 1.0, "seed": 3}
    results = {b: simulate_serving(*RUN[:3], {**RUN[3], "serving": {**serving, "balance": b}}, rate=60,
                                   duration_s=60, gpus=4)
               for b in ("round_robin", "least_outstanding_tokens")}
    rr, lot = results["round_robin"], results["least_outstanding_tokens"]
    assert lot.completed == rr.completed == rr.requests
    assert lot.ttft_s.p99 < rr.ttft_s.p99


def test_a_closed_loop_client_cannot_be_balanced_by_tokens():
    workload = {**RUN[3], "serving": {"balance": "least_outstanding_tokens", "concurrency": 4}}
    with pytest.raises(SpecError, match=r"serving\.balance"):
        simulate_serving(*RUN[:3], workload, rate=1, duration_s=5, gpus=2)


def test_both_pools_of_a_disaggregated_deployment_balance_by_tokens():
    serving = {"prefill_replicas": 2, "lengths": "lognormal", "spread": 1.0}
    results = [simulate_serving(*RUN[:3], {**RUN[3], "serving": {**serving, "balance": b}}, rate=40, duration_s=10,
                                gpus=6) for b in ("round_robin", "least_outstanding_tokens")]
    assert results[0].requests == results[1].requests == results[1].completed
    # the same requests, each prefilled once and decoded once: the same tokens out
    assert results[0].output_tokens_per_s * results[0].makespan_s == pytest.approx(
        results[1].output_tokens_per_s * results[1].makespan_s)
