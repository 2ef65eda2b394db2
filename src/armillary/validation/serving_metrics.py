"""What a serving row measured, in its source's words and unit, as a function of the simulated benchmark.

The benchmark clients (vLLM's benchmark_serving, SGLang's bench_serving, genai-perf) print output, total
and request throughput, and the mean, median and percentiles of TTFT, TPOT, ITL and end-to-end latency;
a throughput is the whole server's unless its metric or unit says per GPU.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from armillary.serving.run import ServingResult
from armillary.serving.window import steady_throughput
from armillary.validation.metrics import PER_GPU, time_unit
from armillary.validation.rows import Unsupported
from armillary.validation.vocabulary import clean


@dataclass(frozen=True)
class ServingMetric:
    label: str  # what is compared, in the row's unit
    read: Callable[[ServingResult], float]  # the predicted value in the row's unit


_LATENCIES = (  # (words, ServingResult field)
    (r"ttft|time to first token|first[- ]token latency", "ttft_s"),
    (r"tpot|time per output token", "tpot_s"),
    (r"itl|inter[- ]token latency", "itl"),
    (r"e2e|end[- ]to[- ]end|request latency", "e2e_s"),
)
_STATISTICS = ((r"median|p50\b", "p50"), (r"p90\b", "p90"), (r"p99\b", "p99"), (r"mean|average|avg", "mean"))


def _statistic(text: str) -> str:
    return next((stat for words, stat in _STATISTICS if re.search(words, text)), "mean")


def _latency(row: dict[str, str], field: str, text: str, unit: str) -> ServingMetric:
    stat, k = _statistic(text), time_unit(unit, "ms")
    if field == "itl":
        if stat != "mean":
            raise Unsupported(f"metric {row.get('metric')!r}: only the mean inter-token latency is simulated")
        return ServingMetric(f"mean ITL [{unit}]", lambda r: r.itl_mean_s / k)
    return ServingMetric(f"{stat} {field[:-2].upper()} [{unit}]", lambda r: getattr(getattr(r, field), stat) / k)


def _rate(name: str, per_gpu: bool, steady: bool) -> Callable[[ServingResult], float]:
    """The server's rate `name` (a ServingResult field), or one device's share of it; `steady`: over the
    run's steady window (serving.window) instead of first arrival to last token."""
    def read(r: ServingResult) -> float:
        value = getattr(steady_throughput(r.times), name) if steady else getattr(r, name)
        return float(value) / (r.devices if per_gpu else 1)

    return read


def read_serving_metric(row: dict[str, str], steady: bool = False) -> ServingMetric:
    """The measured quantity of a serving row; Unsupported names the metric and unit when unknown. `steady`:
    rates over the steady window (a run of unstated length, measured over a time window)."""
    text, unit = clean(row.get("metric")), clean(row.get("unit"))
    for words, field in _LATENCIES:
        if re.search(rf"\b({words})\b", text):
            return _latency(row, field, text, unit)
    both = f"{text} {unit}"
    per_gpu = bool(PER_GPU.search(both))
    whose = " per GPU" if per_gpu else " (server)"
    for words, label, rate in (
            (r"request throughput|requests?/s|req/s|\bqps\b", "requests/s", "requests_per_s"),
            (r"total token|input and output|prompt and output", "total tok/s", "total_tokens_per_s"),
            (r"output token|generat|decode throughput|output throughput|tokens?/s|tok/s", "output tok/s",
             "output_tokens_per_s")):
        if re.search(words, both):
            return ServingMetric(label + whose + (", steady window" if steady else ""), _rate(rate, per_gpu, steady))
    raise Unsupported(f"metric {row.get('metric')!r} / unit {row.get('unit')!r}: not a serving benchmark quantity "
                      "(output, total or request throughput; TTFT, TPOT, ITL or end-to-end latency)")

