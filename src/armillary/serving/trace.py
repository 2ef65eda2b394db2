"""Request traces: arrival times with input and output lengths, generated (Poisson arrivals, length
distributions) or loaded from a CSV file."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from armillary.arguments import number
from armillary.errors import SpecError, shown_value
from armillary.specs.workload import Arrivals, Inference, LengthDistribution


@dataclass(frozen=True)
class Trace:
    """Requests sorted by arrival: seconds from the start, prompt tokens, tokens to generate."""

    arrival_s: np.ndarray
    input_len: np.ndarray
    output_len: np.ndarray

    def __post_init__(self) -> None:
        """Arrays of one dimension and one length (lists and tuples are taken as arrays); the values are
        checked where a trace is served (`check_trace`): a replica's state holds placeholders."""
        columns = {}
        for name in ("arrival_s", "input_len", "output_len"):
            value = getattr(self, name)
            try:
                array = np.asarray(value, dtype=float if name == "arrival_s" else None)
            except (TypeError, ValueError):
                raise SpecError(f"Trace.{name}: expected an array of numbers, got {type(value).__name__}") from None
            if array.ndim != 1 or array.dtype.kind not in "iuf":
                raise SpecError(f"Trace.{name}: expected a one-dimensional array of numbers, got "
                                f"{array.ndim} dimensions of {array.dtype}")
            columns[name] = array
        if len({len(a) for a in columns.values()}) > 1:
            raise SpecError("Trace: arrival_s, input_len and output_len must have one value per request each, got "
                            + ", ".join(f"{len(a)}" for a in columns.values()))
        for name, array in columns.items():
            if array is not getattr(self, name):
                object.__setattr__(self, name, array)

    def __len__(self) -> int:
        return len(self.arrival_s)

    def subset(self, index: np.ndarray | slice) -> Trace:
        return Trace(self.arrival_s[index], self.input_len[index], self.output_len[index])


MAX_REQUESTS = 10_000_000  # a generated trace's requests: about 1 GB of serving state, minutes of simulation


MAX_TOKENS = 2**24  # a request's prompt or output length: far beyond any model's context


def checked_trace(trace: Trace) -> Trace:
    """`trace` if it can be served (its lengths as whole numbers): arrivals finite, >= 0 and in order; lengths
    whole numbers of 1 to 2^24 tokens; at most `MAX_REQUESTS` requests. Else a `SpecError` naming the field
    and the first bad request."""
    if len(trace) > MAX_REQUESTS:
        raise SpecError(f"trace: {len(trace):,} requests; at most {MAX_REQUESTS:,} are served in one run")
    arrival = trace.arrival_s
    bad = np.flatnonzero(~(np.isfinite(arrival) & (arrival >= 0)))
    if len(bad):
        raise SpecError(f"trace.arrival_s: expected finite times >= 0 s, got {float(arrival[bad[0]])!r} (request "
                        f"{bad[0]})")
    late = np.flatnonzero(np.diff(arrival) < 0)
    if len(late):
        raise SpecError(f"trace.arrival_s: expected requests in order of arrival, request {late[0] + 1} arrives "
                        f"before request {late[0]} (sort the trace)")
    for name in ("input_len", "output_len"):
        values = getattr(trace, name)
        ok = (values >= 1) & (values <= MAX_TOKENS)
        if values.dtype.kind == "f":
            ok &= np.isfinite(values) & (values == np.round(values))
        bad = np.flatnonzero(~ok)
        if len(bad):
            raise SpecError(f"trace.{name}: expected whole numbers of 1 to 2^24 tokens, got {values[bad[0]].item()!r} "
                            f"(request {bad[0]})")
    if trace.input_len.dtype.kind == "i" and trace.output_len.dtype.kind == "i":
        return trace
    return Trace(arrival, trace.input_len.astype(np.int64), trace.output_len.astype(np.int64))


def _check_rate(rate: float, duration_s: float) -> None:
    offline = " (all requests at once: workload.serving.arrivals: offline)"
    number("rate (requests/s)" + offline, rate, above=True)
    number("duration (s)", duration_s, above=True)
    if rate * duration_s > MAX_REQUESTS:
        raise SpecError(f"rate x duration = {rate * duration_s:.3g} requests: at most {MAX_REQUESTS:,} are served "
                        "in one run (shorten the duration)")


# [measured] ShareGPT V3 as vLLM's benchmarks/benchmark_serving.py samples it (sample_sharegpt_requests, seed 0,
# 1,000 prompts, Llama 3 tokenizer; prompt or reference reply under 4 tokens, prompt over 1,024 or both over
# 2,048 dropped): quantiles of its prompts and of the replies Llama 3.1 405B (base, greedy) sent back with
# some text, max_tokens being the reference reply (dstackai/benchmarks comparison/h100sxm5_vs_mi300x/raw_data,
# input_lens / output_lens of its 8 complete runs; the prompts identical in all, 215,196 tokens). The replies
# are light-tailed: p50 168, p90 433, p99 739, max 780 (a lognormal of the same log-spread, 1.3, puts its
# p99 at 20x its median, not 4x)
SHAREGPT_QUANTILES = (0, .025, .05, .075, .1, .15, .2, .25, .3, .35, .4, .45, .5, .55, .6, .65, .7, .75, .8, .85,
                      .9, .925, .95, .975, .99, .995, 1)
