"""Specifications: clear errors, Hugging Face configs, presets, infeasible configurations."""

import json

import pytest
from conftest import on_nodes

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
from armillary.specs.loading import load_device, load_stack


def test_bad_enum_names_field_and_allowed_values():
    with pytest.raises(SpecError) as err:
        load_strategy({"recompute": "partial"})
    text = str(err.value)
    assert "strategy.recompute" in text and "'selective'" in text and "'partial'" in text


def test_unknown_field_is_an_error():
    with pytest.raises(SpecError, match=r"strategy\.tensor_parallel"):
        load_strategy({"tensor_parallel": 8})


def test_rank_order_names_allowed_values_and_rejects_expert_parallelism():
    with pytest.raises(SpecError, match="tp-cp-pp-dp"):
        load_strategy({"rank_order": "pp-dp-tp"})
    with pytest.raises(SpecError, match="expert parallelism"):
        load_strategy({"rank_order": "tp-cp-pp-dp", "ep": 2})


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


def test_gpus_must_be_positive():
    with pytest.raises(SpecError, match="gpus"):
        load_system("dgx-a100", 0)


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


def test_incomplete_moe_config_names_the_missing_keys():
    with pytest.raises(SpecError, match="num_experts_per_tok"):
        load_model({"model_type": "mixtral", "hidden_size": 4096, "num_hidden_layers": 32,
                    "num_attention_heads": 32, "vocab_size": 32000, "num_local_experts": 8,
                    "intermediate_size": 14336})


@pytest.mark.parametrize("kind", KINDS)
def test_every_preset_loads_and_cites_sources(kind):
    from armillary.serving.engine import load_engine

    loader = {"models": load_model, "devices": load_device, "systems": load_system, "stacks": load_stack,
              "engines": load_engine}[kind]
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


def test_a_system_file_names_its_device_file_relative_to_itself(tmp_path):
    import yaml

    from armillary.presets.registry import find_preset, read_data_file

    device = read_data_file(find_preset("devices", "a100-sxm4-80gb"))
    (tmp_path / "my-gpu.yaml").write_text(yaml.safe_dump({**device, "name": "my GPU"}))
    system = read_data_file(find_preset("systems", "dgx-a100"))
    (tmp_path / "cluster.yaml").write_text(yaml.safe_dump({**system, "device": "my-gpu.yaml"}))
    assert load_system(str(tmp_path / "cluster.yaml")).device.name == "my GPU"


def test_fully_connected_pairs_use_one_link():
    """MI300X: 7 direct xGMI links of 64 GB/s; two GPUs share one of them (AMD datasheet)."""
    import numpy as np

    from armillary.comm.collectives import collective
    from armillary.specs.communication import Collective

    system = load_system("mi300x-8")
    n = 2**30
    two = float(collective(Collective.ALL_REDUCE, n, on_nodes(2, 2), system).cost.time)
    eight = float(collective(Collective.ALL_REDUCE, n, on_nodes(8, 8), system).cost.time)
    link = system.network[0].efficiency * system.network[0].bandwidth / 7
    assert two == pytest.approx(n / link, rel=0.02)  # 2(p-1)/p n = n bytes over one link
    assert eight < two and np.isfinite(eight)
