"""Fuzzed configurations through the public API (issue 46): random presets, layouts and workloads with
device and network fields scaled over twelve orders of magnitude, on estimate (training and inference),
search, serve and collective. Each example gives numbers that make sense (finite, positive times; MFU at
most 100% where feasible; served requests accounted for) or an error of armillary's own: never another
exception, never a hang. Derandomized and small by default, seconds in CI; FUZZ_EXAMPLES sets the
examples per test (the acceptance run: 10,000 per surface, `--hypothesis-show-statistics` counts them)."""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as hs
from test_fuzz_inputs import no_hang
from test_monotone_resources import MODELS, SYSTEMS, resources, training_configuration

import armillary
from armillary.errors import ArmillaryError
from armillary.specs.loading import load_system
from armillary.specs.system import System

EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "20"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
FACTORS = (1e-6, 1e-3, 0.1, 0.5, 1.0, 2.0, 10.0, 1e3, 1e6)


def _scaled(system: System, data: hs.DataObject) -> System:
    """`system` with up to two of its resources scaled by a factor of 1e-6 to 1e6 (efficiencies stay
    fractions: a resource made faster moves them toward 1)."""
    for _ in range(data.draw(hs.integers(0, 2), label="edits")):
        edits = resources(system)
        name = data.draw(hs.sampled_from(sorted(edits)), label="resource")
        factor = data.draw(hs.sampled_from(FACTORS), label="factor")
        if factor > 1:  # made faster log2(factor) times over: doubled, halved, halfway to 1 each time
            for _ in range(round(math.log2(factor))):
                system = edits[name][0](system)
        elif factor < 1:
            system = _slower(system, name, factor)
    return system


def _slower(system: System, name: str, factor: float) -> System:
    """`system` with resource `name` `factor` times its rate (latencies and overheads 1 / factor; a
    capacity or an efficiency as it is)."""
    d = system.device
    if "capacity" in name or "efficiency" in name:
        return system
    if name in ("flops", "matrix_flops", "vector_flops"):
        return system.scaled(flops=factor)
    if name.startswith("hbm") or name.startswith("tier2"):
        return system.scaled(hbm_bandwidth=factor)
    if name == "kernel_overhead":
        return system.model_copy(update={"device": d.model_copy(update={
            "kernel_overhead": max(d.kernel_overhead, 1e-6) / factor})})
    if name.endswith("latency"):
        return system.scaled(latency=1 / factor)
    return system.scaled(network_bandwidth=factor)


def _sane_step(result: Any) -> None:
    """A training estimate's invariants, whatever its feasibility."""
    step = float(result.step_time_s)
    assert math.isfinite(step) and step > 0, step
    if bool(result.feasible):
        assert 0 < float(result.mfu) <= 1 + 1e-9, float(result.mfu)
        assert float(result.breakdown.bubble) >= 0


@FUZZ
@given(data=hs.data())
def test_a_fuzzed_training_estimate_makes_sense_or_is_refused(data):
    model, name, gpus, strategy, workload = training_configuration(
        lambda options: data.draw(hs.sampled_from(options)), lambda p: data.draw(hs.booleans()))
    with no_hang(60), np.errstate(all="ignore"):
        try:
            system = _scaled(load_system(name, gpus), data)
            result = armillary.estimate(model, system, strategy, workload)
        except ArmillaryError:
            return
    _sane_step(result)


@FUZZ
@given(data=hs.data(), model=hs.sampled_from(MODELS), name=hs.sampled_from(SYSTEMS),
       tp=hs.sampled_from([1, 2, 4, 8]), batch=hs.sampled_from([1, 8, 64, 512]),
       input_len=hs.sampled_from([1, 128, 2048, 32768]), output_len=hs.sampled_from([1, 2, 128, 4096]))
def test_a_fuzzed_inference_estimate_makes_sense_or_is_refused(data, model, name, tp, batch, input_len,
                                                                 output_len):
    workload = {"kind": "inference", "batch": batch, "input_len": input_len, "output_len": output_len}
    with no_hang(60), np.errstate(all="ignore"):
        try:
            system = _scaled(load_system(name, 8), data)
            result = armillary.estimate(model, system, {"tp": tp}, workload)
        except ArmillaryError:
            return
    assert math.isfinite(float(result.ttft_s)) and float(result.ttft_s) > 0
    assert math.isfinite(float(result.tpot_s)) and float(result.tpot_s) >= 0
    assert float(result.output_tokens_per_s) > 0


