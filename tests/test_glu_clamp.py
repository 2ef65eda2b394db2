"""The clamp of a clamped gated activation (GPT-OSS's swiglu_limit) that Megatron-Core's TEGroupedMLP runs in
eager PyTorch before its fused activation (fused_bias_geglu.py weighted_bias_quick_geglu_impl, core_v0.15.0):
two clamps and a torch.cat, 8 N f elements; the clamps keep the up projection's output and the fused
activation its concatenated copy. Expected values by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from armillary.estimate.activations import layer_activations
from armillary.plan.arrays import ModelArrays
from armillary.specs.huggingface import from_huggingface
from armillary.specs.loading import load_model
from armillary.workload.experts import experts_forward

HF = Path(__file__).parent / "data" / "huggingface"
GPT_OSS_MODEL = load_model("gpt-oss-120b")
GPT_OSS = ModelArrays.of(GPT_OSS_MODEL)
UNCLAMPED = ModelArrays.of(GPT_OSS_MODEL.model_copy(update={"glu_clamp": None}))
QWEN = ModelArrays.of(load_model("qwen3-30b-a3b"))


def test_the_preset_and_the_config_state_the_clamp():
    assert GPT_OSS_MODEL.glu_clamp == 7.0
    assert "swiglu_limit" in GPT_OSS_MODEL.sources["glu_clamp"]
    loaded = from_huggingface(json.loads((HF / "gpt-oss-120b.json").read_text()))
    assert loaded.glu_clamp == 7.0
    assert load_model("qwen3-30b-a3b").glu_clamp is None


def test_the_eager_clamp_moves_eight_expert_widths_per_received_token():
    # 8192 tokens routed on a rank of EP 8 (16 experts), balanced: 8192 x 4 = 32,768 received copies; the two
    # clamps read and write 2 x 2880 each, the cat reads and writes 2 x 5760: 8 x 32,768 x 2880 x 2 bytes more
    # than the fused activation's read of 2 f and write of f (3 x 32,768 x 2880 x 2)
    plain = experts_forward(GPT_OSS, 8192.0, 8.0, 1.0, 1.0, 2.0, 2.0)
    eager = experts_forward(GPT_OSS, 8192.0, 8.0, 1.0, 1.0, 2.0, 2.0, bias_pass=1.0)
    assert float(plain.activation.bytes) == pytest.approx(3 * 32768 * 2880 * 2)
    assert float(eager.activation.bytes - plain.activation.bytes) == pytest.approx(8 * 32768 * 2880 * 2)
    unclamped = experts_forward(UNCLAMPED, 8192.0, 8.0, 1.0, 1.0, 2.0, 2.0, bias_pass=1.0)
    assert float(unclamped.activation.bytes) == float(plain.activation.bytes)


def test_models_without_a_clamp_have_no_clamp_pass():
    plain = experts_forward(QWEN, 8192.0, 8.0, 1.0, 1.0, 2.0, 2.0)
    eager = experts_forward(QWEN, 8192.0, 8.0, 1.0, 1.0, 2.0, 2.0, bias_pass=1.0)
    assert float(eager.activation.bytes) == float(plain.activation.bytes)


def test_the_clamp_keeps_one_more_up_projection_output_unless_moe_act_is_recomputed():
    # one micro-batch of 8192 tokens, EP 8: 32,768 received copies keep 2 x 2880 more elements at 2 bytes
    experts = experts_forward(GPT_OSS, 8192.0, 8.0, 1.0, 1.0, 2.0, 2.0, bias_pass=1.0)
    clamped = layer_activations(GPT_OSS, 1.0, 8192.0, 1.0, 0.0, 2.0, flash=3.0, experts=experts)
    plain = layer_activations(UNCLAMPED, 1.0, 8192.0, 1.0, 0.0, 2.0, flash=3.0, experts=experts)
    extra = 32768 * 2 * 2880 * 2
    assert float(clamped.experts - plain.experts) == pytest.approx(extra)
    assert float(clamped.expert_act - plain.expert_act) == pytest.approx(extra)
