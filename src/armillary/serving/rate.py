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

    def slack(self, ttft_slo_s: float, tpot_slo_s: float) -> float:
        """The largest judged latency over its SLO (<= 1 where the run meets them; inf where a request
        was not served): what the search interpolates between the rates it tried."""
        if not self.all_served:
            return float("inf")
        return max(self.ttft_p90_s / ttft_slo_s, self.tpot_p99_s / tpot_slo_s, self.tail_ttft_p90_s / ttft_slo_s)


def steady_latency(result: ServingResult, warmup: float = WARMUP) -> SteadyLatency:
    """`SteadyLatency` of a run, the first `warmup` share of the arrival span left out."""
    t = result.times
    start, end = float(t.arrival_s.min()), float(t.arrival_s.max())
    kept = t.arrival_s >= start + warmup * (end - start)
    tail = t.arrival_s >= end - TAIL * (end - start)
    ttft, tpot = t.ttft_s, t.tpot_s

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


@dataclass(frozen=True, repr=False)
class MaxRate(display.Displayed):
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


def steady_max_rate(serve: Callable[[float, int], ServingResult], seeds: int = 3, warmup: float = WARMUP,
                    low: float = 0.05, high: float = 1e4, steps: int = 12,
                    tolerance: float = TOLERANCE, start: float | None = None, bisect: bool = False) -> MaxRate:
    """The max rate (`steady_meets`) for seeds 0..seeds-1 of `serve(rate, seed)`: mean and range, and
    every rate tried. Each seed ends on a rate that meets next to one that misses at most `tolerance` above
    it (or on `high`), after at most `steps` runs inside its first bracket.

    By default each seed interpolates: from `start` (a guess, e.g. `analytical_rate`; default `low`; each
    later seed starts at the mean of the seeds before) it steps to where the judged latencies would reach
    their SLOs (`SteadyLatency.slack`, log-linear in the rate) until one rate meets and one misses, then
    tries just below where the two interpolate to the SLOs (regula falsi with the Illinois rule) and just
    above, so a good guess ends in 3-5 runs a seed. With `bisect` each seed brackets on the grid low x 2^k
    instead, from the grid point at or below `start` (later seeds where the seed before found its bracket),
    and bisects in log space: the search before interpolation, about 11 runs a seed. Where every grid rate
    below a bracket meets, that tries the rates doubling from `low` would. Either way the seeds' spread is
    that of independent searches."""
    tried: list[RatePoint] = []

    def judge(seed: int) -> Judge:
        def judged(rate: float) -> tuple[ServingResult, RatePoint]:
            result = serve(rate, seed)
            latency = steady_latency(result, warmup)
            tried.append(RatePoint(rate, seed, latency, latency.meets(result.ttft_slo_s, result.tpot_slo_s)))
            return result, tried[-1]
        return judged

    found: list[Found] = []
    for seed in range(seeds):
        if bisect:
            best, bracket = _search(judge(seed), low, high, steps, tolerance, start)
            start = bracket or start
        else:
            best = _interpolated(judge(seed), low, high, steps, tolerance, start)
            met = [r for r, _ in (*found, best) if r > 0]
            start = float(np.mean(met)) if met else start
        found.append(best)
    rates = tuple(r for r, _ in found)
    return MaxRate(float(np.mean(rates)), min(rates), max(rates), rates, found[0][1], tuple(tried))


def analytical_rate(static: InferenceEstimate) -> float | None:
    """Requests/s of the analytical static-batch estimate (its output tokens/s over the output length): where
    the search starts (under continuous batching and SLOs the max rate lands within a few x of it); None
    where the estimate has no finite positive rate."""
    rate = float(static.output_tokens_per_s) / static.output_len
    return rate if np.isfinite(rate) and rate > 0 else None


Judge = Callable[[float], tuple[ServingResult, RatePoint]]
Found = tuple[float, ServingResult | None]

ELASTICITY = 2.0  # [assumed] d log(slack) / d log(rate) while one side of the max rate is known (2.2 on the
# shipped serving example between 6.4 and 12.8 req/s): the first steps aim at slack^(-1/2) x the rate
SMALLEST_SLACK = 1e-9  # slack is floored here before its log (an idle run judged at zero latency)


