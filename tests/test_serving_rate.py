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


def test_a_bisection_started_from_the_analytical_rate_tries_the_same_brackets():
    """Started at the grid point below the analytical static-batch rate (and each later seed where the one
    before found its bracket), every seed's bisection tries the rates the bisection from `low` tries after
    its doubling, so it finds the same rate, with fewer runs; the tolerance stops the bisection early, within
    that share of the full search's rate."""
    from armillary.api import estimate
    from armillary.serving.rate import analytical_rate

    def serve(rate, seed):
        workload = {**WORKLOAD, "serving": {**WORKLOAD["serving"], "seed": seed}}
        return simulate_serving("llama2-7b", "dgx-h100", FLASH, workload, rate, 20.0, gpus=1)

    start = analytical_rate(estimate("llama2-7b", "dgx-h100", FLASH, {**WORKLOAD, "batch": 8}, gpus=1))
    full = steady_max_rate(serve, seeds=2, steps=6, tolerance=0.0, bisect=True)
    started = steady_max_rate(serve, seeds=2, steps=6, tolerance=0.0, start=start, bisect=True)
    assert started.per_seed == full.per_seed and started.rate > 0
    assert len(started.tried) < len(full.tried) - 6
    for seed in (0, 1):  # the bisection's rates are the same
        assert ([p.rate for p in started.tried if p.seed == seed][-6:]
                == [p.rate for p in full.tried if p.seed == seed][-6:])
    loose = steady_max_rate(serve, seeds=2, steps=6, tolerance=0.05, start=start, bisect=True)
    assert len(loose.tried) < len(started.tried)
    assert all(f / 1.05 <= r <= f for r, f in zip(loose.per_seed, full.per_seed, strict=True))


def test_serve_max_rate_searches_from_low_where_the_static_estimate_refuses(monkeypatch):
    """The analytical start is a guess: where the static-batch estimate refuses the run (a layout only the
    serving simulation takes), the search starts from its lowest rate and answers as before."""
    import json
    from pathlib import Path

    from typer.testing import CliRunner

    import armillary.api.serving
    from armillary.cli import app
    from armillary.errors import SpecError

    def refused(*args, **kwargs):
        raise SpecError("workload.batch: does not split")

    monkeypatch.setattr(armillary.api.serving, "estimate", refused)
    serving = Path(__file__).parent.parent / "examples" / "llama2-70b-serving-h100.yaml"
    out = CliRunner().invoke(app, ["serve", str(serving), "--max-rate", "--seeds", "1", "--duration", "20", "--json"])
    assert out.exit_code == 0, out.output
    record = json.loads(out.stdout)
    assert record["rates_tried"][0]["rate"] == 0.05 and record["max_rate"] > 1


def test_the_interpolated_search_lands_within_the_seeds_spread_of_the_bisection_with_half_the_runs():
    """`serve --max-rate` interpolates the judged latencies between the rates it tried (from the analytical
    rate, then a rate just below and one just above where they reach the SLOs) instead of bisecting: on a
    small case its mean is within the seeds' range of the bisection's, each seed ends on a rate that meets
    next to one that misses at most the tolerance above it, and it runs at most 60% as many simulations."""
    from functools import cache

    from armillary.api import estimate
    from armillary.serving.rate import TOLERANCE, analytical_rate

    @cache  # the two searches share the runs they both try
    def serve(rate, seed):
        workload = {**WORKLOAD, "serving": {**WORKLOAD["serving"], "seed": seed}}
        return simulate_serving("llama2-7b", "dgx-h100", FLASH, workload, rate, 20.0, gpus=1)

    start = analytical_rate(estimate("llama2-7b", "dgx-h100", FLASH, {**WORKLOAD, "batch": 8}, gpus=1))
    old = steady_max_rate(serve, seeds=3, start=start, bisect=True)
    new = steady_max_rate(serve, seeds=3, start=start)
    assert old.low < old.high  # the seeds spread
    assert abs(new.rate - old.rate) <= old.high - old.low
    assert old.low / 1.05 <= new.low <= new.high <= old.high * 1.05
    assert len(new.tried) <= 0.6 * len(old.tried)
    for seed, rate in enumerate(new.per_seed):
        mine = [p for p in new.tried if p.seed == seed]
        assert any(p.rate == rate and p.meets for p in mine)
        assert any(rate < p.rate <= rate * (1 + TOLERANCE) * (1 + 1e-12) and not p.meets for p in mine)
    assert steady_meets(new.result) and new.result.offered_rate == pytest.approx(new.per_seed[0], rel=0.1)


class _Judged:
    """A stand-in run for the search: SLOs of 1 and a judged TPOT of `slack`."""

    ttft_slo_s = tpot_slo_s = 1.0

    def __init__(self, slack):
        self.slack = slack


def _searched(slack_at, start, low=0.05, high=1e4):
    from armillary.serving.rate import TOLERANCE, RatePoint, SteadyLatency, _interpolated

    tried = []

    def judge(rate):
        s = slack_at(rate)
        latency = SteadyLatency(0.0, s if s < float("inf") else 0.0, 0.0, s < float("inf"))
        tried.append(RatePoint(rate, 0, latency, latency.meets(1.0, 1.0)))
        return _Judged(s), tried[-1]

    return _interpolated(judge, low, high, 12, TOLERANCE, start), tried


@pytest.mark.parametrize("start", [None, 3.0, 10.0, 25.0, 900.0])
def test_the_interpolation_ends_on_a_tolerance_wide_bracket_from_any_start(start):
    """On a latency curve rising as rate^2.2 (plus 3% of deterministic noise) with its SLO at 10 req/s, the
    search ends on a rate that meets beside one that misses within the tolerance, near 10, in few runs;
    a far start (or none) steps by at most 2x a run; a queue that never drains (inf) counts as a miss."""
    import itertools
    import math

    from armillary.serving.rate import TOLERANCE

    def slack(rate):
        if rate > 40:
            return float("inf")  # requests left unserved
        return (rate / 10) ** 2.2 * (1 + 0.03 * math.sin(rate * 37.0))

    (rate, result), tried = _searched(slack, start)
    assert slack(rate) <= 1 and result is not None
    assert any(rate < p.rate <= rate * (1 + TOLERANCE) * (1 + 1e-12) and not p.meets for p in tried)
    assert 9.5 < rate < 10.5
    steps = [b.rate / a.rate for a, b in itertools.pairwise(tried)]
    assert all(0.5 <= s <= 2.0 for s in steps)
    assert len(tried) <= (9 if start is not None and 3 <= start <= 25 else 20)


def test_the_interpolation_answers_zero_where_even_the_lowest_rate_misses_and_high_where_all_meet():
    (rate, result), tried = _searched(lambda r: 5.0, start=1.0, low=0.05)
    assert (rate, result) == (0.0, None) and tried[-1].rate == 0.05
    (rate, result), tried = _searched(lambda r: 0.5, start=1.0, high=100.0)
    assert rate == 100.0 and result is not None and tried[-1].rate == 100.0
