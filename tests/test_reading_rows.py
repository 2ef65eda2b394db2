"""The harness reads a published row as its authors wrote it, or refuses naming the column: one test per
class of misreading seen on fresh rows, each written from a sentence in that style, with a negative test
(the same words in a clause about something else are not taken)."""

from __future__ import annotations

import pytest

from armillary.specs.loading import load_stack
from armillary.specs.strategy import Recompute, RecomputeModule
from armillary.validation.metrics import _amount, read_metric
from armillary.validation.reading import about_the_run, search_run
from armillary.validation.row_columns import Unsupported, int_column
from armillary.validation.rows import row_specs
from armillary.validation.strategy_words import recompute_modules_of, recompute_of
from armillary.validation.vocabulary import clean

GPT = {"id": "TR-X-1", "kind": "training", "model": "GPT-3 175B", "layers": "96", "hidden": "12288", "heads": "96",
       "ffn": "49152", "seq": "2048", "gbs": "1536", "tp": "8", "pp": "8", "gpu": "H100 SXM 80GB", "n_gpus": "1024",
       "framework": "NeMo Megatron", "precision": "bf16", "recompute": "none", "metric": "step time", "value": "3.1",
       "unit": "s", "source": "a 2024 report"}


def test_a_number_in_a_clause_about_evaluation_is_never_the_training_length():
    text = clean("wall clock from run_start to run_stop; evaluation every 40 steps on 5,000 held-out samples; "
                 "tokens trained per run: 1,610,612,736")
    assert _amount(text) == ("tokens", 1_610_612_736.0)
    # negative: the evaluation cadence alone says nothing about how long the run trained
    assert _amount(clean("includes eval time (evaluated every 40 steps)")) is None
    row = {**GPT, "metric": "time to train", "unit": "min", "other_reported": "eval every 40 steps"}
    with pytest.raises(Unsupported, match="steps, tokens or samples"):
        read_metric(row)


def test_a_per_trillion_tokens_metric_is_an_amount_of_a_trillion_tokens():
    assert _amount(clean("GPU-hours per trillion training tokens")) == ("tokens", 1e12)
    assert _amount(clean("H800 GPU-hours / 1e12 tokens")) == ("tokens", 1e12)
    assert _amount(clean("compared with 2 trillion tokens of the previous run")) is None


def test_clauses_about_storage_comparisons_and_warm_up_are_not_about_the_run():
    text = "Compute: 8x CX-7 400Gb/s; Storage: 2x CX-7 200Gb/s; 5.1 s vs 6.3 s without overlap"
    assert about_the_run(text) == ["Compute: 8x CX-7 400Gb/s"]
    assert search_run(r"(\d+)x", "Storage: 2x CX-7 (front-end)") is None


@pytest.mark.parametrize(("text", "expected"), [
    ("nothing set in the launch config", Recompute.NONE),
    ("none set in config (no ACT_CKPT variables)", Recompute.NONE),
    ("remat_policy=full", Recompute.FULL), ("rematerialization of every block", Recompute.FULL),
    ("core_attn, moe_act", Recompute.SELECTIVE), ("selective", Recompute.SELECTIVE),
    # negative: words that state nothing stay unstated (the harness then says what it assumed)
    ("not transcribed", None), ("per llama3_70b.toml default (not stated)", None), ("remat_policy=minimal", None),
])
def test_recompute_as_configs_and_papers_write_it(text, expected):
    assert recompute_of(text) == expected


def test_recompute_module_lists_are_read_and_used():
    assert recompute_modules_of("--recompute-modules core_attn moe_act") == (RecomputeModule.CORE_ATTN,
                                                                           RecomputeModule.MOE_ACT)
    spec = row_specs({**GPT, "recompute": "selective: core_attn, layernorm"})[0]
    assert spec.strategy.recompute_modules == (RecomputeModule.CORE_ATTN, RecomputeModule.LAYERNORM)
    assert recompute_modules_of("full recompute of each layer") is None


@pytest.mark.parametrize(("text", "expected"), [
    ("8", 8), ("12 (model parallel)", 12), ("4 instances", 4), ("64 (spanning 8 nodes)", 64), ("", None),
    ("ZeRO-1 DP", None), ("n/a", None)])
