"""A training row's software stack and its recipe: the stack its framework and year name, the recipe that stack
publishes for the row's model, GPU and release, and what that recipe sets in the row's strategy fields."""

from __future__ import annotations

import re
from typing import Any

from armillary.specs.loading import load_stack, stack_for
from armillary.specs.stack import RecipeSettings, SoftwareStack
from armillary.specs.strategy import BlockFormat, TrainingPrecision
from armillary.validation.model_words import model_preset_for

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


def recipe_precision(out: dict[str, Any]) -> str:
    """The row's precision by the name Megatron-Bridge's performance scripts give it (`RECIPE_PRECISIONS`):
    fp8_mx for MXFP8, nvfp4, fp8_cs for per-tensor fp8 (the tables' FP8-CS), else bf16."""
    block = out.get("block_format")
    if block is BlockFormat.MXFP8:
        return "fp8_mx"
    if block is BlockFormat.NVFP4:
        return "nvfp4"
    return "fp8_cs" if out.get("precision") is TrainingPrecision.FP8 else "bf16"


def _apply_param_gather(recipe: RecipeSettings, out: dict[str, Any], said: list[str]) -> None:
    """The recipe's overlapped parameter all-gather turned off under the row's precision
    (`RecipeSettings.param_gather_overlap_off`): the distributed optimizer's all-gather then runs after the
    optimizer step, exposed (`Overlap.param_gather`)."""
    precision = recipe_precision(out)
    if precision in recipe.param_gather_overlap_off and "overlap" in out:
        out["overlap"] = {**out["overlap"], "param_gather": False}
        said.append(f"overlapped parameter all-gather off under {precision}")


def apply_dense_recipe(recipe: RecipeSettings, stack: SoftwareStack, out: dict[str, Any], notes: list[str]) -> None:
    """What a dense model's recipe sets beside its memory settings (`recompute_choices` reads those)."""
    graphs = "+".join(recipe.cuda_graph_scope) or "none"
    said = [f"CUDA graphs {graphs}" + ("" if graphs == "none" else " (recorded; a dense layer's host time is not "
                                        "modelled, so not applied)")]
    said.append(f"Megatron FSDP {'on' if recipe.fsdp else 'off'}")
    _apply_param_gather(recipe, out, said)
    notes.append(_recipe_note(recipe, stack, said))


def apply_moe_recipe(recipe: RecipeSettings, stack: SoftwareStack, out: dict[str, Any], moe: dict[str, Any],
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
    _apply_param_gather(recipe, out, said)
    notes.append(_recipe_note(recipe, stack, said))
