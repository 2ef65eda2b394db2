"""Memory of one inference replica per device: weights, the paged KV cache and the working activations of a
pass, and the share of the memory left to the KV cache (the estimator, the serving simulation and the
serving search all size the cache here)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from armillary.estimate.dp_attention import dp_attention_weights
from armillary.estimate.inference_result import InferenceMemory
from armillary.numerics import Array
from armillary.specs.workload import Inference
from armillary.workload.experts import replica_weights
from armillary.workload.parameters import count_parameters

if TYPE_CHECKING:
    from armillary.estimate.inference import ReplicaModel


def kv_pages(tokens: Any, block_tokens: int) -> Any:
    """Pages of a paged KV cache (`block_tokens` each) that hold `tokens` (an int or an int array)."""
    return -(-tokens // block_tokens)


def inference_memory(r: ReplicaModel, w: Inference, batch: Array, pass_tokens: Array) -> InferenceMemory:
    """Bytes per device of the busiest stage: weights (embedding and LM head kept at 16 bits, routed
    experts over ep x expert_tp), the paged KV cache of `batch` sequences of input + output tokens, and
    the working activations of the largest pass (`pass_tokens` new tokens, `batch` sequences)."""
    m, st = r.m, r.st
    params = count_parameters(m)
    share = r.stage_layers / float(m.layers)
    routed = params.moe_layers * params.experts * params.expert
    layer_params = params.total - params.embedding - params.head - routed
    routed = routed * replica_weights(params.experts, st.ep, st.redundant_experts)  # EPLB replicas per rank
    ends = params.embedding + params.head if st.pp == 1 else np.maximum(params.embedding, params.head)
    layers = (layer_params / st.tp + routed / (st.ep * st.etp)) if r.attention_dp == 1 else (
        dp_attention_weights(params, r))
    weights = share * (layers * r.weight_bytes + materialized_mla_bytes(r)) + ends / r.attention_tp * r.activation_bytes
    if r.attention_weight_bytes is not None:  # attention projections kept wider than the other weights
        projections = (m.hidden * m.qkv_width + m.heads * m.value_dim * m.hidden) / st.tp
        weights = weights + share * m.layers * projections * (r.attention_weight_bytes - r.weight_bytes)
    pages = kv_pages(w.input_len + w.output_len, w.kv_cache.block_tokens)
    per_sequence = pages * w.kv_cache.block_tokens * r.cache_bytes_per_token
    # [derived] the widest moment of a layer: its input, the QKV or MLP intermediate, and its output; the
    # fp32 logits of the last tokens
    tokens = pass_tokens
    widest = np.maximum(m.qkv_width / r.attention_tp,
                        (m.mlp_matrices - 1) * np.maximum(m.ffn, m.top_k * m.expert_ffn) / st.tp)
    # the fused MoE's output buffer holds each token's top-k expert outputs at full width before their
    # weighted sum (vLLM fused_moe intermediate_cache3: tokens x top_k x hidden)
    widest = np.maximum(widest, np.where(m.experts > 0, m.top_k * m.hidden, 0.0))
    activations = tokens * (2 * m.hidden + widest) * r.activation_bytes + batch * m.vocab / r.attention_tp * 4
    return InferenceMemory(weights=weights, kv_cache=(1 - r.tier2_fraction) * batch * per_sequence,
                           activations=activations, kv_cache_tier2=r.tier2_fraction * batch * per_sequence,
                           kv_per_sequence=per_sequence)


def materialized_mla_bytes(r: ReplicaModel) -> Array:
    """Bytes per device of all layers' absorbed MLA products that an engine stores beside the raw weights
    (`MlaDecode.MATERIALIZED`; 0 otherwise), per attention rank's a / t heads [derived from vLLM 0.7.3
    vllm/attention/backends/mla/common.py, process_weights_after_loading]: W^Q W^UK (q_lora x kv_lora per
    head) and W^UV W^O (kv_lora x hidden per head), requantized to the weights' precision; the RoPE query part
    W^QR (q_lora x rope) and the dequantized W^UK, W^UV (kv_lora x (nope + v)) at 16 bits. Without a query
    LoRA the query side is `hidden` wide."""
    m = r.m
    query = np.where(m.q_lora > 0, m.q_lora, m.hidden)
    per_head = ((query * m.kv_lora + m.kv_lora * m.hidden) * r.weight_bytes
                + (query * m.rope_dim + m.kv_lora * (m.head_dim - m.rope_dim + m.value_dim)) * r.activation_bytes)
    return r.mla_materialized * (m.kv_lora > 0) * m.layers * m.heads / r.attention_tp * per_head


def kv_blocks(capacity_bytes: float, per_token_bytes: float, block_tokens: int) -> int:
    """Pages of `block_tokens` tokens that fit in `capacity_bytes`."""
    return int(capacity_bytes // (per_token_bytes * block_tokens)) if per_token_bytes > 0 else 2**62 // block_tokens


def kv_budget(r: ReplicaModel, w: Inference, memory: InferenceMemory, of_total: bool = False,
              activations_outside: bool = False) -> tuple[Array, Array]:
    """(HBM left after weights and activations, the share of it the KV cache may take) per device. With
    `of_total` the fraction caps the whole memory and the KV cache takes what weights and activations leave
    of that cap (vLLM's gpu_memory_utilization, Worker.determine_num_available_blocks), or what the weights
    alone leave of it where the activations live outside the share (`activations_outside`: SGLang's
    mem_fraction_static, ModelRunner.profile_max_num_token: rest = available - total x (1 - share), measured
    after loading the weights, before any forward pass). Broadcasts."""
    capacity = float(r.system.device.hbm.capacity)
    free = capacity - memory.weights - memory.activations
    if of_total:
        inside = memory.weights if activations_outside else memory.weights + memory.activations
        return free, np.minimum(free, np.maximum(0.0, w.kv_cache.memory_fraction * capacity - inside))
    return free, w.kv_cache.memory_fraction * free
