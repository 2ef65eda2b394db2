"""The validation harness reads rows written by other people: synonyms, qualifiers, spellings and units give
the same prediction, stacks supply what a row leaves unstated, and a row it cannot run names its column."""

import re

import pytest
from conftest import shipped_results

from armillary.specs.loading import load_stack, stack_for
from armillary.specs.run import load_run
from armillary.specs.strategy import Attention, Recompute, TrainingPrecision, ZeroStage
from armillary.validation.collective_reading import best_of_runs
from armillary.validation.collective_rows import predict_collective
from armillary.validation.gpu_words import memory_gb_of, system_preset_for
from armillary.validation.model_words import model_preset_for
from armillary.validation.precision_words import precision_of
from armillary.validation.rows import row_specs
from armillary.validation.run import read_rows, run_row
from armillary.validation.strategy_words import recompute_of, sharding_of
from armillary.validation.vocabulary import flag, head


@pytest.mark.parametrize(("text", "value"), [
    ("none (activation checkpointing off)", "none"), ("yes; 8 rails", "yes"), ("  Not stated ", None),
    ("n/a", None), ("default (auto)", None), ("per recipe (not in table)", None), ("", None), ("-", None)])
def test_qualified_and_unstated_values(text, value):
    assert head(text) == value


@pytest.mark.parametrize(("text", "value"), [
    ("yes", True), ("Enabled", True), ("TRUE", True), ("NVLS disabled", False), ("off (not used)", False),
    ("no", False), ("not stated", None), ("n/a", None), ("maybe", None)])
def test_flags(text, value):
    assert flag(text) is value


@pytest.mark.parametrize(("text", "value"), [
    ("none (activation checkpointing off)", Recompute.NONE), ("No activation checkpointing", Recompute.NONE),
    ("full (uniform, every layer)", Recompute.FULL), ("Full activation checkpointing", Recompute.FULL),
    ("activation checkpointing", Recompute.FULL), ("selective (attention core)", Recompute.SELECTIVE),
    ("per recipe (not in table)", None), ("not stated", None)])
def test_recompute_descriptions(text, value):
    assert recompute_of(text) is value


@pytest.mark.parametrize(("text", "value"), [
    ("amp_bf16", TrainingPrecision.BF16), ("Float8 + BF16", TrainingPrecision.FP8),
    ("FP8-CS (FP8-MX)", TrainingPrecision.FP8), ("fp16 mixed (loss scale 8192)", TrainingPrecision.FP16),
    ("mixed precision (16-bit)", None), ("not stated in 25.09 table", None)])
def test_precision_descriptions(text, value):
    assert precision_of(text) is value


@pytest.mark.parametrize(("text", "value"), [
    ("MosaicML Composer/llm-foundry, FSDP SHARD_GRAD_OP", ZeroStage.GRADIENTS),
    ("torchtitan; FSDP 8 + TP 8", ZeroStage.PARAMETERS), ("Megatron-LM + DeepSpeed ZeRO-3", ZeroStage.PARAMETERS),
    ("Megatron-Core, distributed optimizer", ZeroStage.OPTIMIZER), ("NeMo 24.07", None)])
def test_sharding_descriptions(text, value):
    assert sharding_of(text) is value


@pytest.mark.parametrize(("text", "preset"), [
    ("Llama-2-70B", "llama2-70b"), ("LLAMA2_70B", "llama2-70b"), ("llama 2 70b (chat)", "llama2-70b"),
    ("LLAMA3.1_405B", "llama3.1-405b"), ("meta-llama/Llama-3.1-405B-Instruct-FP8", "llama3.1-405b"),
    ("GPT OSS 120B (MoE)", "gpt-oss-120b"), ("DeepSeek-R1 (MoE, MLA)", "deepseek-v3"),
    ("Qwen3_235B_a22B (MoE)", "qwen3-235b-a22b"), ("GPT 530B (Megatron)", "korthikanti-530b"),
    ("Nemotron-8B", None)])
def test_model_names_in_any_spelling(text, preset):
    assert model_preset_for(text) == preset


