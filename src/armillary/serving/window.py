"""Throughput over the steady part of a saturated run: how load generators that measure over a time window
(genai-perf / AIPerf at a fixed concurrency, MLPerf LoadGen, a long offline run) report it.

A run that keeps the server full (every request queued at t = 0, or a closed loop at a concurrency) has a
ramp, while the first batch is prefilled, and a drain, after the last request is admitted, when the batch
empties. Between the first completion and the last first token the server runs at its steady batch; the
rates here count the tokens produced in that window (each request's output spread evenly between its first
and last token), so they do not depend on how many requests the run had.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from armillary.serving.simulate import RequestTimes


@dataclass(frozen=True)
class SteadyThroughput:
    start_s: float  # the first completion
    end_s: float  # the last first token (no request is admitted after it)
    output_tokens_per_s: float
    total_tokens_per_s: float  # prompts counted when their first token falls in the window
    requests_per_s: float  # completions in the window
    whole_run: bool  # True: no steady window (too few requests); the rates are the whole run's


def steady_throughput(times: RequestTimes) -> SteadyThroughput:
    """The rates of the window from the first completion to the last first token (`whole_run` when the run
    never reaches it: then over first arrival to last token, as the benchmark clients compute them)."""
    done = np.isfinite(times.finish_s)
    first, finish = times.first_token_s[done], times.finish_s[done]
    out, prompt = times.output_len[done].astype(float), times.input_len[done].astype(float)
    if not done.any():
        return SteadyThroughput(0.0, 0.0, 0.0, 0.0, 0.0, True)
    start, end = float(finish.min()), float(first.max())
    whole = not end > start
    if whole:
        start, end = float(times.arrival_s.min()), float(finish.max())
    span = end - start
    if span <= 0:
        return SteadyThroughput(start, end, 0.0, 0.0, 0.0, True)
    # a request's later tokens come evenly between its first and last token
    decoding = np.maximum(finish - first, 0.0)
    overlap = np.clip(np.minimum(finish, end) - np.maximum(first, start), 0.0, None)
    share = np.divide(overlap, decoding, out=np.zeros_like(overlap), where=decoding > 0)
    admitted = (first >= start) & (first <= end)
    output = float(((out - 1) * share).sum() + admitted.sum())
    prompts = float(prompt[admitted].sum())
    completed = float(((finish >= start) & (finish <= end)).sum())
    return SteadyThroughput(start, end, output / span, (output + prompts) / span, completed / span, whole)
