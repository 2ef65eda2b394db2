"""How rows word their strategy settings: activation recomputation (mode, modules, layers), data-parallel
sharding (ZeRO / FSDP), a deduplicating MoE dispatcher, a Megatron-Core pipeline layout."""

from __future__ import annotations

import re

from armillary.specs.strategy import Recompute, RecomputeModule, ZeroStage
from armillary.validation.vocabulary import NO_WORDS, YES_WORDS, clean, first_named, flag, head, stated


def recompute_of(text: str | None) -> Recompute | None:
    """Activation recomputation from its description; None when not stated."""
    value = stated(text)
    if value is None:
        return None
    first = head(value) or ""
    # "none set in config", "ACT_CKPT_* = null", "remat_policy=none": a configuration that turns nothing on;
    # "activation checkpointing: off", "recompute: false", "AC disabled", "no AC": a switch said to be off
    if first in NO_WORDS or re.match(r"(no|without) (activation )?(checkpointing|recompute|recomputation)", value) \
            or re.match(r"(none|nothing|not) set\b", value) or re.search(r"remat_policy\s*[=:]\s*none", value) \
            or flag(first) is False:
        return Recompute.NONE
    if recompute_modules_of(value) is not None:
        return Recompute.SELECTIVE
    # Megatron-LM's --recompute-activations sets recompute_granularity 'selective' (megatron/training/arguments.py
    # @d98e8a6); its removed --checkpoint-activations was the full recomputation it replaced
    if re.search(r"--recompute[-_]activations|\brecompute_activations\s*[=:]\s*(true|1)\b", value):
        return Recompute.SELECTIVE
    if re.search(r"remat_policy\s*[=:]\s*full\b", value):
        return Recompute.FULL
    if re.search(r"remat_policy\s*[=:]", value):
        return None  # MaxText's partial policies (minimal, save_dot_except_*) save other tensors than ours
    if "selective" in value:
        return Recompute.SELECTIVE
    # Hugging Face's "gradient checkpointing" recomputes every layer; Megatron's --recompute-num-layers and
    # --recompute-method apply only to full recomputation (megatron/training/arguments.py)
    # (a setting switched on: DeepSpeed's / torchtune's "activation_checkpointing: true", Hugging Face's
    # "gradient_checkpointing=True", torchtune's "enable_activation_checkpointing: True")
    if "full" in value or first in YES_WORDS or re.match(r"(enable[_ ])?(activation[_ ]|gradient[_ ])?(checkpointing|"
                                                    r"recompute|rematerialization)", first) \
            or re.search(r"recompute[-_ ](num[-_ ]layers|method)", value):
        return Recompute.FULL
    return None


def recompute_layers_of(text: str | None) -> tuple[int, str | None] | None:
    """The layers a full recomputation names and its method ("full, 8 layers", "full (block, 4 layers)",
    "--recompute-method uniform --recompute-num-layers 2"): (layers, "block" / "uniform" / None when the method
    is not named); None when no layer count is named."""
    value = clean(text)
    found = re.search(r"recompute[-_ ]num[-_ ]layers\s*[=: ]\s*(\d+)", value) or re.search(r"\b(\d+)\s*layers?\b",
                                                                                        value)
    if found is None:
        return None
    method = re.search(r"\b(uniform|block)\b", value)
    return int(found.group(1)), (method.group(1) if method else None)


def recompute_modules_of(text: str | None) -> tuple[RecomputeModule, ...] | None:
    """The modules a selective recomputation names ("selective: core_attn, moe_act", "--recompute-modules
    layernorm mla_up_proj"), in Megatron-Core's names; None when it names none."""
    value = clean(text)
    named = tuple(m for m in RecomputeModule if re.search(rf"(?<![a-z_]){m.value}(?![a-z_])", value))
    return named or None


# data-parallel sharding as frameworks name it; the first found wins
_SHARDINGS = (
    (r"no_shard|ddp only|zero[- ]?(stage[- ]?)?0\b", ZeroStage.NONE),
    # FSDP that keeps the gathered parameters from the forward to the backward holds them like ZeRO-2
    (r"shard_grad_op|zero[- ]?(stage[- ]?)?2\b|not reshard(ed)? after (the )?forward|"
     r"reshard_after_forward\s*[=:]\s*false", ZeroStage.GRADIENTS),
    (r"full_shard|hybrid_shard|zero[- ]?(stage[- ]?)?3\b|\bfsdp|fully_shard|zero[- ]infinity", ZeroStage.PARAMETERS),
    (r"zero[- ]?(stage[- ]?)?1\b|distributed optimi[sz]er", ZeroStage.OPTIMIZER),
)


def sharding_of(text: str | None) -> ZeroStage | None:
    """Data-parallel sharding named in a framework description (FSDP strategies, ZeRO stages, the
    distributed optimizer); None when none is named."""
    return first_named(clean(text), _SHARDINGS)


def deduplicated_dispatch(text: str | None) -> bool:
    """Whether a description names a dispatcher that sends each token once per node and device (DeepEP,
    HybridEP, Megatron-Core's flex dispatcher; `Routing.dispatch_dedup`)."""
    named = r"deep[- ]?ep|hybrid[- ]?ep|flex[- ]dispatcher|dispatcher[- ]type[ =]*flex"
    return re.search(named, clean(text)) is not None


# a pipeline layout a row states in Megatron-Core's syntax: "--pipeline-model-parallel-layout Et|(tt|)*30L",
# "pipeline_model_parallel_layout=...", "pipeline layout: ..." (case kept: 'E', 't', 'm', 'L' differ)
_LAYOUT = re.compile(r"(?:--pipeline-model-parallel-layout|pipeline_model_parallel_layout|pipeline layout)\s*[=:]?\s*"
                     r"['\"]?([EtmL|()*\d,]+)")


def pipeline_layout_of(text: str | None) -> str | None:
    """The Megatron-Core pipeline layout string a row's words state; None when they state none."""
    found = _LAYOUT.search(text or "")
    return found.group(1) if found else None
