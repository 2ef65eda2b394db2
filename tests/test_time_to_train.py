"""Time to train and GPU-hours: a row that states its steps (or tokens, or samples) and its time outside the
steps is predicted as steps x the estimate's step time plus that time; a row that states no amount names
what is missing. Checked against the step time of the same configuration."""

import pytest

from armillary.validation.rows import row_specs
from armillary.validation.run import choose_candidate, read_rows, run_row


def _row_and_step_time() -> tuple[dict[str, str], float, int, int, int]:
    row = dict(next(r for r in read_rows() if r["id"] == "TR-MBRIDGE-25.11-H100-24"))  # Llama 3 70B, 64 H100
    result, chosen = choose_candidate(row_specs(row))
    w = chosen.workload
    return row, float(result.step_time_s), w.global_batch, w.seq_len, chosen.system.devices


@pytest.mark.parametrize(("notes", "steps"), [
    ("1,000 training steps; non-step overhead 5 min", 1000),
    ("steps to converge: 1000. Initialization took 300 s", 1000),
    ("trained on {tokens} tokens, non-step overhead 5 min", 1000),
    ("{samples_k}k samples to converge, evaluation 300 s", 1000),
])
def test_time_to_train_is_steps_times_the_step_time_plus_the_stated_rest(notes: str, steps: int) -> None:
    row, step_s, gbs, seq, _ = _row_and_step_time()
    row.update(metric="time to train", unit="minutes", value="100", other_reported="",
               notes=notes.format(tokens=1000 * gbs * seq, samples_k=gbs))
    result = run_row(row)
    assert result.predicted == pytest.approx((steps * step_s + 300.0) / 60.0, rel=1e-9), result.skipped


def test_gpu_hours_count_every_device() -> None:
    row, step_s, _, _, devices = _row_and_step_time()
    row.update(metric="GPU-hours", unit="GPU-hours", value="100", other_reported="2000 training steps", notes="")
    assert run_row(row).predicted == pytest.approx(2000 * step_s * devices / 3600.0, rel=1e-9)


def test_time_to_train_without_an_amount_says_so() -> None:
    row, *_ = _row_and_step_time()
    row.update(metric="time to train", unit="min", value="100", other_reported="seq 4096 tokens",
               notes="global batch 4M tokens")
    result = run_row(row)
    assert result.predicted is None and "steps, tokens or samples" in result.skipped