def test_a_number_with_its_qualifier_is_read(text, expected):
    assert int_column({"tp": text}, "tp") == expected


@pytest.mark.parametrize("text", ["1536 -> 3072 (ramp over the first 100B tokens)", "256-way x 2 pods",
                                  "1024 or 2048"])
def test_a_column_holding_several_values_is_refused_naming_it(text):
    with pytest.raises(Unsupported, match=r"gbs: .* more than one value"):
        int_column({"gbs": text}, "gbs")


def test_a_2021_stack_never_gets_recomputation_it_did_not_have():
    stack = load_stack("megatron-deepspeed-2021")
    assert stack.recompute_modes == (Recompute.NONE, Recompute.FULL)
    row = {**GPT, "framework": "Megatron-LM + DeepSpeed", "recompute": "not stated in the paper", "gpu": "A100 80GB",
           "source": "arXiv:2201.11990"}
    choices = {s.strategy.recompute for s in row_specs(row)}
    assert choices == {Recompute.NONE, Recompute.FULL}
    assert any("offered (none, full)" in n for n in row_specs(row)[0].assumptions)
    # negative: today's Megatron-Core offers selective and the block method
    assert Recompute.SELECTIVE in {s.strategy.recompute for s in row_specs({**row, "framework": "Megatron-Core",
                                                                             "source": "2025"})}


def test_lora_fine_tuning_is_read_as_lora_or_refused_without_its_rank():
    spec = row_specs({**GPT, "model": "GPT-3 175B LoRA fine-tuning (LoRA rank 16, frozen base)"})[0]
    assert spec.workload.finetune is not None and spec.workload.finetune.rank == 16
    with pytest.raises(Unsupported, match="model"):
        row_specs({**GPT, "model": "GPT-3 175B LoRA fine-tuning (frozen base)"})  # no rank stated
    assert row_specs(GPT)[0].workload.finetune is None  # negative: no adapter named, a full model


def test_a_framework_is_read_by_its_own_name_not_by_a_keyword_it_mentions():
    meta = {**GPT, "framework": "Meta internal (FSDP + 4D parallel, NCCLX)", "source": "arXiv:2407.21783",
            "notes": "FSDP shards optimizer states and gradients; model shards not resharded after forward."}
    spec = row_specs(meta)[0]
    assert any("Llama 3 training stack" in n for n in spec.assumptions)
    assert int(spec.strategy.zero) == 2 and spec.strategy.sequence_parallel
    # negative: an explanation of FSDP's modes in the notes does not change the sharding the framework names
    foundry = {**GPT, "tp": "1", "pp": "1", "framework": "llm-foundry, FSDP FULL_SHARD",
               "notes": "FULL_SHARD ~ ZeRO-3, SHARD_GRAD_OP ~ ZeRO-2 (for reference)"}
    assert int(row_specs(foundry)[0].strategy.zero) == 3


def test_interleaving_without_its_depth_is_a_recorded_assumption():
    spec = row_specs({**GPT, "vpp": "interleaved (V not stated)"})[0]
    assert spec.strategy.vpp == 1 and any("without the chunks per stage" in n for n in spec.assumptions)


def test_the_compute_fabric_is_read_not_a_storage_or_management_network():
    from armillary.specs.loading import load_system

    row = {**GPT, "inter_net": "64 nodes x 8 GPUs; Storage: 2x ConnectX-7 NDR 200Gb/s, Compute: 8x ConnectX-7 "
                               "NDR 400Gb/s, Management: 25Gb/s Ethernet"}
    spec = row_specs(row)[0]
    assert spec.system.network[-1].bandwidth == pytest.approx(400e9 / 8)
    # negative: with only a storage network named, nothing is read and the preset's network is kept (and said)
    storage_only = row_specs({**GPT, "inter_net": "Storage: 2x ConnectX-7 NDR 200Gb/s (BlueField-3 DPU)"})[0]
    preset = load_system("dgx-h100")
    assert storage_only.system.network[-1].bandwidth == preset.network[-1].bandwidth
    assert any("scale-out network not stated" in n for n in storage_only.assumptions)


