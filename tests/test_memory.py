"""Memory against Korthikanti et al. 2022 Table 2 and the ZeRO / distributed-optimizer tables."""

import numpy as np
import pytest

from armillary import Strategy, Training, estimate
from armillary.estimate.activations import layer_activations
from armillary.estimate.model_states import model_states
from armillary.plan.arrays import ModelArrays, StrategyArrays

s, b, h, a = 2048, 1, 12288, 96  # GPT-3 layer (Korthikanti §5 worked example)


def _per_layer(model, t, sp, recompute):
    acts = layer_activations(ModelArrays.of(model), b, s, t, float(sp), 2.0)
    return float(acts.stored(StrategyArrays.of(Strategy(recompute=recompute), 1)))


@pytest.mark.parametrize(("t", "sp", "recompute", "factor"), [
    (1, False, "none", 34 + 5 * a * s / h),  # Eq. 1
    (8, False, "none", 10 + 24 / 8 + 5 * a * s / (h * 8)),  # Eq. 2
    (8, True, "none", 34 / 8 + 5 * a * s / (h * 8)),  # Table 2, TP + SP
    (8, False, "selective", 10 + 24 / 8),  # Table 2
    (8, True, "selective", 34 / 8),  # Eq. 6
    (8, False, "full", 2),  # layer input only
    (8, True, "full", 2 / 8),
])
def test_activation_bytes_per_layer(gpt175b, t, sp, recompute, factor):
    assert _per_layer(gpt175b, t, sp, recompute) == pytest.approx(s * b * h * factor, rel=1e-12)


def test_gpt3_layer_without_parallelism_is_2_87_gb(gpt175b):
    """Korthikanti §4.3 worked check: 2.87 GB per GPT-3 layer without parallelism."""
    assert _per_layer(gpt175b, 1, False, "none") / 1e9 == pytest.approx(2.87, abs=0.01)


@pytest.mark.parametrize(("precision", "fixed", "sharded"), [("bf16", 6, 12), ("fp16", 4, 16), ("fp32", 8, 8)])
def test_distributed_optimizer_bytes_per_param(gpt22b, precision, fixed, sharded):
    """Megatron-LM README: distributed optimizer bytes/parameter = fixed + sharded / d."""
    d = 64
    st = StrategyArrays.of(Strategy(zero=1, precision=precision), dp=d)
    ms = model_states(1.0, st)
    assert float(ms.weights + ms.gradients + ms.optimizer_states) == pytest.approx(fixed + sharded / d)


def test_zero_stages_shard_progressively():
    """ZeRO §5: P_os shards optimizer states, P_os+g also gradients, P_os+g+p also parameters."""
    psi, d = 7.5e9, 64
    totals = []
    for zero in range(4):
        st = StrategyArrays.of(Strategy(zero=zero, precision="fp16"), dp=d)
        ms = model_states(psi, st)
        totals.append(float(ms.weights + ms.gradients + ms.optimizer_states))
    w, g, o = 2, 2, 16  # fp16 recipe bytes per parameter
    assert totals == pytest.approx([psi * (w + g + o), psi * (w + g + o / d), psi * (w + (g + o) / d),
                                    psi * (w + g + o) / d])


def test_pipeline_first_stage_holds_about_l_layers(gpt175b):
    """Korthikanti §4.2.3: with 1F1B the first stage stores p micro-batches of L/p layers = L layers."""
    r = estimate(gpt175b, "dgx-a100", Strategy(tp=8, pp=8, recompute="selective", sequence_parallel=True),
                 Training(seq_len=s, global_batch=64), gpus=64)
    expected = s * b * h * 34 / 8 * 96
    assert float(r.memory_hbm.activations) == pytest.approx(expected, rel=0.01)


def test_out_of_memory_is_reported(gpt175b):
    r = estimate(gpt175b, "dgx-a100", Strategy(tp=1, pp=1), Training(seq_len=2048, global_batch=8), gpus=8)
    assert not bool(r.feasible)
    assert any("out of memory" in reason for reason in r.infeasible_reasons)
    assert np.isfinite(float(r.step_time_s))