@pytest.mark.parametrize(("text", "gb", "system"), [
    ("H100 SXM 96GB HBM2e, 500 W power limit", 96, "dgx-h100"), ("GH200 (96GB HBM3 + 480GB LPDDR5X)", 96, None),
    ("A100 40GB/80GB", 80, "dgx-a100-40gb"), ("a100_40gb", 40, "dgx-a100-40gb"), ("GB200 (NVL72)", None, "gb200-nvl72"),
    ("B200 (DGX-B200)", None, "dgx-b200"), ("GB300 (DGX-GB300, NVL72)", None, "gb300-nvl72"),
    ("DGX B300", None, "dgx-b300"), ("8x H20 96GB", 96, "hgx-h20"), ("H200 SXM", None, "hgx-h200"),
    ("AMD Instinct MI355X", None, "mi355x-8"), ("Intel Gaudi 3", None, "hls-gaudi3"),
    ("TPU v6e (Trillium)", None, "tpu-v6e-slice"), ("Trainium2 (trn2.48xlarge)", None, "trn2-16")])
def test_gpu_texts(text, gb, system):
    assert memory_gb_of(text) == gb
    if system is not None:
        assert system_preset_for(text) == system


@pytest.mark.parametrize(("framework", "stack"), [
    ("Megatron-LM (2021, commit 6985e589)", "megatron-lm-2021"), ("Megatron-LM + DeepSpeed ZeRO-3",
                                                                  "megatron-deepspeed-2021"),
    ("Megatron-Core r0.8.0", "megatron-core"), ("Megatron-Core r0.3.0", "megatron-core-2023"),
    ("Megatron-LM core_r0.3.0", "megatron-core-2023"), ("Megatron-LM core_r0.9.0", "megatron-core"),
    ("NeMo 24.07", "nemo-2"), ("Megatron-Bridge / NeMo 25.11 container", "megatron-bridge"),
    ("MosaicML Composer/llm-foundry, FSDP FULL_SHARD", "llm-foundry"), ("torchtitan @9dec370; FSDP", "torchtitan"),
    ("MaxText on TPU v5p", "maxtext"), ("PyTorch FSDP", "pytorch-fsdp1"),
    ("DeepSpeed ZeRO stage 3", "deepspeed-zero3")])
def test_framework_text_names_its_stack(framework, stack):
    found = stack_for(framework)
    assert found is not None and found == load_stack(stack)


def test_stack_defaults_fill_only_what_a_run_leaves_unstated(tmp_path):
    run = tmp_path / "run.yaml"
    run.write_text("model: llama3-8b\nsystem: dgx-h100\ngpus: 16\nstack: megatron-lm-2021\n"
                   "strategy: {tp: 2, overlap: {dp_grad_reduce: true}}\nworkload: {seq_len: 4096, global_batch: 64}\n")
    _, _, strategy, _ = load_run(run)
    assert strategy.attention is Attention.STANDARD and strategy.precision is TrainingPrecision.FP16
    assert strategy.zero is ZeroStage.NONE and not strategy.sequence_parallel
    assert strategy.overlap.dp_grad_reduce and not strategy.overlap.param_gather  # the run's own setting wins
    run.write_text(run.read_text().replace("megatron-lm-2021", "megatron-core"))
    _, _, strategy, _ = load_run(run)
    assert strategy.attention is Attention.FLASH3 and strategy.sequence_parallel
    assert strategy.zero is ZeroStage.OPTIMIZER


def _training_rows():
    return [r for r in read_rows() if r["kind"] == "training"]


_METRIC_PARAPHRASES = {
    "tokens/s/GPU": "Tokens per second per GPU", "throughput tokens/s/GPU": "Throughput (tokens/sec/GPU)",
    "MFU": "Model FLOPs Utilization", "per-GPU model TFLOP/s": "Model TFLOP/s per GPU",
    "achieved TFLOP/s per GPU": "Achieved TFLOPS per GPU", "end-to-end iteration time": "Training step time",
}
_RECOMPUTE_PARAPHRASES = {"none": "None (activation checkpointing off)", "full": "FULL (every layer)",
                          "selective": "Selective (attention core)", "not stated": "n/a", "": "not stated"}


