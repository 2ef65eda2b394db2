"""Request traces: arrival times with input and output lengths, generated (Poisson arrivals, length
distributions) or loaded from a CSV file."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from armillary.arguments import number
from armillary.errors import SpecError
from armillary.specs.workload import Arrivals, Inference, LengthDistribution


@dataclass(frozen=True)
class Trace:
    """Requests sorted by arrival: seconds from the start, prompt tokens, tokens to generate."""

    arrival_s: np.ndarray
    input_len: np.ndarray
    output_len: np.ndarray

    def __len__(self) -> int:
        return len(self.arrival_s)

    def subset(self, index: np.ndarray | slice) -> Trace:
        return Trace(self.arrival_s[index], self.input_len[index], self.output_len[index])


MAX_REQUESTS = 10_000_000  # a generated trace's requests: about 1 GB of serving state, minutes of simulation


def _check_rate(rate: float, duration_s: float) -> None:
    offline = " (all requests at once: workload.serving.arrivals: offline)"
    number("rate (requests/s)" + offline, rate, above=True)
    number("duration (s)", duration_s, above=True)
    if rate * duration_s > MAX_REQUESTS:
        raise SpecError(f"rate x duration = {rate * duration_s:.3g} requests: at most {MAX_REQUESTS:,} are served "
                        "in one run (shorten the duration)")


def _lengths(rng: np.random.Generator, n: int, mean: int, kind: LengthDistribution, spread: float) -> np.ndarray:
    if kind is LengthDistribution.FIXED:
        values = np.full(n, float(mean))
    elif kind is LengthDistribution.UNIFORM:
        values = rng.uniform(mean * (1 - spread), mean * (1 + spread), n)
    else:  # lognormal with the given mean: mu = ln(mean) - sigma^2 / 2
        values = rng.lognormal(np.log(mean) - spread**2 / 2, spread, n)
    return np.maximum(1, np.rint(values)).astype(np.int64)


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
    n = len(arrivals)
    return Trace(arrivals, _lengths(rng, n, input_len, lengths, spread), _lengths(rng, n, output_len, lengths, spread))


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
    return Trace(arrivals_s, _lengths(rng, n, input_len, lengths, spread),
                 _lengths(rng, n, output_len, lengths, spread))


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
        raise SpecError(f"trace {path} line {line}: more values than columns ({row[None]!r} left over)")
    try:
        arrival, prompt, output = (float(row[k] or "nan") for k in ("arrival_s", "input_len", "output_len"))
    except ValueError:
        arrival = prompt = output = math.nan
    if not (0 <= arrival < math.inf and all(1 <= n <= 2**24 and n.is_integer() for n in (prompt, output))):
        raise SpecError(f"trace {path} line {line}: expected arrival_s >= 0 and whole input_len, output_len of 1 "
                        f"to 2^24 tokens, got {row.get('arrival_s')!r}, {row.get('input_len')!r}, "
                        f"{row.get('output_len')!r}")
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
                raise SpecError(f"trace {path}: expected the columns {', '.join(needed)} once each, got {header}")
            requests = [_request(path, reader.line_num, r) for r in reader]
        except (csv.Error, UnicodeDecodeError) as err:
            raise SpecError(f"trace {path} line {max(reader.line_num, 1)}: not a CSV text file ({err})") from None
    if not requests:
        raise SpecError(f"trace {path}: no requests (a header and one row per request)")
    data = np.array(requests)
    order = np.argsort(data[:, 0], kind="stable")
    data = data[order]
    return Trace(data[:, 0], data[:, 1].astype(np.int64), data[:, 2].astype(np.int64))
