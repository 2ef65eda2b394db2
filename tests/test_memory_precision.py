"""What a run keeps in HBM beside the tensors and at which precision: the runtime reserve per device, fp8
parameters, lower-precision optimizer states, the block formats' quantized copies (issue 44)."""

import pytest

from armillary import Strategy
from armillary.estimate.memory import (
    gathered_weight_bytes,
    optimizer_bytes,
    optimizer_step_bytes,
    runtime_reserve,
    saved_input_bytes,
    weight_bytes,
)
from armillary.estimate.model_states import model_states
from armillary.plan.arrays import StrategyArrays
from armillary.specs.loading import load_system

PSI, D = 1e9, 8  # parameters on one model-parallel rank, data-parallel replicas


def coded(**fields: object) -> StrategyArrays:
    return StrategyArrays.of(Strategy(**fields), dp=D)


def test_the_runtime_reserve_is_the_devices_unless_the_strategy_sets_one():
    """CUDA GPUs keep the 2 GiB allowance; a TPU v6e's XLA runtime keeps 772 MiB of its 32 GiB back
    (bytes_limit 33550237696 = 32 GiB - 772 MiB); v5p's listed 95 GiB is already net of its reserve."""
    h100, v6e, v5p = (load_system(n).device for n in ("dgx-h100", "tpu-v6e-slice", "tpu-v5p-slice"))
    assert (h100.memory_reserve, v6e.memory_reserve, v5p.memory_reserve) == (2 * 2**30, 772 * 2**20, 0.0)
    assert 32 * 2**30 - v6e.memory_reserve == 33550237696
    assert float(runtime_reserve(coded(), v6e.memory_reserve)) == 772 * 2**20
    assert float(runtime_reserve(coded(memory_reserve="1 GiB"), v6e.memory_reserve)) == 2**30
    assert float(runtime_reserve(coded(memory_reserve=0), h100.memory_reserve)) == 0.0


def test_fp8_params_keep_the_fp8_weights_alone_and_gather_them():
    """ZeRO-1 of the fp8 recipe: bf16 weights with an fp8 copy (3 bytes), fp32 main gradients (4), fp32
    main parameters and moments sharded (12 / d). fp8 parameters drop the bf16 copy (1 byte) and the
    distributed optimizer gathers 1 byte per parameter instead of the 2 of the bf16 weights."""
    plain, fp8p = coded(precision="fp8", zero=1), coded(precision="fp8", zero=1, fp8_params=True)
    a, b = model_states(PSI, plain), model_states(PSI, fp8p)
    assert (float(a.weights), float(b.weights)) == pytest.approx((3 * PSI, 1 * PSI))
    assert float(a.gradients) == float(b.gradients) == pytest.approx(4 * PSI)
    assert float(a.optimizer_states) == float(b.optimizer_states) == pytest.approx(12 * PSI / D)
    assert (float(gathered_weight_bytes(PSI, plain)), float(gathered_weight_bytes(PSI, fp8p))) == (2 * PSI, PSI)
    # the step writes no bf16 weight: 2 bytes fewer of the 43 (grad 4, Adam 28, master to model 4 + 2 + 1, zero 4)
    assert (float(optimizer_step_bytes(plain)), float(optimizer_step_bytes(fp8p))) == (43.0, 41.0)


def test_fp8_params_are_refused_where_no_optimizer_keeps_the_main_parameters():
    with pytest.raises(ValueError, match="fp8_params needs a quantized recipe"):
        Strategy(precision="bf16", zero=1, fp8_params=True)
    with pytest.raises(ValueError, match="fp8_params needs zero 1, 2 or 3"):
        Strategy(precision="fp8", fp8_params=True)
    with pytest.raises(ValueError, match="main_params 'fp16' needs precision"):
        Strategy(precision="fp32", main_params="fp16")
    with pytest.raises(ValueError, match="optimizer_states"):
        Strategy(optimizer_states="fp8")


def test_bf16_optimizer_states_halve_the_moments():
    """DeepSeek-V3 (report §3.3.3): bf16 moments, fp32 main parameters and gradients: 4 + 2 + 2 bytes of
    optimizer state per parameter instead of 12; fp16 main parameters (--main-params-dtype fp16) 2 + 2 + 2."""
    assert float(optimizer_bytes(coded())) == 12.0
    assert float(optimizer_bytes(coded(optimizer_states="bf16"))) == 8.0
    assert float(optimizer_bytes(coded(optimizer_states="bf16", main_params="fp16"))) == 6.0
    assert float(optimizer_bytes(coded(precision="fp32", optimizer_states="bf16"))) == 4.0  # fp32: m, v only
    # the step reads and writes each moment (2 x 2 bytes fewer each) and the main parameters three times
    assert float(optimizer_step_bytes(coded())) - float(optimizer_step_bytes(coded(optimizer_states="bf16"))) == 8.0
    assert float(optimizer_step_bytes(coded(optimizer_states="bf16", main_params="fp16"))) == 42.0 - 8.0 - 6.0


@pytest.mark.parametrize(("block_format", "weight", "saved"), [
    ("none", 3.0, 1.0), ("mxfp8", 2 + 2 * 8.25 / 8, 8.25 / 8), ("nvfp4", 2 + 2 * 4.5 / 8, 4.5 / 8),
    ("mxfp4", 2 + 2 * 4.25 / 8, 4.25 / 8)])