def _paraphrased(row: dict[str, str]) -> tuple[dict[str, str], float]:
    """The row written another way, and the factor its measured value (and prediction) scale by."""
    out = dict(row)
    out["model"] = re.sub(r"\s+", "-", row["model"].upper())
    out["framework"] = row["framework"].upper()
    out["gpu"] = row["gpu"].replace("-", " ").replace("_", " ").upper()
    out["metric"] = _METRIC_PARAPHRASES.get(row["metric"], row["metric"].upper())
    out["recompute"] = _RECOMPUTE_PARAPHRASES.get(row["recompute"], row["recompute"].upper())
    out["seq_parallel"] = {"yes": "Enabled", "no": "disabled (not used)", "": "n/a"}.get(
        row["seq_parallel"], row["seq_parallel"])
    out["precision"] = row["precision"].upper()
    scale = 1.0
    if row["unit"] == "s" and "time" in row["metric"]:
        out["unit"], scale = "ms", 1e3
        out["value"] = str(float(row["value"]) * scale)
    return out, scale


def test_paraphrased_rows_give_the_same_prediction():
    """Each training row written with synonyms, capitals, qualifiers and another unit predicts the same."""
    compared = 0
    for row in _training_rows():
        original = run_row(row)
        if original.predicted is None:
            continue
        other, scale = _paraphrased(row)
        again = run_row(other)
        assert again.predicted == pytest.approx(original.predicted * scale, rel=1e-9), (row["id"], again.skipped)
        compared += 1
    assert compared > 300


def test_every_unrunnable_row_names_a_column_or_what_is_missing():
    columns = set(read_rows()[0]) | {"model", "gpu", "op", "metric", "unit"}
    for row in read_rows():
        if row["id"].startswith("SRV-"):  # simulated request streams (minutes): test_validation runs them
            continue
        result = shipped_results().get(row["id"]) or run_row(row)
        if result.skipped:
            named = re.findall(r"[a-z_]+", result.skipped.split(":")[0])
            assert set(named) & columns or "metric" in result.skipped, (row["id"], result.skipped)


def test_degrees_that_do_not_multiply_to_the_gpus_take_dp_from_the_gpus():
    row = next(r for r in read_rows() if r["id"] == "TR-NEMO-LONGSEQ-B200-01")
    spec = row_specs(row)[0]
    assert spec.system.devices == 8 and spec.strategy.dp == 8
    assert any("does not multiply" in a for a in spec.assumptions)


def test_torchtitan_local_batch_is_split_over_pipeline_stages():
    row = next(r for r in read_rows() if r["id"] == "TR-TORCHTITAN-2412-T5-3D-1F1B")
    spec = row_specs(row)[0]
    assert spec.strategy.micro_batch == 32 // 8 and spec.workload.seq_len == 8192
    missing_gbs = next(r for r in read_rows() if r["id"] == "TR-TORCHTITAN-2412-T2-CP1-32K")
    spec = row_specs(missing_gbs)[0]
    assert spec.workload.global_batch == int(missing_gbs["mbs"]) * spec.strategy.dp


def test_torchtitan_selective_checkpointing_recomputes_what_its_policy_does_and_fits():
    """torchtitan's op-level selective checkpointing saves the outputs of SDPA and every other matmul only,
    so its element-wise kernels (RMSNorms among them) and every second matmul are recomputed: Llama 3.1 8B,
    local batch 2 x 8K on 8 GPUs (96 GB) fits as the paper ran it (it did not when 'selective' kept the
    norms, as Megatron's does: 97.5 GB)."""
    row = next(r for r in read_rows() if r["id"] == "TR-TORCHTITAN-2412-T1-FSDP")
    spec = row_specs(row)[0]
    assert spec.strategy.recompute is Recompute.SELECTIVE
    assert {m.value for m in spec.strategy.recompute_modules} == {"elementwise", "alternate_matmuls"}
    result = run_row(row)
    assert result.feasible and result.error is not None


