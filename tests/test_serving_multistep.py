"""Multi-step scheduling (vLLM V0 --num-scheduler-steps): a decode batch runs its steps before the scheduler
admits anyone, a prompt-only iteration is one step, and the host overheads of a scheduler pass are shared by
its steps. Hand-checked traces at one second per iteration."""

import numpy as np
import pytest
from conftest import one_second_per_iteration
from hypothesis import given, settings
from hypothesis import strategies as st

from armillary.errors import SpecError
from armillary.plan.arrays import ModelArrays
from armillary.serving.engine import load_engine, overheads
from armillary.serving.simulate import SchedulerLimits, simulate_replica
from armillary.serving.trace import Trace
from armillary.specs.loading import load_model
from armillary.specs.workload import Policy
from armillary.validation.serving_launch import engine_of_row


def _columns(new) -> np.ndarray:
    """Iterations as columns (sequences x iterations), one iteration given as a vector."""
    return np.atleast_2d(np.asarray(new).T).T


def _limits(steps: int, chunked: bool = False) -> SchedulerLimits:
    return SchedulerLimits(max_batch=8, max_batched_tokens=64, chunked_prefill=chunked, kv_blocks=100,
                           block_tokens=4, policy=Policy.RECOMPUTE, scheduler_steps=steps)


# A: at 0, 4 prompt + 6 output tokens; B: at 1.5, 4 + 3
A_AND_B = Trace(np.array([0.0, 1.5]), np.array([4, 4]), np.array([6, 3]))


def test_one_step_admits_at_the_next_iteration():
    # [0,1] A's prompt (token 1); [1,2] A's token 2; B arrived at 1.5: [2,3] B's prompt (its token 1 at 3);
    # [3,4] [4,5] both decode (B done at 5 with 3 tokens); A's tokens 5, 6 at 6, 7
    run = simulate_replica(A_AND_B, one_second_per_iteration, _limits(1))
    assert run.times.first_token_s.tolist() == [1.0, 3.0]
    assert run.times.finish_s.tolist() == [7.0, 5.0]


def test_three_steps_admit_only_when_the_run_ends():
    # [0,1] A's prompt, one step; [1,2] starts a 3-step decode run: B, arrived at 1.5, waits for its end at
    # 4 (A's tokens 2, 3, 4 at 2, 3, 4); [4,5] B's prompt (token 1 at 5); a run of both: A's tokens 5, 6 at
    # 6, 7, B's 2, 3 at 6, 7
    run = simulate_replica(A_AND_B, one_second_per_iteration, _limits(3))
    assert run.times.first_token_s.tolist() == [1.0, 5.0]
    assert run.times.finish_s.tolist() == [7.0, 7.0]
    assert run.iterations == 7


def test_a_run_that_loses_its_sequences_ends():
    # A alone: [0,1] prompt, a run [1,2] [2,3] [3,4] (tokens 2-4); A done at 4 with 4 tokens. B arrives at 5
    # to an idle replica: admitted at once (5,6], no run in progress
    trace = Trace(np.array([0.0, 5.0]), np.array([4, 4]), np.array([4, 2]))
    run = simulate_replica(trace, one_second_per_iteration, _limits(3))
    assert run.times.finish_s.tolist() == [4.0, 7.0]
    assert run.times.first_token_s.tolist() == [1.0, 6.0]


def one_second_per_sequence(new, past, emitting):
    sequences, iterations = _columns(new).shape
    return np.full(iterations, float(sequences))


def test_a_finished_sequence_rides_along_until_the_run_ends():
    # one second per sequence in the batch. A (4 + 2) and B (4 + 4) at 0: [0,2] both prompts (first tokens at
    # 2); a 3-step run: [2,4] A's token 2, A done at 4; its slot is stepped to the run's end: [4,6] [6,8] B's
    # tokens 3, 4 over a batch of two (done at 8, not 6)
    trace = Trace(np.array([0.0, 0.0]), np.array([4, 4]), np.array([2, 4]))
    runs = simulate_replica(trace, one_second_per_sequence, _limits(3))
    assert runs.times.finish_s.tolist() == [4.0, 8.0]
    assert runs.iterations == 4 and runs.batched_sequences == 8
    # one step per pass: A leaves the batch at once, B's last two steps take a second each
    once = simulate_replica(trace, one_second_per_sequence, _limits(1))
    assert once.times.finish_s.tolist() == [4.0, 6.0]


def test_riders_leave_with_the_run():
    # A (4 + 2), B (4 + 7), 3 steps: the run [2,4] [4,6] [6,8] carries A from 4 to its end; the next run
    # is B's alone: tokens 5, 6, 7 at 9, 10, 11
    trace = Trace(np.array([0.0, 0.0]), np.array([4, 4]), np.array([2, 7]))
    runs = simulate_replica(trace, one_second_per_sequence, _limits(3))
    assert runs.times.finish_s.tolist() == [4.0, 11.0]


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 20), st.integers(1, 30), st.integers(1, 30)), min_size=1, max_size=12),
       st.integers(2, 8), st.booleans())
def test_multi_step_serves_everyone_and_the_first_request_at_once(requests, steps, chunked):
    requests = sorted(requests)
    trace = Trace(*(np.array(x) for x in zip(*requests, strict=True)))
    once = simulate_replica(trace, one_second_per_iteration, _limits(1, chunked))
    runs = simulate_replica(trace, one_second_per_iteration, _limits(steps, chunked))
    # everyone is served, and the first request (alone at its start) gets its first token as soon
    assert np.all(np.isfinite(runs.times.finish_s))
    assert runs.times.first_token_s[0] == once.times.first_token_s[0]


def test_a_scheduler_pass_is_shared_by_its_steps():
    vllm = load_engine("vllm-0.6")
    llama = ModelArrays.of(load_model("llama3.1-405b"))
    one, fifteen = overheads(vllm, llama, 126), overheads(vllm, llama, 126, 15)
    assert fifteen.iteration_s == pytest.approx(vllm.iteration_overhead_s / 15)
    assert fifteen.sequence_s == pytest.approx(vllm.sequence_overhead_s / 15)
    assert fifteen.request_s == one.request_s and fifteen.eager_s == one.eager_s


@pytest.mark.parametrize("written", ["--num-scheduler-steps 15", "--num-scheduler-step 15",
                                     "num_scheduler_steps=15"])
def test_the_harness_reads_the_steps(written):
    row = {"framework": f"vLLM 0.6.3: vllm serve -tp 8 {written}", "other_reported": "", "notes": ""}
    assert engine_of_row(row, False, []).scheduler_steps == 15


def test_multi_step_with_data_parallel_attention_is_refused():
    from armillary.serving.run import serve_trace
    from armillary.specs.loading import load_system
    from armillary.specs.strategy import Strategy
    from armillary.specs.workload import Inference

    w = Inference.model_validate({"kind": "inference", "input_len": 64, "output_len": 8, "weights": "fp8",
                                  "serving": {"scheduler_steps": 4}})
    strategy = Strategy.model_validate({"tp": 8, "precision": "fp8", "ep": 1, "expert_tp": 8, "attention_dp": 8})
    with pytest.raises(SpecError, match="scheduler_steps"):
        serve_trace(ModelArrays.of(load_model("deepseek-v3")), strategy, w, load_system("hgx-h200", 8), 1,
                    Trace(np.zeros(2), np.full(2, 64), np.full(2, 8)))