SHAREGPT_PROMPTS = (4, 6, 8, 9, 10, 13, 15, 19, 24, 31, 43, 58, 83, 140, 209, 258, 315, 357, 426, 516, 621, 681,
                    756, 770, 782, 845, 997)
SHAREGPT_REPLIES = (1, 1, 4, 7, 11, 16, 23, 36, 48, 78, 110, 136, 168, 196, 215, 249, 282, 305, 334, 376, 433,
                    484, 527, 627, 739, 768, 780)


def _table_mean(values: tuple[int, ...]) -> float:
    """Mean of the lengths drawn from a quantile table (`np.interp` of a uniform draw: trapezoids)."""
    u, v = np.asarray(SHAREGPT_QUANTILES), np.asarray(values, dtype=float)
    return float(np.sum(np.diff(u) * (v[1:] + v[:-1]) / 2))


def sharegpt_lengths(rng: np.random.Generator, n: int, input_len: float, output_len: float
                     ) -> tuple[np.ndarray, np.ndarray]:
    """`n` (prompt, reply) lengths as vLLM's benchmark_serving samples ShareGPT (the quantile tables above),
    averaging the given means: prompts scaled to `input_len` (another tokenizer); replies scaled up to a longer
    `output_len`, or, for a shorter one, a share of them stopping at their first token and the rest running
    their whole reply (the model emits its end of sequence before the reference length: 378 of the 1,000
    replies of the runs above were empty)."""
    number("input_len (ShareGPT mean, tokens)", input_len, low=1.0)
    number("output_len (ShareGPT mean, tokens)", output_len, low=1.0)
    prompt_mean, reply_mean = _table_mean(SHAREGPT_PROMPTS), _table_mean(SHAREGPT_REPLIES)
    u = rng.random((3, n))
    prompts = np.interp(u[0], SHAREGPT_QUANTILES, SHAREGPT_PROMPTS) * (input_len / prompt_mean)
    replies = np.interp(u[1], SHAREGPT_QUANTILES, SHAREGPT_REPLIES) * max(1.0, output_len / reply_mean)
    if output_len < reply_mean:  # s x 1 + (1 - s) x reply_mean = output_len
        replies = np.where(u[2] < (reply_mean - output_len) / (reply_mean - 1), 1.0, replies)
    return (np.maximum(1, np.rint(prompts)).astype(np.int64), np.maximum(1, np.rint(replies)).astype(np.int64))


def _lengths(rng: np.random.Generator, n: int, mean: int, kind: LengthDistribution, spread: float) -> np.ndarray:
    if kind is LengthDistribution.FIXED:
        values = np.full(n, float(mean))
    elif kind is LengthDistribution.UNIFORM:
        values = rng.uniform(mean * (1 - spread), mean * (1 + spread), n)
    else:  # lognormal with the given mean: mu = ln(mean) - sigma^2 / 2
        values = rng.lognormal(np.log(mean) - spread**2 / 2, spread, n)
    return np.maximum(1, np.rint(values)).astype(np.int64)


def _request_lengths(rng: np.random.Generator, n: int, input_len: int, output_len: int, kind: LengthDistribution,
                     spread: float) -> tuple[np.ndarray, np.ndarray]:
    if kind is LengthDistribution.SHAREGPT:
        return sharegpt_lengths(rng, n, input_len, output_len)
    return _lengths(rng, n, input_len, kind, spread), _lengths(rng, n, output_len, kind, spread)


def poisson_trace(rate: float, duration_s: float, input_len: int, output_len: int,
                  lengths: LengthDistribution = LengthDistribution.FIXED, spread: float = 0.5,
                  seed: int = 0) -> Trace:
    """Poisson arrivals at `rate` requests/s over `duration_s` (exponential gaps), lengths around the
    given means. The same seed gives the same trace."""
    _check_rate(rate, duration_s)
    rng = np.random.default_rng(seed)
    expected = rate * duration_s
    gaps = rng.exponential(1 / rate, int(expected + 10 * np.sqrt(expected) + 10))
    arrivals = np.cumsum(gaps)
    arrivals = arrivals[arrivals < duration_s]
    return Trace(arrivals, *_request_lengths(rng, len(arrivals), input_len, output_len, lengths, spread))