@pytest.mark.parametrize("row_id", ["TR-NEMO-LONGSEQ-B200-07", "TR-MBRIDGE-25.11-GB300-04"])
def test_layouts_a_source_says_ran_are_feasible(row_id):
    """NeMo's long-sequence B200 table states tp 4 x cp 8 x dp 4 = 128 GPUs beside "512 GPUs": only the stated
    dp makes its global batch of 8; Megatron-Bridge ran DeepSeek-V3's 61 layers on pp 2 x vpp 4 (first /
    last stage 31 / 30: the embedding and the loss in place of layers, no middle stage)."""
    row = next(r for r in read_rows() if r["id"] == row_id)
    spec = row_specs(row)[0]
    if row_id.startswith("TR-NEMO"):
        assert spec.system.devices == 128 and spec.strategy.dp == 4
    else:
        assert (spec.strategy.first_stage_layers, spec.strategy.last_stage_layers) == (31, 30)
    result = run_row(row)
    assert result.feasible and result.error is not None


def test_collective_op_text_pins_the_algorithm():
    row = next(r for r in read_rows() if r["op"].startswith("all_reduce (NCCL_ALGO=Ring"))
    _, _, notes = predict_collective(row)
    assert "algorithm ring" in notes
    time_row = next(r for r in read_rows() if r["kind"] == "collective" and r["metric"].startswith("time"))
    label, value, _ = predict_collective(time_row)
    assert label == "time [us]" and value > 0
    assert run_row({**time_row, "msg_bytes": ""}).skipped.startswith("msg_bytes")


def test_the_faster_of_the_out_of_place_and_in_place_runs_is_the_measurement():
    row = next(r for r in read_rows() if r["id"] == "CO-H100-IBNDR-4N-AR-gj-01")  # 6.41 out of place, 21.78 in
    assert best_of_runs(row, float(row["value"])) == (21.78, True)
    slower = {**row, "other_reported": "out-of-place time 317.0 us; in-place time 93.26 us, busbw 5.0 GB/s"}
    assert best_of_runs(slower, 6.41) == (6.41, False)
    timed = {"metric": "time (out-of-place)", "unit": "us", "other_reported": "in-place time 25.62 us, busbw 0.01 GB/s"}
    assert best_of_runs(timed, 68.52) == (25.62, True) and best_of_runs({**timed, "unit": "ms"}, 68.52)[1] is False
    result = run_row(row)
    assert result.measured == 21.78 and any("in-place" in n for n in result.assumptions)


def test_error_bands_come_from_the_shipped_residuals_and_cover_unseen_sources():
    import importlib.util
    from pathlib import Path

    from armillary.validation.bands import leave_one_source_out, shipped_residuals

    tool = Path(__file__).parent.parent / "tools" / "error_bands.py"
    spec = importlib.util.spec_from_file_location("error_bands", tool)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fresh = module.residuals(shipped_results())
    shipped = shipped_residuals()
    assert [(r.source, r.regime, r.out_of_sample) for r in fresh] == [(r.source, r.regime, r.out_of_sample)
                                                                       for r in shipped], \
        "regenerate validation/data/residuals.json: python tools/error_bands.py"
    assert [r.error for r in fresh] == pytest.approx([r.error for r in shipped], abs=1e-5)
    coverage = leave_one_source_out(shipped)
    covered, total = sum(c for c, _ in coverage.values()), sum(n for _, n in coverage.values())
    assert covered / total >= 0.8  # the target, measured leaving each source out


def test_every_training_estimate_carries_its_band():
    from armillary import api
    from armillary.validation.bands import Regime, band, shipped_residuals

    result = api.estimate("llama3-70b", "dgx-h100", {"tp": 8, "pp": 4, "zero": 1}, {"seq_len": 4096,
                          "global_batch": 256}, gpus=256)
    assert result.error_band is not None and 0 < result.error_band.relative < 1
    assert result.error_band.rows >= 8 and "calibrated device" in result.error_band.regime
    assert "error_band" in result.to_dict()
    uncalibrated = api.estimate("llama3-70b", "mi300x-8", {"tp": 8, "pp": 4}, {"seq_len": 4096,
                                "global_batch": 256}, gpus=256)
    assert uncalibrated.error_band is not None and "uncalibrated" in uncalibrated.error_band.regime
    # a regime with no rows at all falls back to every training row (never to inference or serving rows)
    nowhere = Regime(calibrated=None, precision="fp4", moe=None, sharded=None, scale=None)
    training = [r for r in shipped_residuals() if r.regime.workload == "training" and not r.out_of_sample]
    assert band(nowhere, shipped_residuals()).rows in (len(training), sum(
        r.regime.workload == "training" for r in shipped_residuals() if r.out_of_sample))
    assert "fp4 never validated" in band(nowhere, shipped_residuals()).regime


