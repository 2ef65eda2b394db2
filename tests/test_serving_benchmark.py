"""`armillary serve --mode` and `api.serve_benchmark`: the benchmark modes people publish in."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from armillary import api
from armillary.cli import app
from armillary.errors import SpecError
from armillary.serving.benchmark import MLPERF_LIMITS_S, Benchmark, BenchmarkResult, Mode, requests_for

EXAMPLE = Path(__file__).parent.parent / "examples" / "llama2-70b-serving-h100.yaml"
MODEL, SYSTEM, STRATEGY = "llama2-70b", "dgx-h100", {"tp": 4, "precision": "fp8", "attention": "flash3"}
WORKLOAD = {"kind": "inference", "input_len": 1024, "output_len": 128, "weights": "fp8",
            "kv_cache": {"precision": "fp8"}, "serving": {"max_batch": 64}}


def _run(**client: object) -> BenchmarkResult:
    return api.serve_benchmark(MODEL, SYSTEM, STRATEGY, WORKLOAD, client, gpus=4)


def test_a_stated_request_count_is_served_whole_and_reported_over_the_run():
    r = _run(mode="offline", requests=300)
    assert r.served.requests == 300 and r.steady is None
    assert r.output_tokens_per_s == r.served.output_tokens_per_s


def test_an_unstated_count_reaches_the_steady_state_and_does_not_depend_on_it():
    unstated = _run(mode="concurrency", concurrency=32)
    assert unstated.steady is not None and not unstated.steady.whole_run
    assert unstated.served.requests == requests_for(Benchmark(Mode.CONCURRENCY, concurrency=32), 64) == 256
    longer = api.serve_benchmark(MODEL, SYSTEM, STRATEGY, WORKLOAD,
                                 Benchmark(Mode.CONCURRENCY, requests=1024, concurrency=32), gpus=4)
    from armillary.serving.window import steady_throughput

    assert steady_throughput(longer.served.times).output_tokens_per_s == pytest.approx(
        unstated.output_tokens_per_s, rel=0.03)
    # the whole-run rate of a short run is lower (ramp and drain): the window is what a windowed client reports
    assert _run(mode="concurrency", concurrency=32, requests=64).output_tokens_per_s < unstated.output_tokens_per_s


def test_mlperf_scenarios_carry_their_latency_limits():
    server = _run(mode="mlperf-server", rate=2.0)
    assert server.benchmark.limits_s == MLPERF_LIMITS_S[Mode.MLPERF_SERVER] == (2.0, 0.2)
    assert server.served.ttft_slo_s == 2.0 and server.meets_limits is not None
    assert server.served.requests == 1200  # LoadGen's 600 s at 2 queries/s
    assert _run(mode="mlperf-offline").meets_limits is None
    # a rate far beyond the server's misses the limits (queueing grows without bound)
    assert _run(mode="mlperf-interactive", rate=200.0, requests=2000).meets_limits is False


@pytest.mark.parametrize(("client", "words"), [
    ({"mode": "warp"}, "mode"), ({"mode": "rate"}, "rate"), ({"mode": "concurrency"}, "concurrency"),
    ({"mode": "offline", "requests": 0}, "requests"), ({"mode": "offline", "qps": 3}, "benchmark.qps: Extra inputs")])
def test_a_benchmark_that_cannot_run_says_why(client, words):
    with pytest.raises(SpecError, match=words):
        _run(**client)


def test_serve_mode_on_the_command_line():
    out = CliRunner().invoke(app, ["serve", str(EXAMPLE), "--mode", "concurrency", "--concurrency", "16", "--json"])
    assert out.exit_code == 0, out.output
    record = json.loads(out.output)["benchmark"]
    assert record["mode"] == "concurrency" and record["concurrency"] == 16 and not record["requests_stated"]
    assert record["steady_window_s"][1] > record["steady_window_s"][0] > 0
    text = CliRunner().invoke(app, ["serve", str(EXAMPLE), "--mode", "mlperf-server", "--rate", "2"])
    assert text.exit_code == 0 and "P99 TTFT <= 2000 ms" in text.output
    bad = CliRunner().invoke(app, ["serve", str(EXAMPLE), "--mode", "mlperf-server"])
    assert bad.exit_code != 0 and "rate" in bad.output
