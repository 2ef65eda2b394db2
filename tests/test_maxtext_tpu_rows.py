"""How the MLPerf Training v4.1 TPU MaxText GPT-3 rows are read: MaxText's per-device batch, AQT int8 GEMMs at the
TPU int8 rate, and the evaluations inside the time to train."""

from __future__ import annotations

import pytest

from armillary.estimate.run import estimate_training_run
from armillary.specs.device import Precision
from armillary.specs.loading import load_device
from armillary.specs.strategy import BlockFormat, TrainingPrecision
from armillary.validation.metrics import read_metric
from armillary.validation.precision_words import block_format_of, precision_of
from armillary.validation.rows import row_specs
from armillary.validation.run import DEFAULT_CSV, choose_candidate, read_rows

V5P = "TR-MLPERF-v4.1-Google-cloud-tpu-v5p-12288-maxtext-GPT3-TTT"


def _row(row_id: str) -> dict[str, str]:
    return next(r for r in read_rows(DEFAULT_CSV) if r["id"] == row_id)


def test_maxtext_per_device_batch_is_one_micro_batch_per_data_parallel_rank():
    # per_device_batch_size=1 on 6144 chips with tp 8: 768 data-parallel ranks of 8 sequences, no accumulation
    s = row_specs(_row(V5P))[0]
    assert (s.strategy.tp, s.strategy.dp, s.strategy.micro_batch) == (8, 768, 8)
    assert s.strategy.micro_batch * s.strategy.dp == s.workload.global_batch
    assert s.strategy.sequence_parallel  # activation_embed sharded over the tensor axis
    assert any("per-device batch 1 times the 8" in n for n in s.assumptions)


def test_aqt_int8_runs_at_the_tpu_int8_rate():
    words = "int8 (MaxText quantization=int8, AQT) + bf16"
    assert precision_of(words) is TrainingPrecision.BF16 and block_format_of(words) is BlockFormat.INT8
    assert load_device("tpu-v5p").matrix_peak(Precision.INT8) == pytest.approx(918e12)
    assert load_device("tpu-v6e").matrix_peak(Precision.INT8) == pytest.approx(1836e12)
    s = row_specs(_row(V5P))[0]
    assert s.strategy.block_format is BlockFormat.INT8
    int8 = estimate_training_run(s.model, s.system, s.strategy, s.workload)
    bf16 = estimate_training_run(s.model, s.system, s.strategy.model_copy(update={"block_format": "none"}),
                                 s.workload)
    assert float(int8.breakdown.forward_backward) < 0.75 * float(bf16.breakdown.forward_backward)
    assert 0 < float(int8.mfu) <= 1  # against the int8 peak, not the fp8 (= bf16) one


def test_a_device_without_int8_matrix_units_refuses_int8_gemms():
    with pytest.raises(Exception, match="int8"):
        load_device("h100-sxm").matrix_peak(Precision.INT8)


def test_time_to_train_adds_the_stated_evaluations():
    row = _row(V5P)
    metric = read_metric(row)
    assert "evaluation every 24576 sequences on 24567" in metric.label
    result, chosen = choose_candidate(row_specs(row))
    # without evaluations: the trained steps x the step time, in minutes (a row without the stated cadence would
    # get the MLPerf Training v4.1 rule's evaluations, `mlperf_rules`)
    w = chosen.workload
    evaluated, plain = metric.read(result, chosen), 1459617792 / (w.global_batch * w.seq_len) * float(
        result.step_time_s) / 60.0
    # 1459617792 tokens = 29 intervals of 24576 x 2048; each evaluation is 24567 sequences forward only
    share = evaluated / plain - 1
    assert 0.2 < share < 0.4
