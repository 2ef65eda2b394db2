"""The block-scaled quantize passes of one layer, by hand: bytes and time (workload/quantize.py).

MXFP8 stores 8 + 8/32 bits per element (1.03125 B); a cast reads the bf16 tensor once (2 B) and writes one
layout (3.03125 B per element) or both in one call (4.0625 B). NVFP4 reads twice (amax, then cast: 4 B) and
stores 4 + 8/16 bits (0.5625 B). A GEMM input Megatron-Core keeps in bf16 (TE save_original_input) is cast
rowwise in forward and columnwise in backward: 6.0625 B per element over the step instead of 4.0625.
"""

from types import SimpleNamespace

import numpy as np
import pytest
from conftest import gpt

from armillary.cost.compute import kernel_times
from armillary.plan.arrays import ModelArrays
from armillary.plan.codes import BLOCK_FORMAT
from armillary.specs.loading import load_device
from armillary.specs.strategy import BlockFormat
from armillary.workload.quantize import cast_bytes, out_proj_inputs, quantize_bytes, quantize_ops
from armillary.workload.transformer import layer_forward

MX = BLOCK_FORMAT.code(BlockFormat.MXFP8)
NV = BLOCK_FORMAT.code(BlockFormat.NVFP4)
ONE, BOTH = 2 + 1.03125, 2 + 2 * 1.03125  # MXFP8 bytes per element: one layout, both layouts


def _layer():
    """A GPT layer (GeLU 4h MLP, no tensor parallelism): b 2 x s 1024 tokens, hidden 1024, 16 heads of 64."""
    m = gpt(4, 1024, 16)
    return layer_forward(ModelArrays.of(m), 2.0, 1024.0, 1.0, 0.0, 2.0), 2 * 1024, 1024, 4096


def test_cast_bytes_by_hand():
    assert cast_bytes(1000.0, MX, 1) == pytest.approx(1000 * ONE)
    assert cast_bytes(1000.0, MX, 2) == pytest.approx(1000 * BOTH) == quantize_bytes(1000.0, MX)
    assert cast_bytes(1000.0, NV, 1) == pytest.approx(1000 * (2 * 2 + 0.5625))
    assert cast_bytes(1000.0, 0.0, 1) == 0.0
    assert np.allclose(cast_bytes(np.array([1.0, 1.0]), np.array([MX, NV]), 1), [ONE, 4.5625])


def test_out_proj_inputs_are_tokens_times_heads_times_value_width():
    fw, T, h, _ = _layer()
    assert out_proj_inputs(fw) == pytest.approx(T * 16 * 64)
    assert out_proj_inputs(fw) + T * h == pytest.approx(fw.gemm_inputs[0])


def test_one_layer_mxfp8_quantize_bytes_and_time_by_hand():
    """Forward: QKV input (T h), MLP fc1 input (T h) and fc2 input (T 4h) cast in both layouts, the output
    projection's input (T h) rowwise only; backward: the output gradients of QKV (3h), out (h), fc1 (4h), fc2 (h)
    in both layouts and the output projection's kept input again, columnwise only."""
    fw, T, h, f = _layer()
    forward, backward = quantize_ops(fw, None, MX, 0.0, 0.0)
    assert forward.bytes == pytest.approx(T * (h + h + f) * BOTH + T * h * ONE)
    assert backward.bytes == pytest.approx(T * (3 * h + h + f + h) * BOTH + T * h * ONE)
    # 2048 tokens: forward 2048 x (6144 x 4.0625 + 1024 x 3.03125) = 57,475,072 B
    assert forward.bytes == pytest.approx(57_475_072)
    # streamed at the device's rate (HBM bandwidth x streaming efficiency), one kernel's launch overhead each
    device = load_device("b200")
    t_forward, t_backward = kernel_times((forward, backward), device, 3.0)
    assert t_forward == pytest.approx(57_475_072 / device.hbm.rate + device.kernel_overhead)
    assert t_backward == pytest.approx(backward.bytes / device.hbm.rate + device.kernel_overhead)
    # the re-cast costs one more bf16 read of the output projection's input: 2 B per element over the step
    once = T * ((h + h + h + f) * BOTH + (3 * h + h + f + h) * BOTH)
    assert forward.bytes + backward.bytes - once == pytest.approx(T * h * 2.0)


