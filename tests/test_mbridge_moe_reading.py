"""The Megatron-Bridge 25.11 MoE rows, read as the archive table states them (NVIDIA-NeMo/Megatron-Bridge
docs/performance-summary-archive.md @067f987d, section '25.11 NeMo Container'): every parallel degree, batch
and sequence length, and the precision with its block-scaled format. The expected values are transcribed by
hand from the table, so a change in how the harness reads the words of these rows fails here."""

from __future__ import annotations

import pytest

from armillary.specs.strategy import BlockFormat, Strategy, TrainingPrecision
from armillary.validation.precision_words import block_format_of
from armillary.validation.rows import row_specs
from armillary.validation.run import read_rows, run_row

ROWS = {r["id"]: r for r in read_rows()}

# id suffix: (TP, PP, VP, EP, MBS, GBS, sequence, GPUs, precision column) from the table
TABLE = {
    "GB300-04": (1, 2, 4, 32, 1, 4096, 4096, 256, "BF16"),
    "GB300-05": (1, 2, 4, 32, 1, 4096, 4096, 256, "FP8-MX"),
    "GB300-06": (1, 1, 1, 64, 2, 1280, 8192, 64, "BF16"),
    "GB300-07": (1, 1, 1, 8, 4, 512, 4096, 8, "FP8-MX"),
    "GB300-08": (1, 4, 12, 16, 2, 8192, 4096, 256, "BF16"),
    "GB200-12": (1, 4, 4, 64, 1, 4096, 4096, 256, "BF16"),
    "GB200-13": (1, 8, 4, 32, 1, 4096, 4096, 256, "FP8-MX"),
    "GB200-14": (1, 1, 1, 64, 1, 1280, 8192, 64, "BF16"),
    "GB200-15": (1, 1, 1, 8, 4, 512, 4096, 8, "FP8-MX"),
    "GB200-16": (1, 8, 3, 32, 1, 8192, 4096, 256, "BF16"),
    "B200-19": (1, 16, 1, 8, 1, 2048, 4096, 256, "FP8-MX"),
    "B200-20": (1, 1, 1, 8, 4, 512, 4096, 64, "BF16"),
    "B200-21": (1, 1, 1, 8, 1, 512, 4096, 8, "FP8-MX"),
    "B200-22": (1, 8, 2, 8, 1, 1024, 4096, 64, "FP8-MX"),
    "H100-26": (1, 4, 1, 8, 4, 512, 4096, 64, "BF16"),
    "H100-27": (1, 2, 24, 8, 2, 512, 4096, 16, "FP8-CS"),
    "H100-28": (2, 8, 4, 32, 1, 2048, 4096, 256, "FP8-CS"),
}
# Megatron-Bridge's precision names (scripts/performance/utils/helpers.py get_precision_config at r0.2.0):
# bf16 -> bf16_mixed, fp8_cs -> bf16_with_fp8_current_scaling_mixed (per-tensor), fp8_mx -> bf16_with_mxfp8_mixed,
# nvfp4 -> bf16_with_nvfp4_mixed
PRECISION = {"BF16": (TrainingPrecision.BF16, BlockFormat.NONE), "FP8-CS": (TrainingPrecision.FP8, BlockFormat.NONE),
             "FP8-MX": (TrainingPrecision.FP8, BlockFormat.MXFP8)}


@pytest.mark.parametrize("suffix", sorted(TABLE))
def test_the_25_11_moe_rows_are_read_as_the_table_states(suffix: str) -> None:
    tp, pp, vp, ep, mbs, gbs, seq, gpus, precision = TABLE[suffix]
    row = ROWS[f"TR-MBRIDGE-25.11-{suffix}"]
    assert row["precision"] == precision  # the transcription above is of the same row
    specs = row_specs(row)[0]
    st: Strategy = specs.strategy
    assert (st.tp, st.pp, st.vpp, st.ep, st.expert_tp, st.micro_batch) == (tp, pp, vp, ep, 1, mbs)
    assert st.dp == gpus // (tp * pp)  # the table's DP is #GPUs / (TP x PP x CP), CP 1 throughout
    assert (specs.workload.global_batch, specs.workload.seq_len) == (gbs, seq)
    assert (st.precision, st.block_format) == PRECISION[precision]


@pytest.mark.parametrize(("words", "expected"), [
    ("FP8-MX", BlockFormat.MXFP8), ("MXFP8", BlockFormat.MXFP8), ("fp8_mx", BlockFormat.MXFP8),
    ("NVFP4", BlockFormat.NVFP4), ("MXFP4 (32-element blocks)", BlockFormat.MXFP4),
    # the value is current scaling; the MX figure is the one in parentheses
    ("FP8-CS (FP8-MX)", None), ("FP8-CS", None), ("BF16", None),
    ("FP8 mixed (fine-grained tile/block scaling)", None),  # DeepSeek-V3's 128-wide blocks are not MX
    ("per recipe (not in table)", None), ("", None)])
def test_a_block_scaled_format_is_read_from_the_precision_value(words: str, expected: BlockFormat | None) -> None:
    assert block_format_of(words) is expected


def test_an_fp4_row_keeps_its_tensors_in_bf16_as_megatrons_fp4_recipes_do() -> None:
    row = {**ROWS["TR-MBRIDGE-25.11-B200-21"], "precision": "NVFP4"}
    st = row_specs(row)[0].strategy
    assert (st.precision, st.block_format) == (TrainingPrecision.BF16, BlockFormat.NVFP4)


def test_an_mxfp8_row_pays_for_its_quantize_kernels() -> None:
    """The same run read as per-tensor FP8 would skip MXFP8's quantize kernels (`Strategy.block_format`): the
    MX reading is slower, never faster."""
    row = ROWS["TR-MBRIDGE-25.11-B200-21"]
    mx = run_row(row)
    per_tensor = run_row({**row, "precision": "FP8-CS"})
    assert mx.predicted is not None and per_tensor.predicted is not None
    assert mx.predicted < per_tensor.predicted  # tokens/s/GPU
