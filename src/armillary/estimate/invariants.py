"""Invariants every single estimate satisfies before it is returned: times finite and positive (or zero for a
part that does not run) and below `MAX_TIME_S`, MFU and HFU at most 100%, a bubble >= 0. A result that breaks
one is refused with a `ResultError` naming the quantity (extreme inputs, e.g. a bandwidth of 1e-300 B/s, or a
modelling error), so nonsense is never printed as feasible. Infeasible estimates are reported as they are
(their numbers are not claimed to be runnable)."""

from __future__ import annotations

import math
from dataclasses import fields

import numpy as np

from armillary.errors import ResultError
from armillary.estimate.inference_result import InferenceEstimate
from armillary.estimate.result import StepEstimate, TimeBreakdown

MAX_TIME_S = 1e9  # about 32 years: no step, pass or iteration of a real system takes longer
HINT = ("a device or network value of the system (a bandwidth, FLOP/s, latency or overhead) is out of the range "
        "the models cover")


def _value(x: object) -> float:
    if type(x) is float:  # the common case first
        return x
    if isinstance(x, float | int):  # one configuration's number (np.float64 is a float): no array
        return float(x)
    a = np.asarray(x, dtype=float)
    return float(a.reshape(-1)[0]) if a.size == 1 else math.nan


def _finite(name: str, value: object, positive: bool, high: float = MAX_TIME_S) -> None:
    """`value` finite, > 0 (`positive`) or >= 0, and below `high`."""
    v = _value(value)
    if not math.isfinite(v) or v < 0 or (positive and v <= 0) or v >= high:
        allowed = f"a finite value {'>' if positive else '>='} 0" + (f" below {high:g}" if high < math.inf else "")
        raise ResultError(f"{name} = {v:g}: expected {allowed}; {HINT}")


_BREAKDOWN = tuple(f"breakdown.{f.name}" for f in fields(TimeBreakdown))  # the names each time part is checked by


def check_estimate(result: StepEstimate | InferenceEstimate) -> StepEstimate | InferenceEstimate:
    """`result` if a feasible estimate keeps the invariants, else a `ResultError` naming the quantity."""
    feasible = result.feasible
    if not (feasible if type(feasible) is bool else bool(np.all(feasible))):  # one configuration's bool as is
        return result
    if isinstance(result, StepEstimate):
        _finite("step_time_s", result.step_time_s, True)
        _finite("tokens_per_s", result.tokens_per_s, True, math.inf)
        breakdown = result.breakdown
        for name in _BREAKDOWN:
            v = getattr(breakdown, name[10:])
            if type(v) is float and 0.0 <= v < MAX_TIME_S:  # `_finite`'s test on a float, without the call
                continue
            _finite(name, v, False)
        for name in ("mfu", "hfu"):
            v = _value(getattr(result, name))
            if not 0 < v < math.inf:
                raise ResultError(f"{name} = {v:g}: expected above 0; {HINT}")
            if v > 1 + 1e-9:
                raise ResultError(f"{name} = {v:.1%}: expected above 0 and at most 100% of the devices' peak "
                                  "(a modelling error: please report the configuration)")
    else:
        _finite("ttft_s", result.ttft_s, True)
        _finite("tpot_s", result.tpot_s, result.output_len > 1)
        _finite("output_tokens_per_s", result.output_tokens_per_s, True, math.inf)
    return result
