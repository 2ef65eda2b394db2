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
from armillary.validation.metrics import PER_GPU, PER_LONGER_TIME, refuse_other_gpu_count, time_unit, unit_in_metric
from armillary.validation.row_columns import Unsupported
from armillary.validation.vocabulary import metric_words


@dataclass(frozen=True)
class ServingMetric:
    label: str  # what is compared, in the row's unit
    read: Callable[[ServingResult], float]  # the predicted value in the row's unit


_LATENCIES = (  # (words, ServingResult field)
    (r"ttft|time[- ]to[- ]first[- ]token|first[- ]token latency", "ttft_s"),
    (r"tpot|time[- ]per[- ]output[- ]token", "tpot_s"),
    (r"itl|inter[- ]token latency", "itl"),
    # vLLM's benchmark_serving prints "Mean E2EL (ms)", trtllm-bench "Average request latency (ms)"
    (r"e2el?|end[- ]to[- ]end|request latency", "e2e_s"),
)
# a rate that is not the run's average: vLLM's "Peak output token throughput", "Peak concurrent requests"; a
# goodput counts only the requests that met an SLO (benchmark_serving --goodput)
_NOT_AVERAGE_RATE = re.compile(r"\b(peak|max(imum)?|goodput)\b")
# a speed one user sees: trtllm-bench's "Per User Output Speed [1/TPOT] (tokens/sec/user)", "tps/user"
_PER_USER_SPEED = re.compile(r"1\s*/\s*(tpot|itl)\b|(tokens?|tok|tps)\b[\w\s/]*?(/|\bper)\s*user\b")
_STATISTICS = ((r"median|p50\b", "p50"), (r"p90\b", "p90"), (r"p99\b", "p99"), (r"mean|average|avg", "mean"))
# a percentile written out ("50th percentile", "percentile 90", "P95", "p99.9"), read as its number
_PERCENTILE = re.compile(r"\bp(\d{2}(?:\.\d+)?)\b|\b(\d+(?:\.\d+)?)(?:st|nd|rd|th)?[- ]percentile\b|"
                         r"\bpercentile\s*(\d+(?:\.\d+)?)\b")
# statistics the simulated benchmark does not keep
_OTHER_STATISTICS = re.compile(r"\b(max(imum)?|min(imum)?|std|stdev|standard deviation|worst)\b")


def _statistic(row: dict[str, str], text: str) -> str:
    """The statistic a latency metric names (median, p90, p99, mean; the mean when none is named); another
    percentile or a maximum is refused naming the metric."""
    for found in _PERCENTILE.finditer(text):
        number = next(g for g in found.groups() if g is not None)
        if number not in ("50", "90", "99"):
            raise Unsupported(f"metric {row.get('metric')!r}: percentile {number} is not kept (median, p90, p99 "
                              "and the mean are)")
        text = text.replace(found.group(0), f" p{number} ")
    if _OTHER_STATISTICS.search(text):
        raise Unsupported(f"metric {row.get('metric')!r}: only the median, p90, p99 and the mean are kept")
    return next((stat for words, stat in _STATISTICS if re.search(words, text)), "mean")


def _latency(row: dict[str, str], field: str, text: str, unit: str) -> ServingMetric:
    unit = unit or unit_in_metric(text)
    if not unit:  # a TTFT of 0.2 or 200: seconds and milliseconds are both printed (vLLM ms, InferenceMAX s)
        raise Unsupported(f"unit {row.get('unit')!r} / metric {row.get('metric')!r}: a latency without its time unit "
                          "(ms, s)")
    if field != "tpot_s" and re.search(r"(/|\bper)\s*(output\s*)?tok(en)?s?\b", unit):
        raise Unsupported(f"unit {row.get('unit')!r}: a {field[:-2].upper()} per token is not a latency the benchmark "
                          "keeps (TPOT is the time per output token)")
    stat, k = _statistic(row, f"{text} {unit}"), time_unit(re.sub(r"\([^()]*\)", "", unit).strip(), "ms")
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


