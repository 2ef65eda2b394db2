"""Numeric views of the specifications, for the cost functions.

Every cost function takes these and broadcasts: a field is a float for one configuration or an array
for a sweep (lesson 2 of the architecture notes: the search expands axes, not configuration objects).
Closed choices become the codes of `plan.codes` (`Recompute` -> 0/1/2, `ZeroStage` -> 0..3, precision ->
its position in `PRECISION`), flags 0/1.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from armillary.memo import IdentityCache, quick_init
from armillary.numerics import Array
from armillary.plan.codes import PRECISION, PROJECTIONS, SCHEDULE, STRATEGY_FIELDS, TP_LAYOUT, encode, strategy_value
from armillary.specs.formats import element_bytes
from armillary.specs.model import Model, PositionKind, TernaryKernel, TokenMixer
from armillary.specs.strategy import RecomputeModule, Strategy, TrainingPrecision
from armillary.specs.workload import BasePrecision, LoraTarget, Training


@quick_init
@dataclass(frozen=True)
class ModelArrays:
    layers: Array
    hidden: Array
    heads: Array
    kv_heads: Array
    head_dim: Array
    ffn: Array
    mlp_matrices: Array  # 2 (GeLU/ReLU) or 3 (gated: SwiGLU, GeGLU)
    vocab: Array
    dropout: Array  # 0/1
    rotary: Array  # 0/1
    norm_params: Array  # parameters per channel of a norm: 2 LayerNorm, 1 RMSNorm
    linear_bias: Array  # 0/1
    learned_positions: Array  # 0/1
    max_seq_len: Array
    tied_embeddings: Array  # 0/1
    window: Array  # attention window in tokens; 0 = full causal attention
    window_layers: Array  # fraction of layers that use the window
    qk_norm: Array = 0.0  # 0/1
    attention_sinks: Array = 0.0  # 0/1
    yarn: Array = 0.0  # 0/1: rotary positions scaled by YaRN (`Model.yarn`)
    glu_clamp: Array = 0.0  # 0/1: the gated MLP clamps its halves before the activation (`Model.glu_clamp`)
    qkv_bias: Array = 0.0  # 0/1: biases on Q, K, V only (linear_bias covers every linear layer)
    # attention variants: value head dimension; MLA latent ranks (0 = not MLA / direct query projection)
    value_dim: Array = 0.0
    kv_lora: Array = 0.0
    q_lora: Array = 0.0
    rope_dim: Array = 0.0
    # mixture of experts: experts = 0 for a dense model
    experts: Array = 0.0
    top_k: Array = 0.0
    expert_ffn: Array = 0.0
    shared_ffn: Array = 0.0  # total intermediate size of the shared experts
    dense_layers: Array = 0.0  # leading dense layers (all layers of a dense model: see `moe_layers`)
    router_bias: Array = 0.0
    expert_groups: Array = 1.0  # group-limited routing: groups of experts, of which a token uses group_top_k
    group_top_k: Array = 1.0
    # MatMul-free LM: MLGRU token mixer (0/1), ternary BitLinear weights (0/1), additions-only kernels (0/1)
    mlgru: Array = 0.0
    ternary: Array = 0.0
    ternary_additions: Array = 0.0
    nonzero_fraction: Array = 1.0
    mtp_layers: Array = 0.0  # multi-token-prediction depth of the model (trained where `TrainingArrays.mtp`)

    @property
    def kv_width(self) -> Array:
        """Key and value elements per token (all KV heads)."""
        return self.kv_heads * (self.head_dim + self.value_dim)

    @property
    def qkv_width(self) -> Array:
        """Query, key and value elements per token: the QKV projection's output."""
        return self.heads * self.head_dim + self.kv_width

    @property
    def moe_layers(self) -> Array:
        return self.layers - self.dense_layers

    @classmethod
    def of(cls, m: Model) -> ModelArrays:
        """The numeric view of `m`; a frozen model's view is built once (the last few kept, by identity, with
        the model itself so that its id is not reused)."""
        return _MODEL_ARRAYS.get(m, ModelArrays._of) if cls is ModelArrays else cls._of(m)

    @classmethod
    def _of(cls, m: Model) -> ModelArrays:
        moe, mla, bit = m.moe, m.mla, m.bitlinear
        return cls(
            layers=m.layers, hidden=m.hidden, heads=m.heads, kv_heads=m.n_kv_heads, head_dim=m.d_head,
            ffn=m.ffn, mlp_matrices=m.mlp.matrices, vocab=m.vocab, dropout=float(m.dropout),
            rotary=float(m.position is PositionKind.ROTARY), norm_params=m.norm.params_per_channel,
            linear_bias=float(m.linear_bias), learned_positions=float(m.position is PositionKind.LEARNED),
            max_seq_len=m.max_seq_len, tied_embeddings=float(m.tied_embeddings), window=m.sliding_window or 0,
            window_layers=m.window_layers, qk_norm=float(m.qk_norm), attention_sinks=float(m.attention_sinks),
            glu_clamp=float(m.glu_clamp is not None), yarn=float(m.yarn),
            qkv_bias=float(m.qkv_bias and not m.linear_bias),
            value_dim=m.d_value,
            kv_lora=mla.kv_lora_rank if mla else 0, q_lora=(mla.q_lora_rank or 0) if mla else 0,
            rope_dim=mla.rope_head_dim if mla else 0,
            experts=moe.experts if moe else 0, top_k=moe.top_k if moe else 0,
            expert_ffn=moe.expert_ffn if moe else 0, shared_ffn=moe.shared_size if moe else 0,
            dense_layers=moe.dense_layers if moe else m.layers, router_bias=float(moe.router_bias) if moe else 0.0,
            expert_groups=(moe.expert_groups or 1) if moe else 1, group_top_k=(moe.group_top_k or 1) if moe else 1,
            mlgru=float(m.token_mixer is TokenMixer.MLGRU), ternary=float(bit is not None),
            ternary_additions=float(bit is not None and bit.kernel is TernaryKernel.ADDITIONS),
            nonzero_fraction=bit.nonzero_fraction if bit else 1.0, mtp_layers=m.mtp_layers,
        )


