"""Request traces: arrival times with input and output lengths, generated (Poisson arrivals, length
distributions) or loaded from a CSV file."""

from __future__ import annotations

import csv
import functools
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


# vLLM benchmarks/benchmark_serving.py sample_sharegpt_requests (cb3b2b9b, v0.6.3; the same through 0.8): the
# first two turns of each conversation, dropped when the prompt or the reference reply has fewer than 4
# tokens, the prompt more than 1024 or both more than 2048
SHAREGPT_MIN_TOKENS, SHAREGPT_MAX_PROMPT, SHAREGPT_MAX_PAIR = 4, 1024, 2048
# [measured] log-space spread of what that client sends: its 1,000 prompts (seed 0, Llama 3 tokenizer) 1.58,
# and the replies of 4 tokens or more that Llama 3.1 405B generated to them 1.30-1.31 (three runs;
# dstackai/benchmarks comparison/h100sxm5_vs_mi300x/raw_data, per-request input_lens / output_lens)
SHAREGPT_SIGMA_PROMPT, SHAREGPT_SIGMA_REPLY = 1.58, 1.3
_SOLVE_PAIRS, _SOLVE_STEPS = 200_000, 40


def _sharegpt_pairs(z: np.ndarray, log_means: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The (prompt, reply) lengths of standard normal pairs `z` (2 x n) that the client keeps."""
    prompt, reply = (np.rint(np.exp(log_means[i] + sigma * z[i]))
                     for i, sigma in enumerate((SHAREGPT_SIGMA_PROMPT, SHAREGPT_SIGMA_REPLY)))
    kept = ((prompt >= SHAREGPT_MIN_TOKENS) & (reply >= SHAREGPT_MIN_TOKENS) & (prompt <= SHAREGPT_MAX_PROMPT)
            & (prompt + reply <= SHAREGPT_MAX_PAIR))
    return prompt[kept], reply[kept]


@functools.lru_cache(maxsize=256)
def _sharegpt_log_means(input_len: float, output_len: float) -> tuple[float, float]:
    """Log-space means whose pruned pairs (`_sharegpt_pairs`) average `input_len` and `output_len`: fixed
    point iterations on one fixed sample."""
    target = np.array([input_len, output_len], dtype=float)
    z = np.random.default_rng(0).standard_normal((2, _SOLVE_PAIRS))
    log_means = np.log(target)
    for _ in range(_SOLVE_STEPS):
        pairs = _sharegpt_pairs(z, log_means)
        if len(pairs[0]) < _SOLVE_PAIRS // 100:
            break
        means = np.array([pairs[0].mean(), pairs[1].mean()])
        if np.all(np.abs(means / target - 1) < 1e-3):
            return float(log_means[0]), float(log_means[1])
        log_means = log_means + np.log(target / means)
    raise SpecError(f"input_len {input_len:g} / output_len {output_len:g}: no ShareGPT sample has these means "
                    f"(the client keeps prompts of {SHAREGPT_MIN_TOKENS}-{SHAREGPT_MAX_PROMPT} tokens, replies of "
                    f"{SHAREGPT_MIN_TOKENS} or more, pairs of {SHAREGPT_MAX_PAIR} or fewer)")


def sharegpt_lengths(rng: np.random.Generator, n: int, input_len: float, output_len: float
                     ) -> tuple[np.ndarray, np.ndarray]:
    """`n` (prompt, reply) lengths as vLLM's benchmark_serving samples ShareGPT: lognormal with the dataset's
    spreads (SHAREGPT_SIGMA_*), the pairs the client prunes dropped, averaging the given means."""
    log_means = np.array(_sharegpt_log_means(float(input_len), float(output_len)))
    prompts: list[np.ndarray] = []
    replies: list[np.ndarray] = []
    kept = 0
    while kept < n:
        prompt, reply = _sharegpt_pairs(rng.standard_normal((2, 2 * (n - kept) + 16)), log_means)
        prompts.append(prompt)
        replies.append(reply)
        kept += len(prompt)
    return (np.concatenate(prompts)[:n].astype(np.int64), np.concatenate(replies)[:n].astype(np.int64))


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
