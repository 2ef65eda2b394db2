"""A training row's software stack and what it sets: the strategy (precision, sharding, overlap, experts) and
the recomputation choices."""

from __future__ import annotations

import re
from typing import Any

from armillary.specs.loading import load_stack, stack_for
from armillary.specs.model import Model
from armillary.specs.stack import RecipeSettings, SoftwareStack, hopper_or_later
from armillary.specs.strategy import BlockFormat, Recompute, TrainingPrecision, ZeroStage
from armillary.validation.reading import about_the_run, fp8_params_stated
from armillary.validation.row_columns import Unsupported, int_column
from armillary.validation.row_layout import read_micro_batch
from armillary.validation.vocabulary import (
    block_format_of,
    clean,
    deduplicated_dispatch,
    flag,
    model_preset_for,
    precision_of,
    recompute_layers_of,
    recompute_modules_of,
    recompute_of,
    sharding_of,
)

DEFAULT_STACK = "megatron-core"  # a row that names no framework: today's most published stack


def year_of(source: str) -> int | None:
    """The year a source was published: an arXiv number (2104.04473 -> 2021), else the first year named."""
    arxiv = re.search(r"arxiv:?\s*(\d{2})(\d{2})\.\d{4,5}", source, re.I)
    if arxiv:
        return 2000 + int(arxiv.group(1))
    named = re.search(r"\b(20[0-3]\d)\b", source)
    return int(named.group(1)) if named else None


def read_stack(row: dict[str, str], notes: list[str]) -> SoftwareStack:
    """The row's software stack (`stack_for` its framework and year), else `DEFAULT_STACK`."""
    framework = row.get("framework", "")
    stack = stack_for(framework, year_of(row.get("source", "")))
    if stack is None:
        stack = load_stack(DEFAULT_STACK)
        notes.append(f"framework {framework or 'not stated'!r}: defaults of {stack.name}")
    else:
        notes.append(f"defaults of {stack.name}")
    return stack


_GPU_TYPE = re.compile(r"\b(gb300|gb200|b300|b200|h200|h100)\b", re.I)
_RELEASE = re.compile(r"\bNeMo (\d\d\.\d\d(?:\.\d\d)?)\b", re.I)


def recipe_of(row: dict[str, str], stack: SoftwareStack) -> RecipeSettings | None:
    """What the row's stack's recipe sets for its model preset, GPU type and release (its framework text's
    'NeMo 25.11'; `SoftwareStack.recipes`), dense or MoE; None when the stack has none for them."""
    if not stack.recipes:
        return None
    preset = model_preset_for(row.get("model"))
    gpu = _GPU_TYPE.search(row.get("gpu", ""))
    release = _RELEASE.search(row.get("framework", ""))
    if preset is None or gpu is None or release is None:
        return None
    return stack.recipe(preset, gpu.group(1).lower(), release.group(1))


_FSDP = re.compile(r"\bfsdp=(\d+)", re.I)


def stated_fsdp(row: dict[str, str]) -> bool | None:
    """Whether the row's table states Megatron FSDP ('FSDP=64' on; 'FSDP=0' off); None: not stated."""
    found = _FSDP.search(row.get("other_reported", ""))
    return None if found is None else int(found.group(1)) > 0


def _recipe_note(recipe: RecipeSettings, stack: SoftwareStack, said: list[str]) -> str:
    """The note naming what the row took from its stack's recipe, its source and where the table differs."""
    return (f"{stack.name} recipe for this model, GPU and release: " + ", ".join(said) + f" ({recipe.source})"
            + (f"; the recipe differs from the row: {recipe.differs} (the row kept)" if recipe.differs else ""))


def _apply_dense_recipe(recipe: RecipeSettings, stack: SoftwareStack, notes: list[str]) -> None:
    """What a dense model's recipe sets beside its memory settings (`recompute_choices` reads those)."""
    graphs = "+".join(recipe.cuda_graph_scope) or "none"
    said = [f"CUDA graphs {graphs}" + ("" if graphs == "none" else " (recorded; a dense layer's host time is not "
                                        "modelled, so not applied)")]
    said.append(f"Megatron FSDP {'on' if recipe.fsdp else 'off'}")
    notes.append(_recipe_note(recipe, stack, said))


