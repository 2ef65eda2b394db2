"""Convolution FLOPs (issue 48): dilated, strided, padded and grouped convolutions counted by hand, in XLA's
HloCostAnalysis convention (2 per multiply-add that reads an input element, not padding or a dilation hole)."""

from __future__ import annotations

import pytest

from armillary.ingest.hlo_attrs import WindowDim, convolution_dims
from armillary.ingest.hlo_parse import parse_hlo
from armillary.ingest.hlo_work import instruction_work, valid_taps


def conv_flop(lhs: str, rhs: str, out: str, attrs: str) -> float:
    module = parse_hlo(f"ENTRY %m {{\n  %x = {lhs} parameter(0)\n  %k = {rhs} parameter(1)\n"
                       f"  ROOT %c = {out} convolution(%x, %k), {attrs}\n}}\n")
    comp = module.entry_computation
    return instruction_work(comp.root, comp, module).flop


def test_plain_convolution_is_output_times_window_times_input_features():
    # no padding: every output position sees its whole 3x3 window of 4 input features
    flop = conv_flop("f32[2,10,10,4]", "f32[3,3,4,8]", "f32[2,8,8,8]", "window={size=3x3}, dim_labels=b01f_01io->b01f")
    assert flop == 2 * (2 * 8 * 8 * 8) * (3 * 3 * 4)


def test_batched_matmul_as_lhs_dilated_convolution_counts_one_tap_per_output():
    # XLA writes a batched matmul [B=128, M=32, K=64] x [B, K, N=16] as a convolution whose spatial dimension
    # is the batch: the lhs dilated by 128, a window of 128 padded 127 each side, so each output position
    # meets exactly one input element: 2 x B x M x N x K, not 128x that
    flop = conv_flop("f32[32,128,64]", "f32[128,64,16]", "f32[32,128,16]",
                     "window={size=128 pad=127_127 lhs_dilate=128}, dim_labels=b0f_0io->b0f")
    assert flop == 2 * 128 * 32 * 16 * 64
    # the old count (whole window per output) was 128x that
    assert 2 * (32 * 128 * 16) * (128 * 64) / flop == 128


def test_transposed_convolution_counts_the_taps_on_input_elements():
    # 1-D, 4 inputs dilated by 2 (7 positions with holes), window 3 padded 2 each side: 9 outputs
    # output o reads dilated positions o-2, o-1, o; of those the even ones in 0..6 are input elements
    by_hand = sum(1 for o in range(9) for k in range(3) if 0 <= o - 2 + k <= 6 and (o - 2 + k) % 2 == 0)
    assert by_hand == 12 == valid_taps(WindowDim(3, pad_low=2, pad_high=2, lhs_dilate=2), 4, 9, 3)
    flop = conv_flop("f32[1,4,1]", "f32[3,1,1]", "f32[1,9,1]",
                     "window={size=3 pad=2_2 lhs_dilate=2}, dim_labels=b0f_0io->b0f")
    assert flop == 2 * 12


def test_strided_atrous_convolution():
    # 1-D: 10 inputs, window 3 dilated by 2 (span 5), stride 2, no padding: outputs 0..2 start at 0, 2, 4;
    # every tap lands inside: 3 outputs x 3 taps
    assert valid_taps(WindowDim(3, stride=2, rhs_dilate=2), 10, 3, 3) == 9
    # padded 2 each side: outputs start at -2, 0, 2, 4, 6 (taps +0, +2, +4); the first output's tap at -2
    # and the last's at 10 fall in the padding
    assert valid_taps(WindowDim(3, stride=2, pad_low=2, pad_high=2, rhs_dilate=2), 10, 5, 3) == 15 - 2


def test_grouped_convolutions():
    # depthwise (feature_group_count = 8 features): each output feature reads 1 input feature
    flop = conv_flop("f32[2,6,6,8]", "f32[3,3,1,8]", "f32[2,4,4,8]",
                     "window={size=3x3}, dim_labels=b01f_01io->b01f, feature_group_count=8")
    assert flop == 2 * (2 * 4 * 4 * 8) * (3 * 3 * 1)
    # 2 groups of 4 features out of 8
    flop = conv_flop("f32[2,6,6,8]", "f32[3,3,4,6]", "f32[2,4,4,6]",
                     "window={size=3x3}, dim_labels=b01f_01io->b01f, feature_group_count=2")
    assert flop == 2 * (2 * 4 * 4 * 6) * (3 * 3 * 4)
    # batch_group_count (XLA's weight-gradient form of a grouped convolution): the 4-batch input in 2 groups,
    # output batch 2; each output element reads its window of the 8 input features
    flop = conv_flop("f32[4,6,6,8]", "f32[3,3,8,6]", "f32[2,4,4,6]",
                     "window={size=3x3}, dim_labels=b01f_01io->b01f, batch_group_count=2")
    assert flop == 2 * (2 * 4 * 4 * 6) * (3 * 3 * 8)


def test_window_parse():
    module = parse_hlo("ENTRY %m {\n  %x = f32[1,8,8,2] parameter(0)\n  %k = f32[2,3,2,4] parameter(1)\n"
                       "  ROOT %c = f32[1,4,8,4] convolution(%x, %k), window={size=2x3 stride=2x1 pad=0_0x1_1 "
                       "lhs_dilate=1x1 rhs_dilate=1x1}, dim_labels=b01f_01io->b01f\n}\n")
    dims = convolution_dims(module.entry_computation.root)
    assert dims is not None and dims.lhs == "b01f" and dims.rhs == "01io" and dims.out == "b01f"
    assert dims.window == (WindowDim(2, 2), WindowDim(3, 1, 1, 1))


@pytest.mark.parametrize("labels", ["bf01_oi01->bf01", "b01f_01io->b01f"])
def test_layouts_agree(labels):
    # the same 2-D convolution in NCHW and NHWC labels
    if labels.startswith("bf01"):
        flop = conv_flop("f32[2,4,10,10]", "f32[8,4,3,3]", "f32[2,8,10,10]",
                         f"window={{size=3x3 pad=1_1x1_1}}, dim_labels={labels}")
    else:
        flop = conv_flop("f32[2,10,10,4]", "f32[3,3,4,8]", "f32[2,10,10,8]",
                         f"window={{size=3x3 pad=1_1x1_1}}, dim_labels={labels}")
    assert flop == 2 * 4 * 8 * 2 * (10 * 3 - 2) ** 2


def test_paragraphs_dlrm_batched_matmul():
    # ParaGraph's MLPerf DLRM program (google/paragraph, paragraph/data/hlo_after_optimizations_dlrm_32_tpuv3.txt,
    # %convolution-base-dilated.12, op_type BatchMatMulV2): a [128 x 27 x 128] x [128 x 128 x 27] batched
    # matmul written as a convolution over the batch, window 128, stride 127, lhs_dilate 128: each output
    # meets one input element (XLA's HloCostAnalysis special-cases the same form to `input` valid positions)
    layout = "{2,1,0:T(8,128)(2,1)}"
    flop = conv_flop(f"bf16[128,27,128]{layout}", f"bf16[128,27,128]{layout}", f"bf16[128,27,27]{layout}",
                     "window={size=128 stride=127 lhs_dilate=128}, dim_labels=0bf_0oi->0bf")
    assert flop == 2 * 128 * 27 * 27 * 128  # 2 x batch x M x N x K
