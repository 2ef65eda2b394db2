"""Specifications: clear errors, Hugging Face configs, presets, infeasible configurations."""

import json

import pytest

from armillary import (
    SpecError,
    Strategy,
    Training,
    estimate,
    load_model,
    load_strategy,
    load_system,
    parameters,
)
from armillary.presets.registry import KINDS, preset_names
from armillary.specs.loading import load_device


def test_bad_enum_names_field_and_allowed_values():
    with pytest.raises(SpecError) as err:
        load_strategy({"recompute": "partial"})
    text = str(err.value)
    assert "strategy.recompute" in text and "'selective'" in text and "'partial'" in text


def test_unknown_field_is_an_error():
    with pytest.raises(SpecError, match=r"strategy\.tensor_parallel"):
        load_strategy({"tensor_parallel": 8})


def test_unknown_preset_lists_presets():
    with pytest.raises(SpecError, match="dgx-a100"):
        load_system("dgx-z900")


def test_heads_must_divide():
    with pytest.raises(SpecError, match="kv_heads"):
        load_model({"layers": 2, "hidden": 64, "heads": 8, "kv_heads": 3, "ffn": 256, "vocab": 100})


def test_degrees_that_do_not_divide_are_infeasible(gpt22b):
    r = estimate(gpt22b, "dgx-a100", Strategy(tp=8, pp=5), Training(seq_len=2048, global_batch=40), gpus=40)
    assert not bool(r.feasible)
    assert any("pp*vpp must divide the layers" in x for x in r.infeasible_reasons)


def test_gpus_must_fill_whole_nodes():
    with pytest.raises(SpecError, match="gpus"):
        load_system("dgx-a100", 12)


def test_huggingface_llama_config(tmp_path):
    cfg = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 4096,
           "intermediate_size": 11008, "num_attention_heads": 32, "num_hidden_layers": 32,
           "num_key_value_heads": 32, "vocab_size": 32000, "max_position_embeddings": 4096,
           "hidden_act": "silu", "tie_word_embeddings": False, "rms_norm_eps": 1e-5}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    m = load_model(str(path))
    assert (m.mlp.value, m.norm.value, m.position.value) == ("swiglu", "rmsnorm", "rotary")
    assert parameters(m) == 6_738_415_616


def test_huggingface_gpt2_config():
    cfg = {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "n_positions": 1024,
           "vocab_size": 50257, "activation_function": "gelu_new"}
    assert parameters(cfg) == 124_439_808  # GPT-2 small


def test_moe_config_is_refused_clearly():
    with pytest.raises(SpecError, match="mixture-of-experts"):
        load_model({"model_type": "mixtral", "hidden_size": 4096, "num_hidden_layers": 32,
                    "num_attention_heads": 32, "vocab_size": 32000, "num_local_experts": 8})


@pytest.mark.parametrize("kind", KINDS)
def test_every_preset_loads_and_cites_sources(kind):
    loader = {"models": load_model, "devices": load_device, "systems": load_system}[kind]
    names = preset_names(kind)
    assert names
    for name in names:
        spec = loader(name)
        assert spec.sources, f"{kind}/{name} has no sources"


def test_shipped_json_schemas_are_current():
    """schemas/*.schema.json are what `armillary schema KIND` prints (regenerate them when a spec changes)."""
    from pathlib import Path

    from armillary.specs.schema import SCHEMAS

    folder = Path(__file__).parent.parent / "schemas"
    for kind, cls in SCHEMAS.items():
        shipped = json.loads((folder / f"{kind}.schema.json").read_text())
        assert shipped == cls.model_json_schema(), f"regenerate schemas/{kind}.schema.json"
