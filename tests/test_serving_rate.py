"""The max-rate search on traces and the serving-under-load validation rows."""

import pytest

from armillary.api import simulate_serving
from armillary.serving.rate import steady_max_rate, steady_meets
from armillary.serving.trace import poisson_trace, scaled
from armillary.validation.run import read_rows, run_row

FLASH = {"precision": "bf16", "attention": "flash"}
WORKLOAD = {"kind": "inference", "input_len": 512, "output_len": 64,
            "serving": {"ttft_slo_s": 0.3, "tpot_slo_s": 0.03}}


def test_a_trace_is_run_at_each_searched_rate():
    base = poisson_trace(5.0, 60.0, 512, 64, seed=1)  # a 5 req/s trace

    def serve(rate, seed):
        return simulate_serving("llama2-7b", "dgx-h100", FLASH, WORKLOAD, gpus=1, trace=scaled(base, rate))

    found = steady_max_rate(serve, seeds=1, low=1.0, steps=6)
    assert found.result is not None and steady_meets(found.result)
    # the run behind the answer offered the answer's rate (a trace run as recorded would offer 5 req/s
    # at every rate and the search would run off to its upper bound)
    assert found.result.offered_rate == pytest.approx(found.rate, rel=1e-6)
    assert 5 < found.rate < 200
    assert not steady_meets(serve(found.rate * 1.5, 0))


def test_serving_rows_run_as_engine_benchmarks():
    wanted = {"SRV-VLLM-DSR1-H200-C008-O800", "SRV-SGLANG-DSR1-H200-C128-O800-PREFIX",
              "SRV-VLLM-L405-H100-META-QPS16"}
    results = [run_row(r) for r in read_rows() if r["id"] in wanted]
    assert len(results) == 3 and all(r.error is not None for r in results), [r.skipped for r in results]
    notes = {r.id: "; ".join(r.assumptions) for r in results}
    assert "engine vLLM 0.6-0.7" in notes["SRV-VLLM-DSR1-H200-C008-O800"]
    assert "prefix hit rate 0.60" in notes["SRV-SGLANG-DSR1-H200-C128-O800-PREFIX"]
    # the Llama row runs as the engine runs it and lands within 15%, and so does the DeepSeek row at batch 8
    # now that its routed experts run at the engine's fused-MoE rates (vLLM PR #13932: Triton fused_moe
    # streaming the touched experts' weights at 24% of the HBM bandwidth); it came out 40% fast at the
    # device's own rate. The SGLang row runs --enable-dp-attention as data-parallel attention
    # (estimate/dp_attention.py).
    errors = {r.id: r.error for r in results}
    assert abs(errors["SRV-VLLM-L405-H100-META-QPS16"]) < 0.15
    assert abs(errors["SRV-VLLM-DSR1-H200-C008-O800"]) < 0.15
    assert "block-scaled fp8 (128x128 blocks)" in notes["SRV-VLLM-DSR1-H200-C008-O800"]
    assert "data-parallel attention over 8 groups" in notes["SRV-SGLANG-DSR1-H200-C128-O800-PREFIX"]


def test_server_flags_in_a_rows_notes_set_the_engine():
    # dstack's vLLM prefix run was launched with --enable-prefix-caching --enable-chunked-prefill (its
    # README; the row's notes say so): V0's chunked budget of 0.7 (2048 tokens) and the prefix cache on
    from armillary.validation.serving_rows import serving_row_specs

    rows = {r["id"]: r for r in read_rows()}
    prefix = serving_row_specs(rows["SRV-VLLM-DSR1-H200-C128-O800-PREFIX"])
    plain = serving_row_specs(rows["SRV-VLLM-DSR1-H200-C128-O800"])
    assert prefix.engine.prefix_caching and prefix.engine.chunked_prefill
    assert prefix.engine.max_batched_tokens == 2048
    assert not plain.engine.prefix_caching and not plain.engine.chunked_prefill


def test_a_search_started_from_the_analytical_rate_tries_the_same_brackets():
    """Started at the grid point below the analytical static-batch rate (and each later seed where the one
    before found its bracket), every seed's search tries the rates the search from `low` tries after its
    doubling, so it finds the same rate, with fewer runs; the tolerance stops the bisection early, within
    that share of the full search's rate."""
    from armillary.api import estimate
    from armillary.serving.rate import analytical_rate

    def serve(rate, seed):
        workload = {**WORKLOAD, "serving": {**WORKLOAD["serving"], "seed": seed}}
        return simulate_serving("llama2-7b", "dgx-h100", FLASH, workload, rate, 20.0, gpus=1)

    start = analytical_rate(estimate("llama2-7b", "dgx-h100", FLASH, {**WORKLOAD, "batch": 8}, gpus=1))
    full = steady_max_rate(serve, seeds=2, steps=6, tolerance=0.0)
    started = steady_max_rate(serve, seeds=2, steps=6, tolerance=0.0, start=start)
    assert started.per_seed == full.per_seed and started.rate > 0
    assert len(started.tried) < len(full.tried) - 6
    for seed in (0, 1):  # the bisection's rates are the same
        assert ([p.rate for p in started.tried if p.seed == seed][-6:]
                == [p.rate for p in full.tried if p.seed == seed][-6:])
    loose = steady_max_rate(serve, seeds=2, steps=6, tolerance=0.05, start=start)
    assert len(loose.tried) < len(started.tried)
    assert all(f / 1.05 <= r <= f for r, f in zip(loose.per_seed, full.per_seed, strict=True))


def test_serve_max_rate_searches_from_low_where_the_static_estimate_refuses(monkeypatch):
    """The analytical start is a guess: where the static-batch estimate refuses the run (a layout only the
    serving simulation takes), the search starts from its lowest rate and answers as before."""
    import json
    from pathlib import Path

    from typer.testing import CliRunner

    import armillary.api
    from armillary.cli import app
    from armillary.errors import SpecError

    def refused(*args, **kwargs):
        raise SpecError("workload.batch: does not split")

    monkeypatch.setattr(armillary.api, "estimate", refused)
    serving = Path(__file__).parent.parent / "examples" / "llama2-70b-serving-h100.yaml"
    out = CliRunner().invoke(app, ["serve", str(serving), "--max-rate", "--seeds", "1", "--duration", "20", "--json"])
    assert out.exit_code == 0, out.output
    record = json.loads(out.stdout)
    assert record["rates_tried"][0]["rate"] == 0.05 and record["max_rate"] > 1
