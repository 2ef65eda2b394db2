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
])
def test_every_batch_of_a_block_matches_its_own_estimate(preset: str, strategy: dict[str, object]) -> None:
    model, system = load_model(preset), load_system("dgx-a100", 8)
    s = Strategy.model_validate(strategy)
    w = Inference(input_len=300, output_len=40, weights="fp8", kv_cache={"precision": "fp8"})
    batch = np.array([1.0, 3.0, 64.0, 5000.0])
    fits, ttft, tpot, per_device = _block(ModelArrays.of(model), system, s, w, batch)
    for k, b in enumerate(batch):
        r = estimate_inference_run(model, system, s, w.model_copy(update={"batch": int(b)}))
        assert bool(fits[k]) == r.feasible
        assert float(ttft[k]) == pytest.approx(r.ttft_s, rel=1e-9)
        assert float(tpot[k]) == pytest.approx(r.tpot_s, rel=1e-9)
        assert float(per_device[k]) == pytest.approx(r.output_tokens_per_s_per_device, rel=1e-9)
    assert not fits[-1]  # 5000 sequences of 340 tokens overflow the cache


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