_MODEL_ARRAYS: IdentityCache[Model, ModelArrays] = IdentityCache(64)  # ModelArrays.of per frozen model


@quick_init
@dataclass(frozen=True)
class StrategyArrays:
    tp: Array
    pp: Array
    dp: Array
    cp: Array
    cp_comm: Array  # plan.codes.CP_COMM: 0 ring attention, 1 all-to-all (Ulysses)
    vpp: Array
    schedule: Array  # plan.codes.SCHEDULE
    first_stage_layers: Array  # 0 = even split
    last_stage_layers: Array  # 0 = even split
    micro_batch: Array
    sequence_parallel: Array  # 0/1
    recompute: Array  # plan.codes.RECOMPUTE
    zero: Array  # 0..3
    overlap_dp: Array
    overlap_tp: Array
    overlap_param_gather: Array
    offload_weights: Array
    offload_activations: Array  # 0/1; estimate_training makes it the share of layers offloaded
    offload_optimizer: Array
    precision: Array  # plan.codes.PRECISION
    pp_scatter_gather: Array
    attention: Array  # plan.codes.ATTENTION: 0 standard, else the FlashAttention version (1, 2, 3)
    ep: Array = 1.0
    etp: Array = 1.0
    rank_order: Array = 0.0  # plan.codes.RANK_ORDER: 0 tp-cp-dp-pp, 1 tp-cp-pp-dp
    overlap_ep: Array = 0.0
    tp_overlap_method: Array = 0.0  # plan.codes.TP_OVERLAP: 0 userbuffers, 1 ring
    tp_layout: Array = 0.0  # plan.codes.TP_LAYOUT: 0 1-D (Megatron), 1 2-D (SUMMA on a q x q grid)
    summa_steps: Array = 0.0  # steps of each 2-D SUMMA product; 0 = q (Strategy.summa_steps)
    imbalance: Array = 1.0
    capacity_factor: Array = 0.0  # 0 = dropless
    pad_to_capacity: Array = 0.0
    dispatch_fp8: Array = 0.0
    dispatch_dedup: Array = 0.0  # 0/1: one copy per device and node a token goes to (Routing.dispatch_dedup)
    # modules recompute 'selective' re-runs (0/1 each; they apply only with recompute = selective)
    recompute_core_attn: Array = 1.0
    recompute_layernorm: Array = 0.0
    recompute_mlp: Array = 0.0
    recompute_shared_experts: Array = 0.0
    recompute_moe_act: Array = 0.0
    recompute_mla_up_proj: Array = 0.0
    recompute_elementwise: Array = 0.0
    recompute_alternate_matmuls: Array = 0.0
    zero3_live_params: Array = 0.0  # 0 = two whole layers gathered at once
    zero3_gather_rate: Array = np.inf  # bytes/s per device; inf = the network's rate
    zero3_rank_copy: Array = 0.0  # s per rank and gathered parameter tensor
    expert_gemm_call: Array = 0.0  # s per local expert and grouped expert GEMM; 0 = one launch
    moe_host_op: Array = 0.0  # s of host time per kernel issued one by one (Strategy.moe_host.op)
    moe_host_ops: Array = 0.0  # kernels an MoE layer's forward issues one by one (Strategy.moe_host.ops)
    moe_dispatch_sync: Array = 0.0  # 0/1: the dispatcher blocks the host per MoE layer (moe_host.dispatch_sync)
    redundant_experts: Array = 0.0  # EPLB expert replicas per EP rank (Routing.redundant_experts)
    recompute_moe: Array = 0.0
    recompute_layers: Array = 0.0  # full recompute of the first this many layers of a model chunk; 0 = all
    memory_reserve: Array = 0.0  # HBM bytes the runtime holds outside the tensors; -1 = the device's
    fp8_params: Array = 0.0  # 0/1: weights kept in fp8 only, gathered in fp8 (Strategy.fp8_params)
    moment_bytes: Array = 4.0  # bytes of each Adam moment (Strategy.optimizer_states)
    main_param_bytes: Array = 4.0  # bytes of the optimizer's main parameters (Strategy.main_params)
    cross_entropy: Array = 0.0  # 0 fused, 1 eager fp32 (Strategy.cross_entropy)
    eager_kernels: Array = 0.0  # 0/1: Strategy.activation_kernels eager
    fragmentation: Array = 0.0  # share of the tensors' HBM lost to the allocator's fragmentation
    # the share of a model chunk's layers that full recompute re-runs: derived from recompute_layers by
    # estimate_training (`plan.rules.chunk_share`), 1 before
    recompute_share: Array = 1.0
    offload_activation_layers: Array = 0.0  # the first N layers of each chunk; 0 = every layer
    grad_reduce_bf16: Array = 0.0  # 0/1: data-parallel gradients reduced in bf16 (Strategy.grad_reduce_in_bf16)
    block_format: Array = 0.0  # plan.codes.BLOCK_FORMAT: 0 none, 1 mxfp8, 2 nvfp4, 3 mxfp4, 4 int8 (precision: fp8's)
    attention_projections: Array = 0.0  # plan.codes.PROJECTIONS: 0 the recipe's format, 1 fp8, 2 bf16
    bf16_layers: Array = 0.0  # layers a quantized recipe runs wholly in bf16 (first and last; QuantizedGemms)
    offload_gradients: Array = 0.0  # 0/1: the gradient buffer offloaded (Offload.gradients)
    offload_experts: Array = 0.0  # 0/1: the routed experts' weights offloaded (Offload.experts)

    @classmethod
    def of(cls, s: Strategy, dp: int) -> StrategyArrays:
        # per strategy object first (hashing a pydantic Strategy costs about 1.7 us), then by value
        per_dp = _BY_OBJECT.get(s, lambda _: {})
        key = (type(dp), dp)  # typed, as the lru_cache below (dp 8 and 8.0 code differently)
        found = per_dp.get(key)
        if found is None:
            try:
                found = _strategy_arrays(s, dp)  # a frozen spec: coded once
            except TypeError:  # a strategy holding an unhashable value
                return _coded(s, dp)
            if len(per_dp) < 16:  # (one strategy object estimated on a few device counts)
                per_dp[key] = found
        return found


