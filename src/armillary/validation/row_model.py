"""A training row's model: the preset its name places, or its architecture columns over a family's conventions;
and whether it trains the model's multi-token-prediction modules."""

from __future__ import annotations

import re
from typing import Any

from armillary.specs.loading import load_model
from armillary.specs.model import Model
from armillary.specs.stack import RecipeSettings
from armillary.validation.model_words import model_preset_for, mtp_of
from armillary.validation.row_columns import SHAPE, Unsupported, int_column
from armillary.validation.vocabulary import clean

# family defaults for a model no preset names: (name pattern, preset whose non-shape fields fill the gaps)
_FAMILIES = (
    (re.compile(r"llama[ _-]?3", re.I), "llama3-8b"),  # vocabulary 128256
    (re.compile(r"llama|mistral|mixtral|deepseek|yi[ _-]\d|internlm|baichuan", re.I), "llama2-7b"),
    (re.compile(r"qwen", re.I), "qwen3-30b-a3b"),  # its dense conventions (the experts are dropped)
    (re.compile(r"mpt", re.I), "mpt-125m"),  # llm-foundry benchmark configs: learned positions, biases
    (re.compile(r"nemotron", re.I), "nemotron4-340b"),
    (re.compile(r"falcon", re.I), "falcon-180b"),
    (re.compile(r"bloom", re.I), "bloom-176b"),
    (re.compile(r"\bopt\b", re.I), "opt-175b"),
    (re.compile(r"gpt[ _-]?j", re.I), "gpt-j-6b"),
    (re.compile(r"gpt|megatron", re.I), "megatron-1.7b"),
)
# conventions of a model no name places: an MLP of 4 x hidden is GPT's ungated one (GeLU, LayerNorm, learned
# positions), any other width a gated one (SwiGLU, RMSNorm, rotary: Llama and most models since 2023)
_GATED, _UNGATED, _MOE = "llama2-7b", "megatron-1.7b", "mixtral-8x7b"


def _moe_model(row: dict[str, str], preset: str | None, notes: list[str]) -> Model:
    if preset is None:
        return _moe_from_columns(row, notes)
    model = load_model(preset)
    if model.moe is None:
        raise Unsupported(f"model: the row states experts but the {preset} preset has none")
    stated = {"layers": model.layers, "hidden": model.hidden, "experts": model.moe.experts, "topk": model.moe.top_k}
    differ = [f"{k} {int_column(row, k)} vs {v}" for k, v in stated.items() if int_column(row, k) not in (None, v)]
    if differ:
        raise Unsupported(f"model: the row's architecture differs from the {preset} preset: {', '.join(differ)}")
    notes.append(f"architecture from the {preset} preset (the row states layers, hidden, experts, top-k)")
    return model


def read_model(row: dict[str, str], notes: list[str]) -> Model:
    """The row's model: its preset, or its architecture columns over a family's conventions (`_family`)."""
    preset = model_preset_for(row.get("model"))
    if int_column(row, "experts"):
        return _moe_model(row, preset, notes)
    shape = {k: int_column(row, k) for k in SHAPE}
    if preset is not None and all(v is None for v in shape.values()):
        notes.append(f"architecture from the {preset} preset (the row states none)")
        return load_model(preset)
    if preset is not None and shape["layers"] is not None and shape["hidden"] is not None:
        named = load_model(preset)
        if shape["layers"] != named.layers and shape["hidden"] != named.hidden:
            # "Llama 3 8B" over 80 layers of 8192: another model than the name's, not a variant of it (a variant
            # keeps its depth or its width: Megatron's weak-scaling GPT 1.7B, MPT-30B's 56 heads)
            raise Unsupported(f"model: {row.get('model')!r} names the {preset} preset ({named.layers} layers, hidden "
                              f"{named.hidden}) but the columns state {shape['layers']} layers, hidden "
                              f"{shape['hidden']}")
    missing = [k for k in ("layers", "hidden", "heads") if shape[k] is None]
    if missing:
        raise Unsupported(f"{', '.join(missing)}: architecture columns missing (and no preset named "
                          f"{row.get('model')!r})")
    family = preset or _family(row, shape, notes)
    base = _from_columns(row, load_model(family).model_dump(), shape, family, notes)
    notes.append(f"mlp={base['mlp']}, norm={base['norm']}, position={base['position']} ({family} preset)")
    return Model.model_validate(base)


def _named_family(row: dict[str, str]) -> str | None:
    """The preset of the family the row's model name places (`_FAMILIES`); None when none does."""
    return next((p for rx, p in _FAMILIES if rx.search(row.get("model", ""))), None)


