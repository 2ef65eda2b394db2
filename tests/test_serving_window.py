"""Benchmark modes as rows word them, and the steady window of a saturated run (serving.window)."""

from __future__ import annotations

import numpy as np
import pytest

from armillary.serving.benchmark import Benchmark, Mode
from armillary.serving.simulate import RequestTimes
from armillary.serving.window import steady_throughput
from armillary.validation.row_columns import Unsupported
from armillary.validation.run import is_serving_row
from armillary.validation.serving_rows import _client


def _times(arrival, first, finish, prompt, output):
    n = len(arrival)
    return RequestTimes(*(np.asarray(v, dtype=float) for v in (arrival, first, finish, prompt, output)),
                        np.zeros(n, dtype=np.int64))


def test_the_steady_window_runs_from_the_first_completion_to_the_last_first_token():
    # two slots; each request: first token 1 s after admission, then 10 tokens a second for 1 s (11 tokens)
    t = _times(arrival=[0, 0, 0, 0], first=[1, 1, 3, 3], finish=[2, 2, 4, 4], prompt=[100] * 4, output=[11] * 4)
    s = steady_throughput(t)
    assert (s.start_s, s.end_s, s.whole_run) == (2.0, 3.0, False)
    # in [2, 3]: requests 0 and 1 finish (their decode lies before), 2 and 3 get their first token at 3
    assert s.output_tokens_per_s == pytest.approx(2.0)
    assert s.total_tokens_per_s == pytest.approx(202.0) and s.requests_per_s == pytest.approx(2.0)


def test_a_run_without_a_steady_window_reports_the_whole_run():
    t = _times(arrival=[0], first=[1], finish=[3], prompt=[10], output=[21])
    s = steady_throughput(t)
    assert s.whole_run and s.output_tokens_per_s == pytest.approx(21 / 3)


@pytest.mark.parametrize(("words", "expected"), [
    ("max-load offline (infinite request rate); batch chosen by the runtime", Benchmark(Mode.OFFLINE)),
    ("max load: all 3000 requests queued at start", Benchmark(Mode.OFFLINE, 3000)),
    ("concurrency 50", Benchmark(Mode.CONCURRENCY, concurrency=50)),
    ("max-concurrency 16 (closed loop, 500 prompts, request rate inf)", Benchmark(Mode.CONCURRENCY, 500, None, 16)),
    ("Poisson arrivals, target 71.2 QPS; gpu_batch_size 1024", Benchmark(Mode.RATE, rate=71.2)),
    ("--request-rate 2.5 --num-prompts 400", Benchmark(Mode.RATE, 400, 2.5)),
])
def test_benchmark_modes_as_rows_word_them(words, expected):
    assert _client({"batch_or_concurrency": words}) == expected


def test_a_rate_in_a_comparison_clause_is_not_the_client():
    with pytest.raises(Unsupported, match="batch_or_concurrency"):
        _client({"batch_or_concurrency": "batch 64 (compared with request rate 8 in the earlier run)"})


def test_an_mlperf_scenario_is_a_served_stream_but_a_stated_static_batch_is_not():
    assert is_serving_row({"id": "INF-X", "batch_or_concurrency": "gpu_batch_size 896 (config)",
                           "metric": "Offline tokens per second"})
    assert not is_serving_row({"id": "INF-Y", "batch_or_concurrency": "1024", "metric": "peak offline throughput",
                               "framework": "TensorRT-LLM v0.6.1 (static batching)"})


def test_tensorrt_llm_expert_parallelism_is_read_from_its_flag():
    from armillary.validation.serving_rows import serving_row_specs

    row = {"id": "SRV-T-1", "kind": "inference", "model": "DeepSeek-R1", "gpu": "H200 SXM 141GB", "n_gpus": "8",
           "tp": "8", "isl": "1000", "osl": "100", "batch_or_concurrency": "max-concurrency 8 (64 prompts)",
           "framework": "TensorRT-LLM 0.17 (PyTorch backend): trtllm-serve --tp_size 8 --ep_size 4",
           "precision": "not stated"}
    spec = serving_row_specs(row)
    assert (spec.strategy.ep, spec.strategy.expert_tp) == (4, 2)
    # negative: without the flag the experts are split over every TP rank
    plain = serving_row_specs({**row, "framework": "TensorRT-LLM 0.17 (PyTorch backend): trtllm-serve --tp_size 8"})
    assert (plain.strategy.ep, plain.strategy.expert_tp) == (1, 8)