def test_a_fabric_other_than_infiniband_runs_on_its_fabric_preset():
    from armillary.comm.fabrics import fabric_dimension

    spec = row_specs({**GPT, "inter_net": "RoCE 400 Gb/s per GPU, 3-layer Clos"})[0]
    outer = spec.system.network[-1]
    assert outer.bandwidth == pytest.approx(400e9 / 8) and "scale-out fabric roce-oci" in "; ".join(spec.assumptions)
    assert outer.efficiency == fabric_dimension("roce-oci", 400e9 / 8).efficiency
    # negative: InfiniBand keeps the system preset's own calibrated tier
    ib = row_specs({**GPT, "inter_net": "8x ConnectX-7 IB NDR 400 Gb/s per node"})[0]
    assert not any("scale-out fabric" in n for n in ib.assumptions)


def test_mlperf_nemo_submissions_overlap_tp_communication_as_their_configs_do():
    for framework in ("NeMo Megatron (MLPerf Training v3.0 closed)",
                      "NVIDIA NeMo Framework Release 24.09 (MLPerf Training v4.1 closed), NCCL 2.22.3"):
        spec = row_specs({**GPT, "framework": framework, "source": "mlcommons/training_results_v3.1"})[0]
        assert spec.strategy.overlap.tp_comm and spec.strategy.sequence_parallel
        assert any("MLPerf Training NeMo" in n for n in spec.assumptions)
    # negative: a Megatron-Core run that names no overlap keeps Megatron-Core's defaults
    plain = row_specs({**GPT, "framework": "Megatron-Core 0.9", "source": "2024"})[0]
    assert not plain.strategy.overlap.tp_comm


def test_the_gpu_is_read_from_the_row_not_from_what_another_source_says():
    from armillary.validation.gpu_words import memory_gb_of, system_preset_for

    text = "A100-SXM 80GB (as the vendor's blog states; a later transcription says 40GB)"
    assert system_preset_for(text) == "dgx-a100" and memory_gb_of(text) == 80
    # negative: an instance type in parentheses is about the run and is read
    assert system_preset_for("H100 80GB HBM3 (8/VM; GCP A3 Mega per repository name)") == "gcp-a3-mega"
    assert system_preset_for("A100 40GB") == "dgx-a100-40gb"


def test_a_reading_says_where_it_came_from_and_how_sure_it_is():
    from armillary.validation.reading import read_int

    assert read_int({"ep": "64 (spanning 8 nodes)"}, "ep").how == "qualified"
    assert read_int({"ep": "64"}, "ep").how == "stated" and read_int({"ep": "n/a"}, "ep").how == "not stated"
    spec = row_specs({**GPT, "tp": "8 (model parallel)"})[0]
    assert spec.strategy.tp == 8 and "tp=8 read from '8 (model parallel)'" in spec.assumptions
    # a bare number is stated, not listed as a reading from words
    assert not any("read from" in n for n in row_specs(GPT)[0].assumptions)


@pytest.mark.parametrize(("words", "expected"), [("FSDP On", 3), ("FSDP (FULL_SHARD)", 3), ("ZeRO-1 DP", 1),
                                                 ("FSDP, reshard_after_forward=False", 2), ("DDP only", 0)])
def test_sharding_as_frameworks_name_it(words, expected):
    from armillary.validation.strategy_words import sharding_of

    assert int(sharding_of(words)) == expected
    # negative: a framework that names no sharding says nothing
    assert sharding_of("Megatron-Core r0.8") is None


@pytest.mark.parametrize(("column", "text"), [("n_gpus", "0"), ("tp", "0"), ("n_gpus", "inf"), ("pp", "-2"),
                                              ("gbs", "nan"), ("tp", "0 (none)")])
def test_a_count_that_is_not_a_whole_number_of_one_or_more_is_refused_naming_the_column(column, text):
    from armillary.validation.run import run_row

    result = run_row({**GPT, column: text})
    assert result.predicted is None and result.skipped is not None and result.skipped.startswith(column)


def test_a_negative_message_size_is_refused_not_turned_into_a_negative_bandwidth():
    from armillary.validation.run import read_rows, run_row

    row = next(r for r in read_rows() if r["id"] == "CO-H100-IBNDR-4N-AR-gj-01")
    for text in ("-1048576", "inf", "0"):
        result = run_row({**row, "msg_bytes": text})
        assert result.predicted is None and result.skipped is not None and "msg_bytes" in result.skipped
