"""Gradients reduced in bf16 (issue 48): Strategy.grad_reduce_in_bf16, Megatron-LM's --grad-reduce-in-bf16
(Megatron-Core reduces the fp32 main gradients by default, --accumulate-allreduce-grads-in-fp32): half the
data-parallel gradient bytes; the default unchanged."""

from __future__ import annotations

import pytest
from conftest import gpt

from armillary import Strategy, Training, estimate
from armillary.errors import SpecError
from armillary.estimate.result import ParallelDimension
from armillary.specs.communication import Collective

MODEL = gpt(16, 2048, 16)
W = Training(seq_len=2048, global_batch=64)


def grad_calls(strategy: Strategy):
    r = estimate(MODEL, "dgx-a100", strategy, W, gpus=32)
    return r, [c for c in r.communication if c.dimension is ParallelDimension.DP
               and c.operation in (Collective.ALL_REDUCE, Collective.REDUCE_SCATTER) and float(c.per_step) > 0]


@pytest.mark.parametrize("zero", [0, 1])
def test_bf16_reduction_halves_the_gradient_bytes(zero):
    base, fp32 = grad_calls(Strategy(tp=2, zero=zero))
    half, bf16 = grad_calls(Strategy(tp=2, zero=zero, grad_reduce_in_bf16=True))
    assert len(fp32) == len(bf16) == 1
    (a,), (b,) = fp32, bf16
    assert float(b.message_bytes) == pytest.approx(float(a.message_bytes) / 2)
    assert float(b.scale_out_bytes_each) == pytest.approx(float(a.scale_out_bytes_each) / 2)
    assert float(b.time_each_s) < float(a.time_each_s)
    # the parameters' own gathers (ZeRO-1) are unchanged
    gathers = [[float(c.message_bytes) for c in r.communication if c.operation is Collective.ALL_GATHER
                and c.dimension is ParallelDimension.DP] for r in (base, half)]
    assert gathers[0] == gathers[1]


def test_default_reduces_fp32_gradients():
    assert Strategy().grad_reduce_in_bf16 is False
    _, (call,) = grad_calls(Strategy(tp=2))
    _, (same,) = grad_calls(Strategy(tp=2, grad_reduce_in_bf16=False))
    assert float(call.message_bytes) == float(same.message_bytes)
    params_local = float(call.message_bytes) / 4  # 4 bytes per parameter: fp32 main gradients
    assert params_local == pytest.approx(round(params_local))


def test_fp8_training_may_reduce_in_bf16_but_fp32_and_fp16_may_not():
    Strategy(precision="fp8", grad_reduce_in_bf16=True)
    for precision in ("fp32", "fp16"):
        with pytest.raises((SpecError, ValueError), match="grad_reduce_in_bf16 needs precision 'bf16' or 'fp8'"):
            Strategy(precision=precision, grad_reduce_in_bf16=True)
