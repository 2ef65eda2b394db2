"""A static inference batch on each model replica: the prefill of every prompt (the time to first token),
then the decode steps, the memory and KV cache that admit it, and the largest batch and context that fit
(`estimate.inference_phases` costs the passes)."""

from __future__ import annotations

from dataclasses import replace

from armillary.errors import SpecError
from armillary.estimate.feasibility import inference_checks
from armillary.estimate.inference import ReplicaModel, replica_model
from armillary.estimate.inference_memory import inference_memory, kv_blocks, kv_budget
from armillary.estimate.inference_phases import decode_phase, prefill_pass
from armillary.estimate.inference_result import InferenceEstimate, InferenceMemory, PassTime
from armillary.plan import rules
from armillary.plan.arrays import ModelArrays
from armillary.specs.strategy import Strategy
from armillary.specs.system import System
from armillary.specs.workload import Inference


def estimate_inference(m: ModelArrays, strategy: Strategy, w: Inference, system: System, replicas: int) -> (
        InferenceEstimate):
    """A static batch: prefill of `batch` prompts (time to first token), then output_len - 1 decode steps
    whose attention reads input_len + k - 1 cached tokens at step k. With pp > 1 the decode keeps pp
    micro-batches of batch / pp in flight, so a step takes one pass of batch / pp sequences through all
    layers (every stage busy); the prefill runs the batch through the stages in turn. With data-parallel
    attention the batch splits evenly over the attention groups, which step together."""
    groups = strategy.attention_dp
    if w.batch % groups:
        raise SpecError(f"workload.batch: {w.batch} does not split over strategy.attention_dp = {groups} attention "
                        "groups (use a multiple)")
    whole, w = w, w.model_copy(update={"batch": w.batch // groups})
    r = replica_model(m, strategy, w, system)
    b, n_in = w.batch, w.input_len
    prefill = prefill_pass(r, w)
    decode = decode_phase(r, w, float(b))
    memory = inference_memory(r, w, float(b), float(b * n_in) / r.cp)
    rule_breaks = rules.failed(inference_checks(m, strategy.tp, strategy.cp, strategy.pp, strategy.ep, replicas,
                                                system.devices))
    result = _static_batch(r, w, replicas, prefill, decode, memory, tuple(rule_breaks))
    if groups == 1:
        return result
    return replace(result, batch=whole.batch, max_batch=result.max_batch * groups,
                   output_tokens_per_s=result.output_tokens_per_s * groups,
                   output_tokens_per_s_per_device=result.output_tokens_per_s_per_device * groups)


def _static_batch(r: ReplicaModel, w: Inference, replicas: int, prefill: PassTime, decode: PassTime,
                  memory: InferenceMemory, rule_breaks: tuple[str, ...] = ()) -> InferenceEstimate:
    device = r.system.device
    capacity = device.hbm.capacity
    free, budget = kv_budget(r, w, memory)
    per_hbm = (1 - r.tier2_fraction) * memory.kv_per_sequence
    per_act = memory.activations / w.batch
    # largest batch whose cache fits the budget, activations growing with it: B kv <= f (C - W - B a)
    max_batch = int(max(0.0, w.kv_cache.memory_fraction * (capacity - memory.weights))
                    // (per_hbm + w.kv_cache.memory_fraction * per_act)) if per_hbm + per_act > 0 else 0
    # longest sequence (input + output tokens, whole pages) whose cache fits at this batch
    per_token = (1 - r.tier2_fraction) * r.cache_bytes_per_token
    pages = kv_blocks(max(0.0, float(budget)) / w.batch, per_token, w.kv_cache.block_tokens)
    max_context = pages * w.kv_cache.block_tokens if per_token > 0 else 2**31 - 1
    reasons = list(rule_breaks)
    if free <= 0:
        reasons.append(f"weights ({memory.weights / 2**30:.1f} GiB) and activations ({memory.activations / 2**30:.1f}"
                       f" GiB) exceed the {capacity / 2**30:.0f} GiB of HBM")
    elif memory.kv_cache > budget:
        reasons.append(f"KV cache of batch {w.batch} needs {memory.kv_cache / 2**30:.1f} GiB, "
                       f"{w.kv_cache.memory_fraction:.0%} of the free {free / 2**30:.1f} GiB allows {max_batch} "
                       "sequences")
    tier2 = device.second_tier
    if memory.kv_cache_tier2 > 0 and tier2 is not None and memory.kv_cache_tier2 > tier2.capacity:
        reasons.append(f"second-tier KV cache ({memory.kv_cache_tier2 / 2**30:.1f} GiB) exceeds its "
                       f"{tier2.capacity / 2**30:.0f} GiB")
    ttft, decode_s = prefill.total, decode.total
    e2e = ttft + decode_s
    tokens = w.batch * w.output_len
    per_replica = tokens / e2e
    notes = ("attention: standard runs as a fused kernel (FlashAttention-2 efficiency) in inference",) if (
        r.st.attention == 0) else ()
    return InferenceEstimate(
        batch=w.batch, input_len=w.input_len, output_len=w.output_len, devices_per_replica=r.devices,
        replicas=replicas, prefill=prefill, decode=decode, ttft_s=ttft,
        tpot_s=decode_s / (w.output_len - 1) if w.output_len > 1 else 0.0, e2e_s=e2e,
        output_tokens_per_s=per_replica * replicas, output_tokens_per_s_per_device=per_replica / r.devices,
        memory=memory, hbm_capacity_bytes=capacity, max_batch=max_batch, max_context=max_context, feasible=not reasons,
        infeasible_reasons=tuple(reasons), notes=notes)
