"""Invariants of the estimator, checked with hypothesis."""

import numpy as np
from conftest import gpt, with_bandwidth_scaled
from hypothesis import given, settings
from hypothesis import strategies as hs

from armillary import Strategy, Training, estimate
from armillary.estimate.training import estimate_training
from armillary.plan.arrays import ModelArrays, StrategyArrays, TrainingArrays
from armillary.specs.loading import load_system

MODEL = gpt(32, 4096, 32)
SYSTEM = load_system("dgx-a100", 64)
degrees = hs.sampled_from([1, 2, 4, 8])
recompute = hs.sampled_from(["none", "selective", "full"])


@settings(max_examples=40, deadline=None)
@given(tp=degrees, pp=degrees, cp=hs.sampled_from([1, 2]), mb=hs.sampled_from([1, 2, 4]), rc=recompute,
       zero=hs.integers(0, 3), sp=hs.booleans(), attention=hs.sampled_from(["standard", "flash", "flash3"]),
       cp_comm=hs.sampled_from(["ring", "all_to_all"]))
def test_array_element_equals_scalar_evaluation(tp, pp, cp, mb, rc, zero, sp, attention, cp_comm):
    """One formula, two modes: a sweep's element equals the single-configuration estimate."""
    sp = sp and tp > 1
    if tp * pp * cp > 64:
        return
    st = Strategy(tp=tp, pp=pp, cp=cp, micro_batch=mb, recompute=rc, zero=zero, sequence_parallel=sp,
                  attention=attention, cp_comm=cp_comm)
    w = Training(seq_len=2048, global_batch=512)
    single = estimate(MODEL, SYSTEM, st, w)
    dp = 64 // (tp * pp * cp)
    sweep = StrategyArrays.of(st, dp)
    # the same point embedded in a 3-element sweep over the micro-batch size
    sweep = StrategyArrays(**{**sweep.__dict__, "micro_batch": np.array([1.0, float(mb), 4.0])})
    arr = estimate_training(ModelArrays.of(MODEL), sweep, TrainingArrays.of(w), SYSTEM)
    assert np.isclose(arr.step_time_s[1], single.step_time_s, rtol=1e-12)
    assert np.isclose(arr.memory_hbm.total[1], single.memory_hbm.total, rtol=1e-12)
    assert np.isclose(arr.traffic.scale_out_bytes[1], single.traffic.scale_out_bytes, rtol=1e-12)
    assert bool(arr.feasible[1]) == bool(single.feasible)


@settings(max_examples=30, deadline=None)
@given(tp=hs.sampled_from([1, 2, 4]), pp=hs.sampled_from([1, 2, 4]), rc=recompute, zero=hs.integers(0, 3))
def test_memory_never_grows_with_tp_or_pp(tp, pp, rc, zero):
    w = Training(seq_len=2048, global_batch=256)

    def hbm(t, p):
        st = Strategy(tp=t, pp=p, dp=4, recompute=rc, zero=zero)
        return float(estimate(MODEL, load_system("dgx-a100", 4 * t * p), st, w).memory_hbm.total)

    assert hbm(2 * tp, pp) <= hbm(tp, pp) * (1 + 1e-9)
    assert hbm(tp, 2 * pp) <= hbm(tp, pp) * (1 + 1e-9)


@settings(max_examples=30, deadline=None)
@given(tp=degrees, pp=degrees, scale=hs.floats(1.0, 50.0), zero=hs.integers(0, 3),
       overlap=hs.booleans())
def test_more_bandwidth_never_slows_a_step(tp, pp, scale, zero, overlap):
    st = Strategy(tp=tp, pp=pp, zero=zero, overlap={"dp_grad_reduce": overlap, "tp_comm": overlap})
    w = Training(seq_len=2048, global_batch=512)
    faster = with_bandwidth_scaled(SYSTEM, scale)
    assert float(estimate(MODEL, faster, st, w).step_time_s) <= float(
        estimate(MODEL, SYSTEM, st, w).step_time_s) * (1 + 1e-12)


@settings(max_examples=40, deadline=None)
@given(tp=degrees, pp=degrees, vpp=hs.sampled_from([1, 2]), mb=hs.sampled_from([1, 2, 4]), zero=hs.integers(0, 3),
       flag=hs.sampled_from(["dp_grad_reduce", "tp_comm", "param_gather"]), gbs=hs.sampled_from([64, 512]))
def test_overlap_never_slows_a_step(tp, pp, vpp, mb, zero, flag, gbs):
    vpp = vpp if pp > 1 else 1
    w = Training(seq_len=2048, global_batch=gbs)
    plain = Strategy.model_validate({"tp": tp, "pp": pp, "vpp": vpp, "micro_batch": mb, "zero": zero,
                                     "sequence_parallel": tp > 1, "overlap": {"dp_grad_reduce": False,
                                                                              "tp_comm": False,
                                                                              "param_gather": False}})
    hidden = plain.model_copy(update={"overlap": plain.overlap.model_copy(update={flag: True})})
    assert float(estimate(MODEL, SYSTEM, hidden, w).step_time_s) <= float(
        estimate(MODEL, SYSTEM, plain, w).step_time_s) * (1 + 1e-12)


def test_overlapped_gradient_reduction_never_exceeds_the_plain_one_when_backward_is_short():
    # 1T on 4,096 A100s, 4 layers per stage and micro-batch 1: one micro-batch's backward is shorter than
    # one bucket's reduction, where the last bucket used to be counted twice
    base = Strategy.model_validate({"tp": 8, "pp": 32, "vpp": 4, "sequence_parallel": True, "zero": 1,
                                    "attention": "flash", "overlap": {"dp_grad_reduce": False}})
    w = Training(seq_len=2048, global_batch=3072)
    plain = estimate("megatron-1t", "dgx-a100", base, w, gpus=4096)
    overlapped = Strategy.model_validate({**base.model_dump(), "overlap": {"dp_grad_reduce": True}})
    hidden = estimate("megatron-1t", "dgx-a100", overlapped, w, gpus=4096)
    assert float(hidden.breakdown.dp_exposed) <= float(plain.breakdown.dp_exposed)


def test_breakdown_adds_up():
    r = estimate(MODEL, SYSTEM, Strategy(tp=2, pp=4, vpp=2, zero=1), Training(seq_len=2048, global_batch=512))
    assert float(r.breakdown.total) == float(r.step_time_s)
    assert all(float(getattr(r.breakdown, f)) >= 0 for f in r.breakdown.__dataclass_fields__)


def test_sweep_over_precision_and_micro_batch_matches_single_estimates():
    """A 2-D sweep (precision x micro-batch) through the same functions equals point-by-point estimates."""
    from armillary.plan.codes import PRECISION

    w = Training(seq_len=2048, global_batch=512)
    h100 = load_system("dgx-h100", 64)
    base = StrategyArrays.of(Strategy(tp=2, pp=2, attention="flash"), 16)
    codes = np.arange(len(PRECISION.members))[:, None]
    mbs = np.array([[1.0, 2.0, 4.0]])
    sweep = StrategyArrays(**{**base.__dict__, "precision": codes, "micro_batch": mbs})
    arr = estimate_training(ModelArrays.of(MODEL), sweep, TrainingArrays.of(w), h100)
    for i, prec in enumerate(PRECISION.members):
        for j, mb in enumerate(mbs[0]):
            one = estimate(MODEL, h100, Strategy(tp=2, pp=2, attention="flash", precision=prec,
                                                 micro_batch=int(mb)), w)
            assert np.isclose(arr.step_time_s[i, j], one.step_time_s, rtol=1e-12)
