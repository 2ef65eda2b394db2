"""The int8 block format (AQT, MaxText quantization=int8) end to end, as a user meets it: a clear refusal on
devices without an int8 rate (estimate, simulate, search, CLI), no Megatron-LM launch, no serving (its stored
int8 weights would read as weight-only int8), and the tables indexed by block format stay aligned."""

import pytest
from typer.testing import CliRunner

import armillary
from armillary.cli import app
from armillary.cost.compute import _BLOCK_FORMATS
from armillary.errors import SpecError
from armillary.estimate import memory as mem
from armillary.plan.codes import BLOCK_FORMAT
from armillary.report.deploy import Target, deployment
from armillary.serving.benchmark import served_weights
from armillary.specs.device import Precision
from armillary.specs.formats import FORMATS
from armillary.specs.loading import load_model, load_strategy, load_system, load_workload
from armillary.specs.strategy import BlockFormat, Strategy
from armillary.specs.workload import StoredPrecision
from armillary.workload.quantize import format_bytes

TRAIN = {"seq_len": 4096, "global_batch": 32}
SERVE = {"kind": "inference", "batch": 8, "input_len": 512, "output_len": 64}
INT8 = {"tp": 8, "block_format": "int8"}
NO_RATE = (r"strategy\.block_format 'int8' .*lists no int8 matrix rate .*the preset devices that list one: "
           r"tpu-v4, tpu-v5p, tpu-v6e")


def test_every_block_format_has_a_precision_a_format_and_a_row_in_each_table():
    """Each BlockFormat member but none is a block-scaled Precision with a specs.formats entry, in the
    plan.codes order that cost.compute, estimate.memory and workload.quantize index their tables by."""
    formats = BLOCK_FORMAT.members[1:]
    assert set(formats) == set(BlockFormat) - {BlockFormat.NONE}
    assert tuple(Precision(f.value) for f in formats) == _BLOCK_FORMATS
    assert all(Precision(f.value).block_scaled and f.value in FORMATS for f in formats)
    for table in (mem.QUANTIZED_WEIGHT_BYTES, mem.QUANTIZED_INPUT_BYTES):
        assert len(table) == len(BLOCK_FORMAT.members)
    assert format_bytes(float(BLOCK_FORMAT.code(BlockFormat.INT8))) == FORMATS["int8"].bytes == 1.0


@pytest.mark.parametrize("system", ["dgx-a100", "dgx-h100", "dgx-b200", "mi300x-8"])
def test_a_device_without_an_int8_rate_refuses_it_naming_the_field_and_the_devices(system):
    with pytest.raises(SpecError, match=NO_RATE):
        armillary.estimate("llama3-8b", system, INT8, TRAIN, gpus=8)
    with pytest.raises(SpecError, match=NO_RATE):
        armillary.simulate("llama3-8b", system, INT8, TRAIN, gpus=8)


def test_the_fp4_refusal_still_names_its_units():
    with pytest.raises(SpecError, match=r"strategy\.block_format 'nvfp4': .*has no nvfp4 matrix units"):
        armillary.estimate("llama3-8b", "dgx-h100", {"block_format": "nvfp4"}, TRAIN, gpus=8)


def test_search_tries_int8_where_the_device_lists_it_and_refuses_it_elsewhere():
    space = {"block_format": ["none", "int8"], "tp": [1, 2], "pp": [1], "vpp": [1], "micro_batch": [2],
             "zero": [1], "recompute": ["none"]}
    result = armillary.search("llama3-8b", "tpu-v5p-slice", {"seq_len": 4096, "global_batch": 64}, None, space,
                              gpus=8, top=4)
    assert result.top[0].strategy.block_format is BlockFormat.INT8  # twice the bf16 MXU rate
    bf16 = armillary.search("llama3-8b", "tpu-v5p-slice", {"seq_len": 4096, "global_batch": 64}, None,
                            {**space, "block_format": ["none"]}, gpus=8, top=1)
    assert bf16.top[0].step_time_s > result.top[0].step_time_s
    with pytest.raises(SpecError, match=NO_RATE):
        armillary.search("llama3-8b", "dgx-h100", {"seq_len": 4096, "global_batch": 64}, None, space, gpus=8)


def test_the_cli_prints_the_refusal_without_a_traceback(tmp_path):
    run = tmp_path / "run.yaml"
    run.write_text("model: llama3-8b\nsystem: tpu-v5p-slice\ngpus: 8\nstrategy: {tp: 8, block_format: int8}\n"
                   "workload: {seq_len: 4096, global_batch: 32}\n")
    runner = CliRunner()
    assert runner.invoke(app, ["estimate", str(run)]).exit_code == 0
    for args in (["--set", "system=dgx-h100"], ["--emit", "megatron"]):
        result = runner.invoke(app, ["estimate", str(run), *args])
        assert result.exit_code != 0 and result.output.startswith("error: strategy.block_format 'int8'"), result.output
        assert not isinstance(result.exception, KeyError)


def test_megatron_has_no_int8_launch():
    with pytest.raises(SpecError, match=r"'int8' .*has no Megatron-LM launch"):
        deployment(Target.MEGATRON, load_model("llama3-8b"), load_system("tpu-v5p-slice", 8),
                   load_strategy(INT8), load_workload(TRAIN))


def test_serving_refuses_the_int8_block_format_rather_than_read_it_as_weight_only_int8():
    """served_weights would store StoredPrecision.INT8, which serving reads as weight-only int8 (GEMMs at the
    activation precision), while the block format prices int8 GEMMs: refused on every serving path."""
    with pytest.raises(SpecError, match="training recipe"):
        served_weights(Strategy(block_format=BlockFormat.INT8))
    for call in (armillary.estimate, armillary.simulate):
        with pytest.raises(SpecError, match=r"workload\.weights: int8 and block_format none"):
            call("llama3-8b", "tpu-v6e-slice", INT8, SERVE, gpus=8)
    with pytest.raises(SpecError, match="training recipe"):
        armillary.simulate_serving("llama3-8b", "tpu-v6e-slice", INT8, SERVE, gpus=8, rate=1.0, duration_s=5.0)
    with pytest.raises(SpecError, match="training recipe"):
        deployment(Target.VLLM, load_model("llama3-8b"), load_system("tpu-v6e-slice", 8), load_strategy(INT8),
                   load_workload({**SERVE, "weights": "int8"}))
    # the suggested alternative: weight-only int8 at the bf16 GEMM rate
    weight_only = armillary.estimate("llama3-8b", "tpu-v6e-slice", {"tp": 8}, {**SERVE, "weights": "int8"}, gpus=8)
    assert weight_only.tpot_s > 0
    assert served_weights(Strategy(block_format=BlockFormat.NVFP4)) is StoredPrecision.NVFP4


def test_boundedness_of_an_int8_decode_is_refused_as_serving_is() -> None:
    from armillary.search.technology import op_boundedness

    with pytest.raises(SpecError, match="W8A8"):
        op_boundedness("llama2-70b", "tpu-v5p", 64, decode=True, block_format="int8")
    assert op_boundedness("llama2-70b", "tpu-v5p", 8, seq_len=2048, block_format="int8")  # training: priced
