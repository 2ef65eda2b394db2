"""Strategy search: the chunked array search finds what estimating every point one by one finds."""

import itertools
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from armillary.api import estimate
from armillary.errors import SpecError
from armillary.estimate.feasibility import training_checks
from armillary.plan.arrays import ModelArrays, StrategyArrays, TrainingArrays
from armillary.plan.layout import data_parallel
from armillary.search.executors import process_pool
from armillary.search.run import Objective, search
from armillary.search.space import (
    StrategySpace,
    memory_floor,
    point_strategy,
    resolve_axes,
    time_floor,
)
from armillary.specs.loading import load_model, load_strategy, load_system, load_workload
from armillary.specs.strategy import Attention, RankOrder, Recompute, ZeroStage

MODEL, GPUS = load_model("llama2-7b"), 16
SYSTEM = load_system("dgx-a100", GPUS)
BASE = load_strategy({"attention": "flash"})


def brute_force(space, workload, objective, k, model=MODEL, system=SYSTEM):
    """Every point of the unpruned space through `estimate`, one at a time: (value, strategy) of the k
    best distinct values, and the count of points whose degrees divide."""
    axes = resolve_axes(space, model, system.devices, system.devices_per_node)
    m, w = ModelArrays.of(model), TrainingArrays.of(workload)
    scored, valid = [], 0
    for i in range(axes.size):
        try:
            strategy = point_strategy(BASE, axes.point(i))
        except ValueError:  # a strategy the spec refuses (e.g. sequence parallelism without tp)
            continue
        checks = training_checks(m, StrategyArrays.of(strategy, data_parallel(strategy, system)), w, system.devices)
        if not all(bool(c.ok) for c in checks):
            continue
        valid += 1
        r = estimate(model, system, strategy, workload)
        if r.feasible:
            scored.append((float(r.step_time_s if objective is Objective.TIME else r.memory_hbm.total), i,
                           strategy))
    distinct = {}  # equal values: points that differ only in axes that change nothing; the first stands
    for v, _i, st in sorted(scored, key=lambda x: x[:2]):
        distinct.setdefault(v, st)
    return list(distinct.items())[:k], valid


@settings(max_examples=6, deadline=None)
@given(hs.sampled_from([(1, 2, 4), (2, 8), (1, 4, 8)]), hs.sampled_from([(1, 2), (1, 4), (2,)]),
       hs.sampled_from([(1,), (1, 2)]), hs.sampled_from([(1, 2), (4,)]),
       hs.sampled_from([((Recompute.NONE, Recompute.FULL), ()), ((Recompute.SELECTIVE,), ()),
                        ((Recompute.NONE, Recompute.FULL), (1, 4))]),
       hs.sampled_from([(ZeroStage.NONE, ZeroStage.PARAMETERS), (ZeroStage.OPTIMIZER,)]),
       hs.sampled_from([Objective.TIME, Objective.MEMORY]), hs.sampled_from([1024, 2048]))
def test_top_k_equals_brute_force(tp, pp, vpp, mb, recompute, zero, objective, seq):
    (modes, layers) = recompute  # block recomputation of some layers rides on the recompute axis
    space = StrategySpace(tp=tp, pp=pp, vpp=vpp, micro_batch=mb, recompute=modes, recompute_layers=layers,
                          zero=zero, overlap_tp=(False,), overlap_param_gather=(True,))
    workload = load_workload({"seq_len": seq, "global_batch": 32})
    expected, valid = brute_force(space, workload, objective, 5)
    result = search(MODEL, SYSTEM, workload, BASE, space, objective, top_k=5, chunk=7)
    assert result.evaluated <= valid and result.pruned == result.points - result.evaluated
    assert [c.strategy for c in result.top] == [st for _, st in expected]
    got = [c.step_time_s if objective is Objective.TIME else c.memory_bytes for c in result.top]
    np.testing.assert_allclose(got, [v for v, _ in expected], rtol=1e-9)


