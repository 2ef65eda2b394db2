"""Context parallelism: ring attention (K/V blocks around the ring) and all-to-all (Ulysses)."""

import pytest
from conftest import gpt

from armillary import Strategy, Training, estimate
from armillary.estimate.result import ParallelDimension
from armillary.specs.communication import Collective

MODEL = gpt(32, 4096, 32)
W = Training(seq_len=16384, global_batch=64)


def run(cp, **kw):
    return estimate(MODEL, "dgx-h100", Strategy(tp=4, cp=cp, pp=2, attention="flash", **kw), W, gpus=64)


def test_each_rank_computes_its_share_and_the_step_its_whole():
    one, two = run(1), run(2)
    assert float(two.layer.forward.flop) == pytest.approx(float(one.layer.forward.flop) / 2)
    assert float(two.model_flop) == pytest.approx(float(one.model_flop))  # the same work per iteration
    assert float(two.memory_hbm.activations) < 0.6 * float(one.memory_hbm.activations)


def test_ring_attention_passes_kv_blocks():
    """Liu et al. 2023: cp - 1 K/V blocks of 2 b (s/cp) n_kv d_h bytes per layer forward, twice that in
    backward (K/V and their gradients)."""
    cp, t, b, s = 4, 4, 1, 16384
    r = run(cp)
    (ring,) = [c for c in r.communication if c.dimension is ParallelDimension.CP]
    assert ring.operation is Collective.SEND_RECV
    assert float(ring.message_bytes) == pytest.approx(2 * b * (s / cp) * 32 * 128 / t * 2)
    layers, m = 16, float(r.microbatches)
    assert float(ring.per_step) == pytest.approx((cp - 1) * 3 * layers * m)
    assert float(r.breakdown.cp_exposed) >= 0


def test_ulysses_all_to_alls():
    r = run(2, cp_comm="all_to_all")
    calls = [c for c in r.communication if c.dimension is ParallelDimension.CP]
    assert {c.operation for c in calls} == {Collective.ALL_TO_ALL}
    assert float(r.breakdown.cp_exposed) > 0  # nothing hides them


def test_context_parallel_degree_must_fit_the_devices_and_sequence():
    r = estimate(MODEL, "dgx-h100", Strategy(tp=4, cp=3, pp=2, dp=2), W, gpus=64)
    assert not bool(r.feasible)
    assert any("tp*cp*pp*dp" in x for x in r.infeasible_reasons)
