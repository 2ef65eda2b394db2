"""Eager activation kernels (`Strategy.activation_kernels` eager, `activations.eager_activations`): what PyTorch
autograd run op by op keeps for backward in LitGPT's model code of 2023 (lit_gpt/model.py, lora.py @8641822),
counted by hand from which operands each op saves (PyTorch derivatives.yaml)."""

import pytest

from armillary import Strategy
from armillary.estimate.activations import layer_activations, lora_saved_inputs
from armillary.plan.arrays import ModelArrays, StrategyArrays, TrainingArrays
from armillary.specs.loading import load_model
from armillary.specs.workload import Lora, LoraTarget, Training
from armillary.validation.memory_rows import eager_kernels_stated

H, F, T = 4096, 11008, 1304  # Llama 2 7B (MHA, 32 heads of 128), one 1304-token sequence


def _stored(kernels: str, recompute: str = "none", modules: tuple[str, ...] = ()) -> float:
    m = ModelArrays.of(load_model("llama2-7b"))
    w = TrainingArrays.of(Training(seq_len=T, global_batch=1, finetune=Lora(
        rank=8, target_modules=(LoraTarget.Q, LoraTarget.V), fused=False)))
    acts = layer_activations(m, 1, T, 1, 0.0, 2.0, 2.0, saved_inputs=lora_saved_inputs(w, 2.0, 2.0))
    chosen = {"recompute_modules": modules} if modules else {}
    st = Strategy(activation_kernels=kernels, recompute=recompute, **chosen)
    return float(acts.stored(StrategyArrays.of(st, 1)))


def test_eager_llama_lora_layer_keeps_the_silu_output_the_rotated_qk_and_the_scattered_adapter_output():
    """Per token of one Llama layer, in bf16 (2 bytes):
    - LLaMAMLP: silu saves fc_1's output, the multiply silu's output and fc_2's: the SiLU output, 2 * 11008,
      beyond the two outputs a fused SwiGLU keeps;
    - attention: apply_rope + torch.cat make new q and k (2 * 4096 each) while v, a view, keeps the whole
      QKV output: 2 * (4096 + 4096) beyond Q, K, V;
    - LoRAQKVLinear on q and v: zero_pad's index_copy saves its source, the adapters' q and v outputs
      reshaped to a copy: 2 * (4096 + 4096)."""
    extra = _stored("eager") - _stored("fused")
    assert extra == pytest.approx(T * (2 * F + 2 * (H + H) + 2 * (H + H)), rel=1e-12)
    assert extra / T == 22016 + 16384 + 16384


def test_recomputing_the_elementwise_ops_remakes_what_eager_kept_but_the_scatter():
    """Selective recomputation of the element-wise ops (torchtitan's op-level SAC) re-runs SiLU and RoPE:
    only the index_copy source (a copy, not an element-wise output) stays."""
    fused, eager = (_stored(k, "selective", ("elementwise",)) for k in ("fused", "eager"))
    assert eager - fused == pytest.approx(T * 2 * (H + H), rel=1e-12)


def test_only_the_rows_that_say_eager_pytorch_read_eager_kernels():
    assert eager_kernels_stated({"notes": "Eager PyTorch (no torch.compile, no fused kernels): SDPA (flash)"})
    assert not eager_kernels_stated({"framework": "torchtitan @9dec370; FSDP (eager)"})


def test_a_row_that_says_partial_rotary_positions_is_priced_rotary():
    """LitGPT's phi-1.5 (rotary percentage 0.5) and StableLM Alpha (0.25): rotary, not GPT's learned
    positions, and the eager rotated q and k copies, 2 * (2048 + 2048) bytes per token and layer at phi-1.5's
    width (the cat copies the whole head under partial rotary)."""
    from armillary.validation.memory_rows import MEMORY_CSV, stated_positions
    from armillary.validation.rows import row_specs
    from armillary.validation.run import read_rows

    row = next(r for r in read_rows(MEMORY_CSV) if r["id"] == "MEM-LITGPT-2310-PHI15-MB1")
    stated = stated_positions(row, row_specs({**row, "kind": "training"}))
    assert stated[0].model.position == "rotary" and "partial rotary" in stated[0].assumptions[-1]
    m = ModelArrays.of(stated[0].model)
    eager = layer_activations(m, 1, 1044, 1, 0.0, 2.0, 2.0).eager_rope
    assert float(eager) == 1044 * 2 * (2048 + 2048)
