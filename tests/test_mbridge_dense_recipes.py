"""The memory settings of Megatron-Bridge's performance recipes for dense models (`SoftwareStack.recipes`:
recomputation, CPU activation offloading, Megatron FSDP, CUDA graphs) and how the validation harness reads them.
The expected settings are transcribed by hand from scripts/performance/configs/llama3/workload_base_configs.py and
llama31/workload_base_configs.py at v0.2.0 (NeMo 25.11), configs/llama3/*.yaml and llama31/*.yaml at r0.1.0
(NeMo 25.09) and configs/llama/*workload_base_configs.py at v0.4.2 (NeMo 26.04.01), so a change in the data or in
the reading fails here."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from armillary.specs.loading import load_model, load_stack
from armillary.specs.stack import RecipeSettings
from armillary.specs.strategy import Recompute
from armillary.validation.row_stack import recipe_of, stated_fsdp
from armillary.validation.rows import row_specs
from armillary.validation.run import read_rows

ROWS = {r["id"]: r for r in read_rows()}
MB = load_stack("megatron-bridge")

# (model, gpu, release): (recompute_num_layers, cpu_offloading_num_layers, use_megatron_fsdp, cuda_graph_scope)
BY_HAND = {
    ("llama3-8b", "gb300", "25.11"): (None, None, False, ("full_iteration",)),  # mbs 4 (the table's 2)
    ("llama3-8b", "gb200", "25.11"): (None, None, False, ("full_iteration",)),
    ("llama3-8b", "b200", "25.11"): (None, None, False, ("full_iteration",)),
    ("llama3-8b", "h100", "25.11"): (5, None, False, ()),
    ("llama3-70b", "gb300", "25.11"): (None, 20, True, ()),
    ("llama3-70b", "gb200", "25.11"): (None, 40, True, ()),
    ("llama3-70b", "h100", "25.11"): (None, None, False, ()),
    ("llama3.1-405b", "gb300", "25.11"): (None, 10, True, ()),
    ("llama3.1-405b", "gb200", "25.11"): (None, 92, True, ()),
    ("llama3.1-405b", "b200", "25.11"): (None, None, False, ()),
    ("llama3.1-405b", "h100", "25.11"): (None, None, False, ()),
    ("llama3-8b", "h100", "25.09"): (None, None, True, ()),
    ("llama3-70b", "h100", "25.09"): (None, None, False, ()),
    ("llama3.1-405b", "h100", "25.09"): (None, None, False, ()),
    ("llama3-70b", "h100", "26.04.01"): (None, None, False, ()),
    ("llama3.1-405b", "h100", "26.04.01"): (None, None, False, ()),
}


@pytest.mark.parametrize("key", sorted(BY_HAND))
def test_the_dense_recipe_settings_as_the_configs_state_them(key: tuple[str, str, str]) -> None:
    e = MB.recipe(*key)
    assert e is not None
    assert (e.recompute_layers, e.offload_activation_layers, e.fsdp, e.cuda_graph_scope) == BY_HAND[key]
    assert e.recompute_modules is None and e.dispatcher is None


def test_every_dense_megatron_bridge_row_has_its_recipe() -> None:
    dense = [r for r in ROWS.values() if r["id"].startswith("TR-MBRIDGE") and "llama" in r["model"].lower()]
    assert len(dense) == 16
    assert all(recipe_of(r, MB) is not None for r in dense), [r["id"] for r in dense if recipe_of(r, MB) is None]


def test_an_offloaded_layer_count_is_below_the_models_layers() -> None:
    # Megatron-Core's TransformerConfig refuses cpu_offloading_num_layers outside [0, num_layers)
    for e in MB.recipes:
        if e.offload_activation_layers is not None:
            assert e.offload_activation_layers < load_model(e.model).layers, (e.model, e.gpu, e.release)


def test_the_gb200_llama3_70b_row_is_read_with_the_recipes_cpu_offloading_first() -> None:
    # LLAMA3_70B_GB200_FP8_CS_BASE_CONFIG: use_megatron_fsdp, cpu_offloading_num_layers 40, no recomputation;
    # the table states FSDP=64, as the recipe
    specs = row_specs(ROWS["TR-MBRIDGE-25.11-GB200-10"])
    first = specs[0].strategy
    assert first.recompute is Recompute.NONE
    assert first.offload.activations and first.offload.activation_layers == 40
    assert not first.offload.weights and not first.offload.optimizer  # cpu_offloading_weights False
    assert specs[1].strategy.recompute is Recompute.NONE and not specs[1].strategy.offload.activations  # fallback
    assert any("first 40 layers" in n for n in specs[0].assumptions)
    gb300 = row_specs(ROWS["TR-MBRIDGE-25.11-GB300-02"])[0].strategy
    assert gb300.offload.activation_layers == 20


def test_a_recipe_for_another_sharding_than_the_tables_is_not_taken() -> None:
    # LLAMA31_405B_GB300_FP8_CS: Megatron FSDP, tp 2, offloading 10 layers; the table: pp 8, cp 2, FSDP=0
    row = ROWS["TR-MBRIDGE-25.11-GB300-03"]
    assert stated_fsdp(row) is False and MB.recipe("llama3.1-405b", "gb300", "25.11").fsdp  # type: ignore[union-attr]
    assert not any(rs.strategy.offload.activations for rs in row_specs(row))
    # LLAMA3_8B_H100_FP8_CS: recompute_num_layers 5 without FSDP; the table says FSDP=8
    h100 = row_specs(ROWS["TR-MBRIDGE-25.11-H100-23"])
    assert stated_fsdp(ROWS["TR-MBRIDGE-25.11-H100-23"]) is True
    assert h100[0].strategy.recompute is Recompute.NONE


def test_the_rows_own_words_win_over_the_recipe() -> None:
    row = dict(ROWS["TR-MBRIDGE-25.11-GB200-10"], recompute="full")
    specs = row_specs(row)
    assert len(specs) == 1 and specs[0].strategy.recompute is Recompute.FULL
    assert not specs[0].strategy.offload.activations
    # the table's mbs 2 is kept where the GB300 Llama 3 8B recipe sets 4, and the difference is noted
    gb300 = row_specs(ROWS["TR-MBRIDGE-25.11-GB300-01"])[0]
    assert gb300.strategy.micro_batch == 2
    assert any("the recipe's mbs 4; the table's 2" in n for n in gb300.assumptions)


@pytest.mark.parametrize(("change", "words"), [
    ({"offload_activation_layers": 0}, "offload_activation_layers"),
    ({"recompute_layers": -1}, "recompute_layers"),
    ({"recompute_layers": 2, "recompute_modules": ["mlp"]}, "recompute_layers .full. and recompute_modules"),
    ({"cuda_graph_scope": ["full_iteration", "attn"]}, "full_iteration"),
    ({"cuda_graph_scope": ["full"]}, "cuda_graph_scope"),
    ({"fsdp": "sometimes"}, "fsdp"),
])
def test_a_bad_dense_recipe_entry_names_its_field(change: dict[str, object], words: str) -> None:
    good = dict(model="llama3-70b", gpu="gb200", release="25.11", source="x")
    with pytest.raises(ValidationError, match=words):
        RecipeSettings.model_validate({**good, **change})
