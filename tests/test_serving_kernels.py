"""The serving simulation's compiled loops (serving/kernels.py) against the model's own functions: the
coefficients read off `ReplicaModel` give every iteration's time to 1e-12, and whole simulations costed from
them match those costed through `IterationCost.evaluated` (the model's functions every iteration)."""

from dataclasses import replace

import numpy as np
import pytest

from armillary.estimate.inference import replica_model
from armillary.plan.arrays import ModelArrays
from armillary.serving.run import _limits
from armillary.serving.simulate import IterationCost, simulate_replica
from armillary.serving.trace import poisson_trace
from armillary.specs.loading import load_model, load_system
from armillary.specs.strategy import Strategy
from armillary.specs.workload import Inference

CASES = {
    "llama2-70b tp4, fp8 cache": ("llama2-70b", "dgx-h100", 4, {"tp": 4, "precision": "fp8", "attention": "flash"},
                                  {"kv_cache": {"precision": "fp8"}}),
    "llama2-7b, half the cache on the second tier": ("llama2-7b", "dgx-h100", 1,
                                                     {"precision": "bf16", "attention": "flash"},
                                                     {"kv_cache": {"tier2_fraction": 0.5}}),
    "deepseek-v3 MLA, absorbed decode": ("deepseek-v3", "hgx-h200", 8,
                                         {"tp": 8, "ep": 8, "expert_tp": 1, "precision": "fp8", "attention": "flash3"},
                                         {"weights": "fp8"}),
    "llama2-70b per-query-head decode kernel": ("llama2-70b", "dgx-h100", 8,
                                                {"tp": 8, "precision": "bf16", "attention": "flash1"},
                                                {"decode_attention": "per_query_head"}),
}


def _cost(case: str) -> tuple[IterationCost, object, Inference]:
    model, system, gpus, strategy, extra = CASES[case]
    w = Inference.model_validate({"kind": "inference", "input_len": 512, "output_len": 64, **extra})
    r = replica_model(ModelArrays.of(load_model(model)), Strategy.model_validate(strategy), w,
                      load_system(system, gpus))
    return IterationCost(r, 2048, 64), r, w


@pytest.mark.parametrize("case", CASES)
def test_coefficients_give_each_iteration_as_the_model_does(case: str) -> None:
    cost, _, _ = _cost(case)
    assert cost.fitted is not None and cost.roofline is not None
    rng = np.random.default_rng(7)
    for sequences in (1, 3, 64):
        for prefill in (0, 1, sequences):  # decode only, one prompt chunk among decodes, prompts only
            new = np.ones(sequences, np.int64)
            new[:prefill] = rng.integers(2, 2048 // sequences + 2, prefill)
            past = rng.integers(0, 200_000, sequences).astype(np.int64)
            emitting = int(rng.integers(0, sequences + 1))
            assert float(cost(new, past, emitting)[0]) == pytest.approx(
                float(cost.evaluated(new, past, emitting)[0]), rel=1e-12)


def test_the_second_tier_moves_the_cache_reads_off_hbm() -> None:
    cost, _, _ = _cost("llama2-7b, half the cache on the second tier")
    assert cost.roofline is not None and cost.roofline[2] > 0 and cost.roofline[4] > 0
    plain, _, _ = _cost("llama2-70b tp4, fp8 cache")
    assert plain.roofline is not None and plain.roofline[2] == 0 and plain.roofline[4] == 0


def test_sliding_windows_are_evaluated_by_the_model() -> None:
    w = Inference.model_validate({"kind": "inference", "input_len": 512, "output_len": 64})
    r = replica_model(ModelArrays.of(load_model("gpt-oss-120b")), Strategy.model_validate(
        {"tp": 4, "ep": 4, "expert_tp": 1, "precision": "bf16", "attention": "flash"}), w, load_system("dgx-h100", 4))
    cost = IterationCost(r, 2048, 64)
    assert cost.fitted is None  # not affine in the cached tokens: every iteration through the model
    new, past = np.array([1, 1, 300]), np.array([5000, 20, 0])
    assert float(cost(new, past, 2)[0]) == float(cost.evaluated(new, past, 2)[0])


@pytest.mark.parametrize("case", list(CASES)[:2])
@pytest.mark.parametrize("rate", [2.0, 40.0])
@pytest.mark.parametrize("steps", [1, 4])
def test_a_simulation_from_coefficients_matches_one_through_the_model(case: str, rate: float, steps: int) -> None:
    # light load: decode stretches cut by arrivals; heavy load: full batches, prompt chunks among decodes;
    # multi-step runs: finished sequences stepped to the run's end (costed in the compiled loop too)
    cost, r, w = _cost(case)
    limits = replace(_limits(r, w, 2048, None), scheduler_steps=steps)
    trace = poisson_trace(rate, 20.0, 512, 64, seed=3)
    fast = simulate_replica(trace, cost, limits)
    slow = simulate_replica(trace, lambda new, past, emitting: cost.evaluated(new, past, emitting), limits)
    assert (fast.iterations, fast.batched_sequences) == (slow.iterations, slow.batched_sequences)
    for a, b in ((fast.times.first_token_s, slow.times.first_token_s), (fast.times.finish_s, slow.times.finish_s)):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=0)
