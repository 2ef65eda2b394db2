"""Megatron-Bridge's performance recipes that turn the overlapped parameter all-gather off under MXFP8
(`RecipeSettings.param_gather_overlap_off`), and how the validation harness reads them. Transcribed by hand from
scripts/performance/configs/{deepseek,qwen3,llama3}/*_llm_pretrain.py at v0.2.0 (NeMo 25.11): `if precision ==
"fp8_mx": cfg.comm_overlap.overlap_param_gather = False` (with ddp and optimizer) in deepseek_v3_gb300_config,
deepseek_v3_gb200_config, qwen3_235b_a22b_b200_config, llama3_70b_gb300_config and llama3_70b_gb200_config only."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from armillary.specs.loading import load_stack
from armillary.specs.stack import RecipeSettings
from armillary.specs.strategy import BlockFormat, TrainingPrecision
from armillary.validation.row_stack import recipe_precision
from armillary.validation.rows import row_specs
from armillary.validation.run import read_rows

ROWS = {r["id"]: r for r in read_rows()}
MB = load_stack("megatron-bridge")

OFF_UNDER_MXFP8 = {("deepseek-v3", "gb300", "25.11"), ("deepseek-v3", "gb200", "25.11"),
                   ("qwen3-235b-a22b", "b200", "25.11"), ("llama3-70b", "gb300", "25.11"),
                   ("llama3-70b", "gb200", "25.11")}


def test_the_entries_that_turn_the_overlap_off_are_the_configs_that_do() -> None:
    off = {(e.model, e.gpu, e.release) for e in MB.recipes if e.param_gather_overlap_off}
    assert off == OFF_UNDER_MXFP8
    assert all(MB.recipe(*key).param_gather_overlap_off == ("fp8_mx",) for key in OFF_UNDER_MXFP8)


def test_an_unknown_precision_name_is_refused() -> None:
    with pytest.raises(ValidationError, match="param_gather_overlap_off"):
        RecipeSettings(model="deepseek-v3", gpu="gb300", release="25.11", param_gather_overlap_off=("mxfp8",),
                       source="x")


def test_the_row_precision_by_the_recipe_scripts_name() -> None:
    assert recipe_precision({"precision": TrainingPrecision.FP8, "block_format": BlockFormat.MXFP8}) == "fp8_mx"
    assert recipe_precision({"precision": TrainingPrecision.FP8, "block_format": BlockFormat.NONE}) == "fp8_cs"
    assert recipe_precision({"precision": TrainingPrecision.BF16}) == "bf16"


@pytest.mark.parametrize(("row", "overlapped"), [
    ("TR-MBRIDGE-25.11-GB300-05", False),  # DeepSeek-V3, FP8-MX: the recipe turns it off
    ("TR-MBRIDGE-25.11-GB300-04", True),   # the same entry, BF16: left on
    ("TR-MBRIDGE-25.11-GB200-13", False),  # DeepSeek-V3, FP8-MX
    ("TR-MBRIDGE-25.11-B200-22", False),   # Qwen3-235B, FP8-MX
    ("TR-MBRIDGE-25.11-B200-21", True),    # Qwen3-30B, FP8-MX: its config leaves the overlap on
    ("TR-MBRIDGE-25.11-GB200-10", True),   # Llama 3 70B, FP8-CS: off under fp8_mx only
])
def test_the_harness_reads_the_setting_under_the_rows_precision(row: str, overlapped: bool) -> None:
    spec = row_specs(ROWS[row])[0]
    assert spec.strategy.overlap.param_gather is overlapped
    said = any("overlapped parameter all-gather off under fp8_mx" in a for a in spec.assumptions)
    assert said is (not overlapped)