def test_block_formats_keep_rowwise_and_columnwise_copies(block_format, weight, saved):
    """bf16 weights and, per block format, a rowwise and a columnwise quantized copy (scales included:
    NVFP4 4.5 bits, MXFP4 4.25, MXFP8 8.25); the input kept for the weight gradient in its columnwise copy.
    Per-tensor fp8 (none) keeps its one fp8 copy, 3 bytes and 1."""
    st = coded(precision="fp8", block_format=block_format)
    assert float(weight_bytes(1.0, st)) == pytest.approx(weight)
    assert float(saved_input_bytes(st)) == pytest.approx(saved)
    if block_format != "none":  # a block format names either family: priced in fp8's (docs/fp4.md)
        assert float(weight_bytes(1.0, coded(precision="bf16", block_format=block_format))) == pytest.approx(weight)
    assert (float(weight_bytes(1.0, coded())), float(saved_input_bytes(coded()))) == (2.0, 2.0)


def test_mlperf_gpt3_on_32_h100_nodes_fits_with_the_fp8_parameters_it_ran_with():
    """MLPerf Training v4.1, NVIDIA eos_n32 GPT-3 175B (tp 4, pp 8, vpp 6, mbs 2, 80 GB H100s): its config sets
    FP8_PARAMS=True (config_common.sh) and the row says "FP8 params". With fp8 parameters the estimate fits
    (about 72 GiB of 80), without them it does not (about 83)."""
    from armillary.estimate.run import estimate_training_run
    from armillary.validation.reading import fp8_params_stated
    from armillary.validation.rows import row_specs
    from armillary.validation.run import DEFAULT_CSV, read_rows

    rows = {r["id"]: r for r in read_rows(DEFAULT_CSV)}
    row = rows["TR-MLPERF-v4.1-NVIDIA-eos-n32-ngc24.09-nemo-GPT3-STEP"]
    assert fp8_params_stated(row)
    assert not fp8_params_stated(rows["TR-MLPERF-v4.0-eos-n64-ngc24-04-nemo-TTT"])  # its config does, its row not
    s = row_specs(row)[0]
    peaks = {}
    for on in (False, True):
        r = estimate_training_run(s.model, s.system, s.strategy.model_copy(update={"fp8_params": on}), s.workload)
        peaks[on] = (float(r.memory_hbm.total) / 2**30, bool(r.feasible))
    assert peaks[True][1] and not peaks[False][1]
    # 175e9 / (tp 4 x pp 8) parameters per rank, 2 bytes each fewer: 10.2 GiB
    assert peaks[False][0] - peaks[True][0] == pytest.approx(2 * 175e9 / 32 / 2**30, rel=0.03)


def test_megatron_arguments_of_the_stored_precisions():
    from pathlib import Path

    from armillary.report.deploy import Target, deployment
    from armillary.specs.run import load_run

    model, system, strategy, workload = load_run(Path(__file__).parent.parent / "examples" / "llama3-70b-h100.yaml")

    def argv(**fields: object) -> tuple[list[str], tuple[str, ...]]:
        s = type(strategy).model_validate({**strategy.model_dump(), **fields})
        d = deployment(Target.MEGATRON, model, system, s, workload)
        return list(d.commands[0].argv), d.notes

    plain, _ = argv()
    assert "--fp8-param-gather" not in plain and "--use-precision-aware-optimizer" not in plain
    fp8p, _ = argv(precision="fp8", fp8_params=True)
    fp4p, _ = argv(precision="bf16", block_format="nvfp4", fp8_params=True)
    assert "--fp8-param-gather" in fp8p and "--fp4-param-gather" in fp4p and "--fp8-param-gather" not in fp4p
    ds, notes = argv(optimizer_states="bf16")
    i = ds.index("--use-precision-aware-optimizer")
    assert ds[i:i + 7] == ["--use-precision-aware-optimizer", "--exp-avg-dtype", "bf16", "--exp-avg-sq-dtype", "bf16",
                           "--main-params-dtype", "fp32"]
    assert any("store_param_remainders" in n for n in notes)
    _, eager = argv(cross_entropy="eager_fp32")
    assert any("eager_fp32" in n and "vocab-parallel" in n for n in eager)


def test_mlperf_gpt3_on_512_trillium_chips_fits_with_the_tpus_reserve():
    """MLPerf Training v4.1, Google's GPT-3 175B on 512 TPU v6e (FSDP over all chips, full remat): with the
    XLA runtime's 772 MiB kept back it fits the 32 GiB; with the CUDA figure, 2 GiB, it would not."""
    from armillary.estimate.run import estimate_training_run
    from armillary.validation.rows import row_specs
    from armillary.validation.run import DEFAULT_CSV, read_rows

    trillium = "TR-MLPERF-v4.1-Google-cloud-tpu-trillium-512-maxtext-GPT3-TTT"
    row = next(r for r in read_rows(DEFAULT_CSV) if r["id"] == trillium)
    s = row_specs(row)[0]
    tpu = estimate_training_run(s.model, s.system, s.strategy, s.workload)
    cuda = estimate_training_run(s.model, s.system, s.strategy.model_copy(update={"memory_reserve": 2 * 2**30}),
                                 s.workload)
    assert bool(tpu.feasible) and not bool(cuda.feasible)
    assert float(cuda.memory_hbm.total - tpu.memory_hbm.total) == pytest.approx(2 * 2**30 - 772 * 2**20)