# StrategyArrays.of per strategy object and dp: the same coded point `_strategy_arrays` gives by value
_BY_OBJECT: IdentityCache[Strategy, dict[tuple[type, int], StrategyArrays]] = IdentityCache(256)


@functools.lru_cache(maxsize=256, typed=True)
def _strategy_arrays(s: Strategy, dp: int) -> StrategyArrays:
    return _coded(s, dp)


def _coded(s: Strategy, dp: int) -> StrategyArrays:
    coded = {name: encode(name, strategy_value(s, name)) for name in STRATEGY_FIELDS}
    coded["precision"] = float(recipe_family(coded["precision"], coded["block_format"]))
    return StrategyArrays(
        **coded, dp=dp, schedule=SCHEDULE.code(s.pipeline_schedule),
        first_stage_layers=s.first_stage_layers or 0, last_stage_layers=s.last_stage_layers or 0,
        etp=s.etp, imbalance=s.routing.imbalance, capacity_factor=s.routing.capacity_factor or 0.0,
        pad_to_capacity=float(s.routing.pad_to_capacity), dispatch_fp8=float(s.routing.dispatch_fp8),
        zero3_live_params=s.zero3_live_parameters or 0.0, zero3_gather_rate=s.zero3_gather_rate or np.inf,
        zero3_rank_copy=s.zero3_rank_copy or 0.0, expert_gemm_call=s.expert_gemm_call or 0.0,
        moe_host_op=s.moe_host.op, moe_host_ops=s.moe_host.ops, moe_dispatch_sync=float(s.moe_host.dispatch_sync),
        redundant_experts=s.routing.redundant_experts,
        memory_reserve=-1.0 if s.memory_reserve is None else s.memory_reserve, fragmentation=s.fragmentation,
        fp8_params=float(s.fp8_params), moment_bytes=element_bytes(s.optimizer_states.value),
        main_param_bytes=element_bytes(s.main_params.value), cross_entropy=float(s.cross_entropy == "eager_fp32"),
        eager_kernels=float(s.activation_kernels == "eager"),
        grad_reduce_bf16=float(s.grad_reduce_in_bf16),
        tp_layout=TP_LAYOUT.code(s.tp_layout), summa_steps=s.summa_steps or 0.0,
        bf16_layers=s.quantized_gemms.first_layers_bf16 + s.quantized_gemms.last_layers_bf16,
        attention_projections=PROJECTIONS.code(s.quantized_gemms.attention_projections),
        **{f"recompute_{module.value}": float(module in s.recompute_modules) for module in RecomputeModule},
    )


