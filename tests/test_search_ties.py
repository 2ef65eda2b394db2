"""Search says when its top strategies are a tie under the model's accuracy (issue 43)."""

from __future__ import annotations

from dataclasses import replace

from armillary import api
from armillary.estimate.result import ErrorBand
from armillary.report.records import search_record, tied_with_first


def test_strategies_within_the_first_ones_band_are_called_a_tie():
    found = api.search("llama3-70b", "dgx-h100", {"seq_len": 4096, "global_batch": 256}, gpus=256, top=6)
    assert found.top and found.top[0].error_band is not None
    first, band = float(found.top[0].step_time_s), found.top[0].error_band.relative
    expected = sum(float(c.step_time_s) <= first * (1 + band) for c in found.top[1:])
    assert tied_with_first(found) == expected == search_record(found)["tied_with_first_in_step_time"]
    # a band narrower than every gap: no tie
    tight = ErrorBand(relative=0.0, regime="x", rows=8, sources=2)
    narrowed = replace(found, top=(replace(found.top[0], error_band=tight), *found.top[1:]))
    assert tied_with_first(narrowed) == sum(float(c.step_time_s) <= first for c in found.top[1:])
