"""The search progress bar's rate and ETA (issue 47: a space too large to finish says how long it would take)."""

from __future__ import annotations

from armillary.cli.search import pace


def test_pace_names_rate_and_time_left():
    assert pace(0, 10**6, 1.0) == ("-", "-")  # nothing done yet
    assert pace(1000, 1000, 0.5) == ("2,000", "0 s")
    assert pace(1000, 100_000, 1.0) == ("1,000", "99 s")
    assert pace(1000, 1_000_000, 1.0) == ("1,000", "16.6 min")
    assert pace(2_000_000, 10**11, 1.0) == ("2,000,000", "13.9 h")
    assert pace(2_000_000, 10**12, 1.0) == ("2,000,000", "5.8 days")  # the 1e12-point space of issue 47