def test_attention_projections_kept_wider_have_no_recast():
    fw, T, h, f = _layer()
    forward, backward = quantize_ops(fw, None, MX, 1.0, 0.0)  # attention projections kept in fp8
    assert forward.bytes == pytest.approx(T * (h + f) * BOTH)
    assert backward.bytes == pytest.approx(T * (f + h) * BOTH)


def _experts(received: float, h: float, f: float):
    """The part of an ExpertsForward the quantize kernels read: a gated expert MLP (fc1 2f wide)."""
    return SimpleNamespace(gemm_inputs=received * (h + f), gemm_outputs=received * (2 * f + h),
                           received_tokens=received, ffn_shard=f)


def test_moe_act_recompute_recasts_the_down_projection_input():
    fw, _, h, _ = _layer()
    ex = _experts(16384.0, h, 512.0)
    forward, backward = quantize_ops(fw, ex, MX, 0.0, 0.0)  # type: ignore[arg-type]
    f_r, b_r = quantize_ops(fw, ex, MX, 0.0, 0.0, moe_act_recompute=1.0)  # type: ignore[arg-type]
    fc2_in = 16384.0 * 512.0
    assert f_r.bytes - forward.bytes == pytest.approx(-fc2_in * 1.03125)  # columnwise layout not written
    assert b_r.bytes - backward.bytes == pytest.approx(fc2_in * ONE)  # read again, columnwise written
    # Megatron-Core's NVFP4 recipe sets config.fp4, not config.fp8: its hooks keep nothing in bf16 there
    n_f, n_b = quantize_ops(fw, ex, NV, 0.0, 0.0)  # type: ignore[arg-type]
    r_f, r_b = quantize_ops(fw, ex, NV, 0.0, 0.0, moe_act_recompute=1.0)  # type: ignore[arg-type]
    assert (r_f.bytes, r_b.bytes) == (n_f.bytes, n_b.bytes)
    T_h = 2048 * 1024  # QKV (and out projection) input, tokens x hidden: NVFP4 casts both layouts at once
    assert n_f.bytes == pytest.approx((T_h * 3 + 2048 * 4096 + fc2_in + 16384.0 * 1024) * (2 * 2 + 2 * 0.5625))


def test_mla_up_projection_inputs_cast_again_when_recomputed():
    fw, T, h, f = _layer()
    latent = T * (1536.0 + 512.0)
    base_f, base_b = quantize_ops(fw, None, MX, 0.0, 0.0)
    once_f, once_b = quantize_ops(fw, None, MX, 0.0, 0.0, latent_inputs=latent)
    assert once_f.bytes - base_f.bytes == pytest.approx(latent * BOTH)
    assert once_b.bytes == pytest.approx(base_b.bytes)
    re_f, re_b = quantize_ops(fw, None, MX, 0.0, 0.0, mla_up_recompute=1.0, latent_inputs=latent)
    assert re_f.bytes - base_f.bytes == pytest.approx(latent * ONE)  # forward under no_grad: rowwise only
    assert re_b.bytes - base_b.bytes == pytest.approx(latent * BOTH)  # recomputed with gradients: both
    # the attention projections kept wider: their inputs, the latents too, are not cast
    kept_f, _ = quantize_ops(fw, None, MX, 2.0, 0.0, mla_up_recompute=1.0, latent_inputs=latent)
    assert kept_f.bytes == pytest.approx(T * (h + f) * BOTH)


def test_no_block_format_no_traffic_and_arrays_match_scalars():
    fw, *_ = _layer()
    forward, backward = quantize_ops(fw, None, 0.0, 0.0, 0.0, moe_act_recompute=1.0, mla_up_recompute=1.0,
                                     latent_inputs=1e6)
    assert forward.bytes == 0.0 and backward.bytes == 0.0
    codes = np.array([0.0, MX, NV])
    arr_f, arr_b = quantize_ops(fw, None, codes, np.zeros(3), np.zeros(3), mla_up_recompute=np.array([1.0, 1.0, 0.0]),
                                latent_inputs=1e6)
    for i, (code, mla) in enumerate(((0.0, 1.0), (MX, 1.0), (NV, 0.0))):
        one_f, one_b = quantize_ops(fw, None, code, 0.0, 0.0, mla_up_recompute=mla, latent_inputs=1e6)
        assert arr_f.bytes[i] == pytest.approx(one_f.bytes) and arr_b.bytes[i] == pytest.approx(one_b.bytes)
