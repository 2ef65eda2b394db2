"""Where an engine's memory share puts the activations: vLLM's gpu_memory_utilization holds the weights, the
profiled activations and the KV cache (Worker.determine_available_memory); SGLang's mem_fraction_static holds the
weights and the KV pool only (ModelRunner.profile_max_num_token: rest = memory available after loading the
weights - total x (1 - share), before a forward pass), its activations live in the (1 - share) left."""

import pytest

from armillary.estimate.inference import replica_model
from armillary.estimate.inference_memory import inference_memory, kv_budget
from armillary.plan.arrays import ModelArrays
from armillary.serving.engine import load_engine
from armillary.serving.launch import with_engine
from armillary.specs.loading import load_model, load_system
from armillary.specs.strategy import Strategy
from armillary.specs.workload import Inference


def _replica(engine: str) -> tuple[object, Inference, object]:
    system = load_system("dgx-h100", 8)
    w = Inference.model_validate({"kind": "inference", "input_len": 1000, "output_len": 1000})
    w, _ = with_engine(w, load_engine(engine))
    r = replica_model(ModelArrays.of(load_model("llama2-70b")), Strategy.model_validate({"tp": 8}), w, system)
    return r, w, inference_memory(r, w, float(w.serving.max_batch), float(w.serving.max_batched_tokens))


def test_sglang_pool_is_its_share_less_the_weights_alone() -> None:
    r, w, memory = _replica("sglang-0.4")
    capacity = float(r.system.device.hbm.capacity)
    free, budget = kv_budget(r, w, memory, of_total=True, activations_outside=True)
    assert float(memory.activations) > 0
    assert float(budget) == pytest.approx(0.81 * capacity - float(memory.weights))
    assert float(free) == pytest.approx(capacity - float(memory.weights) - float(memory.activations))
    # the share counted as vLLM counts it would leave the activations' bytes fewer
    _, less = kv_budget(r, w, memory, of_total=True)
    assert float(budget) - float(less) == pytest.approx(float(memory.activations))


def test_the_pool_never_takes_the_activations_room() -> None:
    r, w, memory = _replica("sglang-0.4")
    w_all = w.model_copy(update={"kv_cache": w.kv_cache.model_copy(update={"memory_fraction": 1.0})})
    free, budget = kv_budget(r, w_all, memory, of_total=True, activations_outside=True)
    assert float(budget) == pytest.approx(float(free))


def test_which_engines_keep_the_activations_outside_their_share() -> None:
    assert load_engine("sglang-0.4").activations_outside_share and load_engine("sglang-0.5").activations_outside_share
    assert not load_engine("vllm-0.8").activations_outside_share
    assert not load_engine("tensorrt-llm-1.0").activations_outside_share
