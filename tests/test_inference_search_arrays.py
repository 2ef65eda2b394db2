"""The array serving search agrees point by point with the scalar estimate it vectorizes."""

from __future__ import annotations

import numpy as np
import pytest

from armillary.estimate.run import estimate_inference_run
from armillary.plan.arrays import ModelArrays
from armillary.search.inference import InferenceSpace, _block, search_inference
from armillary.specs.loading import load_model, load_system
from armillary.specs.strategy import Strategy
from armillary.specs.workload import Inference


@pytest.mark.parametrize(("preset", "strategy"), [
    ("llama2-7b", {"tp": 2, "pp": 2, "attention": "flash"}),
    ("mixtral-8x7b", {"tp": 4, "ep": 2, "expert_tp": 2, "attention": "flash"}),
    ("mixtral-8x7b", {"tp": 8, "ep": 8, "expert_tp": 1, "attention_dp": 4, "attention": "flash"}),
])
def test_every_batch_of_a_block_matches_its_own_estimate(preset: str, strategy: dict[str, object]) -> None:
    model, system = load_model(preset), load_system("dgx-a100", 8)
    s = Strategy.model_validate(strategy)
    w = Inference(input_len=300, output_len=40, weights="fp8", kv_cache={"precision": "fp8"})
    batch = np.array([4.0, 12.0, 64.0, 20000.0])  # multiples of the attention groups
    fits, ttft, tpot, per_device, prefill = _block(ModelArrays.of(model), system, s, w, batch, 0.0)
    assert prefill == 0
    for k, b in enumerate(batch):
        r = estimate_inference_run(model, system, s, w.model_copy(update={"batch": int(b)}))
        assert bool(fits[k]) == r.feasible
        assert float(ttft[k]) == pytest.approx(r.ttft_s, rel=1e-9)
        assert float(tpot[k]) == pytest.approx(r.tpot_s, rel=1e-9)
        assert float(per_device[k]) == pytest.approx(r.output_tokens_per_s_per_device, rel=1e-9)
    assert not fits[-1]  # 20000 sequences of 340 tokens overflow the cache


def test_search_over_ep_and_kv_precision_counts_every_point() -> None:
    model, system = load_model("mixtral-8x7b"), load_system("dgx-a100", 8)
    space = InferenceSpace(tp=(2, 4, 8), ep=(1, 2), batch=(1, 16, 128), weights=(None, "fp8"),
                           kv_cache=(None, "fp8"), tpot_limit_s=0.05)
    result = search_inference(model, system, Inference(input_len=256, output_len=64), Strategy(attention="flash"),
                              space, top_k=3)
    assert result.points == 3 * 2 * 3 * 2 * 2
    assert 0 < result.within_limits <= result.feasible <= result.points
    rates = [c.estimate.output_tokens_per_s_per_device for c in result.top]
    assert rates == sorted(rates, reverse=True) and all(c.estimate.tpot_s <= 0.05 for c in result.top)


def test_disaggregated_pools_by_hand() -> None:
    # Llama 2 7B on 16 A100 at tp 2: 8 replicas; a quarter prefill (2), six decode. The pools' request rates
    # are 2 b / prefill(b) and 6 b / decode(b), the slower paces the system; TTFT adds the cache's handover
    from armillary.estimate.inference import replica_model
    from armillary.estimate.inference_phases import kv_handover_time
    from armillary.search.inference import split_replicas

    model, system = load_model("llama2-7b"), load_system("dgx-a100", 16)
    s = Strategy.model_validate({"tp": 2, "attention": "flash"})
    w = Inference(input_len=2000, output_len=200)
    batch = np.array([1.0, 8.0, 64.0])
    m = ModelArrays.of(model)
    ttft0, tpot0 = _block(m, system, s, w, batch, 0.0)[1:3]
    _, ttft, tpot, per_device, prefill = _block(m, system, s, w, batch, 0.25)
    assert prefill == 2 == split_replicas(8, 0.25) and split_replicas(8, 0.01) == 1 and split_replicas(8, 0.0) == 0
    r = replica_model(m, s, w, system)
    for k, b in enumerate(batch):
        one = estimate_inference_run(model, system, s, w.model_copy(update={"batch": int(b)}))
        decode_s = one.tpot_s * (w.output_len - 1)
        rate = min(2 * b / one.ttft_s, 6 * b / decode_s)
        assert float(per_device[k]) == pytest.approx(rate * w.output_len / 16, rel=1e-9)
        assert float(ttft[k]) == pytest.approx(one.ttft_s + float(kv_handover_time(r, b * 2000.0)), rel=1e-9)
        assert float(tpot[k]) == pytest.approx(float(tpot0[k]))
    assert (ttft > ttft0).all()  # the handover is not free
    # a split that leaves no decode replica does not fit
    assert not _block(m, system, s, w, batch, 0.99)[0].any()


def test_search_picks_a_split_when_prefill_stalls_break_the_tpot_limit() -> None:
    # a stream of long prompts: a colocated replica prefills between its decode steps, so its TPOT is
    # (prefill + decode) / (out - 1); under a 40 ms limit only replicas that decode alone qualify
    model, system = load_model("llama2-7b"), load_system("dgx-a100", 16)
    space = InferenceSpace(tp=(2,), batch=(8,), prefill_share=(0.0, 0.25, 0.5, 0.75), continuous=True,
                           tpot_limit_s=0.04)
    w = Inference(input_len=8000, output_len=64)
    result = search_inference(model, system, w, Strategy(attention="flash"), space, top_k=8)
    assert result.points == 4 and result.top and all(c.prefill_replicas > 0 for c in result.top)
    best = result.top[0]
    assert best.prefill_replicas == 6  # decode is the fast phase: 2 decode replicas keep up with 6 prefilling
    static = search_inference(model, system, w, Strategy(attention="flash"),
                              space.model_copy(update={"continuous": False}), top_k=8)
    colocated = [c for c in static.top if c.prefill_replicas == 0]
    assert colocated and colocated[0].tpot_s < 0.04  # one static batch decodes without stalls
    for c in colocated:  # without a split the ranked figures are the estimate's own
        assert c.output_tokens_per_s_per_device == pytest.approx(float(c.estimate.output_tokens_per_s_per_device))


def test_attention_dp_axis_counts_and_ranks_its_points() -> None:
    # Mixtral on 8 A100 at tp 8: attention_dp 8 needs ep = 8 (experts over all ranks); attention_dp 2 with
    # ep 8 too; a batch that does not split over the groups does not fit
    model, system = load_model("mixtral-8x7b"), load_system("dgx-a100", 8)
    space = InferenceSpace(tp=(8,), ep=(8,), attention_dp=(1, 2, 8), batch=(4, 64, 256), tpot_limit_s=0.2)
    result = search_inference(model, system, Inference(input_len=512, output_len=128), Strategy(attention="flash"),
                              space, top_k=9)
    assert result.points == 9
    assert {c.strategy.attention_dp for c in result.top} == {1, 2, 8}
    assert not any(c.strategy.attention_dp == 8 and c.batch == 4 for c in result.top)  # 4 over 8 groups
    for c in result.top:
        assert c.output_tokens_per_s_per_device == pytest.approx(float(c.estimate.output_tokens_per_s_per_device))