def _apply_moe_recipe(recipe: RecipeSettings, stack: SoftwareStack, out: dict[str, Any], moe: dict[str, Any],
                      notes: list[str]) -> None:
    """What the recipe sets for the MoE layers (`RecipeSettings`), into the row's strategy fields."""
    said = [f"dispatcher {recipe.dispatcher or 'not stated'}"]
    routing: dict[str, Any] = dict(moe.get("routing", {}))
    if recipe.dispatcher in ("hybridep", "deepep"):  # the flex dispatcher's DeepEP / HybridEP: one copy per node
        routing["dispatch_dedup"] = True
    if recipe.capacity_factor is not None:
        routing.update(capacity_factor=recipe.capacity_factor, pad_to_capacity=recipe.pad_to_capacity)
        said.append(f"token drop at capacity {recipe.capacity_factor:g}"
                    + (", padded to capacity" if recipe.pad_to_capacity else ""))
    if routing:
        moe["routing"] = routing
    host = dict(out.get("moe_host") or {})
    if host:
        if recipe.pad_to_capacity:  # drop_and_pad: counts known on the host, no device-to-host sync
            host["dispatch_sync"] = False
        scope = "+".join(sorted(recipe.cuda_graph_scope))
        if scope in stack.graph_host_ops:
            host["ops"] = stack.graph_host_ops[scope]
        out["moe_host"] = host
    said.append(f"CUDA graphs {'+'.join(recipe.cuda_graph_scope) or 'none'}")
    if recipe.a2a_overlap:
        # recorded, not applied: `Overlap.ep_comm` would hide the all-to-all in full, and Megatron-Core says its
        # batch-level overlap "brings extra cpu overhead and may cause GPU bubble" without CUDA graphs
        # (NVIDIA/Megatron-LM PR #2184, 2025-11, partial CUDA graphs for EP overlap), which these recipes
        # leave off; how much it hides is not stated (docs/validation.md, Megatron-Bridge MoE rows)
        said.append("batch-level all-to-all overlap set by the recipe, not applied (its hiding without CUDA "
                    "graphs is not stated)")
    notes.append(_recipe_note(recipe, stack, said))


