"""Request traces: arrival times with input and output lengths, generated (Poisson arrivals, length
distributions) or loaded from a CSV file."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from armillary.errors import SpecError
from armillary.specs.workload import LengthDistribution


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
    if rate <= 0 or duration_s <= 0:
        raise SpecError(f"rate ({rate}) and duration ({duration_s}) must be positive")
    rng = np.random.default_rng(seed)
    expected = rate * duration_s
    gaps = rng.exponential(1 / rate, int(expected + 10 * np.sqrt(expected) + 10))
    arrivals = np.cumsum(gaps)
    arrivals = arrivals[arrivals < duration_s]
    n = len(arrivals)
    return Trace(arrivals, _lengths(rng, n, input_len, lengths, spread), _lengths(rng, n, output_len, lengths, spread))


def load_trace(path: str | Path) -> Trace:
    """A CSV with columns arrival_s, input_len, output_len (one request per row, any order)."""
    path = Path(path)
    if not path.is_file():
        raise SpecError(f"trace {path} does not exist")
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    needed = {"arrival_s", "input_len", "output_len"}
    if not rows or not needed <= set(rows[0]):
        raise SpecError(f"trace {path}: expected columns {', '.join(sorted(needed))}")
    try:
        data = np.array([[float(r[k]) for k in ("arrival_s", "input_len", "output_len")] for r in rows])
    except ValueError as err:
        raise SpecError(f"trace {path}: {err}") from None
    if (data[:, 0] < 0).any() or (data[:, 1:] < 1).any():
        raise SpecError(f"trace {path}: arrival_s must be >= 0 and lengths >= 1")
    order = np.argsort(data[:, 0], kind="stable")
    data = data[order]
    return Trace(data[:, 0], data[:, 1].astype(np.int64), data[:, 2].astype(np.int64))
