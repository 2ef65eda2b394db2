"""What QLoRA and LoRA-with-dropout keep beyond the base model's own memory, by hand: bitsandbytes leaves the
embedding in 16 bits (it quantizes linear layers only), dequantizes the LM head whole into an fp16 and a bf16
copy at the end of the forward (MatMul4Bit.forward: dequantize_4bit, then .to(bfloat16)), and an adapter's
dropout keeps its dropped input and a 1-byte mask for A's gradient (PyTorch native_dropout)."""

from __future__ import annotations

import pytest

from armillary import api
from armillary.estimate.result import StepEstimate
from armillary.plan.arrays import ModelArrays
from armillary.specs.loading import load_model, load_system
from armillary.workload.parameters import count_parameters

MODEL = "llama2-7b"
SEQ = 1024
STRATEGY = {"tp": 1, "pp": 1, "dp": 1, "micro_batch": 1, "recompute": "none", "zero": 0}


def _memory(base: str, dropout: float = 0.0) -> StepEstimate:
    workload = {"kind": "training", "seq_len": SEQ, "global_batch": 1,
                "finetune": {"rank": 8, "base_precision": base, "dropout": dropout,
                             "target_modules": ["q", "v"], "fused": False}}
    result = api.estimate(MODEL, load_system("dgx-a100", 1), STRATEGY, workload, gpus=1)
    assert isinstance(result, StepEstimate)
    return result


def test_qlora_keeps_the_embedding_at_16_bits_and_two_dequantized_head_copies() -> None:
    m = load_model(MODEL)
    params = count_parameters(ModelArrays.of(m))
    nf4 = (4 + 8 / 64 + 32 / (64 * 256)) / 8  # bytes per NF4 weight (Dettmers et al. 2023 §3)
    q, b = _memory("nf4").memory_hbm, _memory("bf16").memory_hbm
    # every weight but the embedding moves from 2 bytes to NF4; the adapters (bf16 in both) cancel
    assert float(b.weights) - float(q.weights) == pytest.approx(
        (float(params.total) - float(params.embedding)) * (2 - nf4), rel=1e-9)
    # QLoRA's activations hold, beyond the bf16 run's, every frozen GEMM input (bitsandbytes keeps them) and the
    # LM head's two dequantized 16-bit copies: at least the copies, 4 bytes per head weight
    assert float(q.activations) - float(b.activations) >= 4 * float(params.head)
    assert float(params.head) == pytest.approx(m.vocab * m.hidden + m.hidden)  # the head, with its final norm


def test_lora_dropout_keeps_a_mask_and_the_dropped_input() -> None:
    """One dropout per adapted input (LitGPT drops x once before its stacked A): bf16 base, +1 byte per element
    of the QKV input (the dropped copy replaces the kept input, the mask is new); QLoRA, whose base keeps the
    input anyway, +3 (the dropped copy and the mask)."""
    m = load_model(MODEL)
    elements = SEQ * m.hidden * m.layers
    for base, extra in (("bf16", 1.0), ("nf4", 3.0)):
        grown = float(_memory(base, 0.05).memory_hbm.activations) - float(_memory(base).memory_hbm.activations)
        assert grown == pytest.approx(extra * elements, rel=1e-6), base