def test_inference_estimates_and_served_streams_carry_the_band_of_their_rows():
    from typer.testing import CliRunner

    from armillary import api
    from armillary.cli import app
    from armillary.validation.bands import SERVING, STATIC_BATCH, Regime, shipped_residuals

    static = {"kind": "inference", "batch": 8, "input_len": 1024, "output_len": 128}
    r = api.estimate("llama2-70b", "dgx-h100", {"tp": 4, "precision": "fp8", "attention": "flash3"}, static, gpus=4)
    band = r.error_band
    assert band is not None and band.regime.endswith("static batch") and "error_band" in r.to_dict()
    # the split-conformal rank of the static-batch rows of its regime, by hand: the ceil(0.8 (n + 1))-th smallest
    regime = Regime(True, "fp8", False, False, "<=64", STATIC_BATCH)
    errors = sorted(abs(x.error) for x in shipped_residuals() if x.regime == regime and not x.out_of_sample)
    rank = min(-(-4 * (len(errors) + 1) // 5), len(errors))
    assert band.rows == len(errors) >= 8 and band.relative == pytest.approx(errors[rank - 1])
    served = api.simulate_serving("llama2-70b", "dgx-h100", {"tp": 4, "precision": "fp8"},
                                  {**static, "serving": {"engine": "vllm-0.8"}}, rate=1, duration_s=10, gpus=4)
    assert served.error_band is not None and "engine vllm" in served.error_band.regime
    assert served.error_band.poorly_validated  # serving under load is far from its rows (issue 17)
    rows = [x for x in shipped_residuals() if x.regime.workload == SERVING and not x.out_of_sample]
    assert rows and not any(x.source.startswith(("TR-", "INF-TRT061")) for x in rows)  # never training or static
    assert served.error_band.rows == sum(x.regime.engine == "vllm" and bool(x.regime.calibrated) for x in rows)
    out = CliRunner().invoke(app, ["estimate", "examples/llama2-70b-serving-h100.yaml"])
    assert out.exit_code == 0 and "static batch" in out.output


def test_a_bare_framework_name_takes_the_stack_of_the_sources_year():
    from armillary.validation.row_stack import year_of

    assert year_of("Narayanan et al., SC21 (arXiv:2104.04473), Table 2") == 2021
    assert stack_for("Megatron-LM", 2021) == load_stack("megatron-lm-2021")
    assert stack_for("Megatron-LM", None) == load_stack("megatron-core")  # unknown year: today's stack
    assert stack_for("Megatron-Core r0.8.0", 2021) == load_stack("megatron-core")  # the text decides first


def test_search_and_codesign_carry_the_band_and_warn_on_poorly_validated_winners():
    from typer.testing import CliRunner

    from armillary import api
    from armillary.cli import app
    from armillary.estimate.result import POORLY_VALIDATED
    from armillary.search.space import StrategySpace

    space = StrategySpace(tp=(1, 2), micro_batch=(1, 2))
    work = {"seq_len": 2048, "global_batch": 64}
    calibrated = api.search("llama2-7b", "dgx-h100", work, {"attention": "flash"}, space, gpus=16)
    band = calibrated.top[0].error_band
    assert band == api.estimate("llama2-7b", "dgx-h100", calibrated.top[0].strategy, work, gpus=16).error_band
    uncalibrated = api.search("llama2-7b", "dgx-b300", work, {"attention": "flash"}, space, gpus=16)
    assert all(c.error_band is not None and c.error_band.poorly_validated for c in uncalibrated.top)
    assert band is not None and band.poorly_validated == (band.relative > POORLY_VALIDATED)
    out = CliRunner().invoke(app, ["search", "--model", "llama2-7b", "--system", "dgx-b300", "--gpus", "16",
                                   "--global-batch", "64", "--top", "2"])
    assert out.exit_code == 0 and "poorly validated regime" in out.output and "uncalibrated device" in out.output
    designs = api.codesign("llama2-7b", "dgx-h100", work, {"gpus": [16, 32], "prices": {"device": 1, "hbm_per_gib": 0}},
                           {"attention": "flash"}, space)
    assert all(p.best is not None and p.best.error_band is not None for p in designs.points)


def _renamed(row_id: str, name: str):
    row = dict(next(r for r in read_rows() if r["id"] == row_id))
    return run_row({**row, "model": name})


def test_a_model_no_preset_names_is_built_from_its_columns():
    """An unknown name with its shape columns runs: the family its name places, else the MLP width decides
    the conventions (4h: GPT's; other: gated, Llama's), and the assumptions say so. A Llama 3.1 405B row renamed
    keeps its columns' shape (a row whose stack recipe names the model's preset, as GB200-10's offload does,
    would lose the recipe with the name); MPT-13B renamed keeps its 4h GeLU MLP (learned positions as MPT's)."""
    named, renamed = _renamed("TR-MBRIDGE-25.11-B200-18", "LLAMA3.1_405B"), _renamed("TR-MBRIDGE-25.11-B200-18",
                                                                                      "Zeta-405B")
    assert renamed.predicted is not None and any("gated MLP" in a for a in renamed.assumptions)
    assert renamed.predicted == pytest.approx(named.predicted, rel=0.05)  # only the vocabulary (32000) differs
    gpt = _renamed("TR-FOUNDRY-008", "Foo 13B")
    assert any("GPT's 4h MLP" in a for a in gpt.assumptions)
    assert gpt.predicted == pytest.approx(_renamed("TR-FOUNDRY-008", "MPT-13b").predicted, rel=0.01)
    qwen = _renamed("TR-MBRIDGE-25.11-GB200-10", "Qwen2-72B")
    assert any("qwen3-30b-a3b preset" in a for a in qwen.assumptions)
    spec = row_specs({**next(r for r in read_rows() if r["id"] == "TR-MBRIDGE-25.11-GB200-10"), "model": "Qwen"})[0]
    assert spec.model.moe is None and (spec.model.layers, spec.model.hidden, spec.model.ffn) == (80, 8192, 28672)


def test_a_mixture_of_experts_no_preset_names_is_built_from_its_columns():
    """'expert N' of the ffn column is the expert width; experts and top-k from their columns; no shared
    experts or leading dense layers unless stated; Mixtral's conventions. Without top-k it names the column."""
    row = dict(next(r for r in read_rows() if r["id"] == "TR-MBRIDGE-25.11-B200-22"))
    model = row_specs({**row, "model": "Some MoE 235B"})[0].model
    assert model.moe is not None
    assert (model.layers, model.hidden, model.heads, model.n_kv_heads, model.vocab) == (94, 4096, 64, 4, 151936)
    assert (model.moe.experts, model.moe.top_k, model.moe.expert_ffn, model.moe.shared_experts,
            model.moe.dense_layers) == (128, 8, 1536, 0, 0)
    assert model.mlp.value == "swiglu" and model.mla is None
    unrunnable = run_row({**row, "model": "Some MoE 235B", "topk": ""})
    assert unrunnable.predicted is None and "topk" in (unrunnable.skipped or "")


def test_the_first_untouched_run_of_a_batch_is_kept_and_never_rewritten(tmp_path):
    from armillary.validation.out_of_sample import OUT_OF_SAMPLE, append_batch, read_out_of_sample, run_untouched

    shipped = read_out_of_sample(OUT_OF_SAMPLE)
    assert len(shipped) >= 264 and {r.batch for r in shipped} >= {"2026-12-06"}
    assert all(r.skipped or r.error is not None for r in shipped)
    row = next(r for r in read_rows() if r["id"] == "TR-KOR-T5-22B-SEL")
    first = run_untouched([row], "2000-01-01", "aaaa")
    path = tmp_path / "oos.csv"
    append_batch(first, path)
    append_batch(run_untouched([row], "2000-02-01", "bbbb"), path)  # a later run of the same row is not kept
    kept = read_out_of_sample(path)
    assert [(r.batch, r.commit) for r in kept] == [("2000-01-01", "aaaa")]
    assert kept[0].band is not None and kept[0].covered == (abs(kept[0].error) <= kept[0].band)
