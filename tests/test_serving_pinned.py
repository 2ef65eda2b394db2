"""Serving results pinned before the simulation's speed work (issue 17): the same requests' times after any
change to how the event loop is run (not to what it models). Values from the event loop as of f6d8782,
re-pinned when fused attention started paying a query block's fixed work (656 keys per query on the
H100: iterations within 0.2%, the same preemptions, times within 1.1%); a model change that moves them
must update them on purpose."""

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
    (2.0, 60.0, 101, 11696, 2874.5018005106904, 3157.3650962247957),  # light: decode stretches
    (40.0, 10.0, 363, 1918, 3474.4785393819993, 8652.595040771645),  # overloaded: full batches
])
def test_the_example_serves_as_pinned(rate, duration, requests, iterations, first, finish):  # type: ignore[no-untyped-def]
    model, system, strategy, w = load_run(EXAMPLE)
    r = simulate_serving(model, system, strategy, w, rate, duration)
    assert (r.requests, r.iterations, r.preemptions) == (requests, iterations, 0)
    assert _sums(r) == pytest.approx((first, finish), rel=1e-12)


@pytest.mark.parametrize(("policy", "iterations", "preemptions", "first", "finish"), [
    (Policy.GUARANTEED_NO_EVICT, 2653, 0, 1603.0294287635834, 2412.3602753050054),
    (Policy.RECOMPUTE, 2525, 18, 1612.7912513665503, 2497.61842234564),
    (Policy.SWAP, 2525, 18, 1545.509301872468, 2390.9541607401884),
])
def test_each_policy_under_a_small_cache_serves_as_pinned(policy, iterations, preemptions, first, finish):  # type: ignore[no-untyped-def]
    model, system, strategy, w = load_run(EXAMPLE)
    w = w.model_copy(update={"serving": w.serving.model_copy(update={"policy": policy}),
                             "kv_cache": w.kv_cache.model_copy(update={"memory_fraction": 0.03})})
    r = simulate_serving(model, system, strategy, w, 20.0, 10.0)
    assert (r.requests, r.iterations, r.preemptions, r.kv_blocks_per_device) == (174, iterations, preemptions, 778)
    assert _sums(r) == pytest.approx((first, finish), rel=1e-12)