def recipe_family(precision: Array, block_format: Array) -> Array:
    """The precision code a strategy is priced in: fp8's under a block format, whichever of bf16 and fp8 it
    names (a block-scaled recipe holds bf16 weights beside a quantized copy, saves quantized GEMM inputs, and
    its MFU is counted against the fp8 peak: docs/fp4.md), else its own."""
    return np.where(np.asarray(block_format) > 0, _FP8, precision) if isinstance(block_format, np.ndarray) else (
        _FP8 if block_format > 0 else precision)


_FP8 = PRECISION.code(TrainingPrecision.FP8)


@quick_init
@dataclass(frozen=True)
class TrainingArrays:
    seq_len: Array
    global_batch: Array
    # LoRA (`Training.finetune`): the rank (0 = every weight trained), 0/1 per adapted linear layer, 1 when
    # q/k/v and gate/up share one adapter, bytes per stored base parameter, 1 when the base is dequantized
    lora_rank: Array = 0.0
    lora_q: Array = 0.0
    lora_k: Array = 0.0
    lora_v: Array = 0.0
    lora_o: Array = 0.0
    lora_gate: Array = 0.0
    lora_up: Array = 0.0
    lora_down: Array = 0.0
    lora_fused: Array = 0.0
    base_bytes: Array = 0.0
    base_dequantize: Array = 0.0
    lora_dropout: Array = 0.0  # 1 when the adapters drop out their input (`Lora.dropout` > 0)
    mtp: Array = 0.0  # 1 when the model's multi-token-prediction modules are trained (`Training.mtp`)

    @property
    def frozen(self) -> Array:
        """1 when the base model is frozen (LoRA), else 0."""
        return self.lora_rank > 0

    @classmethod
    def of(cls, w: Training) -> TrainingArrays:
        """The numeric view of `w`, built once per frozen workload (as `ModelArrays.of`)."""
        return _TRAINING_ARRAYS.get(w, TrainingArrays._of) if cls is TrainingArrays else cls._of(w)

    @classmethod
    def _of(cls, w: Training) -> TrainingArrays:
        lora = w.finetune
        if lora is None:
            return cls(seq_len=w.seq_len, global_batch=w.global_batch, mtp=float(w.mtp))
        on = {target.value: float(target in lora.target_modules) for target in LoraTarget}
        return cls(seq_len=w.seq_len, global_batch=w.global_batch, lora_rank=float(lora.rank), lora_q=on["q"],
                   lora_k=on["k"], lora_v=on["v"], lora_o=on["o"], lora_gate=on["gate"], lora_up=on["up"],
                   lora_down=on["down"], lora_fused=float(lora.fused), base_bytes=lora.base_precision.bytes,
                   base_dequantize=float(lora.base_precision is BasePrecision.NF4),
                   lora_dropout=float(lora.dropout > 0), mtp=float(w.mtp))


_TRAINING_ARRAYS: IdentityCache[Training, TrainingArrays] = IdentityCache(64)  # TrainingArrays.of per workload