def _family(row: dict[str, str], shape: dict[str, int | None], notes: list[str]) -> str:
    """The preset whose conventions fill what the row's columns leave out: the family its name places, or
    the MLP its width implies (`_GATED`, `_UNGATED`)."""
    named = _named_family(row)
    if named is not None:
        return named
    ffn, hidden = shape["ffn"], shape["hidden"]
    if ffn is None or hidden is None:
        raise Unsupported(f"model: no preset or model family known for {row.get('model')!r}, and no ffn "
                          "column to tell its MLP")
    gated = abs(ffn / hidden - 4) > 0.01
    notes.append(f"no preset or family named: ffn / hidden = {ffn / hidden:.3g} reads as "
                 + ("a gated MLP (Llama conventions)" if gated else "GPT's 4h MLP (GPT conventions)"))
    return _GATED if gated else _UNGATED


def _from_columns(row: dict[str, str], base: dict[str, Any], shape: dict[str, int | None], family: str,
                  notes: list[str]) -> dict[str, Any]:
    """A model spec of the row's shape columns over `base`'s other fields (a family preset's), saying which
    shape fields the preset supplied."""
    filled = {k: v for k, v in shape.items() if v is not None}
    for k in SHAPE:
        if k not in filled and k != "kv_heads":
            notes.append(f"{k}={base[k]} from the {family} preset")
    base.update(filled, name=row.get("model") or "row", head_dim=None, published=None, aliases=(),
                sources={"*": row.get("source", "")}, moe=None, mla=None)
    if "kv_heads" not in filled:
        base["kv_heads"] = filled["heads"]
        notes.append("kv_heads = heads (not stated)")
    seq = int_column(row, "seq") or 2048
    base["max_seq_len"] = max(base["max_seq_len"], seq)
    return base


def _moe_from_columns(row: dict[str, str], notes: list[str]) -> Model:
    """An MoE model no preset names, from its columns: layers, hidden, heads, experts, top-k and the expert
    width (the ffn column's number, or its 'expert N' with a 'dense N' for leading dense layers), over the
    conventions of its family or of Mixtral (SwiGLU experts, RMSNorm, rotary); shared experts and leading
    dense layers only as stated."""
    ffn_text = clean(row.get("ffn"))
    # (also as config.json keys: DeepSeek-V3's "intermediate_size: 18432" and "moe_intermediate_size: 2048")
    expert = re.search(r"expert\D*(\d+)|moe[-_ ]?intermediate[-_ ]?size\D*(\d+)", ffn_text)
    dense = re.search(r"dense\D*(\d+)|(?<![a-z_])intermediate[-_ ]?size\D*(\d+)", ffn_text)
    expert_ffn = int(expert.group(1) or expert.group(2)) if expert else int_column(row, "ffn")
    shape = {k: int_column(row, k) for k in SHAPE}
    shape["ffn"] = int(dense.group(1) or dense.group(2)) if dense else expert_ffn
    needed = {"layers": shape["layers"], "hidden": shape["hidden"], "heads": shape["heads"],
              "topk": int_column(row, "topk"), "ffn (expert width)": expert_ffn}
    missing = [k for k, v in needed.items() if v is None]
    if missing:
        raise Unsupported(f"model: no mixture-of-experts preset for {row.get('model')!r} and the columns lack "
                          f"{', '.join(missing)}")
    named = _named_family(row)
    family = named if named in (_GATED, "llama3-8b", "qwen3-30b-a3b") else _MOE
    base = _from_columns(row, load_model(family).model_dump(), shape, family, notes)
    shared = re.search(r"(\d+)\s*shared", ffn_text)
    base["moe"] = {"experts": int_column(row, "experts"), "top_k": needed["topk"], "expert_ffn": expert_ffn,
                   "shared_experts": int(shared.group(1)) if shared else 0, "dense_layers": 0}
    notes.append(f"MoE architecture from the row's columns ({base['moe']['experts']} experts, top-"
                 f"{needed['topk']}, expert width {expert_ffn}; no preset named), mlp={base['mlp']}, "
                 f"norm={base['norm']}, position={base['position']} ({family} preset); "
                 f"{base['moe']['shared_experts']} shared experts, no leading dense layers (as stated)")
    return Model.model_validate(base)

def read_mtp(row: dict[str, str], model: Model, notes: list[str], recipe: RecipeSettings | None = None) -> bool:
    """Whether the row trains the model's multi-token-prediction modules: as its model text says ("w/ MTP",
    "w/o MTP": `model_words.mtp_of`), else as its stack's recipe for its model, GPU and release sets
    (`RecipeSettings.mtp`); a row that says nothing trains none (as before MTP was modelled)."""
    said = mtp_of(row.get("model"))
    if said is None and recipe is not None and recipe.mtp is not None and model.mtp_layers:
        notes.append(f"MTP depth {model.mtp_layers} {'' if recipe.mtp else 'not '}trained (the recipe for this "
                     f"model, GPU and release: {recipe.source})")
        return recipe.mtp
    if said is None:
        return False
    if said and not model.mtp_layers:
        raise Unsupported(f"model: the row trains multi-token prediction ({row.get('model')!r}) but {model.name} "
                          "has no MTP modules (mtp_layers 0)")
    notes.append(f"MTP depth {model.mtp_layers} trained on the last stage (the model text says so)" if said
                 else "MTP modules not trained (the model text says so)")
    return said
