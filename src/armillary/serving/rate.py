"""The largest sustainable request rate: SLOs judged on the steady part of a run (warm-up trimmed, the
last arrivals checked for a growing queue), over several seeds for an interval.

A short run at a rate above capacity can pass: its queue has not grown yet (the max rate then moved with
the duration: 13.9 req/s at 30 s, 10.0 at 600 s). Here the first `warmup` share of the arrivals is left
out, and the requests of the last tenth must meet the TTFT SLO too: at an unsustainable rate their wait
grows with the duration, so they fail at any duration once the backlog exceeds the SLO.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from armillary import display
from armillary.estimate.inference_result import InferenceEstimate
from armillary.serving.run import ServingResult

WARMUP = 0.2  # [assumed] share of the arrival span left out as warm-up (an empty server fills)
TAIL = 0.1  # share of the arrivals, at the end, checked for a growing queue
TOLERANCE = 0.0025  # the bisection stops at a bracket this wide (relative), well inside the seeds' spread (1-2%)


# How `serve --max-rate` (and `armillary.max_rate`) judges the SLOs, stated in its output beside
# `search.inference.JUDGED` (what `search --tpot-limit` judges) and in docs/serving.md
JUDGED = ("SLOs judged on a simulated Poisson stream (continuous batching, chunked prefill): P90 TTFT and P99 TPOT "
          "of the requests after the first 20% of arrivals, every request served, P90 TTFT of the last 10% within "
          "the SLO (no growing queue); `armillary search --tpot-limit` judges one static batch (its prompts "
          "prefilled together, mean TPOT) and usually finds fewer tokens/s per device")


@dataclass(frozen=True)
class SteadyLatency:
    """What the rate search judges of one run: P90 TTFT and P99 TPOT of the requests sent after the
    warm-up, P90 TTFT of the last arrivals, and whether every request was served."""

    ttft_p90_s: float
    tpot_p99_s: float
    tail_ttft_p90_s: float
    all_served: bool

    def meets(self, ttft_slo_s: float, tpot_slo_s: float) -> bool:
        return (self.all_served and self.ttft_p90_s <= ttft_slo_s and self.tpot_p99_s <= tpot_slo_s
                and self.tail_ttft_p90_s <= ttft_slo_s)


def steady_latency(result: ServingResult, warmup: float = WARMUP) -> SteadyLatency:
    """`SteadyLatency` of a run, the first `warmup` share of the arrival span left out."""
    t = result.times
    start, end = float(t.arrival_s.min()), float(t.arrival_s.max())
    kept = t.arrival_s >= start + warmup * (end - start)
    tail = t.arrival_s >= end - TAIL * (end - start)
    ttft = t.first_token_s - t.arrival_s
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(t.output_len > 1, (t.finish_s - t.first_token_s) / (t.output_len - 1), np.nan)

    def p(values: np.ndarray, q: float) -> float:
        v = values[np.isfinite(values)]
        return float(np.percentile(v, q)) if len(v) else 0.0

    served = not result.rejected and result.completed >= result.requests
    return SteadyLatency(p(ttft[kept], 90), p(tpot[kept], 99), p(ttft[tail], 90), served)


def steady_meets(result: ServingResult, warmup: float = WARMUP) -> bool:
    """P90 TTFT and P99 TPOT of the requests sent after the warm-up within the SLOs, every request
    served, and P90 TTFT of the last arrivals within the SLO (no growing backlog)."""
    return steady_latency(result, warmup).meets(result.ttft_slo_s, result.tpot_slo_s)


@dataclass(frozen=True)
class RatePoint:
    """One rate the search tried (for one seed) and what it judged there."""

    rate: float
    seed: int
    latency: SteadyLatency
    meets: bool


@dataclass(frozen=True)
class MaxRate:
    """The largest request rate meeting the SLOs (`steady_meets`): `rate`, the mean over the seeds, with
    their range and every rate tried."""

    rate: float  # mean over the seeds
    low: float  # smallest and largest of the seeds' rates
    high: float
    per_seed: tuple[float, ...]
    result: ServingResult | None  # the first seed's run at its max rate
    tried: tuple[RatePoint, ...] = ()  # every rate the search ran, in order

    def headline(self) -> display.Headline:
        seeds = len(self.per_seed)
        spread = f" (range {display.number(self.low)}..{display.number(self.high)} over {seeds} seeds)" \
            if seeds > 1 else ""
        return [("rate", f"{display.number(self.rate)} requests/s{spread}"), ("runs", str(len(self.tried)))]

    def __repr__(self) -> str:
        return display.short_repr(type(self).__name__, self.headline())

    def _repr_html_(self) -> str:
        return display.html_table(type(self).__name__, self.headline())


def steady_max_rate(serve: Callable[[float, int], ServingResult], seeds: int = 3, warmup: float = WARMUP,
                    low: float = 0.05, high: float = 1e4, steps: int = 12,
                    tolerance: float = TOLERANCE, start: float | None = None) -> MaxRate:
    """The max rate (`steady_meets`) for seeds 0..seeds-1 of `serve(rate, seed)`: mean and range, and
    every rate tried.

    Each seed brackets it on the grid low x 2^k, between the last rate that meets and the first that
    misses, then bisects (in log space) for at most `steps` steps, stopping once the bracket is `tolerance`
    wide. The first seed starts at the grid point at or below `start` (a guess, e.g. `analytical_rate`;
    default `low`) and doubles or halves from there; each later seed starts where the seed before found its
    bracket. Where every grid rate below a bracket meets (the load far below capacity), a seed tries the
    same rates as doubling from `low` would and its rate is within `tolerance` of where the full `steps`
    end: the seeds' spread is that of independent searches."""
    tried: list[RatePoint] = []

    def judge(seed: int) -> Judge:
        def judged(rate: float) -> tuple[ServingResult, bool]:
            result = serve(rate, seed)
            latency = steady_latency(result, warmup)
            tried.append(RatePoint(rate, seed, latency, latency.meets(result.ttft_slo_s, result.tpot_slo_s)))
            return result, tried[-1].meets
        return judged

    found: list[Found] = []
    for seed in range(seeds):
        best, bracket = _search(judge(seed), low, high, steps, tolerance, start)
        found.append(best)
        start = bracket or start
    rates = tuple(r for r, _ in found)
    return MaxRate(float(np.mean(rates)), min(rates), max(rates), rates, found[0][1], tuple(tried))