def read_strategy(row: dict[str, str], n_gpus: int, stack: SoftwareStack, notes: list[str]) -> dict[str, Any]:
    """The row's strategy fields: its parallel degrees, and what its stack sets that the row does not state."""
    tp, pp = int_column(row, "tp"), int_column(row, "pp")
    if tp is None or pp is None:
        raise Unsupported("tp, pp: parallel configuration not stated")
    cp = int_column(row, "cp") or 1
    dp = n_gpus // (tp * cp * pp)
    if dp == 0:
        raise Unsupported(f"n_gpus: {n_gpus} GPUs cannot hold one replica of tp x cp x pp = {tp * cp * pp}")
    if int_column(row, "dp") not in (None, dp):
        notes.append(f"dp={dp} from n_gpus / (tp cp pp); the row's dp {int_column(row, 'dp')} does not multiply "
                     f"to its {n_gpus} GPUs")
    mbs = read_micro_batch(row, stack, dp, pp, notes)
    out = stack.strategy_defaults(tp, hopper_or_later(row.get("gpu", "")))
    framework, other = clean(row.get("framework")), clean(row.get("other_reported"))
    if re.search(r"ulysses|ring[- ]?attention|context[- ]parallel", clean(row.get("seq_parallel"))):
        # DeepSpeed-Ulysses and ring attention split the sequence across ranks for attention: context
        # parallelism (Strategy.cp), not Megatron's sequence parallelism of the TP region's norms and dropout
        raise Unsupported(f"seq_parallel: {row.get('seq_parallel')!r} names context parallelism (Ulysses / ring "
                          "attention), not Megatron's sequence parallelism; the row needs it as cp")
    sp = flag(row.get("seq_parallel"))
    if sp is None:
        notes.append(f"sequence_parallel={out['sequence_parallel']} (not stated)")
    else:
        out["sequence_parallel"] = sp and tp > 1
    precision = precision_of(row.get("precision"))
    if precision is None:
        notes.append(f"precision={out['precision'].value} ({row.get('precision') or 'not stated'})")
    else:
        out["precision"] = precision
    block = block_format_of(row.get("precision"))
    if block is not None:  # the format of a recipe's GEMMs, beside the precision its tensors are kept in
        out["block_format"] = block
        if block is not BlockFormat.MXFP8:  # Megatron's FP4 recipes: --bf16 --fp4-format e2m1 (`Strategy.block_format`)
            out["precision"] = TrainingPrecision.BF16
        notes.append(f"block_format={block.value}, precision={out['precision'].value} (the precision "
                     f"{row.get('precision')!r} names the block-scaled format)")
    if fp8_params_stated(row) and out["precision"] is TrainingPrecision.FP8:
        out["fp8_params"] = True  # needs a sharded optimizer, as the stacks that offer it have (zero >= 1)
        notes.append("fp8_params: the row says its weights were kept in fp8 (FP8 params / param gather)")
    elif out.get("fp8_params") and out["precision"] is not TrainingPrecision.FP8:
        out["fp8_params"] = False  # a stack's fp8 parameters belong to its fp8 recipe, not a row's bf16 run
    fsdp_degree = re.search(r"fsdp=(\d+)", other)
    sharding = sharding_of(framework) or (ZeroStage.PARAMETERS if fsdp_degree and int(fsdp_degree.group(1)) > 0
                                          else None)
    kept = "; ".join(about_the_run(row.get("notes", "")))
    if (sharding or out["zero"]) is ZeroStage.PARAMETERS and sharding_of(kept) is ZeroStage.GRADIENTS \
            and re.search(r"reshard", kept, re.I):
        sharding = ZeroStage.GRADIENTS  # FSDP keeping the gathered parameters from forward to backward
        notes.append("zero=2: the notes say the parameters are not resharded after the forward pass")
    if sharding is not None:
        out["zero"] = sharding
    if out["zero"] is ZeroStage.PARAMETERS and pp > 1 and re.search(r"torchtitan", stack.name, re.I):
        # torchtitan's apply_fsdp sets reshard_after_forward False when PP is on, and PyTorch's pipeline
        # schedules reduce-scatter and reshard only after the last micro-batch (torch.distributed.pipelining
        # stage.py backward_maybe_with_nosync): parameters gathered and gradients whole for the step, the
        # optimizer sharded, one gather and one reduce-scatter per step: ZeRO-1
        out["zero"] = ZeroStage.OPTIMIZER
        notes.append(f"zero=1: {stack.name} keeps FSDP's parameters gathered and gradients unsharded across the "
                     "micro-batches of a pipeline (reshard_after_forward off under PP)")
    if re.search(r"tp-comm-overlap|tp comm overlap|async ?tp|collective matmul", f"{framework} "
                 f"{clean(row.get('notes'))}") and tp > 1:
        out["overlap"]["tp_comm"] = True
    notes.append(f"attention={out['attention'].value}, zero={int(out['zero'])}, overlapped: "
                 + (", ".join(k for k, v in out["overlap"].items() if v) or "nothing"))
    moe: dict[str, Any] = {}
    if int_column(row, "experts"):
        moe = dict(ep=int_column(row, "ep") or 1, expert_tp=1)
        notes.append("expert_tp=1, balanced routing (the benchmarks force-balance the tokens)")
        if deduplicated_dispatch(f"{framework} {clean(row.get('notes'))}"):
            moe["routing"] = {"dispatch_dedup": True}
            notes.append("dispatch_dedup (the row names DeepEP / HybridEP: one copy per node and device)")
        recipe = recipe_of(row, stack)
        if recipe is not None:
            _apply_moe_recipe(recipe, stack, out, moe, notes)
    elif (recipe := recipe_of(row, stack)) is not None:
        _apply_dense_recipe(recipe, stack, notes)
    vpp = int_column(row, "vpp")
    if vpp is None and re.search(r"interleav", clean(row.get("vpp"))):
        notes.append(f"vpp=1: the row says {row.get('vpp')!r} without the chunks per stage (the bubble of an "
                     "interleaved schedule is overstated)")
    return dict(**out, **moe, tp=tp, pp=pp, cp=cp, dp=dp, vpp=vpp or 1, micro_batch=mbs)


# module recompute of the MoE recipes (Megatron MoE model zoo, Qwen3 and DeepSeek-V3 best practice on H100:
# "norm, act", plus MLA's up-projections for DeepSeek)
_MOE_MODULES = ("core_attn", "layernorm", "moe_act")


