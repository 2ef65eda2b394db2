"""A training row's activation recomputation: what the row states or its stack's recipe sets, else every choice
the stack offers from the least to the most (the harness keeps the least that fits memory)."""

from __future__ import annotations

from typing import Any

from armillary.specs.model import Model
from armillary.specs.stack import RecipeSettings, SoftwareStack
from armillary.specs.strategy import Recompute
from armillary.validation.row_stack import recipe_of, stated_fsdp
from armillary.validation.strategy_words import recompute_layers_of, recompute_modules_of, recompute_of

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
