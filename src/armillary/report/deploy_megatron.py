"""A training strategy as Megatron-LM / NeMo (Megatron-Core) arguments: the model's architecture, the
parallel layout and pipeline, memory savers, precision and block-scaled recipes, LoRA; what the flags cannot
express goes into the notes. Flag names: Megatron-LM megatron/training/arguments.py (Megatron-Core 0.12+:
--attention-backend, --cp-comm-type, --overlap-moe-expert-parallel-comm, --use-tp-pp-dp-mapping; 0.15+:
--moe-flex-dispatcher-backend)."""

from __future__ import annotations

from armillary.errors import SpecError
from armillary.plan.layout import data_parallel
from armillary.report.launch import Command, Deployment, Target
from armillary.specs.model import MlpKind, Model, NormKind, PositionKind, TokenMixer
from armillary.specs.strategy import (
    Attention,
    BlockFormat,
    ContextParallel,
    CrossEntropy,
    MainParamPrecision,
    OptimizerStatePrecision,
    ProjectionPrecision,
    RankOrder,
    Recompute,
    RecomputeModule,
    Schedule,
    Strategy,
    TpLayout,
    TrainingPrecision,
    ZeroStage,
)
from armillary.specs.system import System
from armillary.specs.workload import BasePrecision, Lora, LoraTarget, Training


def _model_args(model: Model, seq_len: int, notes: list[str]) -> list[str]:
    args = ["--num-layers", str(model.layers), "--hidden-size", str(model.hidden), "--num-attention-heads",
            str(model.heads), "--ffn-hidden-size", str(model.ffn), "--seq-length", str(seq_len),
            "--max-position-embeddings", str(max(model.max_seq_len, seq_len))]
    if model.kv_heads is not None and model.kv_heads != model.heads:
        args += ["--group-query-attention", "--num-query-groups", str(model.kv_heads)]
    if model.moe is not None:
        moe = model.moe
        args += ["--num-experts", str(moe.experts), "--moe-router-topk", str(moe.top_k),
                 "--moe-ffn-hidden-size", str(moe.expert_ffn)]
        if moe.shared_experts:  # Megatron-Core fuses the shared experts into one MLP of their summed width
            width = moe.shared_experts * (moe.shared_ffn or moe.expert_ffn)
            args += ["--moe-shared-expert-intermediate-size", str(width)]
        if moe.dense_layers:
            args += ["--moe-layer-freq", f"([0]*{moe.dense_layers}+[1]*{model.layers - moe.dense_layers})"]
        if moe.expert_groups is not None:
            args += ["--moe-router-num-groups", str(moe.expert_groups), "--moe-router-group-topk", str(moe.group_top_k)]
        if moe.router_bias:
            notes.append("router bias (GPT-OSS): Megatron-Core's router linear has no bias argument")
    return args + _architecture_args(model, notes)


# Megatron-Core TransformerConfig defaults (megatron/core/transformer/transformer_config.py): GeLU MLP, LayerNorm,
# learned absolute positions (arguments.py --position-embedding-type), biases on every linear layer, tied input
# and output embeddings, dropout 0.1; each departure of the model from them is a flag, or a note


_POSITION = {PositionKind.ROTARY: "rope", PositionKind.NONE: "none"}