def arrival_times(rng: np.random.Generator, n: int, rate: float, arrivals: Arrivals,
                  burstiness: float = 1.0) -> np.ndarray:
    """Send times of `n` requests as the serving benchmarks draw them: exponential gaps (Poisson), gamma
    gaps of shape `burstiness` and mean 1/rate (vLLM benchmark_serving --burstiness: coefficient of
    variation 1/sqrt(shape)), or all at t = 0 (offline throughput benchmarks)."""
    if arrivals is Arrivals.OFFLINE or not np.isfinite(rate):
        return np.zeros(n)
    if rate <= 0:
        raise SpecError(f"rate ({rate}) must be positive")
    shape = 1.0 if arrivals is Arrivals.POISSON else burstiness
    gaps = rng.gamma(shape, 1 / (rate * shape), n)
    return np.cumsum(gaps) - gaps[0] if n else gaps  # the first request at t = 0


def benchmark_trace(n: int, rate: float, input_len: int, output_len: int, arrivals: Arrivals = Arrivals.POISSON,
                    burstiness: float = 1.0, lengths: LengthDistribution = LengthDistribution.FIXED,
                    spread: float = 0.5, seed: int = 0) -> Trace:
    """`n` requests of a serving benchmark client (a fixed request count, not a duration)."""
    rng = np.random.default_rng(seed)
    arrivals_s = arrival_times(rng, n, rate, arrivals, burstiness)
    return Trace(arrivals_s, *_request_lengths(rng, n, input_len, output_len, lengths, spread))


def generated_trace(w: Inference, rate: float, duration_s: float) -> Trace:
    """The requests of `duration_s` seconds at `rate` requests/s with the workload's lengths and its
    `serving.arrivals` (Poisson, gamma; offline: rate x duration requests all at t = 0)."""
    sv = w.serving
    if sv.arrivals is Arrivals.POISSON:
        return poisson_trace(rate, duration_s, w.input_len, w.output_len, sv.lengths, sv.spread, sv.seed)
    _check_rate(rate, duration_s)
    n = max(1, round(rate * duration_s))
    return benchmark_trace(n, rate, w.input_len, w.output_len, sv.arrivals, sv.burstiness, sv.lengths, sv.spread,
                           sv.seed)


def scaled(trace: Trace, rate: float) -> Trace:
    """The trace with its arrival times stretched so that it offers `rate` requests/s (its lengths and
    burst pattern kept): how a rate search runs a recorded trace."""
    n = len(trace)
    span = float(trace.arrival_s[-1] - trace.arrival_s[0]) if n > 1 else 0.0
    if span <= 0 or rate <= 0:
        raise SpecError("a trace needs two or more distinct arrival times to be run at another rate")
    factor = (n - 1) / span / rate
    return Trace(trace.arrival_s[0] + (trace.arrival_s - trace.arrival_s[0]) * factor, trace.input_len,
                 trace.output_len)


def _request(path: Path, line: int, row: dict[str | None, str | None]) -> tuple[float, float, float]:
    """One request of a trace file: a finite arrival >= 0 and whole lengths of 1 to 2^24 tokens."""
    if None in row:
        raise SpecError(f"trace {path} line {line}: more values than columns ({len(row[None] or [])} left over)")
    try:
        arrival, prompt, output = (float(row[k] or "nan") for k in ("arrival_s", "input_len", "output_len"))
    except ValueError:
        arrival = prompt = output = math.nan
    if not (0 <= arrival < math.inf and all(1 <= n <= MAX_TOKENS and n.is_integer() for n in (prompt, output))):
        raise SpecError(f"trace {path} line {line}: expected arrival_s >= 0 and whole input_len, output_len of 1 "
                        f"to 2^24 tokens, got " + ", ".join(shown_value(row.get(k)) for k in
                                                            ("arrival_s", "input_len", "output_len")))
    return arrival + 0.0, prompt, output  # -0 as 0


def load_trace(path: str | Path) -> Trace:
    """A CSV with columns arrival_s, input_len, output_len (one request per row, any order)."""
    path = Path(path)
    if not path.is_file():
        raise SpecError(f"trace {path}: no such file")
    needed = ("arrival_s", "input_len", "output_len")
    with path.open(newline="", encoding="utf-8-sig") as f:
        reader = csv.DictReader(f, skipinitialspace=True)
        try:
            header = reader.fieldnames or []
            if not set(needed) <= set(header) or len(set(header)) < len(header):
                raise SpecError(f"trace {path}: expected the columns {', '.join(needed)} once each, got "
                                f"{shown_value(header)}")
            requests: list[tuple[float, float, float]] = []
            for r in reader:
                if len(requests) == MAX_REQUESTS:  # refused while reading, not after holding them all
                    raise SpecError(f"trace {path}: more than {MAX_REQUESTS:,} requests; at most that many are "
                                    "served in one run")
                requests.append(_request(path, reader.line_num, r))
        except (csv.Error, UnicodeDecodeError) as err:
            raise SpecError(f"trace {path} line {max(reader.line_num, 1)}: not a CSV text file ({err})") from None
    if not requests:
        raise SpecError(f"trace {path}: no requests (a header and one row per request)")
    data = np.array(requests)
    order = np.argsort(data[:, 0], kind="stable")
    data = data[order]
    return Trace(data[:, 0], data[:, 1].astype(np.int64), data[:, 2].astype(np.int64))