def test_deepspeed_bounds_the_gathered_zero3_parameters():
    """GPT 530B under ZeRO-3 (SC'21 Table 2's DeepSpeed baseline, 640 A100s, micro-batch 4): FSDP-style units
    hold two whole layers gathered (2 x 5.03B fp16 parameters, 20.1 GB); DeepSpeed holds at most
    stage3_max_live_parameters (1e9) but never less than its largest module, the 20480 x 81920 MLP matrix
    (1.68B parameters, 3.36 GB). The run fit on 80 GB A100s; with two layers gathered it would not."""
    from armillary.specs.loading import load_model, load_system

    model, system = load_model("megatron-529.6b"), load_system("dgx-a100", 640)
    base = {"zero": 3, "micro_batch": 4, "recompute": "full", "precision": "fp16"}
    work = Training(seq_len=2048, global_batch=2560)
    layers_of_two = estimate(model, system, Strategy(**base), work)
    deepspeed = estimate(model, system, Strategy(**base, zero3_live_parameters=1e9), work)
    h = model.hidden
    layer = 12 * h * h + 13 * h  # SC'21 Eq. 2 per layer
    freed = 2 * layer * 2 - h * 4 * h * 2
    # (a unit is the stage's weights over its layers: the embedding and head spread over them add 0.25%)
    assert float(layers_of_two.memory_hbm.comm_buffers - deepspeed.memory_hbm.comm_buffers) == pytest.approx(
        freed, rel=5e-3)
    assert not bool(layers_of_two.feasible) and bool(deepspeed.feasible)


@pytest.mark.parametrize("t", [1, 8])
def test_fp8_recipes_keep_gemm_inputs_in_fp8(gpt175b, t):
    # Korthikanti's 34 sbh at 16 bits counts four GEMM inputs kept for the weight gradients: the QKV and
    # MLP inputs (sbh each, replicated), the projection input (attention output, also FlashAttention's O)
    # and the down projection's input (4sbh / t); fp8 recipes keep the QKV, MLP and down-projection inputs
    # at one byte: sbh (2 + 4 / t) less
    m = ModelArrays.of(gpt175b)
    bf16 = layer_activations(m, b, s, t, 0.0, 2.0, flash=2.0)
    fp8 = layer_activations(m, b, s, t, 0.0, 2.0, flash=2.0, g=1.0)
    none = StrategyArrays.of(Strategy(recompute="none"), 1)
    assert float(bf16.stored(none) - fp8.stored(none)) == pytest.approx(s * b * h * (2 + 4 / t), rel=1e-12)


def test_fp8_expert_inputs_are_kept_at_one_byte():
    # a routed token keeps its expert input (h) and down-projection input (f) at g bytes, its gate/up output
    # (2f) and expert output (h) at e bytes: Qwen3-30B-A3B (h 2048, f 768) saves h + f bytes per copy
    from armillary.specs.loading import load_model
    from armillary.workload.experts import experts_forward

    model = ModelArrays.of(load_model("qwen3-30b-a3b"))
    x = experts_forward(model, 4096.0, 8.0, 1.0, 1.0, 2.0, 2.0)
    bf16 = layer_activations(model, 1, 4096, 1, 0.0, 2.0, flash=2.0, experts=x)
    fp8 = layer_activations(model, 1, 4096, 1, 0.0, 2.0, flash=2.0, experts=x, g=1.0)
    copies = 4096 * 8  # tokens x top_k reach the 16 local experts of a balanced ep 8 rank
    assert float(bf16.experts - fp8.experts) == pytest.approx(copies * (2048 + 768), rel=1e-12)


def test_the_runtime_allowance_is_explicit_and_configurable(gpt175b):
    """The runtime's HBM (CUDA context, workspaces, communicator buffers; 2 GiB by default) and the
    allocator's fragmentation (a share of the tensors' bytes) are their own category, by hand; enough of
    them makes a fitting run infeasible, with the reason."""
    work = Training(seq_len=2048, global_batch=64)

    def hbm(**memory: float):
        st = Strategy(tp=8, pp=8, recompute="selective", sequence_parallel=True, **memory)
        return estimate(gpt175b, "dgx-a100", st, work, gpus=64)

    bare, default, fragmented = hbm(memory_reserve=0.0), hbm(), hbm(memory_reserve=0.0, fragmentation=0.1)
    assert float(bare.memory_hbm.runtime) == 0.0 and float(default.memory_hbm.runtime) == 2 * 2**30
    assert float(default.memory_hbm.total) == pytest.approx(float(bare.memory_hbm.total) + 2 * 2**30, rel=1e-12)
    assert float(fragmented.memory_hbm.total) == pytest.approx(1.1 * float(bare.memory_hbm.total), rel=1e-12)
    assert bool(bare.feasible)
    crowded = hbm(memory_reserve="80 GiB")
    assert not bool(crowded.feasible) and any("out of memory" in r for r in crowded.infeasible_reasons)
    assert float(crowded.step_time_s) == float(bare.step_time_s)  # memory, not time