def _architecture_args(model: Model, notes: list[str]) -> list[str]:
    """The block's architecture as Megatron-LM flags (arguments.py, TransformerConfig's generated flags)."""
    args: list[str] = []
    if model.mlp is MlpKind.SWIGLU:
        args += ["--swiglu"]
    elif model.mlp is not MlpKind.GELU:  # --squared-relu and --quick-geglu are other functions
        notes.append(f"mlp {model.mlp.value}: Megatron-LM has no flag for it (--swiglu, --squared-relu, "
                     "--quick-geglu are other activations); these arguments build a GeLU MLP")
    if model.norm is NormKind.RMSNORM:
        args += ["--normalization", "RMSNorm"]
    if model.position in _POSITION:
        args += ["--position-embedding-type", _POSITION[model.position]]
    elif model.position is PositionKind.ALIBI:
        notes.append("ALiBi positions: Megatron-LM has no ALiBi (--position-embedding-type is learned_absolute, "
                     "rope, yarn, mrope, relative or none); these arguments learn absolute positions")
    if not model.tied_embeddings:
        args += ["--untie-embeddings-and-output-weights"]
    if not model.linear_bias:
        args += ["--disable-bias-linear"]
    if model.qkv_bias and not model.linear_bias:
        args += ["--add-qkv-bias"]
    if not model.dropout:  # Megatron's default is 0.1 for both
        args += ["--hidden-dropout", "0", "--attention-dropout", "0"]
    if model.head_dim is not None and model.mla is None and model.head_dim * model.heads != model.hidden:
        args += ["--kv-channels", str(model.head_dim)]
    if model.qk_norm:
        args += ["--qk-layernorm"]
    if model.attention_sinks:
        args += ["--softmax-type", "learnable"]
    if model.mla is not None:
        mla = model.mla
        args += ["--multi-latent-attention", "--kv-lora-rank", str(mla.kv_lora_rank), "--qk-head-dim",
                 str(mla.nope_head_dim), "--qk-pos-emb-head-dim", str(mla.rope_head_dim), "--v-head-dim",
                 str(mla.v_head_dim)]
        if mla.q_lora_rank is not None:
            args += ["--q-lora-rank", str(mla.q_lora_rank)]
    if model.sliding_window is not None:
        args += ["--window-size", f"{model.sliding_window},0"]  # (left, right): causal
        every = 1 / (1 - model.window_layers) if model.window_layers < 1 else 0.0
        if every and abs(every - round(every)) < 1e-9:  # one full-attention layer after every - 1 windowed ones
            args += ["--window-attn-skip-freq", str(round(every))]
        elif model.window_layers < 1:
            notes.append(f"sliding window on {model.window_layers:.0%} of layers: set --window-attn-skip-freq "
                         "to the model's pattern of full-attention layers")
    if model.token_mixer is not TokenMixer.ATTENTION or model.bitlinear is not None:
        notes.append("MatMul-free (MLGRU token mixer / ternary BitLinear): not a Megatron-LM GPT model; these "
                     "arguments build an attention transformer of the same sizes")
    notes.append(f"vocabulary {model.vocab:,}: set by the tokenizer (--tokenizer-type / --tokenizer-model); "
                 "Megatron pads it to a multiple of --make-vocab-size-divisible-by (128)")
    return args


