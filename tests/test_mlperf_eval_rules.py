"""MLPerf Training's evaluation inside a time to train, as the round's rules set it (data/mlperf_eval_rules.csv):
applied (and recorded) where an MLPerf Training row states no cadence, a stated cadence wins, a benchmark or round
the data does not hold is recorded as a gap. Checked by hand against the estimate's step time and forward share."""

import math

import pytest

from armillary.validation.metrics import forward_share, read_metric
from armillary.validation.mlperf_rules import load_rules, round_of, rule_for_row
from armillary.validation.rows import row_specs
from armillary.validation.run import choose_candidate, read_rows, run_row


def _gpt3_row() -> dict[str, str]:
    # MLPerf Training v3.1 GPT-3 175B on 512 H100, GBS 2048, seq 2048; its notes say only "eval every 20
    # steps-equivalent" (no sample count)
    return dict(next(r for r in read_rows() if r["id"] == "TR-MLPERF-v3.1-eos-n64-ngc23-09-nemo-TTT"))


def _estimate(row: dict[str, str]):
    return choose_candidate(row_specs(row))


def test_the_rule_is_applied_to_a_row_without_a_cadence_by_hand() -> None:
    row = _gpt3_row()
    result, chosen = _estimate(row)
    metric = read_metric(row)
    # by hand: 1207959552 tokens / (2048 x 2048) = 288 steps; CEIL(24576 / 2048) = 12 steps between evaluations,
    # none skipped: 24 evaluations, each 5662 sequences of 2048 tokens forward only
    step_s, fb = float(result.step_time_s), float(result.breakdown.forward_backward)
    evaluating_s = 24 * 5662 / 2048 * fb * forward_share(result)
    assert metric.read(result, chosen) == pytest.approx((288 * step_s + evaluating_s) / 60.0, rel=1e-9)
    assert evaluating_s > 0.03 * 288 * step_s  # not a rounding error: a few percent of the run
    assert any(a.startswith("evaluation per MLPerf Training v3.1 rules (gpt3): every 24576 sequences")
               and "5662 sequences of 2048 tokens" in a and "training_rules.adoc" in a for a in metric.assumptions)
    # the row's "eval every 20 steps-equivalent" contradicts CEIL(24576 / 2048) = 12: recorded, not read
    assert any("disagree" in a and "= 12 steps" in a for a in metric.assumptions)
    assert "evaluation per MLPerf Training v3.1 rules" in metric.label


def test_a_stated_cadence_wins() -> None:
    row = _gpt3_row()
    row["notes"] = "Includes eval time (eval every 24576 sequences on 24567 eval samples)."
    result, chosen = _estimate(row)
    metric = read_metric(row)
    assert metric.assumptions == ()
    assert "evaluation every 24576 sequences on 24567" in metric.label
    step_s, fb = float(result.step_time_s), float(result.breakdown.forward_backward)
    evaluating_s = 288 * 2048 / 24576 * 24567 / 2048 * fb * forward_share(result)
    assert metric.read(result, chosen) == pytest.approx((288 * step_s + evaluating_s) / 60.0, rel=1e-9)


@pytest.mark.parametrize(("change", "gap"), [
    ({"framework": "NeMo Megatron (MLPerf Training v2.1 closed)", "id": "X-gpt3-TTT",
      "source": "a submitter's log"}, "round v2.1"),
    ({"model": "BERT-large (MLPerf Training reference)", "id": "X-TTT",
      "source": "mlcommons/training_results_v3.1:NVIDIA/results/x/bert/result_0.txt"}, "benchmark not recognised"),
])
def test_an_mlperf_row_the_data_does_not_hold_records_the_gap(change: dict[str, str], gap: str) -> None:
    row = {**_gpt3_row(), **change}
    result, chosen = _estimate(_gpt3_row())
    metric = read_metric(row)
    assert len(metric.assumptions) == 1 and gap in metric.assumptions[0]
    assert "no evaluation time added" in metric.assumptions[0]
    tokens = 1207959552
    assert metric.read(result, chosen) == pytest.approx(tokens / (2048 * 2048) * float(result.step_time_s) / 60.0)


def test_a_row_that_does_not_name_mlperf_training_gets_nothing() -> None:
    row = {**_gpt3_row(), "id": "X-TTT", "framework": "NeMo Megatron", "source": "a blog",
           "notes": "time to train of a GPT-3 175B run", "model": "GPT-3 175B"}
    assert read_metric(row).assumptions == ()


def test_skipped_first_evaluations_and_uneven_intervals() -> None:
    rules = load_rules()
    lora = rules[("llama2_70b_lora", "v4.1")]
    # GBS 8: CEIL(384 / 8) = 48 steps between evaluations, FLOOR(0.125 x 8 + 2) = 3 skipped (NVIDIA's SKIP_EVALS=3)
    assert (lora.interval_steps(8), lora.skipped(8)) == (48, 3)
    assert lora.evaluations(48 * 5, 8) == 2
    assert lora.evaluations(48 * 2, 8) == 0
    big = rules[("llama31_405b", "v5.1")]
    # GBS 1152: CEIL(18432 / 1152) = 16 steps; FLOOR(0.0026 x 1152 + 12) = FLOOR(14.9952) = 14 skipped
    assert (big.interval_steps(1152), big.skipped(1152)) == (16, 14)
    gpt3 = rules[("gpt3", "v4.0")]
    assert gpt3.interval_steps(2688) == 10 and gpt3.skipped(2688) == 0  # 24576 / 2688 = 9.14 -> 10 steps


def test_every_rule_has_its_sources_and_the_gpt3_rounds_are_held() -> None:
    rules = load_rules()
    assert {r for b, r in rules if b == "gpt3"} == {"v3.0", "v3.1", "v4.0", "v4.1"}
    for rule in rules.values():
        assert "training_rules.adoc" in rule.interval_source and rule.eval_set_source
        assert rule.eval_sequences > 0 and rule.eval_seq_len > 0 and rule.interval_sequences > 0


def test_the_shipped_gpt3_runs_train_whole_rule_intervals() -> None:
    # a check of the rule against the rows: every MLPerf GPT-3 TTT row's trained tokens are a whole number of
    # CEIL(24576 / GBS)-step intervals (run_stop follows an evaluation), which "every 20 steps" would not give
    rows = [r for r in read_rows() if r["id"].startswith("TR-MLPERF-v") and r["id"].endswith("-TTT")
            and "Google" not in r["id"]]
    assert len(rows) == 16
    for row in rows:
        rule, gap = rule_for_row(row)
        assert rule is not None and gap is None and rule.round == round_of(row)
        gbs = int(row["gbs"])
        tokens = int(row["other_reported"].split("trained tokens per run: ")[1].split(",")[0])
        steps = tokens / (gbs * 2048)
        assert steps == int(steps) and steps % rule.interval_steps(gbs) == 0, row["id"]
        assert math.ceil(24576 / gbs) != 20


def test_the_rule_is_listed_in_the_row_results_assumptions() -> None:
    # run.py joins the metric's assumptions to the configuration's (the CSV's assumptions column)
    result = run_row(_gpt3_row())
    assert any(a.startswith("evaluation per MLPerf Training v3.1 rules (gpt3)") for a in result.assumptions)
    gap = run_row({**_gpt3_row(), "framework": "NeMo Megatron (MLPerf Training v2.1 closed)", "id": "X-gpt3-TTT",
                   "source": "a submitter's log"})
    assert any("not in validation/data/mlperf_eval_rules.csv" in a for a in gap.assumptions)
