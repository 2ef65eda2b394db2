"""The expert biases that Megatron-Core adds expert by expert after the grouped GEMM (TEGroupedMLP._apply_bias,
docs/moe.md), and the replicas' share of a rank's expert weights. Expected values by hand."""

from __future__ import annotations

import pytest

from armillary.plan.arrays import ModelArrays
from armillary.specs.loading import load_model
from armillary.workload.experts import experts_forward, replica_weights

GPT_OSS = ModelArrays.of(load_model("gpt-oss-120b"))
QWEN = ModelArrays.of(load_model("qwen3-30b-a3b"))


def test_the_eager_bias_pass_moves_six_output_widths_per_received_token():
    # GPT-OSS 120B, 8192 tokens routed on a rank of EP 8 (16 experts), balanced: 8192 x 4 = 32,768 received
    # copies of width 2880 at 2 bytes; b p written, t and b p read and their sum written, the cat's read and
    # write: 6 x 32,768 x 2880 x 2 bytes more of the permutes' stream
    plain = experts_forward(GPT_OSS, 8192.0, 8.0, 1.0, 1.0, 2.0, 2.0)
    eager = experts_forward(GPT_OSS, 8192.0, 8.0, 1.0, 1.0, 2.0, 2.0, bias_pass=1.0)
    assert float(plain.received_tokens) == pytest.approx(32768.0)
    assert float(eager.permute.bytes - plain.permute.bytes) == pytest.approx(6 * 32768 * 2880 * 2)
    assert float(eager.experts_in.flop) == float(plain.experts_in.flop)  # the GEMMs are the same


def test_experts_without_biases_have_no_bias_pass():
    plain = experts_forward(QWEN, 8192.0, 8.0, 1.0, 1.0, 2.0, 2.0)
    eager = experts_forward(QWEN, 8192.0, 8.0, 1.0, 1.0, 2.0, 2.0, bias_pass=1.0)
    assert float(eager.permute.bytes) == float(plain.permute.bytes)


def test_replicas_are_whole_expert_copies():
    # 128 experts over EP 8 hold 16 a rank; 2 replicas make it 18: 18 / 16 of the weights
    assert float(replica_weights(128.0, 8.0, 2.0)) == pytest.approx(18 / 16)
    assert float(replica_weights(128.0, 8.0, 0.0)) == 1.0
    assert float(replica_weights(0.0, 1.0, 0.0)) == 1.0  # a dense model