def test_memory_floor_is_a_lower_bound_and_pruning_keeps_the_optimum():
    model, system = load_model("llama2-13b"), load_system("dgx-a100-40gb", 8)
    workload = load_workload({"seq_len": 2048, "global_batch": 16})
    space = StrategySpace(tp=(1, 2, 4, 8), pp=(1, 2, 4), vpp=(1,), micro_batch=(1,), sequence_parallel=(False,),
                          recompute=(Recompute.FULL,), zero=(ZeroStage.NONE, ZeroStage.OPTIMIZER),
                          overlap_dp=(True,), overlap_tp=(False,), overlap_param_gather=(True,))
    pruned_axes = resolve_axes(space, model, 8, 8, BASE, system.device.hbm.capacity)
    assert pruned_axes.size < resolve_axes(space, model, 8, 8).size  # tp1 / tp2 x pp1 cannot hold the states
    axes = resolve_axes(space, model, 8, 8)
    for i in range(axes.size):  # the floor never exceeds what the estimator needs
        values = axes.point(i)
        strategy = point_strategy(BASE, values)
        r = estimate(model, system, strategy, workload)
        floor = memory_floor(model, BASE, space, values["tp"], values["pp"], values["cp"], 8)
        assert floor <= float(r.memory_hbm.total) * (1 + 1e-12)
    expected, _ = brute_force(space, workload, Objective.TIME, 3, model, system)
    result = search(model, system, workload, BASE, space, top_k=3)
    assert [c.strategy for c in result.top] == [st for _, st in expected]