def analytical_rate(static: InferenceEstimate) -> float | None:
    """Requests/s of the analytical static-batch estimate (its output tokens/s over the output length): where
    the search starts (under continuous batching and SLOs the max rate lands within a few x of it); None
    where the estimate has no finite positive rate."""
    rate = float(static.output_tokens_per_s) / static.output_len
    return rate if np.isfinite(rate) and rate > 0 else None


Judge = Callable[[float], tuple[ServingResult, bool]]
Found = tuple[float, ServingResult | None]


def _grid(low: float, high: float, start: float | None) -> float:
    """The grid point low x 2^k at or below `start` (and `high`), at least `low`."""
    rate = low
    while start is not None and rate * 2 <= min(start, high):
        rate *= 2
    return rate


def _search(judge: Judge, low: float, high: float, steps: int, tolerance: float,
            start: float | None) -> tuple[Found, float | None]:
    """One seed's max rate (`serving.run.max_rate` with a start and a tolerance): (rate, its run), (0, None)
    when even `low` misses; and the grid rate the bracket rests on (None without one)."""
    best: Found = (0.0, None)
    if low > high:
        return best, None
    rate = _grid(low, high, start)
    result, meets = judge(rate)
    if meets:  # double up to the first miss
        while meets:
            best = (rate, result)
            rate *= 2
            if rate > high:
                return best, None
            result, meets = judge(rate)
    else:  # halve down to the first that meets
        while rate > low:
            result, meets = judge(rate / 2)
            if meets:
                best = (rate / 2, result)
                break
            rate /= 2
    bracket = best[0] or None
    lo, hi = best[0] if best[0] > 0 else low / 2**steps, rate
    for _ in range(steps):
        if hi <= lo * (1 + tolerance):
            break
        mid = float(np.sqrt(lo * hi))
        result, meets = judge(mid)
        if meets:
            lo, best = mid, (mid, result)
        else:
            hi = mid
    return best, bracket
