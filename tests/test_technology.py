"""Technology-scaling what-ifs (search/technology.py, presets/technology/, docs/technology.md): the preset
family's chained node ratios and sources, derived devices and systems, die cost, the A100 -> B200 speed-up
chain of docs/technology.md (direction and size of each step) and per-kernel boundedness."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import numpy as np
import pytest

from armillary.api import run_estimate
from armillary.cost.compute import kernel_times, stream_time
from armillary.errors import SpecError
from armillary.plan.codes import PRECISION
from armillary.presets.registry import read_data_file
from armillary.search import technology as tech
from armillary.search.technology import Step, serving_chain, training_chain
from armillary.specs.loading import load_device, load_system
from armillary.specs.strategy import TrainingPrecision

B16 = {"precision": "bf16"}
F8 = {"precision": "fp8"}
F4 = {"precision": "fp8", "block_format": "nvfp4"}


def test_every_number_of_the_presets_names_its_source() -> None:
    folder = tech._DIR
    for name in ("logic", "memory", "network"):
        data = read_data_file(folder / f"{name}.yaml")
        entries = data["nodes"] if name == "logic" else data["generations"]
        for key, entry in entries.items():
            numbers = {k for k, v in entry.items() if k not in ("vs", "sources", "description")}
            assert numbers <= set(entry.get("sources", {})), (name, key, numbers)
    cost = read_data_file(folder / "cost.yaml")
    assert {"wafer_price", "defect_density_per_cm2", "yield", "dies_per_wafer"} <= set(cost["sources"])


def test_node_ratios_chain_the_published_steps() -> None:
    nodes = tech.technology().nodes
    assert nodes["n7"].density == 1.0
    assert nodes["n5"].density == pytest.approx(1.84)
    assert nodes["n2"].density == pytest.approx(1.84 * 1.6 * 1.15)
    assert nodes["n4"].energy_efficiency == pytest.approx(1 / 0.70 / 0.82)
    order = ["n7", "n5", "n4", "n2"]
    assert all(nodes[a].density < nodes[b].density for a, b in itertools.pairwise(order))


def test_logic_scale_is_the_lower_of_area_and_power() -> None:
    nodes = tech.technology().nodes
    same = tech.logic_scale("n7", "n4")
    assert same == pytest.approx(min(nodes["n4"].density, nodes["n4"].energy_efficiency))
    assert same == pytest.approx(nodes["n4"].energy_efficiency)  # on equal power, FLOP/J binds
    assert tech.logic_scale("n7", "n4", power_ratio=2.0) == pytest.approx(nodes["n4"].density)
    assert tech.logic_scale("n4", "n4") == 1.0
    with pytest.raises(SpecError, match="node 'n9'"):
        tech.logic_scale("n7", "n9")


def test_derived_device_scales_peaks_and_hbm_and_runs_faster() -> None:
    b200 = load_device("b200")
    node, memory, _ = tech.preset_generations("b200")
    d = tech.derive_device(b200, node, "n2", memory, "hbm4")
    k = tech.logic_scale("n4", "n2")
    assert all(d.matrix_flops[p] == pytest.approx(k * v) for p, v in b200.matrix_flops.items())
    assert d.hbm.bandwidth == pytest.approx(2.0 * b200.hbm.bandwidth)  # 1 -> 2 TB/s per stack
    assert d.hbm.capacity == pytest.approx(64 / 24 * b200.hbm.capacity)
    assert d.matrix_efficiency == b200.matrix_efficiency and b200.hbm.bandwidth == 7.7e12  # base untouched
    base = load_system("dgx-b200", 64)
    fast = base.model_copy(update={"device": d})
    st = {"tp": 8, "pp": 2, "precision": "fp8"}
    w = {"seq_len": 4096, "global_batch": 64}
    assert run_estimate("llama3-70b", fast, st, w).step_time_s < run_estimate("llama3-70b", base, st, w).step_time_s
    with pytest.raises(SpecError, match="give both"):
        tech.derive_device(b200, "n4", "n2", base_memory="hbm3e")


def test_derived_system_scales_each_dimension_by_the_serdes_rate() -> None:
    a100 = load_system("dgx-a100", 64)
    s = tech.derive_system(a100, "n7", "n4", "hbm2e", "hbm3e", "serdes-50g", "serdes-200g")
    assert [d.bandwidth for d in s.network] == pytest.approx([4 * d.bandwidth for d in a100.network])
    inner = tech.derive_system(a100, "n7", "n7", base_serdes="serdes-50g", target_serdes="serdes-100g",
                               dimensions=[0])
    assert inner.network[0].bandwidth == 2 * a100.network[0].bandwidth
    assert inner.network[1].bandwidth == a100.network[1].bandwidth


def test_die_cost_yield_and_chiplets() -> None:
    c = tech.die_cost(100, "n7")
    assert c.dies_per_wafer == pytest.approx(math.pi * 150**2 / 100 - math.pi * 300 / math.sqrt(200))
    assert c.die_yield == pytest.approx(math.exp(-1.0 * 0.1))
    mono, split = tech.die_cost(800, "n4"), tech.die_cost(800, "n4", chiplets=4)
    assert split.die_yield > mono.die_yield and split.cost < mono.cost  # smaller dies lose less to defects
    assert tech.die_cost(100, "n2").cost > tech.die_cost(100, "n7").cost  # the newer wafer costs more


# The factor table of docs/technology.md: GPT-3 175B, 1,024 GPUs, sequences of 2,048, global batch 1,536,
# the fastest strategy searched on each system; each step's factor (over the step before), pinned within 10%.
TRAINING = (
    (Step("A100 bf16", "dgx-a100", B16), 1.0),
    (Step("B200 bf16", "dgx-b200", B16), 5.01),
    (Step("B200 fp8", "dgx-b200", F8), 8.00),
    (Step("B200 nvfp4", "dgx-b200", F4), 11.23),
    (Step("GB200 NVL72 nvfp4", "gb200-nvl72", F4), 16.45),
)
# the ratio of the dense peaks each step changes (datasheets, as the device presets hold them): a step that
# changes only the device's peak cannot gain more than its peak ratio
PEAK_BOUND = {"B200 bf16": 2250 / 312, "B200 fp8": 2.0, "B200 nvfp4": 2.0}


def test_a100_to_b200_training_chain_direction_and_size() -> None:
    chain = training_chain("gpt3-175b", [s for s, _ in TRAINING], {"seq_len": 2048, "global_batch": 1536}, 1024)
    for prev, step, (_, expected) in zip(chain, chain[1:], TRAINING[1:], strict=False):
        assert step.speedup == pytest.approx(expected, rel=0.10), step.label
        gain = step.speedup / prev.speedup
        assert gain > 1.0, step.label  # every step is a speed-up
        if step.label in PEAK_BOUND:
            assert gain <= PEAK_BOUND[step.label] * 1.001, step.label
    # NVL72: the GB200's own peak is 10/9 of the B200's, the step gains more (a 72-GPU scale-up domain)
    assert chain[-1].speedup / chain[-2].speedup > 10 / 9 * 1.2
    # still short of Optimus's ~35x and of the dense FP4 peak over the A100's bf16 (10 / 0.312 = 32x)
    assert chain[-1].speedup < 10000 / 312 < 35


SERVING = (
    ((Step("A100 bf16", "dgx-a100", {**B16, "attention": "flash"}), {}), 1.0),
    ((Step("B200 bf16", "dgx-b200", {**B16, "attention": "flash3"}), {}), 2.80),
    ((Step("B200 fp8", "dgx-b200", {**F8, "attention": "flash3"}), {"weights": ["fp8"], "kv_cache": ["fp8"]}), 10.77),
    ((Step("B200 nvfp4", "dgx-b200", {"precision": "bf16", "block_format": "nvfp4", "attention": "flash3"}),
      {"kv_cache": ["fp8"]}), 20.07),
    ((Step("GB200 nvfp4", "gb200-nvl72", {"precision": "bf16", "block_format": "nvfp4", "attention": "flash3"}),
      {"kv_cache": ["fp8"]}), 21.39),
)


def test_a100_to_b200_serving_chain_under_a_latency_limit() -> None:
    w = {"kind": "inference", "batch": 1, "input_len": 1024, "output_len": 1024}
    chain = serving_chain("llama2-70b", [s for s, _ in SERVING], w, 8, 0.02)
    for step, (_, expected) in zip(chain, SERVING, strict=True):
        assert step.speedup == pytest.approx(expected, rel=0.10), step.label
        assert step.step_time_s <= 0.02
    assert all(b.speedup > a.speedup for a, b in itertools.pairwise(chain))
    # decode reads weights and cache: fp8 weights gain more than the 2x of fp8's peak under a tight TPOT
    assert chain[2].speedup / chain[1].speedup > 2.0


def test_op_boundedness_matches_the_estimators_kernel_times() -> None:
    a100 = load_device("a100-sxm4-80gb")
    ops = tech.op_boundedness("llama2-70b", a100, tokens=1, seq_len=4096, tp=8)
    from armillary.plan.arrays import ModelArrays
    from armillary.specs.loading import load_model
    from armillary.workload.transformer import layer_forward

    fw = layer_forward(ModelArrays.of(load_model("llama2-70b")), 1.0, 4096.0, 8.0, 0.0, 2.0)
    code = PRECISION.code(TrainingPrecision.BF16)
    for o in ops:
        op = getattr(fw, o.name)
        priced = float(np.asarray(kernel_times((op,), a100, code, sixteen_bit=o.name.startswith("attention")))[0])
        assert max(o.compute_s, o.memory_s) + a100.kernel_overhead == pytest.approx(priced, rel=1e-9), o.name
        assert o.memory_s == pytest.approx(float(stream_time(replace(op).bytes, a100)))
    bound = {o.name: o.bound for o in ops}
    assert all(bound[n] == "compute" for n in ("qkv", "out_proj", "mlp_in", "mlp_out"))  # prefill GEMMs
    assert all(bound[n] == "memory" for n in ("norms", "residuals", "activation"))
    decode = {o.name: o for o in tech.op_boundedness("llama2-70b", a100, tokens=1, tp=8, decode=True)}
    assert "attention_scores" not in decode
    assert all(decode[n].bound == "memory" and decode[n].intensity < 2 for n in ("qkv", "mlp_in"))  # batch 1
