"""The word embedding's gradient all-reduce between the first and the last pipeline stage (Megatron-Core
finalize_model_grads.py `_allreduce_word_embedding_grads`; estimate/embedding_sync.py): by hand for GPT-3 175B,
absent where Megatron skips it, a sweep's points equal to one configuration's, and simulated as estimated."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import armillary
from armillary.comm.collectives import all_reduce
from armillary.estimate import embedding_sync
from armillary.estimate.embedding_sync import embedding_pair
from armillary.estimate.result import ParallelDimension, StepEstimate
from armillary.estimate.training import estimate_training
from armillary.plan.arrays import ModelArrays, StrategyArrays, TrainingArrays
from armillary.plan.placement import Placement, place_groups
from armillary.specs.communication import Collective
from armillary.specs.loading import load_model, load_strategy, load_system, load_workload

GPT3 = load_model("gpt3-175b")
SYSTEM = load_system("dgx-a100", 64)  # 8 nodes of 8 A100s, one 200 Gb/s HDR NIC per GPU
WORK = load_workload({"seq_len": 2048, "global_batch": 64})


def _estimate(model=GPT3, **strategy: object) -> StepEstimate:
    st = {"tp": 8, "pp": 8, "micro_batch": 1, "attention": "flash", **strategy}
    result = armillary.estimate(model, SYSTEM, st, WORK)
    assert isinstance(result, StepEstimate)
    return result


def _embedding_calls(est: StepEstimate):
    return [c for c in est.communication
            if c.dimension is ParallelDimension.PP and c.operation is Collective.ALL_REDUCE and float(c.per_step) > 0]


def test_gpt3_175b_pp8_tp8_by_hand(monkeypatch):
    """tp 8 fills a node, so each of the 8 stages is a node and the first and last stage sit in two nodes: one
    all-reduce of the word embedding's fp32 main gradient, 50,257 x 12,288 / 8 x 4 B = 308,779,008 B, over 2 ranks
    on the scale-out dimension. A 2-rank ring sends 2 (2 - 1) / 2 = 1 message's worth per rank: at HDR's 25 GB/s x
    0.9 (the dgx-a100 preset) 13.72 ms, plus the ring's latency steps (tens of microseconds). Nothing hides it:
    the step is longer by exactly its time, in the exposed data-parallel part."""
    est = _estimate()
    (call,) = _embedding_calls(est)
    n = 50_257 * 12_288 / 8 * 4
    assert float(call.message_bytes) == n == 308_779_008
    assert float(call.per_step) == 1
    assert float(call.scale_out_bytes_each) == pytest.approx(n, rel=1e-12)
    assert float(call.scale_up_bytes_each) == 0
    assert float(call.time_each_s) == all_reduce(n, Placement((1.0, 2.0)), SYSTEM).time
    assert n / (25e9 * 0.9) == pytest.approx(0.013724, rel=1e-4)
    assert float(call.time_each_s) == pytest.approx(n / (25e9 * 0.9), rel=5e-3)
    assert float(call.time_each_s) > n / (25e9 * 0.9)
    # the same estimate without it (the mechanism switched off): the step and the DP part shorter by its time
    monkeypatch.setattr(embedding_sync, "embedding_synced", lambda *args: 0.0)
    without = _estimate(recompute="selective")  # (a configuration the estimator has not kept)
    again = _estimate(recompute="selective")
    monkeypatch.undo()
    with_ = _estimate(recompute="selective")
    assert not _embedding_calls(without) and not _embedding_calls(again)
    assert float(with_.breakdown.dp_exposed - without.breakdown.dp_exposed) == pytest.approx(
        float(call.time_each_s), rel=1e-9)
    assert float(with_.step_time_s - without.step_time_s) == pytest.approx(float(call.time_each_s), rel=1e-9)


def test_grad_reduce_in_bf16_halves_the_message():
    (fp32,) = _embedding_calls(_estimate(precision="bf16"))
    (bf16,) = _embedding_calls(_estimate(precision="bf16", grad_reduce_in_bf16=True))
    assert float(bf16.message_bytes) == float(fp32.message_bytes) / 2


def test_no_all_reduce_without_a_pipeline_or_a_second_copy():
    """None with one stage, with untied embeddings and no MTP (the last stage's LM head is its own), or with the
    embedding frozen (LoRA): Megatron-Core's condition (pp > 1 and tied or MTP) and a gradient to reduce."""
    assert _embedding_calls(_estimate())
    assert not _embedding_calls(_estimate(pp=1, tp=8))
    untied = GPT3.model_copy(update={"tied_embeddings": False})
    assert not _embedding_calls(_estimate(untied))
    lora = armillary.estimate(GPT3, SYSTEM, {"tp": 8, "pp": 8, "micro_batch": 1, "attention": "flash"},
                              {"seq_len": 2048, "global_batch": 64, "finetune": {"rank": 16}})
    assert not _embedding_calls(lora)


def test_mtp_copies_the_embedding_to_the_last_stage():
    """DeepSeek-V3 (untied) trains its MTP module on the last stage, which holds a copy of the embedding:
    with pp > 1 and MTP trained, the copy's gradient is all-reduced with the first stage's; without, none."""
    system = load_system("dgx-b200", 64)
    st = {"tp": 1, "pp": 4, "ep": 8, "micro_batch": 1}
    runs = [armillary.estimate("deepseek-v3", system, st, {"seq_len": 4096, "global_batch": 256, "mtp": mtp},
                               gpus=64) for mtp in (True, False)]
    (call,) = _embedding_calls(runs[0])
    assert float(call.message_bytes) == 129_280 * 7_168 * 4  # tp 1, fp32 main gradients
    assert not _embedding_calls(runs[1])


def test_the_pair_sits_where_the_pipeline_ends_are():
    """The first and last stage differ on the outermost dimension the pipeline spans: across nodes when the
    stages are a node apart, inside one node when the whole pipeline fits in it (pp 4 x tp 2 on 8 GPUs), and on
    the outer dimension for a pipeline of two ranks a node and more apart."""
    sizes = (8, 8)
    assert embedding_pair(place_groups(8.0, 1.0, 8.0, sizes).pp).spans == (1.0, 2.0)
    assert embedding_pair(place_groups(2.0, 1.0, 4.0, sizes).pp).spans == (2.0, 1.0)
    assert embedding_pair(place_groups(4.0, 4.0, 2.0, sizes).pp).spans == (1.0, 2.0)
    swept = embedding_pair(place_groups(np.array([8.0, 2.0]), 1.0, np.array([8.0, 4.0]), sizes).pp)
    assert [list(s) for s in swept.spans] == [[1.0, 2.0], [2.0, 1.0]]


def test_a_sweeps_points_are_one_configurations():
    """Over pp (1, 2, 8) and the gradient reduction's precision: each point of the sweep is the estimate of that
    configuration alone, with and without the all-reduce."""
    m, w = ModelArrays.of(GPT3), TrainingArrays.of(WORK)
    base = StrategyArrays.of(load_strategy({"attention": "flash", "tp": 8, "pp": 8, "precision": "bf16"}), 1)
    pp, bf16 = np.array([1.0, 2.0, 8.0]).reshape(3, 1), np.array([0.0, 1.0]).reshape(1, 2)
    with np.errstate(all="ignore"):
        sweep = estimate_training(m, dataclasses.replace(base, pp=pp, grad_reduce_bf16=bf16), w, SYSTEM)
        for i in range(3):
            for j in range(2):
                one = estimate_training(m, dataclasses.replace(base, pp=float(pp[i, 0]),
                                                               grad_reduce_bf16=float(bf16[0, j])), w, SYSTEM)
                for name in ("step_time_s",):
                    assert float(np.broadcast_to(sweep.step_time_s, (3, 2))[i, j]) == pytest.approx(
                        float(getattr(one, name)), rel=1e-12)
                dp = np.broadcast_to(sweep.breakdown.dp_exposed, (3, 2))[i, j]
                assert float(dp) == pytest.approx(float(one.breakdown.dp_exposed), rel=1e-12, abs=1e-15)


def test_the_simulator_runs_it_between_the_first_and_last_stage():
    """The simulated step has the all-reduce between stage 0 and stage pp - 1, after their last backward and
    before their optimizer steps, and agrees with the estimate (symmetric ranks and every rank alike)."""
    st = {"tp": 8, "pp": 4, "micro_batch": 1, "attention": "flash", "zero": 1}
    work = {"seq_len": 2048, "global_batch": 16}
    system = load_system("dgx-a100", 32)
    r = armillary.simulate(GPT3, system, st, work)
    (call,) = _embedding_calls(r.estimate)
    tasks = [t for t in r.graph.tasks if t.name == "embedding grad all-reduce"]
    assert [t.ranks for t in tasks] == [(0, 3)]
    assert tasks[0].duration_ns == round(float(call.time_each_s) * 1e9)
    assert abs(r.difference) < 0.02
    every = armillary.simulate(GPT3, system, st, work, symmetric=False)
    assert sum(t.name == "embedding grad all-reduce" for t in every.graph.tasks) == 8  # one per tp rank
    assert every.step_time_s == pytest.approx(r.step_time_s, rel=1e-9)


def test_the_kept_cost_reads_only_its_listed_fields():
    """`embedding_sync_cost` on a recording strategy point reads only EMBEDDING_SYNC_FIELDS (the key under which one
    configuration's cost is kept per system) and gives what the point gives."""
    m, w = ModelArrays.of(GPT3), TrainingArrays.of(WORK)
    for strategy in ({"tp": 8, "pp": 8}, {"tp": 4, "pp": 2, "precision": "bf16", "grad_reduce_in_bf16": True}):
        st = StrategyArrays.of(load_strategy(strategy), 1)
        pp_group = place_groups(st.tp, 1.0, st.pp, SYSTEM.sizes).pp
        point = _Reading(st)
        got = embedding_sync.embedding_sync_cost(m, point, w, 0.0, pp_group, SYSTEM)  # type: ignore[arg-type]
        assert repr(got) == repr(embedding_sync.embedding_sync_cost(m, st, w, 0.0, pp_group, SYSTEM))
        assert point.read <= set(embedding_sync.EMBEDDING_SYNC_FIELDS), point.read
        assert {"pp", "tp"} <= point.read


class _Reading:
    """A strategy point that notes the fields read from it."""

    def __init__(self, point: StrategyArrays) -> None:
        self.__dict__["point"], self.__dict__["read"] = point, set()

    def __getattr__(self, name: str) -> object:
        self.__dict__["read"].add(name)
        return getattr(self.__dict__["point"], name)