def _pipeline_args(model: Model, s: Strategy, notes: list[str]) -> list[str]:
    args = ["--pipeline-model-parallel-size", str(s.pp)]
    if s.pipeline_layout is not None:  # sets every chunk's layers itself (Megatron-Core 0.13+)
        return [*args, "--pipeline-model-parallel-layout", s.pipeline_layout]
    if s.first_stage_layers is not None:
        args += ["--decoder-first-pipeline-num-layers", str(s.first_stage_layers)]
    if s.last_stage_layers is not None:
        args += ["--decoder-last-pipeline-num-layers", str(s.last_stage_layers)]
    if s.vpp > 1:
        even = s.first_stage_layers is None and s.last_stage_layers is None and model.layers % (s.pp * s.vpp) == 0
        args += (["--num-layers-per-virtual-pipeline-stage", str(model.layers // (s.pp * s.vpp))] if even
                 else ["--num-virtual-stages-per-pipeline-rank", str(s.vpp)])
    if s.pipeline_schedule in (Schedule.GPIPE, Schedule.ZB_H1):
        notes.append(f"schedule {s.pipeline_schedule.value}: Megatron-LM runs 1F1B (interleaved with vpp > 1); "
                     "zero-bubble schedules need the sail-sg/zero-bubble-pipeline-parallelism fork")
    return args


_RECOMPUTE_MODULES = {RecomputeModule.CORE_ATTN: "core_attn", RecomputeModule.LAYERNORM: "layernorm",
                      RecomputeModule.MLP: "mlp", RecomputeModule.SHARED_EXPERTS: "shared_experts",
                      RecomputeModule.MOE_ACT: "moe_act", RecomputeModule.MLA_UP_PROJ: "mla_up_proj",
                      RecomputeModule.MOE: "moe"}
# Megatron-Core AttnBackend: flash (FlashAttention via Transformer Engine), fused (cuDNN fused attention,
# the FlashAttention-3 class kernel on Hopper), unfused (PyTorch attention: the s x s scores in HBM)


_ATTENTION = {Attention.STANDARD: "unfused", Attention.FLASH1: "flash", Attention.FLASH: "flash",
              Attention.FLASH3: "fused"}


def _memory_args(s: Strategy, notes: list[str]) -> list[str]:
    args: list[str] = []
    if s.recompute is Recompute.SELECTIVE:
        args += ["--recompute-granularity", "selective"]
        if s.recompute_modules != (RecomputeModule.CORE_ATTN,):
            args += ["--recompute-modules", *(_RECOMPUTE_MODULES[m] for m in s.recompute_modules)]
    elif s.recompute is Recompute.FULL and s.recompute_layers is not None:
        args += ["--recompute-granularity", "full", "--recompute-method", "block", "--recompute-num-layers",
                 str(s.recompute_layers)]
    elif s.recompute is Recompute.FULL:
        args += ["--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]
    if s.zero is ZeroStage.PARAMETERS:
        args += ["--use-torch-fsdp2"]
    elif s.zero is not ZeroStage.NONE:
        args += ["--use-distributed-optimizer"]
        if s.zero is ZeroStage.GRADIENTS:
            notes.append("ZeRO-2: Megatron's distributed optimizer reduce-scatters gradients into optimizer "
                         "shards but keeps a full gradient buffer (ZeRO-1 memory)")
    if s.offload.optimizer:
        args += ["--optimizer-cpu-offload"]
    if s.offload.activations and s.offload.activation_layers is not None:
        args += ["--cpu-offloading", "--cpu-offloading-num-layers", str(s.offload.activation_layers)]
    elif s.offload.activations:
        notes.append("offloading every layer's activations: Megatron-Core's --cpu-offloading-num-layers must be "
                     "below the layer count (set offload.activation_layers)")
    if s.offload.weights:
        notes.append("weight offload (Transformer Engine cpu_offloading weights) has no Megatron-LM argument here")
    if s.offload.gradients:
        notes.append("gradient offload (ZeRO-Offload's host gradients) has no Megatron-LM argument: "
                     "--optimizer-cpu-offload keeps the gradients on the device; DeepSpeed's offload_optimizer does")
    if s.offload.experts:
        notes.append("expert offload (routed experts fetched per MoE layer) has no Megatron-LM argument")
    return args


def megatron(model: Model, system: System, s: Strategy, workload: Training) -> Deployment:
    """Megatron-LM `pretrain_gpt.py` arguments (the same names are NeMo's model.* / trainer settings)."""
    if s.tp_layout is TpLayout.TWO_D:  # no launch rather than a 1-D one priced as 2-D
        raise SpecError("strategy.tp_layout '2d' (SUMMA on a q x q grid) has no Megatron-LM launch: Megatron-LM and "
                        "Megatron-Core split tensor parallelism in 1-D only (--tensor-model-parallel-size). "
                        "Colossal-AI runs the 2-D layout (legacy tensor parallel mode '2d': Linear2D, LayerNorm2D); "
                        "emit tp_layout '1d' for Megatron-LM")
    if s.block_format is BlockFormat.INT8:  # no launch rather than flags for another recipe
        raise SpecError("strategy.block_format 'int8' (AQT int8 GEMMs) has no Megatron-LM launch: Megatron-LM's "
                        "Transformer Engine recipes are fp8 (--fp8-recipe tensorwise, delayed, mxfp8, blockwise) and "
                        "fp4 (--fp4-recipe nvfp4), none of them int8; MaxText runs it (quantization=int8)")
    notes: list[str] = [f"{system.devices} devices: torchrun world size {system.devices}, "
                        f"data parallel {data_parallel(s, system)} (implied)"]
    if system.memory_pool is not None:
        notes.append(f"the system's memory pool ({system.memory_pool.name}) is a what-if: Megatron-LM offloads to "
                     "host memory only")
    args = ["--tensor-model-parallel-size", str(s.tp), *_pipeline_args(model, s, notes)]
    if s.cp > 1:
        args += ["--context-parallel-size", str(s.cp),
                 "--cp-comm-type", "a2a" if s.cp_comm is ContextParallel.ALL_TO_ALL else "p2p"]
    if s.ep > 1:
        args += ["--expert-model-parallel-size", str(s.ep)]
    if s.expert_tp is not None and s.expert_tp != s.tp:
        args += ["--expert-tensor-parallel-size", str(s.expert_tp)]
    if s.sequence_parallel:
        args += ["--sequence-parallel"]
    if s.rank_order is RankOrder.PP_INNER:
        args += ["--use-tp-pp-dp-mapping"]
    args += ["--micro-batch-size", str(s.micro_batch), "--global-batch-size", str(workload.global_batch),
             *_model_args(model, workload.seq_len, notes), *_memory_args(s, notes)]
    if workload.mtp and model.mtp_layers:  # Megatron-LM arguments.py: --mtp-num-layers (estimate/mtp.py)
        args += ["--mtp-num-layers", str(model.mtp_layers)]
    if s.overlap.dp_grad_reduce:
        args += ["--overlap-grad-reduce"]
    if s.overlap.param_gather and s.zero is not ZeroStage.NONE:
        args += ["--overlap-param-gather"]
    if s.overlap.tp_comm and s.tp > 1:
        args += ["--tp-comm-overlap"]
    if s.overlap.ep_comm and s.ep > 1:
        args += ["--overlap-moe-expert-parallel-comm"]
    if s.routing.dispatch_dedup and s.ep > 1:
        args += ["--moe-token-dispatcher-type", "flex", "--moe-flex-dispatcher-backend", "deepep"]
    if s.routing.redundant_experts:
        notes.append(f"{s.routing.redundant_experts} redundant expert(s) per EP rank (EPLB): Megatron-LM has no "
                     "training argument for expert replicas; the estimate prices them as DeepSeek's EPLB places them")
    if s.moe_host.dispatch_sync and s.ep > 1:
        notes.append("the estimate has the token dispatcher wait for the token counts once per MoE layer forward "
                     "(Megatron-Core's dropless alltoall dispatcher); a capacity factor with "
                     "--moe-pad-expert-input-to-capacity avoids that wait")
    args += _precision_args(s, notes)
    args += ["--attention-backend", _ATTENTION[s.attention]]
    if s.attention is Attention.FLASH1:
        notes.append("flash1: Megatron's flash backend runs FlashAttention-2 (faster than the estimate)")
    if workload.finetune is not None:
        notes.append(_lora_note(workload.finetune))
    return Deployment(Target.MEGATRON, (Command(("torchrun", "pretrain_gpt.py", *args)),), notes=tuple(notes))


# the block formats as Megatron-LM's Transformer Engine arguments (arguments.py _add_transformer_engine_args:
# --fp8-recipe {tensorwise, delayed, mxfp8, blockwise}, --fp4-format e2m1, --fp4-recipe nvfp4); MXFP8 in E4M3,
# Transformer Engine MXFP8BlockScaling's default format


_BLOCK_FORMAT_ARGS = {BlockFormat.MXFP8: ["--fp8-format", "e4m3", "--fp8-recipe", "mxfp8"],
                      BlockFormat.NVFP4: ["--fp4-format", "e2m1", "--fp4-recipe", "nvfp4"],
                      BlockFormat.MXFP4: ["--fp4-format", "e2m1", "--fp4-recipe", "mxfp4"]}


def _precision_args(s: Strategy, notes: list[str]) -> list[str]:
    """The numeric recipe: --bf16 / --fp16, fp8 (--fp8-format hybrid), a block format (docs/fp4.md), the layers
    kept in bf16 (--first-last-layers-bf16, which Megatron-Core's get_fp8_context and get_fp4_context honour)."""
    if s.block_format is BlockFormat.NONE:
        args = {TrainingPrecision.BF16: ["--bf16"], TrainingPrecision.FP16: ["--fp16"], TrainingPrecision.FP32: [],
                TrainingPrecision.FP8: ["--bf16", "--fp8-format", "hybrid"]}[s.precision]
    else:
        args = ["--bf16", *_BLOCK_FORMAT_ARGS[s.block_format]]
    if s.block_format is BlockFormat.MXFP4:
        notes.append("mxfp4: upstream Megatron-LM's --fp4-recipe offers nvfp4 only; --fp4-recipe mxfp4 is AMD "
                     "Primus's (its Megatron backend with Primus-Turbo kernels)")
    if s.precision is TrainingPrecision.FP8 and s.block_format in (BlockFormat.NVFP4, BlockFormat.MXFP4):
        notes.append(f"precision fp8 with {s.block_format.value}: Megatron's FP4 recipe takes --fp4-format without "
                     "--fp8-format (the estimate prices both alike)")
    args += _stored_precision_args(s, notes)
    kept = s.quantized_gemms
    if kept.first_layers_bf16 or kept.last_layers_bf16:
        args += ["--first-last-layers-bf16", "--num-layers-at-start-in-bf16", str(kept.first_layers_bf16),
                 "--num-layers-at-end-in-bf16", str(kept.last_layers_bf16)]
    if kept.attention_projections is not ProjectionPrecision.RECIPE:
        notes.append(f"attention projections in {kept.attention_projections.value}: Megatron-LM runs every linear "
                     "layer of a quantized transformer layer in the recipe; no argument keeps them wider")
    return args


def _stored_precision_args(s: Strategy, notes: list[str]) -> list[str]:
    """Weights kept in fp8 (--fp8-param-gather: Transformer Engine fp8 parameters, gathered in fp8) and the
    optimizer's stored precisions (--use-precision-aware-optimizer with --exp-avg-dtype, --exp-avg-sq-dtype,
    --main-params-dtype: Megatron-LM arguments.py, Megatron-Core OptimizerConfig)."""
    if s.cross_entropy is CrossEntropy.EAGER_FP32:
        notes.append("cross_entropy eager_fp32 (12 bytes per logit): Megatron-LM computes its loss with the "
                     "vocab-parallel cross-entropy, which keeps less; the estimate counts the eager loss")
    fp4 = s.block_format in (BlockFormat.NVFP4, BlockFormat.MXFP4)  # --fp4-param-gather: parameters in fp4
    args = [("--fp4-param-gather" if fp4 else "--fp8-param-gather")] if s.fp8_params else []
    if s.optimizer_states is OptimizerStatePrecision.FP32 and s.main_params is MainParamPrecision.FP32:
        return args
    args += ["--use-precision-aware-optimizer", "--exp-avg-dtype", s.optimizer_states.value, "--exp-avg-sq-dtype",
             s.optimizer_states.value, "--main-params-dtype", s.main_params.value]
    if s.main_params is MainParamPrecision.FP32 and not s.fp8_params and s.precision is not TrainingPrecision.FP32:
        notes.append("the precision-aware optimizer keeps fp32 main parameters beside bf16 weights as their 16-bit "
                     "remainders (Megatron-Core OptimizerConfig.store_param_remainders, on by default with "
                     "Transformer Engine 2.1+): 2 bytes per parameter fewer than the estimate counts")
    return args


_NEMO_LORA_TARGETS = {LoraTarget.Q: "linear_qkv", LoraTarget.K: "linear_qkv", LoraTarget.V: "linear_qkv",
                      LoraTarget.O: "linear_proj", LoraTarget.GATE: "linear_fc1", LoraTarget.UP: "linear_fc1",
                      LoraTarget.DOWN: "linear_fc2"}


def _lora_note(lora: Lora) -> str:
    """What the arguments cannot say of a LoRA run: pretrain_gpt.py has no LoRA flag; NeMo's fine-tuning
    recipe does (NeMo 2.0 llm.finetune with peft=llm.peft.LoRA(dim, target_modules))."""
    targets = list(dict.fromkeys(_NEMO_LORA_TARGETS[t] for t in lora.target_modules))
    text = (f"LoRA rank {lora.rank}: Megatron-LM pretrain_gpt.py has no LoRA flag (these arguments train every "
            f"weight); run NeMo's fine-tuning instead: llm.finetune(..., peft=llm.peft.LoRA(dim={lora.rank}, "
            f"target_modules={targets}))")
    if not lora.fused and len(targets) < len(lora.target_modules):
        text += "; NeMo's adapters sit on the fused linear_qkv / linear_fc1, not one per projection"
    if lora.base_precision is BasePrecision.NF4:
        text += "; a 4-bit NF4 base (QLoRA) has no NeMo / Megatron setting (bitsandbytes with Hugging Face PEFT)"
    elif lora.base_precision is BasePrecision.FP8:
        text += "; an fp8 base: --fp8-param-gather (Transformer Engine fp8 parameters)"
    return text
