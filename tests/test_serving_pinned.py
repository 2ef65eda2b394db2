"""Serving results pinned before the simulation's speed work (issue 17): the same requests' times after any
change to how the event loop is run (not to what it models). Values from the event loop as of f6d8782,
re-pinned when fused attention started paying a query block's fixed work (same iterations and
preemptions, times within 0.05%); a model change that moves them must update them on purpose."""

import numpy as np
import pytest

from armillary.api import simulate_serving
from armillary.specs.run import load_run
from armillary.specs.workload import Policy

EXAMPLE = "examples/llama2-70b-serving-h100.yaml"


def _sums(result):  # type: ignore[no-untyped-def]
    t = result.times
    return float(np.nansum(t.first_token_s)), float(np.nansum(t.finish_s))


@pytest.mark.parametrize(("rate", "duration", "requests", "iterations", "first", "finish"), [
    (2.0, 60.0, 101, 11705, 2874.385161499365, 3156.9977428575885),  # light: decode stretches
    (40.0, 10.0, 363, 1918, 3432.076060116341, 8571.873172323194),  # overloaded: full batches
])
def test_the_example_serves_as_pinned(rate, duration, requests, iterations, first, finish):  # type: ignore[no-untyped-def]
    model, system, strategy, w = load_run(EXAMPLE)
    r = simulate_serving(model, system, strategy, w, rate, duration)
    assert (r.requests, r.iterations, r.preemptions) == (requests, iterations, 0)
    assert _sums(r) == pytest.approx((first, finish), rel=1e-12)


@pytest.mark.parametrize(("policy", "iterations", "preemptions", "first", "finish"), [
    (Policy.GUARANTEED_NO_EVICT, 2656, 0, 1595.0140665912163, 2400.3706241201207),
    (Policy.RECOMPUTE, 2526, 18, 1603.9066857738435, 2483.380768591913),
    (Policy.SWAP, 2526, 18, 1537.443270792804, 2378.0246964801154),
])
def test_each_policy_under_a_small_cache_serves_as_pinned(policy, iterations, preemptions, first, finish):  # type: ignore[no-untyped-def]
    model, system, strategy, w = load_run(EXAMPLE)
    w = w.model_copy(update={"serving": w.serving.model_copy(update={"policy": policy}),
                             "kv_cache": w.kv_cache.model_copy(update={"memory_fraction": 0.03})})
    r = simulate_serving(model, system, strategy, w, 20.0, 10.0)
    assert (r.requests, r.iterations, r.preemptions, r.kv_blocks_per_device) == (174, iterations, preemptions, 778)
    assert _sums(r) == pytest.approx((first, finish), rel=1e-12)
