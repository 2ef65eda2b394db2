"""A YaRN model's rotary embedding as Megatron-Bridge trains it: `validate_rope_fusion_compatibility` turns the
fused RoPE off unless position_embedding_type is "rope", so GPT-OSS ("yarn") runs Megatron-Core's
`_apply_rotary_pos_emb_bshd` op by op: 12 reads and writes of Q and K against the fused kernel's 2. Expected
values by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from armillary.errors import SpecError
from armillary.plan.arrays import ModelArrays
from armillary.specs.huggingface import from_huggingface
from armillary.specs.loading import load_model
from armillary.specs.model import Model
from armillary.workload.transformer import layer_forward

HF = Path(__file__).parent / "data" / "huggingface"


@pytest.mark.parametrize(("config", "yarn"), [("gpt-oss-120b", True), ("deepseek-v3", True),
                                              ("llama3.2-1b", False), ("qwen3-30b-a3b", False)])
def test_the_configs_rope_scaling_says_yarn(config, yarn):
    # llama3.2-1b scales its rotary positions too, by rope_type "llama3": Megatron's "rope", fused
    assert from_huggingface(json.loads((HF / f"{config}.json").read_text())).yarn is yarn


def test_the_presets_state_yarn_with_a_source():
    for name in ("gpt-oss-120b", "gpt-oss-20b", "deepseek-v3"):
        model = load_model(name)
        assert model.yarn and "yarn" in model.sources["yarn"]
    assert not load_model("qwen3-30b-a3b").yarn


def test_eager_yarn_moves_q_and_k_twelve_times():
    # GPT-OSS 120B, 4096 tokens on one rank: Q is 64 x 64, K 8 x 64 wide; fused 2 x 4096 x 4608 x 2 bytes,
    # op by op 12 x 4096 x 4608 x 2
    m = ModelArrays.of(load_model("gpt-oss-120b"))
    fused = layer_forward(m, 1.0, 4096.0, 1.0, 0.0, 2.0)
    eager = layer_forward(m, 1.0, 4096.0, 1.0, 0.0, 2.0, eager_yarn=1.0)
    assert float(fused.rotary.bytes) == pytest.approx(2 * 4096 * 4608 * 2)
    assert float(eager.rotary.bytes) == pytest.approx(12 * 4096 * 4608 * 2)
    assert float(eager.qkv.flop) == float(fused.qkv.flop)


@pytest.mark.parametrize("name", ["deepseek-v3", "qwen3-30b-a3b"])
def test_mla_and_plain_rope_stay_fused(name):
    # MLA's rotary part keeps its fused kernels (validate_rope_fusion_compatibility returns True for MLA)
    m = ModelArrays.of(load_model(name))
    assert float(layer_forward(m, 1.0, 4096.0, 1.0, 0.0, 2.0, eager_yarn=1.0).rotary.bytes) == float(
        layer_forward(m, 1.0, 4096.0, 1.0, 0.0, 2.0).rotary.bytes)


def test_yarn_needs_rotary_positions():
    spec = {**load_model("gpt-oss-120b").model_dump(), "position": "learned"}
    with pytest.raises((SpecError, ValueError), match="yarn"):
        Model.model_validate(spec)
