"""A run file's `benchmark:` section (mode, requests, rate, concurrency, client) is the mapping the API takes:
`armillary serve RUN.yaml` runs it, the command line only reading the file and printing, so the run file, the
options and the API give one answer; a value not known is refused naming the field and the allowed values."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from armillary import api
from armillary.cli import app
from armillary.errors import SpecError
from armillary.serving.benchmark import Benchmark, Client, Mode
from armillary.specs.run import BenchmarkSection, load_benchmark, load_run

MODEL, SYSTEM, STRATEGY = "llama3.1-8b", "hgx-h200", {"tp": 1, "precision": "fp8", "attention": "flash3"}
WORKLOAD: dict[str, Any] = {"kind": "inference", "input_len": 128, "output_len": 128, "weights": "fp8",
                            "kv_cache": {"precision": "fp8"}, "serving": {"engine": "tensorrt-llm-1.0"}}
BENCH = {"mode": "offline", "requests": 300, "client": "trtllm-bench"}


def _run_file(tmp_path: Path, benchmark: dict[str, Any] | None) -> Path:
    run = tmp_path / "run.yaml"
    section = "" if benchmark is None else f"benchmark: {json.dumps(benchmark)}\n"
    run.write_text(f"model: {MODEL}\nsystem: {SYSTEM}\ngpus: 1\nstrategy: {json.dumps(STRATEGY)}\n"
                   f"workload: {json.dumps(WORKLOAD)}\n{section}")
    return run


def _serve(*args: str) -> dict[str, Any]:
    out = CliRunner().invoke(app, ["serve", *args, "--json"])
    assert out.exit_code == 0, out.output
    return dict(json.loads(out.output)["benchmark"])


def test_a_run_file_with_the_client_is_the_api_call(tmp_path: Path) -> None:
    run = _run_file(tmp_path, BENCH)
    expected = api.serve_benchmark(MODEL, SYSTEM, STRATEGY, WORKLOAD, BENCH, gpus=1)
    assert expected.benchmark.client is Client.TRTLLM_BENCH and expected.assumed
    record = _serve(str(run))  # no --mode: the file's section
    assert record["client"] == "trtllm-bench" and record["client_launch"] == list(expected.assumed)
    assert record["requests"] == 300 and record["output_tokens_per_s"] == pytest.approx(
        expected.output_tokens_per_s, rel=1e-9)
    # the same file read in Python: load_run and load_benchmark give the API its arguments
    section = load_benchmark(run)
    assert section == BenchmarkSection(mode=Mode.OFFLINE, requests=300, client=Client.TRTLLM_BENCH)
    assert Benchmark.of(section) == Benchmark.of(BENCH) == Benchmark(Mode.OFFLINE, 300, client=Client.TRTLLM_BENCH)
    again = api.serve_benchmark(*load_run(run), section)
    assert again.output_tokens_per_s == pytest.approx(expected.output_tokens_per_s, rel=1e-9)
    # and as the options say it, the file without a section
    plain = _run_file(tmp_path, None)
    options = _serve(str(plain), "--mode", "offline", "--requests", "300", "--client", "trtllm-bench")
    assert options == record


def test_the_options_and_set_override_the_sections_fields(tmp_path: Path) -> None:
    run = _run_file(tmp_path, {"mode": "offline", "requests": 300})
    assert _serve(str(run))["client"] is None  # no client: trtllm-serve's launch
    with_client = _serve(str(run), "--client", "trtllm-bench", "--requests", "200")
    assert with_client["client"] == "trtllm-bench" and with_client["requests"] == 200
    assert _serve(str(run), "--set", "benchmark.client=trtllm-bench", "--requests", "200") == with_client
    # --mode replaces the section: the file's client is not carried into another mode
    bench_file = _run_file(tmp_path, BENCH)
    closed = _serve(str(bench_file), "--mode", "concurrency", "--concurrency", "8", "--requests", "64")
    assert closed["client"] is None and closed["mode"] == "concurrency" and closed["requests"] == 64


@pytest.mark.parametrize(("section", "words"), [
    ({"mode": "offline", "client": "trtllm-serve"}, r"benchmark.client: Input should be 'trtllm-bench'"),
    ({"mode": "warp"}, r"benchmark.mode: Input should be 'rate', 'offline', 'concurrency'"),
    ({"client": "trtllm-bench"}, "mode: missing; give one of rate, offline, concurrency, mlperf-offline"),
    ({"mode": "offline", "qps": 3}, r"benchmark.qps: Extra inputs are not permitted"),
])
def test_a_bad_section_is_refused_naming_the_field_and_the_allowed_values(tmp_path: Path, section: dict[str, Any],
                                                                          words: str) -> None:
    run = _run_file(tmp_path, section)
    with pytest.raises(SpecError, match=words):
        load_benchmark(run)
    with pytest.raises(SpecError, match=words):
        load_run(run)  # the run file's own validation reads the section too
    out = CliRunner().invoke(app, ["serve", str(run)])
    assert out.exit_code != 0 and re.search(words, out.output), out.output
    with pytest.raises(SpecError, match=words):  # the API reads the mapping as the run file's section
        api.serve_benchmark(MODEL, SYSTEM, STRATEGY, WORKLOAD, section, gpus=1)


def test_the_sections_client_is_refused_where_its_rules_do_not_apply(tmp_path: Path) -> None:
    run = _run_file(tmp_path, {"mode": "rate", "rate": 2, "client": "trtllm-bench"})
    out = CliRunner().invoke(app, ["serve", str(run)])
    assert out.exit_code != 0 and "offline only" in out.output
    maxed = CliRunner().invoke(app, ["serve", str(_run_file(tmp_path, BENCH)), "--max-rate"])
    assert maxed.exit_code != 0 and "--max-rate" in maxed.output
