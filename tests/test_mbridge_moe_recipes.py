"""The MoE settings of Megatron-Bridge's performance recipes (`SoftwareStack.recipes`) and how the validation
harness reads them into a row's strategy. The expected settings are transcribed by hand from
scripts/performance/configs/{qwen3,gpt_oss,deepseek}/workload_base_configs.py at v0.2.0 (NeMo 25.11) and
scripts/performance/run_script.py at r0.1.0 (NeMo 25.09), so a change in the data or the reading fails here."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from armillary.specs.loading import load_model, load_stack, preset_names
from armillary.specs.stack import RecipeSettings
from armillary.specs.strategy import Recompute, RecomputeModule
from armillary.validation.rows import row_specs
from armillary.validation.run import read_rows

ROWS = {r["id"]: r for r in read_rows()}
MB = load_stack("megatron-bridge")


@pytest.mark.parametrize("name", preset_names("stacks"))
def test_every_recipe_names_a_preset_and_a_source_and_moe_settings_only_for_moe(name: str) -> None:
    stack = load_stack(name)
    for e in stack.recipes:
        model = load_model(e.model)
        assert e.source, (name, e.model, e.gpu, e.release)
        if model.moe is None:  # a dense model's entry sets no MoE field
            assert e.dispatcher is None and e.capacity_factor is None and not e.a2a_overlap, (e.model, e.gpu)
            continue
        assert e.dispatcher is not None, (e.model, e.gpu, e.release)
        assert "+".join(sorted(e.cuda_graph_scope)) in stack.graph_host_ops, (e.model, e.gpu, e.cuda_graph_scope)
    keys = [(e.model, e.gpu, e.release) for e in stack.recipes]
    assert len(keys) == len(set(keys)), "one entry per model, GPU and release"


# (model, gpu, release): (dispatcher, graph scopes, recompute modules, a2a overlap), by hand from the configs
BY_HAND = {
    ("qwen3-30b-a3b", "gb200", "25.11"): ("hybridep", ("moe_router", "moe_preprocess"), None, False),
    ("qwen3-30b-a3b", "b200", "25.11"): ("alltoall", ("moe_router", "moe_preprocess"), None, False),
    ("qwen3-30b-a3b", "h100", "25.11"): ("alltoall", (), None, True),
    ("qwen3-235b-a22b", "gb200", "25.11"): ("hybridep", ("attn", "moe_router", "moe_preprocess"), None, False),
    ("gpt-oss-120b", "b200", "25.11"): ("alltoall", (), ("layernorm", "moe_act"), False),
    ("gpt-oss-120b", "gb300", "25.11"): ("alltoall", ("attn", "moe_router", "moe_preprocess"), None, False),
    ("deepseek-v3", "gb300", "25.11"): ("hybridep", ("attn", "moe_router", "moe_preprocess"), ("moe_act",), False),
    ("deepseek-v3", "b200", "25.11"): ("alltoall", (), ("mla_up_proj",), False),
    ("deepseek-v3", "h100", "25.09"): ("deepep", (), ("mla_up_proj", "mlp"), True),
}


@pytest.mark.parametrize("key", sorted(BY_HAND))
def test_the_recipe_settings_as_the_configs_state_them(key: tuple[str, str, str]) -> None:
    e = MB.recipe(*key)
    assert e is not None
    dispatcher, scope, modules, a2a = BY_HAND[key]
    assert (e.dispatcher, e.cuda_graph_scope, e.a2a_overlap) == (dispatcher, scope, a2a)
    assert (None if e.recompute_modules is None else tuple(m.value for m in e.recompute_modules)) == modules


def test_the_25_09_qwen3_rows_drop_and_pad_so_their_dispatcher_does_not_sync() -> None:
    # r0.1.0 run_script.py: apply_moe_token_drop (capacity factor 1.0, pad to capacity) for every Qwen3 run;
    # Megatron-Core's alltoall dispatcher skips its device-to-host sync when drop_and_pad (token_dispatcher.py)
    st = row_specs(ROWS["TR-MBRIDGE-25.09-05"])[0].strategy
    assert st.routing.capacity_factor == 1.0 and st.routing.pad_to_capacity
    assert not st.moe_host.dispatch_sync
    dropless = row_specs(ROWS["TR-MBRIDGE-25.11-H100-27"])[0].strategy  # the same table shape, 25.11: dropless
    assert dropless.routing.capacity_factor is None and dropless.moe_host.dispatch_sync


def test_hybridep_recipes_dispatch_one_copy_per_node_and_alltoall_recipes_do_not() -> None:
    assert row_specs(ROWS["TR-MBRIDGE-25.11-GB200-15"])[0].strategy.routing.dispatch_dedup  # hybridep
    assert not row_specs(ROWS["TR-MBRIDGE-25.11-B200-21"])[0].strategy.routing.dispatch_dedup  # alltoall


def test_graph_scopes_set_the_kernels_issued_one_by_one() -> None:
    ops = {rid: row_specs(ROWS[f"TR-MBRIDGE-25.11-{rid}"])[0].strategy.moe_host.ops
           for rid in ("B200-20", "B200-21", "GB300-06")}
    # no graphs: Megatron-Core's 40; router and preprocess graphed: 28; attention graphed too: 28 - 11
    assert ops == {"B200-20": 40, "B200-21": 28, "GB300-06": 17}


def test_the_a2a_overlap_a_recipe_sets_is_recorded_not_applied() -> None:
    rs = row_specs(ROWS["TR-MBRIDGE-25.11-H100-27"])[0]
    assert not rs.strategy.overlap.ep_comm
    assert any("all-to-all overlap set by the recipe, not applied" in a for a in rs.assumptions)


def test_the_recipes_recompute_comes_first_then_the_least_that_fits() -> None:
    specs = row_specs(ROWS["TR-MBRIDGE-25.11-B200-19"])  # DeepSeek-V3 on B200: recompute_modules [mla_up_proj]
    first = specs[0].strategy
    assert first.recompute is Recompute.SELECTIVE and first.recompute_modules == (RecomputeModule.MLA_UP_PROJ,)
    assert specs[1].strategy.recompute is Recompute.NONE  # the fallback ladder, least first
    qwen = row_specs(ROWS["TR-MBRIDGE-25.11-B200-21"])  # Qwen3: the perf configs set recompute_granularity None
    assert qwen[0].strategy.recompute is Recompute.NONE


def test_a_row_of_another_release_or_framework_takes_no_recipe() -> None:
    row = dict(ROWS["TR-MBRIDGE-25.11-B200-20"], framework="Megatron-Bridge / NeMo 24.01 container")
    assert MB.moe_host is not None and MB.moe_host.ops == 28  # the stack's default, not the recipe's 40
    assert row_specs(row)[0].strategy.moe_host.ops == MB.moe_host.ops


@pytest.mark.parametrize(("field", "value", "words"), [
    ("cuda_graph_scope", ["mlp"], "cuda_graph_scope"),
    ("pad_to_capacity", True, "pad_to_capacity needs a capacity_factor"),
    ("dispatcher", "flex", "dispatcher"),
    ("release", "25.1", "release"),
])
def test_a_bad_recipe_entry_names_its_field(field: str, value: object, words: str) -> None:
    good = dict(model="qwen3-30b-a3b", gpu="b200", release="25.11", source="x")
    with pytest.raises(ValidationError, match=words):
        RecipeSettings.model_validate({**good, field: value})


def test_the_25_09_deepseek_h100_run_trains_mtp_on_the_layout_its_run_script_passes() -> None:
    # r0.1.0 run_script.py passes layout 'Et|(tt|)*30mL' on h100 (pp 8 x vp 4); the recipe's mtp_num_layers is 1
    rs = row_specs(ROWS["TR-MBRIDGE-25.09-04"])[0]
    assert rs.workload.mtp and rs.strategy.pipeline_layout == "Et|(tt|)*30mL"
    assert (rs.strategy.first_stage_layers, rs.strategy.last_stage_layers) == (7, 6)  # 1 + 2 x 3, 2 x 3 + 0


def test_a_release_with_a_patch_number_is_read() -> None:
    e = MB.recipe("qwen3-30b-a3b", "h100", "26.04.01")  # v0.4.2: hybridep on H100, no graphs
    assert e is not None and e.dispatcher == "hybridep"
    assert row_specs(ROWS["TR-MBRIDGE-26.04.01-10"])[0].strategy.routing.dispatch_dedup
