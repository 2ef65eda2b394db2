"""Where an engine's memory share puts the activations: vLLM's gpu_memory_utilization holds the weights, the
profiled activations and the KV cache (Worker.determine_available_memory); SGLang's mem_fraction_static holds the
weights and the KV pool only (ModelRunner.profile_max_num_token: rest = memory available after loading the
weights - total x (1 - share), before a forward pass), its activations live in the (1 - share) left."""

import pytest

from armillary.estimate.inference import replica_model
from armillary.estimate.inference_memory import inference_memory, kv_budget
from armillary.plan.arrays import ModelArrays
from armillary.presets.registry import preset_names
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


# SGLang's mem_fraction_static when unset, read per release range with the run's tp x pp and DP attention
# (DeviceDefaults.memory_share; each profile's sources say which wheels): the rule, not the tp-8 numbers alone
@pytest.mark.parametrize(("engine", "system", "tp", "pp", "groups", "share", "graphs"), [
    # 0.4.0-0.4.5.post2: 0.79 / 0.81 / 0.85 / 0.87 / 0.88 at tp >= 16 / 8 / 4 / 2 / 1, every GPU
    ("sglang-0.4", "dgx-h100", 1, 1, 1, 0.88, 160), ("sglang-0.4", "dgx-h100", 2, 1, 1, 0.87, 160),
    ("sglang-0.4", "dgx-h100", 4, 1, 1, 0.85, 160), ("sglang-0.4", "hgx-h200", 16, 1, 1, 0.79, 160),
    ("sglang-0.4.4.post2", "hgx-h200", 1, 1, 1, 0.88, 160),
    # 0.4.5.post3-0.4.6.post1: the table up to 81,920 MiB, (memory - 13 GiB) / memory above, whatever the tp
    ("sglang-0.4.5.post3", "dgx-h100", 2, 1, 1, 0.87, 160), ("sglang-0.4.6", "hgx-h200", 1, 1, 1, 0.908, 256),
    # 0.4.6.post2-0.4.7: the table by tp x pp up to 81,920 MiB
    ("sglang-0.4.6.post2", "dgx-h100", 2, 2, 1, 0.85, 160), ("sglang-0.4.7", "dgx-h100", 1, 1, 1, 0.88, 160),
    # 0.4.7.post1-0.5.2: reserve 9.5 + tp x pp / 2 GiB below 90 GiB, 12 + tp x pp / 2 to 160, + 4 with DP attention
    ("sglang-0.4.7.post1", "dgx-h100", 1, 1, 1, round(1 - 10 / 80, 3), 160),
    ("sglang-0.4.9.post4", "dgx-h100", 8, 1, 8, round(1 - 17.5 / 80, 3), 160),
    ("sglang-0.5.0", "hgx-h200", 2, 1, 1, round(1 - 13 / 141, 3), 256),
    # 0.5.3-0.5.9: 0.5 GiB + 1.5 MiB x 8192 + 2 MiB x graphs (256 below tp 4) + tp x pp / 8 GiB, at least 10;
    # with DP attention + graphs x groups x 4.5 MiB (graphs above 300)
    ("sglang-0.5.3", "dgx-h100", 1, 1, 1, round(1 - (12.5 + 0.5 + 0.125) / 80, 3), 256),
    ("sglang-0.5.3", "dgx-h100", 8, 1, 8, round(1 - (12.5 + 1 + 1 + 18) / 80, 3), 512),
    # 0.5.10 on: + 58 x 8 MiB of prefill graphs, which pp > 1 and DP attention turn off
    ("sglang-0.5.10", "dgx-h100", 1, 1, 1, round(1 - (13.125 + 0.453125) / 80, 3), 256),
    ("sglang-0.5.10", "dgx-h100", 4, 2, 1, round(1 - (12.5 + 1 + 1) / 80, 3), 512),
    ("sglang-0.5", "hgx-h200", 8, 1, 8, round(1 - (12.5 + 1 + 1 + 18) / 141, 3), 512),
])
def test_sglang_memory_share_follows_the_runs_tp(engine: str, system: str, tp: int, pp: int, groups: int,
                                                  share: float, graphs: int) -> None:
    from armillary.serving.engine import on_device

    started = on_device(load_engine(engine), load_system(system, 1).device, tp, pp, groups)
    assert (started.memory_fraction, started.graph_max_batch) == (pytest.approx(share), graphs)


def test_a_run_stating_no_tp_keeps_the_profiles_tp_8_numbers() -> None:
    from armillary.serving.engine import on_device
    from armillary.serving.engine_tiers import ASSUMED_TP

    assert ASSUMED_TP == 8
    h100 = load_system("dgx-h100", 1).device
    for name in ("sglang-0.4", "sglang-0.4.7.post1", "sglang-0.5.3", "sglang-0.5.10"):
        engine = load_engine(name)
        assert on_device(engine, h100) == on_device(engine, h100, 8)
        assert on_device(engine, h100).memory_fraction == engine.memory_fraction  # the profile's: an 80 GiB GPU at tp 8


def test_serve_takes_the_share_of_the_strategys_tp() -> None:
    """`with_engine` (armillary serve, the API) starts the engine for the strategy's tp: SGLang 0.4 at tp 2 on an
    H100 holds 0.87 of the memory, at tp 8 0.81."""
    h100 = load_system("dgx-h100", 1).device
    w = Inference.model_validate({"kind": "inference", "input_len": 128, "output_len": 128,
                                  "serving": {"engine": "sglang-0.4"}})
    assert with_engine(w, device=h100, tp=2)[0].kv_cache.memory_fraction == pytest.approx(0.87)
    assert with_engine(w, device=h100, tp=8)[0].kv_cache.memory_fraction == pytest.approx(0.81)
    assert with_engine(w, device=h100)[0].kv_cache.memory_fraction == pytest.approx(0.81)
    mine = w.model_copy(update={"kv_cache": w.kv_cache.model_copy(update={"memory_fraction": 0.5})})
    assert with_engine(mine, device=h100, tp=2)[0].kv_cache.memory_fraction == 0.5  # the workload's own wins


@pytest.mark.parametrize("name", [n for n in preset_names("engines") if n.startswith("sglang")])
def test_every_sglang_profile_states_its_share_rule_with_its_source(name: str) -> None:
    engine = load_engine(name)
    assert engine.device_defaults and "tp" in engine.sources["device_defaults"]
    assert "read (" in engine.sources["device_defaults"]
