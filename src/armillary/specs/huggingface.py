"""Read a Hugging Face `config.json` (plain JSON, no transformers dependency) into a model spec."""

from __future__ import annotations

from typing import Any

from armillary.specs.model import MlpKind, Model, NormKind, PositionKind

# key aliases used by different model families, first match wins
_ALIASES = {
    "hidden": ("hidden_size", "n_embd", "d_model", "n_embed"),
    "layers": ("num_hidden_layers", "n_layer", "n_layers", "num_layers"),
    "heads": ("num_attention_heads", "n_head", "n_heads"),
    "vocab": ("vocab_size",),
}
_GATED_ACTIVATIONS = {"silu", "swiglu", "swish"}
# families whose config.json this reader understands: GPT-style (2-matrix MLP, LayerNorm) and Llama-style
# (gated MLP, RMSNorm)
_GPT_STYLE = ("gpt2", "opt", "bloom", "gpt_neox", "mpt", "gpt_bigcode")
_LLAMA_STYLE = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "internlm2", "yi", "deepseek", "olmo2")


def is_huggingface_config(data: dict[str, Any]) -> bool:
    return "model_type" in data or "architectures" in data


def _get(data: dict[str, Any], field: str) -> Any:
    for key in _ALIASES[field]:
        if data.get(key) is not None:
            return data[key]
    raise ValueError(f"config.json has no {field}: expected one of the keys {list(_ALIASES[field])}")


def from_huggingface(data: dict[str, Any], name: str | None = None) -> Model:
    """Map config.json keys onto Model. Llama-style families (llama, mistral, qwen2, gemma...),
    GPT-2, OPT, BLOOM, MPT and GPT-NeoX are recognised; MoE configs are refused until MoE is modelled."""
    if any(k in data for k in ("num_local_experts", "n_routed_experts", "num_experts")):
        raise ValueError("config.json describes a mixture-of-experts model; MoE specs are not supported yet")
    kind = str(data.get("model_type", "")).lower()
    if kind not in _GPT_STYLE + _LLAMA_STYLE:
        raise ValueError(f"model_type {kind!r} is not understood yet; known: {', '.join(_GPT_STYLE + _LLAMA_STYLE)} "
                         "(write the model as a Model YAML instead)")
    hidden, heads = int(_get(data, "hidden")), int(_get(data, "heads"))
    act = str(data.get("hidden_act", data.get("activation_function", "gelu"))).lower()
    spec: dict[str, Any] = {
        "name": name or data.get("_name_or_path") or kind or "huggingface",
        "layers": int(_get(data, "layers")), "hidden": hidden, "heads": heads,
        "kv_heads": data.get("num_key_value_heads") or heads,
        "vocab": int(_get(data, "vocab")),
        "max_seq_len": int(data.get("max_position_embeddings") or data.get("n_positions")
                           or data.get("max_seq_len") or data.get("seq_length") or 2048),
        # transformers' default is tied, and saved configs leave defaults out
        "tied_embeddings": bool(data.get("tie_word_embeddings", True)),
    }
    if data.get("head_dim"):
        spec["head_dim"] = int(data["head_dim"])
    if data.get("sliding_window") and data.get("use_sliding_window", True):
        spec["sliding_window"] = int(data["sliding_window"])
    if kind in _GPT_STYLE:
        if kind == "mpt":
            ffn = int(data.get("expansion_ratio", 4) * hidden)
        else:
            ffn = data.get("intermediate_size") or data.get("n_inner") or data.get("ffn_dim") or 4 * hidden
        position = {"gpt2": PositionKind.LEARNED, "opt": PositionKind.LEARNED, "gpt_bigcode": PositionKind.LEARNED,
                    "bloom": PositionKind.ALIBI, "gpt_neox": PositionKind.ROTARY}.get(kind, PositionKind.ALIBI)
        if kind == "mpt" and not data.get("attn_config", {}).get("alibi", True):
            position = PositionKind.LEARNED
        spec |= {"ffn": int(ffn), "mlp": MlpKind.RELU if "relu" in act else MlpKind.GELU,
                 "norm": NormKind.LAYERNORM, "position": position, "linear_bias": not data.get("no_bias", False)}
    else:  # Llama-style
        spec |= {"ffn": int(data.get("intermediate_size") or 4 * hidden),
                 "mlp": MlpKind.SWIGLU if act in _GATED_ACTIVATIONS else MlpKind.GEGLU if "gelu" in act
                 else MlpKind.GELU,
                 "norm": NormKind.RMSNORM, "position": PositionKind.ROTARY,
                 "linear_bias": bool(data.get("attention_bias", False) or data.get("mlp_bias", False))}
    spec["sources"] = {"*": "Hugging Face config.json"}
    return Model.model_validate(spec)
