"""Transformer Engine's fp8 padding copies around Megatron-Core's grouped expert GEMMs (`experts_forward`
fp8_pad; core_v0.15.0 experts.py, TE pytorch/module/fp8_padding.py), by hand."""

from __future__ import annotations

import pytest

from armillary.plan.arrays import ModelArrays
from armillary.specs.loading import load_model
from armillary.workload.experts import experts_forward

QWEN = ModelArrays.of(load_model("qwen3-30b-a3b"))  # hidden 2048, 128 experts, top 8


def test_the_padding_copies_the_received_tokens_in_and_the_output_out():
    # 4096 tokens on a rank of EP 8, balanced: 4096 x 8 = 32,768 received copies of width 2048 at 2 bytes;
    # the pad reads and writes them (2 N h e) and their fp32 probabilities (8 N), the unpad reads and writes
    # the down projection's output (2 N h e)
    plain = experts_forward(QWEN, 4096.0, 8.0, 1.0, 1.0, 2.0, 2.0, bias_pass=1.0)
    padded = experts_forward(QWEN, 4096.0, 8.0, 1.0, 1.0, 2.0, 2.0, bias_pass=1.0, fp8_pad=1.0)
    assert float(padded.permute.bytes - plain.permute.bytes) == pytest.approx(32768 * (4 * 2048 * 2 + 8))
    assert float(padded.permute.flop) == float(plain.permute.flop)
    # the rest of the layer is untouched
    assert padded.experts_in == plain.experts_in and padded.activation == plain.activation


def test_expert_tensor_parallelism_pads_the_gathered_tokens():
    # with etp 2 the grouped GEMMs see the tokens of both etp ranks: twice the padded rows
    one = experts_forward(QWEN, 4096.0, 8.0, 1.0, 1.0, 2.0, 2.0, fp8_pad=1.0)
    two = experts_forward(QWEN, 4096.0, 8.0, 2.0, 1.0, 2.0, 2.0, fp8_pad=1.0)
    pad = (32768 * (4 * 2048 * 2 + 8), 65536 * (4 * 2048 * 2 + 8))
    one_plain = experts_forward(QWEN, 4096.0, 8.0, 1.0, 1.0, 2.0, 2.0)
    two_plain = experts_forward(QWEN, 4096.0, 8.0, 2.0, 1.0, 2.0, 2.0)
    assert float(one.permute.bytes - one_plain.permute.bytes) == pytest.approx(pad[0])
    assert float(two.permute.bytes - two_plain.permute.bytes) == pytest.approx(pad[1])