@FUZZ
@given(data=hs.data(), model=hs.sampled_from(MODELS), name=hs.sampled_from(SYSTEMS),
       gpus=hs.sampled_from([1, 8, 16, 64]), seq_len=hs.sampled_from([512, 4096]),
       tp=hs.lists(hs.sampled_from([1, 2, 4, 8]), min_size=1, max_size=3, unique=True),
       pp=hs.lists(hs.sampled_from([1, 2, 4]), min_size=1, max_size=2, unique=True),
       zero=hs.lists(hs.sampled_from([0, 1, 3]), min_size=1, max_size=2, unique=True),
       objective=hs.sampled_from(["time", "memory"]))
def test_a_fuzzed_search_gives_sensible_candidates_or_is_refused(data, model, name, gpus, seq_len, tp, pp, zero,
                                                                 objective):
    workload = {"kind": "training", "seq_len": seq_len, "global_batch": 64}
    space = {"tp": tp, "pp": pp, "zero": zero, "micro_batch": [1, 2]}
    with no_hang(120), np.errstate(all="ignore"):
        try:
            system = _scaled(load_system(name, gpus), data)
            result = armillary.search(model, system, workload, space=space, objective=objective, top=3)
        except ArmillaryError:
            return
    assert result.feasible <= result.evaluated <= result.points
    for c in result.top:
        assert math.isfinite(c.step_time_s) and c.step_time_s > 0 and 0 < c.mfu <= 1 + 1e-9
        assert math.isfinite(c.memory_bytes) and c.memory_bytes > 0


@FUZZ
@given(data=hs.data(), model=hs.sampled_from(("llama3.2-1b", "llama3-8b", "mixtral-8x7b", "qwen3-30b-a3b")),
       name=hs.sampled_from(("dgx-h100", "dgx-a100", "mi300x-8", "gb200-nvl72")), tp=hs.sampled_from([1, 2, 8]),
       rate=hs.sampled_from([0.5, 4.0, 40.0]), duration=hs.sampled_from([1.0, 4.0]),
       input_len=hs.sampled_from([16, 512, 8192]), output_len=hs.sampled_from([1, 16, 256]))
def test_a_fuzzed_serving_run_accounts_for_every_request_or_is_refused(data, model, name, tp, rate, duration,
                                                                       input_len, output_len):
    workload = {"kind": "inference", "input_len": input_len, "output_len": output_len}
    with no_hang(120), np.errstate(all="ignore"):
        try:
            system = _scaled(load_system(name, 8), data)
            result = armillary.simulate_serving(model, system, {"tp": tp}, workload, rate, duration)
        except ArmillaryError:
            return
    assert result.completed + result.rejected == result.requests
    assert math.isfinite(result.makespan_s) and result.makespan_s >= 0
    assert math.isfinite(result.output_tokens_per_s) and result.output_tokens_per_s >= 0
    assert 0 <= result.slo_attainment <= 1


@FUZZ
@given(data=hs.data(), op=hs.sampled_from(["all_reduce", "all_gather", "reduce_scatter", "all_to_all",
                                           "broadcast", "reduce"]),
       name=hs.sampled_from(SYSTEMS), gpus=hs.sampled_from([1, 2, 3, 8, 16, 72, 256, 4096]),
       size=hs.one_of(hs.sampled_from([1.0, 1e3, 1e6, 1e9, 1e12]), hs.floats(1.0, 1e10)),
       algorithm=hs.sampled_from(["auto", "ring", "tree", "direct", "halving_doubling", "in_network"]),
       composition=hs.sampled_from(["auto", "flat_ring", "pipelined", "sequential"]))
def test_a_fuzzed_collective_makes_sense_or_is_refused(data, op, name, gpus, size, algorithm, composition):
    with no_hang(60), np.errstate(all="ignore"):
        try:
            system = _scaled(load_system(name), data)
            row = armillary.collective(op, size, system, gpus=gpus, algorithm=algorithm, composition=composition)
        except ArmillaryError:
            return
    assert math.isfinite(row.time_s) and row.time_s > 0
    assert math.isfinite(row.busbw_bytes_per_s) and row.busbw_bytes_per_s >= 0


@pytest.mark.parametrize("pinned", [{"composition": "pipelined"}, {"algorithm": "in_network"}])
def test_a_pinned_choice_that_cannot_run_is_refused(pinned):
    """Found by the fuzzer: NCCL's pipelined phases need a tree-family top phase, which all-gather does not
    have, and NVLink SHARP does not gather across nodes; `collective --composition pipelined` or
    `--algorithm in_network` printed a time of inf for an all-gather over two DGX H100 nodes; now refused
    (comm/compose.compose), naming the pinned choice."""
    with pytest.raises(ArmillaryError, match="|".join(pinned)):
        armillary.collective("all_gather", 1e6, "dgx-h100", gpus=16, **pinned)
