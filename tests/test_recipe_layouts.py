"""The pipeline layouts a stack's recipes set (`SoftwareStack.pipeline_layouts`) and how the validation harness
reads them: Megatron-Bridge's DeepSeek-V3 recipe lays its 61 layers out from a table by (pp, vpp)
(src/megatron/bridge/recipes/deepseek/deepseek_v3.py at v0.2.0 and r0.1.0). The expected stage counts are
counted by hand from the recipe's lists."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from armillary.plan.layout import embedding_and_loss_split
from armillary.specs.loading import load_model, load_stack, preset_names
from armillary.specs.pipeline_layout import layout_layers, layout_mtp, layout_stage_layers
from armillary.specs.stack import RecipeLayout
from armillary.validation.row_columns import Unsupported
from armillary.validation.rows import row_specs
from armillary.validation.run import read_rows

ROWS = {r["id"]: r for r in read_rows()}
B200_19, GB200_12 = ROWS["TR-MBRIDGE-25.11-B200-19"], ROWS["TR-MBRIDGE-25.11-GB200-12"]


@pytest.mark.parametrize("name", preset_names("stacks"))
def test_every_recipe_layout_parses_and_covers_its_models_layers(name: str) -> None:
    for entry in load_stack(name).pipeline_layouts:
        assert layout_layers(entry.layout) == load_model(entry.model).layers, (name, entry.pp, entry.vpp)
        assert layout_mtp(entry.layout) == 0 and entry.source
        layout_stage_layers(entry.with_mtp(load_model(entry.model).mtp_layers), entry.pp, entry.vpp)


# (pp, vpp): (first, last) stage layers of the recipe's lists, counted by hand: chunk c on rank c mod pp
@pytest.mark.parametrize(("pp", "vpp", "first", "last"), [
    (4, 1, 16, 13),  # [E + 16 t], [16 t], [16 t], [13 t + L]
    (8, 1, 8, 5),  # [E + 8 t], 6 x [8 t], [5 t + L]
    (4, 2, 16, 13),  # the same 8 chunks: rank 0 holds chunks 0 and 4 (8 + 8), rank 3 chunks 3 and 7 (8 + 5)
    (16, 1, 4, 1),  # [E + 4 t], 14 x [4 t], [t + L]
    (8, 2, 8, 5),  # the same 16 chunks: rank 7 holds chunks 7 and 15 (4 + 1)
    (4, 4, 16, 13),  # rank 0: chunks 0, 4, 8, 12 (4 x 4); rank 3: 3, 7, 11, 15 (4 + 4 + 4 + 1)
])
def test_megatron_bridge_deepseek_v3_table_by_hand(pp: int, vpp: int, first: int, last: int) -> None:
    entry = load_stack("megatron-bridge").recipe_layout("deepseek-v3", pp, vpp)
    assert entry is not None
    assert layout_stage_layers(entry.layout, pp, vpp) == (first, last)
    assert layout_stage_layers(entry.with_mtp(1), pp, vpp) == (first, last)  # the MTP module holds no layer
    assert load_stack("megatron-bridge").recipe_layout("deepseek-v3", 8, 4) is None  # not in the table


def test_mtp_modules_go_just_before_the_loss() -> None:
    entry = load_stack("megatron-bridge").recipe_layout("deepseek-v3", 16, 1)
    assert entry is not None
    assert entry.with_mtp(0) == "Et*4|(t*4|)*14tL"
    assert entry.with_mtp(2) == "Et*4|(t*4|)*14tmmL"


def test_a_bad_table_entry_is_refused_naming_it() -> None:
    with pytest.raises(ValidationError, match=r"pipeline_layouts \(deepseek-v3, pp 8, vpp 1\).*16 chunks"):
        RecipeLayout(model="deepseek-v3", pp=8, vpp=1, layout="Et*4|(t*4|)*14tL", source="s")
    with pytest.raises(ValidationError, match="names multi-token-prediction modules"):
        RecipeLayout(model="deepseek-v3", pp=16, vpp=1, layout="Et*4|(t*4|)*14tmL", source="s")


def test_b200_19_is_read_with_the_recipes_layout() -> None:
    """DeepSeek-V3 with MTP on pp 16: 4 / 1 layers on the first / last stage (the generic rule says 3 / 2), the
    MTP module before the loss, and the reading written down."""
    specs = row_specs(B200_19)[0]
    st = specs.strategy
    assert st.pipeline_layout == "Et*4|(t*4|)*14tmL" and specs.workload.mtp
    assert (st.first_stage_layers, st.last_stage_layers) == (4, 1)
    assert embedding_and_loss_split(61, 16, 1) == (3, 2)  # what it was read as before
    assert any("pipeline_layout" in a and "deepseek_v3.py" in a for a in specs.assumptions)


def test_gb200_12_without_mtp_places_no_mtp_module() -> None:
    st = row_specs(GB200_12)[0].strategy
    assert st.pipeline_layout == "Et*4|(t*4|)*14tL"
    assert (st.first_stage_layers, st.last_stage_layers) == (16, 13)


def test_a_row_that_states_its_layout_keeps_it() -> None:
    own = "Et*3|(t*4|)*14t*2mL"
    row = {**B200_19, "notes": f"{B200_19['notes']}; --pipeline-model-parallel-layout {own}"}
    specs = row_specs(row)[0]
    assert specs.strategy.pipeline_layout == own
    assert (specs.strategy.first_stage_layers, specs.strategy.last_stage_layers) == (3, 2)
    assert any("the row states it" in a for a in specs.assumptions)
    with pytest.raises(Unsupported, match=r"pipeline_layout.*15 chunks"):
        row_specs({**B200_19, "notes": "pipeline layout: Et*4|(t*4|)*13tmL"})


def test_shapes_and_stacks_outside_the_table_keep_the_generic_split() -> None:
    """pp 8 x vpp 4 is not in the recipe's table (GB200-13: the 25.11 GB200 config sets no layout; the 25.09
    H100 run passes its own, `RecipeSettings.layout`, tests/test_mbridge_moe_recipes.py), so the generic rule reads
    it, 7 / 6; a row of another stack is not read with Megatron-Bridge's table."""
    st = row_specs(ROWS["TR-MBRIDGE-25.11-GB200-13"])[0].strategy
    assert st.pipeline_layout is None and (st.first_stage_layers, st.last_stage_layers) == (7, 6)
    assert layout_stage_layers("Et|(tt|)*30mL", 8, 4) == (7, 6)
    other = row_specs({**B200_19, "framework": "Megatron-Core"})[0].strategy
    assert other.pipeline_layout is None and (other.first_stage_layers, other.last_stage_layers) == (3, 2)