@pytest.mark.parametrize("target", [1, 7, 100, 1000, 10**9])
def test_blocks_cover_the_space_and_decode_as_outer_products(target):
    axes = resolve_axes(StrategySpace(cp=(1, 2, 4), micro_batch=(1, 2, 4, 8, 16)), load_model("gpt3-175b"), 64, 8)
    assert axes.pruned > 0 and axes.size < axes.size + axes.pruned
    ranges = list(axes.blocks(target))
    assert ranges[0][0] == 0 and ranges[-1][1] == axes.size
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
    assert max(b - a for a, b in ranges) <= max(target, 4)  # at least one step of the split axis
    for a, b in (*ranges[:3], *ranges[-2:], ranges[len(ranges) // 2]):
        block = axes.block(a, b)
        shape = np.broadcast_shapes(*(np.shape(v) for v in block.values()))
        points = axes.decode(a, b)
        for name, values in points.items():
            np.testing.assert_array_equal(np.broadcast_to(block[name], shape).ravel(), values)


def test_process_pool_gives_the_serial_answer():
    workload = load_workload({"seq_len": 2048, "global_batch": 64})
    space = StrategySpace(tp=(1, 2, 4, 8), micro_batch=(1, 2))
    serial = search(MODEL, SYSTEM, workload, BASE, space, top_k=8, chunk=500)
    pooled = search(MODEL, SYSTEM, workload, BASE, space, top_k=8, chunk=500, executor=process_pool(2))
    assert [c.index for c in pooled.top] == [c.index for c in serial.top]
    assert (pooled.evaluated, pooled.feasible) == (serial.evaluated, serial.feasible)


def test_dask_local_cluster_gives_the_serial_answer():
    from armillary.search.executors import dask_cluster

    workload = load_workload({"seq_len": 2048, "global_batch": 64})
    space = StrategySpace(tp=(1, 2, 4, 8), micro_batch=(1, 2))
    serial = search(MODEL, SYSTEM, workload, BASE, space, top_k=8, chunk=500)
    dask = search(MODEL, SYSTEM, workload, BASE, space, top_k=8, chunk=500, executor=dask_cluster("local", 2))
    assert [c.index for c in dask.top] == [c.index for c in serial.top]
    assert [c.step_time_s for c in dask.top] == [c.step_time_s for c in serial.top]
    assert (dask.evaluated, dask.feasible) == (serial.evaluated, serial.feasible)


def test_an_interrupted_search_resumes_from_its_checkpoint(tmp_path):
    workload = load_workload({"seq_len": 2048, "global_batch": 64})
    space = StrategySpace(tp=(1, 2, 4, 8), micro_batch=(1, 2))
    whole = search(MODEL, SYSTEM, workload, BASE, space, top_k=6, chunk=300)
    checkpoint = tmp_path / "search.ckpt"

    def stop_after_two(fn, waves):
        for n, (a, b) in enumerate(r for wave in waves for r in wave):
            if n == 2:
                raise KeyboardInterrupt
            yield fn(a, b)

    with pytest.raises(KeyboardInterrupt):
        search(MODEL, SYSTEM, workload, BASE, space, top_k=6, chunk=300, executor=stop_after_two,
               checkpoint=checkpoint)
    with checkpoint.open("a") as f:
        f.write('{"start": 9')  # a block cut mid-line by the interruption
    ran = []

    def counting(fn, waves):
        for wave in waves:
            ran.extend(wave)
            yield from (fn(a, b) for a, b in wave)

    resumed = search(MODEL, SYSTEM, workload, BASE, space, top_k=6, chunk=300, executor=counting,
                     checkpoint=checkpoint)
    assert [c.index for c in resumed.top] == [c.index for c in whole.top]
    kept = [tuple(json.loads(line)[k] for k in ("start", "stop")) for line in checkpoint.read_text().splitlines()[1:3]]
    assert len(kept) == 2 and not set(kept) & set(ran)  # the two finished blocks did not run again
    # (what the bound skips may differ: the resumed search starts from the kept blocks' top-k)
    assert len(ran) + resumed.bounded // 300 <= len(list(resolve_axes(space, MODEL, GPUS, 8).blocks(300))) - 2
    with pytest.raises(SpecError, match="another search"):
        search(MODEL, SYSTEM, workload, BASE, space, top_k=5, chunk=300, checkpoint=checkpoint)


def test_the_best_gpt3_strategy_on_64_a100s_is_feasible_and_explained():
    result = search(load_model("gpt3-175b"), load_system("dgx-a100", 64),
                    load_workload({"seq_len": 2048, "global_batch": 64}), BASE, top_k=3)
    assert result.points > 100_000 and result.pruned > 0 and result.feasible > 0
    best = result.top[0]
    assert best.strategy.tp * best.strategy.pp * best.strategy.cp <= 64
    assert best.step_time_s <= result.top[-1].step_time_s
    assert best.memory_bytes <= load_system("dgx-a100", 64).device.hbm.capacity


@settings(max_examples=8, deadline=None)
@given(hs.sampled_from(["llama2-7b", "mixtral-8x7b", "gpt3-175b"]), hs.sampled_from([(1, 2), (2, 4), (1, 8)]),
       hs.sampled_from([1, 2, 4]), hs.sampled_from([128, 512]), hs.sampled_from([1, 2]),
       hs.sampled_from(["tp-cp-dp-pp", "tp-cp-pp-dp"]), hs.integers(0, 10**6))
def test_time_floor_never_exceeds_the_estimate(name, mb_choices, tp, batch, vpp, order, seed):
    model = load_model(name)
    rng = np.random.default_rng(seed)
    pp = int(rng.choice([p for p in (1, 2, 4, 8) if model.layers % (p * vpp) == 0 and (vpp == 1 or p > 1)]))
    system = load_system("dgx-h100", 64)
    workload = load_workload({"seq_len": 2048, "global_batch": batch})
    space = StrategySpace(micro_batch=mb_choices)
    dp = 64 // (tp * pp)
    mb = int(rng.choice(mb_choices))
    strategy = load_strategy({"tp": tp, "pp": pp, "vpp": vpp, "micro_batch": mb, "attention": "flash",
                              "recompute": str(rng.choice(["none", "selective", "full"])), "rank_order": order,
                              "precision": str(rng.choice(["bf16", "fp8"])), "sequence_parallel": tp > 1})
    if batch % (dp * mb):
        return
    r = estimate(model, system, strategy, workload)
    assert time_floor(model, system, workload, space, pp, vpp, dp) <= float(r.step_time_s) * (1 + 1e-12)


def test_skipping_by_the_time_bound_keeps_the_brute_force_answer():
    """A space whose pipeline-heavy layouts are bounded out: the search skips them and still finds the
    brute-force top-k."""
    space = StrategySpace(tp=(1, 2, 4, 8), pp=(1, 2, 4, 8, 16), vpp=(1,), micro_batch=(1, 2),
                          recompute=(Recompute.NONE,), zero=(ZeroStage.OPTIMIZER,), overlap_tp=(False,),
                          overlap_param_gather=(True,))
    workload = load_workload({"seq_len": 2048, "global_batch": 16})
    expected, _ = brute_force(space, workload, Objective.TIME, 3)
    result = search(MODEL, SYSTEM, workload, BASE, space, top_k=3, chunk=4)
    assert result.bounded > 0
    assert [c.strategy for c in result.top] == [st for _, st in expected]


def test_space_values_are_validated():
    with pytest.raises(ValueError, match="recompute"):
        StrategySpace(recompute=("sometimes",))


def test_search_cli(tmp_path):
    import json

    from typer.testing import CliRunner

    from armillary.cli import app

    (tmp_path / "space.yaml").write_text("tp: [2, 4]\npp: [1, 2]\nmicro_batch: [1]\n")
    args = ["search", "--model", "llama2-7b", "--system", "dgx-a100", "--gpus", "16", "--global-batch", "32",
            "--strategies", str(tmp_path / "space.yaml"), "--top", "3"]
    out = CliRunner().invoke(app, [*args, "--json", "--csv", str(tmp_path / "top.csv")])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert len(data["top"]) == 3 and data["points"] == data["evaluated"] + data["pruned"]
    assert {r["tp"] for r in data["top"]} <= {2, 4} and data["top"][0]["step_time_s"] <= data["top"][2]["step_time_s"]
    assert len((tmp_path / "top.csv").read_text().splitlines()) == 4
    import pyarrow.parquet as pq

    assert CliRunner().invoke(app, [*args, "--save", str(tmp_path / "top.parquet")]).exit_code == 0
    table = pq.read_table(tmp_path / "top.parquet").to_pylist()
    assert [r["tp"] for r in table] == [r["tp"] for r in data["top"]]
    assert [r["step_time_s"] for r in table] == [r["step_time_s"] for r in data["top"]]
    wrong = CliRunner().invoke(app, [*args, "--save", str(tmp_path / "top.xlsx")])
    assert wrong.exit_code == 2 and ".parquet" in wrong.output
    bad = CliRunner().invoke(app, [*args, "--objective", "fast"])
    assert bad.exit_code == 2 and "time or memory" in bad.output


def test_inference_search_maximizes_throughput_within_the_tpot_limit():
    from armillary.search.inference import InferenceSpace, search_inference
    from armillary.specs.workload import Inference

    model, system = load_model("llama2-7b"), load_system("dgx-a100", 8)
    workload = Inference(input_len=512, output_len=128)
    space = InferenceSpace(tp=(1, 2, 4), batch=(1, 8, 64, 256), tpot_limit_s=0.02)
    result = search_inference(model, system, workload, BASE, space, top_k=50)
    assert result.within_limits == len(result.top) > 0
    best = result.top[0].estimate
    for tp in (1, 2, 4):  # brute force: nothing within the limit beats the first
        for batch in (1, 8, 64, 256):
            r = estimate(model, system, {"attention": "flash", "tp": tp}, workload.model_copy(update={"batch": batch}))
            if r.feasible and r.tpot_s <= 0.02:
                assert r.output_tokens_per_s_per_device <= best.output_tokens_per_s_per_device
    assert all(c.estimate.tpot_s <= 0.02 for c in result.top)
    tighter = search_inference(model, system, workload, BASE, space.model_copy(update={"tpot_limit_s": 0.01}))
    assert tighter.top[0].estimate.output_tokens_per_s_per_device <= best.output_tokens_per_s_per_device


def test_the_search_tries_recomputing_only_some_layers():
    """Llama 2 7B at 4K tokens on 16 A100s, tp 1, pp 1: nothing fits without recomputation; re-running the
    first N layers of each chunk fits and beats re-running all, and the search finds it when asked to try N."""
    workload = load_workload({"seq_len": 4096, "global_batch": 64})
    space = StrategySpace(tp=(1,), pp=(1,), vpp=(1,), micro_batch=(4,), recompute=(Recompute.NONE, Recompute.FULL),
                          recompute_layers=(4, 8, 16, 24), zero=(ZeroStage.OPTIMIZER,), overlap_tp=(False,))
    best = search(MODEL, SYSTEM, workload, BASE, space, Objective.TIME, top_k=3).top[0].strategy
    whole = search(MODEL, SYSTEM, workload, BASE, space.model_copy(update={"recompute_layers": ()}),
                   Objective.TIME, top_k=1).top[0]
    assert best.recompute is Recompute.FULL and best.recompute_layers is not None
    assert estimate(MODEL, SYSTEM, best, workload).step_time_s < whole.step_time_s


def test_the_search_over_expert_parallel_exchange_equals_brute_force():
    """EP degree, all-to-all overlap and deduplicated dispatch as axes: the top points equal estimating every
    point of the space one by one (Mixtral 8x7B on 32 H100s, EP across nodes)."""
    model, system = load_model("mixtral-8x7b"), load_system("dgx-h100", 32)
    workload = load_workload({"seq_len": 4096, "global_batch": 64})
    space = StrategySpace(tp=(2, 4), pp=(1, 2), vpp=(1,), micro_batch=(1,), sequence_parallel=(True,),
                          recompute=(Recompute.FULL,), zero=(ZeroStage.OPTIMIZER,), overlap_tp=(False,),
                          overlap_param_gather=(True,), ep=(1, 4, 8), overlap_ep=(False, True),
                          dispatch_dedup=(False, True), rank_order=(RankOrder.DP_INNER,),
                          attention=(Attention.FLASH3,))
    expected, _ = brute_force(space, workload, Objective.TIME, 4, model, system)
    result = search(model, system, workload, BASE, space, Objective.TIME, top_k=4, chunk=5)
    assert [c.strategy for c in result.top] == [st for _, st in expected]
    np.testing.assert_allclose([c.step_time_s for c in result.top], [v for v, _ in expected], rtol=1e-9)
    assert result.top[0].strategy.routing.dispatch_dedup or result.top[0].strategy.overlap.ep_comm


def test_the_search_tries_offloading_only_some_layers():
    """The activation-offload axis is compound like recompute: none, every layer, or the first N of each
    chunk. Llama 2 7B at 4K on 16 A100s, tp 1, pp 1: nothing fits without offload or recomputation; the
    first 16 of the 32 layers fit with no stall, where offloading all stalls on PCIe (5.4 vs 3.8 s). The top
    points equal estimating every point one by one."""
    workload = load_workload({"seq_len": 4096, "global_batch": 64})
    space = StrategySpace(tp=(1, 2), pp=(1,), vpp=(1,), micro_batch=(4,), recompute=(Recompute.NONE,),
                          zero=(ZeroStage.OPTIMIZER,), overlap_dp=(True,), overlap_tp=(False,),
                          overlap_param_gather=(True,), rank_order=(RankOrder.DP_INNER,),
                          offload_activations=(False, True), offload_activation_layers=(8, 16, 24))
    assert resolve_axes(space, MODEL, GPUS, 8).size == 2 * 2 * 5  # layouts x SP x (none, all, 8, 16, 24)
    expected, _ = brute_force(space, workload, Objective.TIME, 5)
    result = search(MODEL, SYSTEM, workload, BASE, space, Objective.TIME, top_k=5, chunk=3)
    assert [c.strategy for c in result.top] == [st for _, st in expected]
    best = min((c for c in result.top if c.strategy.tp == 1), key=lambda c: c.step_time_s)
    assert best.strategy.offload.activation_layers == 16