# Rates a serving row may state that are not the run's server-wide average rate, and why each is not read (in
# the order they are tested, after the per-user speed and the latencies)
_RATES_NOT_READ: tuple[tuple[re.Pattern[str], str], ...] = (
    (_NOT_AVERAGE_RATE, "a peak, maximum or goodput is not read; the run's output, total or request throughput is"),
    (PER_LONGER_TIME, "a rate per minute, hour or day; rates are read per second"),
    (re.compile(r"(per|/)[\s-]*(user|request|req|stream|query|sequence|session)s?\b|interactivity|tok/s/u\b"),
     "a rate per user or request (the output speed one client sees) is not read; the server's throughput is"),
    # input tokens, unless the words say total, or input and output
    (re.compile(r"^(?!.*(total|(input|prompt) (and|\+|&) output)).*\b(input|prompt|prefill)\b"),
     "an input-token (prefill) rate is not read; output, total and request throughput are"),
    (re.compile(r"\b(k|m|thousand|million)\s*(tokens?|tok)\b|\(\s*(k|m|thousands|millions)\s*\)"),
     "a rate in thousands or millions of tokens; the tokens/s are read"),
    (re.compile(r"(per|/)[\s-]*(mw|megawatt|kw|watt|w|\$|dollar|gpu[- ]?hour)\b"),
     "a rate per power or cost is not read; the server's throughput is"),
    (re.compile(r"\b(decode|prefill|context|generation)[\s-]*(gpus?|workers?|ranks?|nodes?)\b(?!\s*and)"),
     "a rate over one pool of a disaggregated deployment (its prefill or decode GPUs) is not read"),
    (re.compile(r"(per|/)[\s-]*(node|host|server|instance|replica|rack|tray|pod|nvl\s*\d+|superpod)s?\b"),
     "a rate per node or instance is not read; the whole server's or one GPU's is"),
)


def read_serving_metric(row: dict[str, str], steady: bool = False) -> ServingMetric:
    """The measured quantity of a serving row; Unsupported names the metric and unit when unknown. `steady`:
    rates over the steady window (a run of unstated length, measured over a time window)."""
    text, unit = metric_words(row.get("metric")), metric_words(row.get("unit"))
    both = f"{text} {unit}"
    refuse_other_gpu_count(row, both)
    if _PER_USER_SPEED.search(both):
        raise Unsupported(f"metric {row.get('metric')!r} / unit {row.get('unit')!r}: a rate per user or request "
                          "(the output speed one client sees) is not read; the server's throughput is")
    for words, field in _LATENCIES:
        if re.search(rf"\b({words})\b", text):
            return _latency(row, field, text, unit)
    for refused, reason in _RATES_NOT_READ:
        if refused.search(both):
            raise Unsupported(f"metric {row.get('metric')!r} / unit {row.get('unit')!r}: {reason}")
    per_gpu = bool(PER_GPU.search(both))
    whose = " per GPU" if per_gpu else " (server)"
    for words, label, rate in (
            (r"request throughput|requests?/s|req/s|\bqps\b", "requests/s", "requests_per_s"),
            # SGLang's bench_serving "Total throughput (tok/s)" counts input and output tokens; trtllm-bench's
            # "Total Output Throughput" is the server's output tokens
            (r"total token|\btotal throughput|(input|prompt) (and|\+|&) output", "total tok/s",
             "total_tokens_per_s"),
            # a bare "Throughput (tokens/s)" names neither (vLLM's benchmark_throughput prints total and output
            # tokens/s side by side): refused below
            (r"output token|generat|decode throughput|output throughput|(output|completion|completed|generated)"
             r"\s*(tokens?|tok)\s*(/|per)\s*s", "output tok/s",
             "output_tokens_per_s")):
        if re.search(words, both):
            return ServingMetric(label + whose + (", steady window" if steady else ""), _rate(rate, per_gpu, steady))
    if re.search(r"(tokens?|tok)\s*(/|per)\s*(s|sec|second)\b", both):
        raise Unsupported(f"metric {row.get('metric')!r} / unit {row.get('unit')!r}: tokens/s without saying output or "
                          "total (input and output) tokens")
    raise Unsupported(f"metric {row.get('metric')!r} / unit {row.get('unit')!r}: not a serving benchmark quantity "
                      "(output, total or request throughput; TTFT, TPOT, ITL or end-to-end latency)")

