"""Twice any resource never makes a training step slower (issue 46, finding 2), over random configurations
that include ZeRO-3 / FSDP, MoE, context parallelism, recomputation, offload and every overlap flag: the
device's FLOP/s (matrix, vector), HBM bandwidth, capacity and efficiency, the second tier, the kernel
overhead, the GEMM and attention efficiencies, and each network dimension's bandwidth, latency and
efficiency, one at a time, through the public API (`armillary.estimate` on the edited `System`) as a user's
`--set system....=+100%` reaches them (the same `System`, checked here). A faster resource also never turns
a feasible configuration infeasible. `benchmarks/bench_monotone.py --resources` runs 20,000 of them."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as hs

import armillary
from armillary.errors import ArmillaryError
from armillary.specs.efficiency import EfficiencyCurve
from armillary.specs.loading import load_model, load_system
from armillary.specs.system import System

MODELS = ("llama3.2-1b", "llama3-8b", "mistral-7b", "qwen2.5-7b", "llama2-13b", "mixtral-8x7b", "deepseek-v2-lite",
          "qwen3-30b-a3b", "gpt-oss-20b")
SYSTEMS = ("dgx-h100", "dgx-a100", "dgx-b200", "gb200-nvl72", "mi300x-8", "hls-gaudi3", "aws-p5", "hgx-h20",
           "tpu-v5p-slice", "trn2-16")
SLOWER = 1 + 1e-9  # relative tolerance for rounding


def _toward_one(x: float) -> float:
    """An efficiency halfway to 1: 'twice' for a fraction."""
    return x + (1.0 - x) / 2


def _curve(c: EfficiencyCurve) -> EfficiencyCurve:
    return EfficiencyCurve(points=tuple((x, _toward_one(e)) for x, e in c.points))


def _device(system: System, **changes: Any) -> System:
    return system.model_copy(update={"device": system.device.model_copy(update=changes)})


def _tier(system: System, index: int, **changes: Any) -> System:
    memory = list(system.device.memory)
    memory[index] = memory[index].model_copy(update=changes)
    return _device(system, memory=tuple(memory))


def _attention(system: System) -> System:
    d = system.device
    return _device(system, **{name: _toward_one(v) for name in ("flash1_attention_efficiency",
                                                                  "flash_attention_efficiency",
                                                                  "flash3_attention_efficiency")
                              if (v := getattr(d, name)) is not None})


def _gemms(system: System) -> System:
    d = system.device
    return _device(system, matrix_efficiency=_curve(d.matrix_efficiency),
                   matrix_efficiency_by_precision={p: _curve(c) for p, c in d.matrix_efficiency_by_precision.items()})


def resources(system: System) -> dict[str, tuple[Callable[[System], System], list[str]]]:
    """What a user can make faster on `system`: name -> (the edit of the System, the same edit as
    `--set` overrides). Bandwidths, FLOP/s and capacities doubled, latencies and overheads halved,
    efficiencies halfway to 1."""
    d = system.device
    peaks = {f"system.device.matrix_flops.{p.value}": "+100%" for p in d.matrix_flops}
    vector = {f"system.device.vector_flops.{p.value}": "+100%" for p in d.vector_flops}
    found: dict[str, tuple[Callable[[System], System], list[str]]] = {
        "flops": (lambda s: s.scaled(flops=2.0), [f"{k}={v}" for k, v in {**peaks, **vector}.items()]),
        "matrix_flops": (lambda s: _device(s, matrix_flops={p: 2 * v for p, v in s.device.matrix_flops.items()}),
                         [f"{k}={v}" for k, v in peaks.items()]),
        "hbm.bandwidth": (lambda s: _tier(s, 0, bandwidth=2 * s.device.hbm.bandwidth),
                          ["system.device.memory.0.bandwidth=+100%"]),
        "hbm.capacity": (lambda s: _tier(s, 0, capacity=2 * s.device.hbm.capacity),
                         ["system.device.memory.0.capacity=+100%"]),
        "hbm.efficiency": (lambda s: _tier(s, 0, efficiency=_toward_one(s.device.hbm.efficiency)),
                           [f"system.device.memory.0.efficiency={_toward_one(d.hbm.efficiency)!r}"]),
        "kernel_overhead": (lambda s: _device(s, kernel_overhead=s.device.kernel_overhead / 2),
                            ["system.device.kernel_overhead=-50%"]),
        "gemm_efficiency": (_gemms, []),
        "attention_efficiency": (_attention, []),
        "network.bandwidth": (lambda s: s.scaled(network_bandwidth=2.0),
                              [f"system.network.{i}.bandwidth=+100%" for i in range(len(system.network))]),
        "network.latency": (lambda s: s.scaled(latency=0.5),
                            [f"system.network.{i}.latency=-50%" for i in range(len(system.network))]),
    }
    if d.vector_flops:
        found["vector_flops"] = (
            lambda s: _device(s, vector_flops={p: 2 * v for p, v in s.device.vector_flops.items()}),
            [f"{k}={v}" for k, v in vector.items()])
    if d.second_tier is not None:
        found["tier2.bandwidth"] = (lambda s: _tier(s, 1, bandwidth=2 * s.device.memory[1].bandwidth),
                                    ["system.device.memory.1.bandwidth=+100%"])
        found["tier2.capacity"] = (lambda s: _tier(s, 1, capacity=2 * s.device.memory[1].capacity),
                                   ["system.device.memory.1.capacity=+100%"])
    for i, dim in enumerate(system.network):
        found[f"network.{i}.bandwidth"] = (lambda s, i=i: s.with_dimension(i, bandwidth=2 * s.network[i].bandwidth),
                                           [f"system.network.{i}.bandwidth=+100%"])
        found[f"network.{i}.latency"] = (lambda s, i=i: s.with_dimension(i, latency=s.network[i].latency / 2),
                                         [f"system.network.{i}.latency=-50%"])
        found[f"network.{i}.efficiency"] = (
            lambda s, i=i: s.with_dimension(i, efficiency=_toward_one(s.network[i].efficiency)),
            [f"system.network.{i}.efficiency={_toward_one(dim.efficiency)!r}"])
    return found


Choose = Callable[[Sequence[Any]], Any]


def training_configuration(choose: Choose, flip: Callable[[float], bool]) -> tuple[str, str, int, dict[str, Any],
                                                                                  dict[str, Any]]:
    """(model, system, gpus, strategy, training workload) drawn with `choose` (one of a sequence) and
    `flip` (True with a probability): hypothesis' draws in the test, a seeded generator in the benchmark."""
    model = choose(MODELS)
    m = load_model(model)
    moe = m.moe is not None
    gpus = choose((8, 16, 32, 64))
    tp, pp, cp = choose((1, 2, 4, 8)), choose((1, 1, 2, 4)), choose((1, 1, 2))
    ep = choose((1, 2, 4, 8)) if moe else 1
    vpp = 2 if pp > 1 and m.layers % (2 * pp) == 0 and flip(0.3) else 1
    recompute = choose(("none", "selective", "full"))
    strategy: dict[str, Any] = {
        "tp": tp, "pp": pp, "cp": cp, "ep": ep, "vpp": vpp, "zero": choose((0, 1, 2, 3, 3)),
        "recompute": recompute, "micro_batch": choose((1, 2)), "attention": choose(("flash", "flash", "standard")),
        "sequence_parallel": tp > 1 and flip(0.5), "precision": choose(("bf16", "bf16", "fp8")),
        "overlap": {"tp_comm": flip(0.5), "dp_grad_reduce": flip(0.7), "param_gather": flip(0.7),
                    "ep_comm": moe and flip(0.5)},
        "offload": {"optimizer": flip(0.15), "activations": flip(0.1)},
    }
    if moe and ep > 1 and tp > 1 and flip(0.3):
        strategy["expert_tp"] = 1
    if pp > 1 and vpp == 1 and flip(0.2):
        strategy["schedule"] = "zb-h1"
    if recompute == "full" and flip(0.3):
        strategy["recompute_layers"] = 1
    dp = max(gpus // (tp * pp * cp), 1)
    workload = {"kind": "training", "seq_len": choose((1024, 2048, 4096, 8192)),
                "global_batch": dp * strategy["micro_batch"] * choose((1, 2, 4, 8))}
    return model, choose(SYSTEMS), gpus, strategy, workload


def slower_with_more(model: str, system: System, strategy: dict[str, Any], workload: dict[str, Any]) -> (
        list[tuple[str, float, float]] | None):
    """(resource, step time, step time with the resource faster, or inf where it turns infeasible) for
    every resource that slows the step; None where the configuration itself is refused or infeasible."""
    try:
        base = armillary.estimate(model, system, strategy, workload)
    except (ArmillaryError, ValueError):
        return None
    if not bool(base.feasible):
        return None
    worse = []
    for name, (edit, _) in resources(system).items():
        quicker = armillary.estimate(model, edit(system), strategy, workload)
        step = float(quicker.step_time_s) if bool(quicker.feasible) else float("inf")
        if step > float(base.step_time_s) * SLOWER:
            worse.append((name, float(base.step_time_s), step))
    return worse


def random_configurations(count: int, seed: int = 0) -> Iterator[tuple[str, str, int, dict[str, Any], dict[str, Any]]]:
    """`count` configurations drawn at random (feasible or not: `slower_with_more` says)."""
    rng = np.random.default_rng(seed)
    for _ in range(count):
        yield training_configuration(lambda options: options[int(rng.integers(len(options)))],
                                     lambda p: bool(rng.random() < p))


EXAMPLES = int(os.environ.get("MONOTONE_EXAMPLES", "150"))


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(data=hs.data())
def test_twice_any_resource_never_slows_a_training_step(data):
    """A bounded run (MONOTONE_EXAMPLES, 150 by default, about 10 s); the benchmark runs 20,000."""
    model, name, gpus, strategy, workload = training_configuration(
        lambda options: data.draw(hs.sampled_from(options)), lambda p: data.draw(hs.booleans()))
    try:
        system = load_system(name, gpus)
    except ArmillaryError:
        assume(False)
    worse = slower_with_more(model, system, strategy, workload)
    assume(worse is not None)
    assert not worse, f"{model} on {gpus} {name}, {strategy}, {workload}: slower with a faster {worse}"


def test_the_set_overrides_reach_the_same_system(tmp_path):
    """Each resource's `--set` form gives the System the property test edits, so what holds through the
    API holds through `--set` (and `armillary estimate --set` prints the same step)."""
    from armillary.specs.overrides import parse_override
    from armillary.specs.run import load_run

    for name, gpus in (("gb200-nvl72", 16), ("trn2-16", 16), ("dgx-h100", 16)):
        run = tmp_path / f"{name}.yaml"
        run.write_text(f"model: llama3-8b\nsystem: {name}\ngpus: {gpus}\nstrategy: {{tp: 2}}\n"
                       "workload: {kind: training, seq_len: 2048, global_batch: 16}\n")
        base = load_run(run)[1]
        for what, (edit, overrides) in resources(base).items():
            if not overrides:  # efficiency curves: edited as data, no single --set
                continue
            system = load_run(run, [parse_override(o) for o in overrides])[1]
            assert system.model_dump() == edit(base).model_dump(), (name, what)


@pytest.mark.parametrize(("model", "system", "gpus", "strategy", "workload", "what"), [
    # finding 2's example: the replicated parameters' and the routed experts' ZeRO-3 traffic each hid behind
    # the whole of the same passes, so halving the passes exposed twice what it saved
    ("qwen3-30b-a3b", "dgx-b200", 32, {"ep": 4, "zero": 3, "recompute": "selective", "micro_batch": 2,
                                       "attention": "flash", "overlap": {"tp_comm": True, "ep_comm": True}},
     {"kind": "training", "seq_len": 1024, "global_batch": 128}, "flops"),
    ("deepseek-v2-lite", "dgx-b200", 64, {"ep": 8, "zero": 3, "recompute": "full", "attention": "flash",
                                          "precision": "fp8", "overlap": {"tp_comm": True}},
     {"kind": "training", "seq_len": 4096, "global_batch": 128}, "flops"),
    # the recomputed forward's expert exchange moved from the backward's window into the forward's
    ("qwen3-30b-a3b", "mi300x-8", 32, {"tp": 2, "cp": 2, "ep": 4, "zero": 3, "recompute": "full",
                                       "attention": "flash", "precision": "fp8",
                                       "overlap": {"tp_comm": True, "param_gather": False, "ep_comm": True}},
     {"kind": "training", "seq_len": 2048, "global_batch": 16}, "flops"),
])
def test_found_violations_stay_fixed(model, system, gpus, strategy, workload, what):
    sysm = load_system(system, gpus)
    base = armillary.estimate(model, sysm, strategy, workload)
    quicker = armillary.estimate(model, resources(sysm)[what][0](sysm), strategy, workload)
    assert bool(base.feasible) and float(quicker.step_time_s) <= float(base.step_time_s) * SLOWER


# 84 of the 109 violations of `bench_monotone.py --resources` (20,000 configurations, seed 46) before issue
# 46's collective fix: ZB-H1 with a communication-bound backward. The weight-gradient pass the schedule defers
# is priced at its compute (training.py: weight_share = crit.compute x t_W / t), yet behind it the backward's
# overlapped EP exchange or TP reduce-scatters were hidden; deferring it exposes them, so it takes off less
# than t_W, down to nothing. With faster compute the steady state stayed (communication-bound) while the
# claimed saving halved. Now priced at what deferring the pass takes off the backward, the pass less the
# communication it hid (LayerCost.weight_deferrable_s, estimate/layer.py; StageTime.deferrable).
@pytest.mark.parametrize(("model", "system", "gpus", "strategy", "workload"), [
    # the overlapped expert exchange hid behind the weight pass: 0.2009 -> 0.2149 s with 2x FLOP/s
    ("qwen3-30b-a3b", "trn2-16", 64, {"tp": 8, "pp": 4, "ep": 2, "attention": "flash", "schedule": "zb-h1",
                                      "overlap": {"tp_comm": True, "dp_grad_reduce": False, "ep_comm": True}},
     {"kind": "training", "seq_len": 1024, "global_batch": 2}),
    # sequence-parallel TP overlap: the input gradients' reduce-scatters ran beside the weight-gradient GEMMs
    ("llama3.2-1b", "trn2-16", 64, {"tp": 8, "pp": 2, "cp": 2, "zero": 3, "attention": "standard",
                                    "sequence_parallel": True, "schedule": "zb-h1", "overlap": {"tp_comm": True}},
     {"kind": "training", "seq_len": 2048, "global_batch": 4}),
])
def test_zero_bubble_never_slows_with_faster_compute(model, system, gpus, strategy, workload):
    sysm = load_system(system, gpus)
    base = armillary.estimate(model, sysm, strategy, workload)
    assert bool(base.feasible)
    for what in ("flops", "gemm_efficiency"):
        quicker = armillary.estimate(model, resources(sysm)[what][0](sysm), strategy, workload)
        assert float(quicker.step_time_s) <= float(base.step_time_s) * SLOWER, what


@pytest.mark.parametrize("p", [2, 4, 8])
def test_zero_bubble_fills_the_drain_with_the_weight_passes_there_are(p):
    """With one micro-batch ZB-H1 takes p (t_F + t_B) + t_W: each stage's weight pass runs while the
    backward walks on, so it saves (p - 1) t_W of 1F1B's p (t_F + t_B + t_W), not 2 (p - 1) t_W (which made
    a shorter weight pass lengthen the step); with m >= p micro-batches (Qi et al. ICLR'24 §3.1) 2 (p - 1) t_W."""
    from armillary.estimate.pipeline import pipeline_time
    from armillary.plan.codes import SCHEDULE_ZB_H1

    assert float(pipeline_time(3.0, 3.0 * p, 1, 1, SCHEDULE_ZB_H1, 1 / 3, p)) == pytest.approx(2 * p + 1)
    assert float(pipeline_time(3.0, 3.0 * p, p, 1, SCHEDULE_ZB_H1, 1 / 3, p)) == pytest.approx(3 * p + (p - 1))