def recompute_choices(row: dict[str, str], model: Model, stack: SoftwareStack, chunk: int,
                       notes: list[str]) -> list[dict[str, Any]]:
    """The recomputation the row states or its stack sets; else every choice from the least to the most:
    none, selective, the MoE recipes' modules, full recomputation of the first 1, 2, ... layers of each model
    chunk of `chunk` layers (Megatron's block method, which NVIDIA's recipes use: recompute_num_layers), all."""
    stated_choice = recompute_of(row.get("recompute")) or stack.recompute
    recipe = recipe_of(row, stack) if stated_choice is None else None
    fsdp = stated_fsdp(row)
    if recipe is not None and fsdp is not None and fsdp != recipe.fsdp:
        # the recipe's recomputation and offloading fit its own sharding; the table states another
        notes.append(f"{stack.name}'s recipe for this model, GPU and release shards "
                     f"{'with' if recipe.fsdp else 'without'} Megatron FSDP, the row "
                     f"{'with' if fsdp else 'without'}: its recomputation and offloading, set for its own "
                     "sharding, not taken; the least recomputation that fits memory")
        recipe = None
    elif recipe is not None:  # the recipe states it; what it leaves unset is off (recompute_granularity None)
        first = _recipe_memory(recipe)
        notes.append(f"{stack.name}'s recipe for this model, GPU and release: {_said_memory(recipe)} (where that "
                     "does not fit memory: the least recomputation that does)")
        return [first, *(c for c in _ladder(model, stack, chunk) if c != first)]
    if stated_choice is not None:
        named = recompute_modules_of(row.get("recompute"))
        if stated_choice is Recompute.SELECTIVE and named is not None:
            notes.append("selective recomputation of the modules the row names: " + ", ".join(m.value for m in named))
            return [{"recompute": "selective", "recompute_modules": named}]
        layers = recompute_layers_of(row.get("recompute"))
        if stated_choice is Recompute.FULL and layers is not None:
            return [_stated_layers(layers, chunk, notes)]
        if stated_choice is Recompute.SELECTIVE and stack.selective_modules is not None:
            notes.append(f"selective recomputation as {stack.name} does it: "
                         + ", ".join(m.value for m in stack.selective_modules))
            return [{"recompute": "selective", "recompute_modules": stack.selective_modules}]
        return [{"recompute": stated_choice}]
    offered = stack.recompute_modes or tuple(Recompute)
    notes.append("recompute not stated: the least recomputation that fits memory"
                 + ("" if stack.recompute_modes is None else
                    f" of those {stack.name} offered ({', '.join(m.value for m in offered)})"))
    return _ladder(model, stack, chunk)


def _stated_layers(layers: tuple[int, str | None], chunk: int, notes: list[str]) -> dict[str, Any]:
    """Full recomputation of the layers a row names: Megatron-Core's uniform method recomputes every layer
    (groups of n layers, each group's input kept), the block method the first n layers of each model chunk
    (megatron/core/transformer/transformer_block.py _checkpointed_forward); a count without its method is read
    as the block method, which NVIDIA's recipes pass with recompute_num_layers (`_recipe_memory`)."""
    n, method = layers
    if method == "uniform" or n >= chunk:
        notes.append(f"full recomputation of every layer (the row states {n} layers"
                     + (", uniform method" if method == "uniform" else f", a model chunk has {chunk}") + ")")
        return {"recompute": "full"}
    notes.append(f"full recomputation of the first {n} of each chunk's {chunk} layers (the row states {n} layers; "
                 + ("block method)" if method else "no method named: Megatron-Core's block method assumed)"))
    return {"recompute": "full", "recompute_layers": n}


def _recipe_memory(recipe: RecipeSettings) -> dict[str, Any]:
    """The strategy fields of the recipe's recomputation and CPU activation offloading (Megatron-Bridge
    scripts/performance/utils/helpers.py set_recompute_overrides: recompute_num_layers -> full, block method;
    cpu_offloading_num_layers -> activations only, cpu_offloading_weights False)."""
    out: dict[str, Any] = {"recompute": "none"}
    if recipe.recompute_modules is not None:
        out = {"recompute": "selective", "recompute_modules": recipe.recompute_modules}
    elif recipe.recompute_layers is not None:
        out = {"recompute": "full", "recompute_layers": recipe.recompute_layers}
    if recipe.offload_activation_layers is not None:
        out["offload"] = {"activations": True, "activation_layers": recipe.offload_activation_layers}
    return out


def _said_memory(recipe: RecipeSettings) -> str:
    """The recipe's recomputation and offloading in words, for a row's notes."""
    if recipe.recompute_modules is not None:
        said = "selective recomputation of " + ", ".join(m.value for m in recipe.recompute_modules)
    elif recipe.recompute_layers is not None:
        said = f"full recomputation of the first {recipe.recompute_layers} layers of each chunk"
    else:
        said = "recompute=none"
    if recipe.offload_activation_layers is not None:
        said += f", the activations of the first {recipe.offload_activation_layers} layers of each chunk " \
                "offloaded to the host"
    return said


def _ladder(model: Model, stack: SoftwareStack, chunk: int) -> list[dict[str, Any]]:
    """Every recomputation choice the stack offers, from the least to the most."""
    offered = stack.recompute_modes or tuple(Recompute)
    choices: list[dict[str, Any]] = [{"recompute": "none"}, {"recompute": "selective"}]
    if model.moe is not None:
        modules = _MOE_MODULES + (("mla_up_proj",) if model.mla is not None else ())
        choices.append({"recompute": "selective", "recompute_modules": modules})
    partial = [{"recompute": "full", "recompute_layers": n} for n in range(1, chunk)] \
        if stack.recompute_modes is None else []  # the block method arrived with selective recomputation
    return [c for c in (*choices, *partial, {"recompute": "full"}) if Recompute(c["recompute"]) in offered]
