"""Results as pandas DataFrames (skipped without pandas)."""

from __future__ import annotations

import numpy as np
import pytest

import armillary
from armillary.report.frames import to_frame
from armillary.specs.workload import Training

pd = pytest.importorskip("pandas")
W = Training(seq_len=2048, global_batch=32)


def test_estimate_is_one_row_with_dotted_columns():
    est = armillary.estimate("llama3-8b", "dgx-h100", {"tp": 2, "attention": "flash"}, W, gpus=8)
    frame = to_frame(est)
    assert len(frame) == 1
    assert frame.loc[0, "step_time_s"] == pytest.approx(float(est.step_time_s))
    assert frame.loc[0, "breakdown.dp_exposed"] == pytest.approx(float(est.breakdown.dp_exposed))
    assert frame.loc[0, "memory.hbm.total"] == pytest.approx(float(est.memory_hbm.total))


def test_search_rows_and_serving_requests():
    found = armillary.search("llama3-8b", "dgx-h100", W, gpus=8, top=5)
    frame = to_frame(found)
    assert len(frame) == len(found.top) and list(frame["step_time_s"]) == sorted(frame["step_time_s"])
    served = armillary.simulate_serving("llama2-70b", "dgx-h100", {"tp": 4}, {
        "kind": "inference", "input_len": 512, "output_len": 64}, rate=2, duration_s=5)
    requests = to_frame(served)
    assert len(requests) == served.requests and {"arrival_s", "finish_s"} <= set(requests.columns)
    assert np.all(requests["finish_s"] >= requests["arrival_s"])


def test_unknown_type_is_an_error():
    with pytest.raises(TypeError, match="no table"):
        to_frame(3)