def _log_slack(point: RatePoint, result: ServingResult) -> float:
    return float(np.log(max(point.latency.slack(result.ttft_slo_s, result.tpot_slo_s), SMALLEST_SLACK)))


def _interpolated(judge: Judge, low: float, high: float, steps: int, tolerance: float,
                  start: float | None) -> Found:
    """One seed's max rate by interpolation (`steady_max_rate`): (rate, its run), (0, None) when even `low`
    misses. Rates are compared in log space; `width` is log(1 + tolerance), the bracket it ends on."""
    if low > high:
        return 0.0, None
    width = float(np.log1p(tolerance))
    rate = min(max(start if start is not None else low, low), high)
    meets: tuple[float, float, ServingResult] | None = None  # (rate, log slack, run) of the largest that meets
    misses: tuple[float, float] | None = None  # (rate, log slack) of the smallest that misses
    while meets is None or misses is None:  # step towards the SLOs until one rate meets and one misses
        result, point = judge(rate)
        slack = _log_slack(point, result)
        aim = float(np.exp(-slack / ELASTICITY)) if np.isfinite(slack) else 0.5
        if point.meets:
            meets = (rate, slack, result)
            if rate >= high:
                return rate, result
            rate = min(high, rate * float(min(max(aim * np.sqrt(1 + tolerance), 1 + tolerance), 2.0)))
        else:
            misses = (rate, slack)
            if rate <= low:
                return 0.0, None
            rate = max(low, rate * float(max(min(aim / np.sqrt(1 + tolerance), 1 / (1 + tolerance)), 0.5)))
    lo, f_lo, best = meets
    hi, f_hi = misses
    kept = 0  # +1 / -1: the low / high end moved last (twice in a row: the Illinois rule halves the other's slack)
    for _ in range(steps):
        gap = float(np.log(hi / lo))
        if gap <= width:
            break
        if gap <= 2 * width or not np.isfinite(f_hi) or f_hi <= f_lo:
            rate = float(np.sqrt(lo * hi))  # one run ends a narrow bracket; no slope to follow
        else:  # just below where the slacks interpolate to 1, at least a tolerance inside the bracket
            aim = float(np.log(lo) + gap * -f_lo / (f_hi - f_lo))
            rate = float(np.exp(min(max(aim - width / 2, np.log(lo) + width), np.log(hi) - width)))
        result, point = judge(rate)
        slack = _log_slack(point, result)
        if point.meets:
            lo, f_lo, best = rate, slack, result
            f_hi, kept = (f_hi / 2 if kept > 0 else f_hi), 1
        else:
            hi, f_hi = rate, slack
            f_lo, kept = (f_lo / 2 if kept < 0 else f_lo), -1
    return lo, best


def _met(judge: Judge, rate: float) -> tuple[ServingResult, bool]:
    result, point = judge(rate)
    return result, point.meets


def _grid(low: float, high: float, start: float | None) -> float:
    """The grid point low x 2^k at or below `start` (and `high`), at least `low`."""
    rate = low
    while start is not None and rate * 2 <= min(start, high):
        rate *= 2
    return rate


def _search(judge: Judge, low: float, high: float, steps: int, tolerance: float,
            start: float | None) -> tuple[Found, float | None]:
    """One seed's max rate by bisection (`steady_max_rate(bisect=True)`): (rate, its run), (0, None)
    when even `low` misses; and the grid rate the bracket rests on (None without one)."""
    best: Found = (0.0, None)
    if low > high:
        return best, None
    rate = _grid(low, high, start)
    result, meets = _met(judge, rate)
    if meets:  # double up to the first miss
        while meets:
            best = (rate, result)
            rate *= 2
            if rate > high:
                return best, None
            result, meets = _met(judge, rate)
    else:  # halve down to the first that meets
        while rate > low:
            result, meets = _met(judge, rate / 2)
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
        result, meets = _met(judge, mid)
        if meets:
            lo, best = mid, (mid, result)
        else:
            hi = mid
    return best, bracket
