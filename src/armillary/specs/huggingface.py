"""Read a Hugging Face `config.json` (plain JSON, no transformers dependency) into a model spec."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from armillary.errors import shown_value
from armillary.specs.model import MlpKind, Model, NormKind, PositionKind

# key aliases used by different model families, first match wins
_ALIASES = {
    "hidden": ("hidden_size", "n_embd", "d_model", "n_embed"),
    "layers": ("num_hidden_layers", "n_layer", "n_layers", "num_layers"),
    "heads": ("num_attention_heads", "n_head", "n_heads"),
    "vocab": ("vocab_size",),
}
_GATED_ACTIVATIONS = {"silu", "swiglu", "swish"}
# families whose config.json this reader understands: GPT-style (2-matrix MLP, LayerNorm), Llama-style
# (gated MLP, RMSNorm), their mixture-of-experts relatives, and the MatMul-free LM
_GPT_STYLE = ("gpt2", "opt", "bloom", "gpt_neox", "mpt", "gpt_bigcode")
_MOE = ("mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v2", "deepseek_v3", "gpt_oss")
# phi3: Phi-3 mini / medium and Phi-4 (Phi3ForCausalLM: fused qkv_proj and gate_up_proj, the parameters of
# separate Llama matrices)
_LLAMA_STYLE = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "internlm2", "yi", "deepseek", "olmo2",
                "phi3", *_MOE)
_MATMUL_FREE = ("hgrn_bit",)
_DBRX = ("dbrx",)  # its attention and experts sit in nested attn_config / ffn_config
_KNOWN = _GPT_STYLE + _LLAMA_STYLE + _MATMUL_FREE + _DBRX
_QK_NORM = ("qwen3", "qwen3_moe", "olmo2")
# routed-expert keys, first match wins: (experts, top-k, expert intermediate size)
_EXPERTS = ("num_local_experts", "n_routed_experts", "num_experts")
_TOP_K = ("num_experts_per_tok", "experts_per_token")
_EXPERT_FFN = ("moe_intermediate_size", "intermediate_size")


# keys read as sizes (whole numbers), ratios (numbers) and flags (JSON true / false)
_WHOLE = (*(k for keys in _ALIASES.values() for k in keys), "num_key_value_heads", "intermediate_size",
          "max_position_embeddings", "n_positions", "head_dim", "sliding_window", *_EXPERTS, *_TOP_K,
          "moe_intermediate_size", "n_shared_experts", "first_k_dense_replace", "shared_expert_intermediate_size",
          "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "num_heads",
          "n_group", "topk_group", "n_inner", "ffn_dim", "max_seq_len", "seq_length", "num_nextn_predict_layers")
_RATIOS = ("expansion_ratio", "hidden_ratio", "swiglu_limit")
_FLAGS = ("tie_word_embeddings", "attention_bias", "mlp_bias", "use_sliding_window", "no_bias")
_TEXT = ("model_type", "_name_or_path", "hidden_act", "activation_function")
_LARGEST = 2**40


def _check_values(data: dict[str, Any]) -> None:
    """Sizes are whole numbers in 1..2^40, ratios positive numbers, flags true or false; anything else
    is an error naming the key (a list, a dict or "no" is not read as something else)."""
    for key in _WHOLE:
        _check_whole(key, data.get(key))
    for key in _RATIOS:
        value = data.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1e6):
            raise ValueError(f"config.json {key}: expected a positive number, got {shown_value(value)}")
    for key in _FLAGS:
        if key in data and not isinstance(data[key], bool):
            raise ValueError(f"config.json {key}: expected true or false, got {shown_value(data[key])}")
    for key in _TEXT:
        if data.get(key) is not None and not isinstance(data[key], str):
            raise ValueError(f"config.json {key}: expected a string, got {shown_value(data[key])}")
    for nested in ("attn_config", "ffn_config", "rope_scaling", "rope_parameters"):
        if data.get(nested) is not None and not isinstance(data[nested], dict):
            raise ValueError(f"config.json {nested}: expected a mapping, got {shown_value(data[nested])}")
    types = data.get("layer_types")
    if types is not None and (not isinstance(types, list) or not all(isinstance(t, str) for t in types)):
        raise ValueError(f"config.json layer_types: expected a list of strings, got {shown_value(types)}")


def _check_whole(key: str, value: Any) -> None:
    """A size key (None: absent) is a whole number in 0..2^40, else an error naming it."""
    if value is None:
        return
    integral = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if isinstance(value, bool) or not integral or not 0 <= value <= _LARGEST:
        raise ValueError(f"config.json {key}: expected a whole number up to 2^40, got {shown_value(value)}")


# keys read somewhere below, and keys that change nothing a cost model sees (ids, numerics, serialization)
_READ = frozenset((*_WHOLE, *_RATIOS, *_FLAGS, "model_type", "architectures", "hidden_act", "activation_function",
                   "_name_or_path", "use_sliding_window", "layer_types", "no_bias", "attn_config", "n_inner",
                   "ffn_dim", "n_embd", "n_head", "n_layer", "d_model", "ffn_config", "rope_scaling",
                   "rope_parameters"))
_IRRELEVANT = frozenset((
    "torch_dtype", "dtype", "transformers_version", "bos_token_id", "eos_token_id", "pad_token_id",
    "initializer_range", "initializer_factor", "rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "use_cache",
    "rope_theta", "attention_dropout", "hidden_dropout", "resid_pdrop",
    "embd_pdrop", "attn_pdrop", "summary_type", "summary_use_proj", "summary_activation", "summary_proj_to_labels",
    "summary_first_dropout", "task_specific_params", "id2label", "label2id", "pretraining_tp", "quantization_config",
    "auto_map", "output_router_logits", "router_aux_loss_coef", "router_jitter_noise", "max_window_layers",
    "scoring_func", "norm_topk_prob", "routed_scaling_factor", "topk_method",
    "aux_loss_alpha", "seq_aux", "ep_size", "moe_layer_freq", "tokenizer_class", "decoder_start_token_id",
    "initial_context_length", "original_max_position_embeddings", "emb_pdrop"))
UNREAD = "config.json keys not modelled"  # the model's `sources` key listing what the reader left out


def unread_keys(data: dict[str, Any]) -> tuple[str, ...]:
    """Keys of a config.json this reader neither maps nor knows to be irrelevant to cost (they may change
    the model: a new attention variant, a projection the preset lacks)."""
    return tuple(sorted(k for k in data if k not in _READ and k not in _IRRELEVANT))


def huggingface_name(data: dict[str, Any], path: Path | None = None) -> str | None:
    """A name for a model read from `path` (a config.json): the repository of a Hugging Face cache folder
    (models--meta-llama--Llama-3.1-8B -> meta-llama/Llama-3.1-8B), else `_name_or_path`, else the file's
    own name unless it is "config", else its folder's unless that is a snapshot's commit hash, else the
    first of `architectures`; None: none of them (the reader then names it by model_type)."""
    parts = path.expanduser().resolve().parts if path is not None else ()
    cache = next((p for p in reversed(parts) if p.startswith("models--")), None)
    if cache is not None:
        return cache.removeprefix("models--").replace("--", "/")
    if data.get("_name_or_path"):
        return str(data["_name_or_path"])
    if path is not None and path.stem.lower() != "config":
        return path.stem
    folder = parts[-2] if len(parts) >= 2 else ""
    if folder and not re.fullmatch(r"[0-9a-f]{40}", folder):
        return folder
    architectures = data.get("architectures")
    return str(architectures[0]) if isinstance(architectures, list) and architectures else None


def snapshot_config(folder: Path) -> Path | None:
    """The config.json of a model folder: the folder's own, or in a Hugging Face cache folder
    (models--ORG--NAME) the snapshot that refs/main names, else the newest snapshot's."""
    if (folder / "config.json").is_file():
        return folder / "config.json"
    ref = folder / "refs" / "main"
    if ref.is_file() and (folder / "snapshots" / ref.read_text().strip() / "config.json").is_file():
        return folder / "snapshots" / ref.read_text().strip() / "config.json"
    found = sorted((folder / "snapshots").glob("*/config.json"), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


def is_huggingface_config(data: dict[str, Any]) -> bool:
    return "model_type" in data or "architectures" in data


def _first(data: dict[str, Any], keys: tuple[str, ...], needed: str | None = None) -> Any:
    """The value of the first key present; a `needed` field that none of the keys gives is an error."""
    value = next((data[k] for k in keys if data.get(k) is not None), None)
    if needed and value is None:
        raise ValueError(f"config.json has no {needed}: expected one of the keys {list(keys)}")
    return value


def _get(data: dict[str, Any], field: str) -> Any:
    return _first(data, _ALIASES[field], field)


def from_huggingface(data: dict[str, Any], name: str | None = None) -> Model:
    """Map config.json keys onto Model. Llama-style families (llama, mistral, qwen2/3, gemma, phi3...), GPT-2,
    OPT, BLOOM, MPT and GPT-NeoX; mixture-of-experts families (Mixtral, Qwen2/3-MoE, GPT-OSS, DBRX,
    DeepSeek-V2/V3 with multi-head latent attention) and the MatMul-free LM (hgrn_bit) are recognised."""
    kind = str(data.get("model_type", "")).lower()
    if kind not in _KNOWN:
        raise ValueError(f"model_type {shown_value(kind)} is not understood yet; known: {', '.join(_KNOWN)} "
                         "(write the model as a Model YAML instead)")
    _check_values(data)
    if kind in _MATMUL_FREE:
        return _matmul_free(data, name)
    if kind in _DBRX:
        return _dbrx(data, name)
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
            ffn = int((data.get("expansion_ratio") or 4) * hidden)
        else:
            ffn = data.get("intermediate_size") or data.get("n_inner") or data.get("ffn_dim") or 4 * hidden
        position = {"gpt2": PositionKind.LEARNED, "opt": PositionKind.LEARNED, "gpt_bigcode": PositionKind.LEARNED,
                    "bloom": PositionKind.ALIBI, "gpt_neox": PositionKind.ROTARY}.get(kind, PositionKind.ALIBI)
        if kind == "mpt" and not (data.get("attn_config") or {}).get("alibi", True):
            position = PositionKind.LEARNED
        spec |= {"ffn": int(ffn), "mlp": MlpKind.RELU if "relu" in act else MlpKind.GELU,
                 "norm": NormKind.LAYERNORM, "position": position, "linear_bias": not data.get("no_bias", False)}
    else:  # Llama-style
        spec |= {"ffn": int(data.get("intermediate_size") or 4 * hidden),
                 "mlp": MlpKind.SWIGLU if act in _GATED_ACTIVATIONS else MlpKind.GEGLU if "gelu" in act
                 else MlpKind.GELU,
                 "norm": NormKind.RMSNORM, "position": PositionKind.ROTARY,
                 "linear_bias": bool(data.get("attention_bias", False) or data.get("mlp_bias", False))}
        # rope_scaling (rope_parameters in newer transformers): its rope_type ("type" in older configs)
        scaling = data.get("rope_scaling") or data.get("rope_parameters") or {}
        spec["yarn"] = (scaling.get("rope_type") or scaling.get("type")) == "yarn"
    spec |= _experts_and_latent_attention(data, kind)
    # Qwen2 / Qwen2-MoE put biases on q, k and v (modeling_qwen2.py: bias=True) with no config key saying so
    spec["qkv_bias"] = kind in ("qwen2", "qwen2_moe") and not spec.get("linear_bias")
    spec["sources"] = {"*": "Hugging Face config.json"}
    if unread := unread_keys(data):
        spec["sources"][UNREAD] = ", ".join(unread)
    return _validated(spec, data)


def _experts_and_latent_attention(data: dict[str, Any], kind: str) -> dict[str, Any]:
    """The MoE, MLA, q/k-norm, sink and alternating-window fields of a config.json."""
    spec: dict[str, Any] = {"qk_norm": kind in _QK_NORM, "attention_sinks": kind == "gpt_oss"}
    experts = _first(data, _EXPERTS)
    if experts:
        spec["moe"] = {
            "experts": int(experts), "top_k": int(_first(data, _TOP_K, "top_k")),
            "expert_ffn": int(_first(data, _EXPERT_FFN, "expert_ffn")),
            "shared_experts": int(data.get("n_shared_experts") or 0),
            "dense_layers": int(data.get("first_k_dense_replace") or 0),
            "router_bias": kind == "gpt_oss",
        }
        # DeepSeek-V2 / V3 group-limited routing (transformers' DeepseekV3TopkRouter: topk_group of n_group
        # groups; "greedy", V2-Lite's method, ignores the groups)
        if (data.get("n_group") or 1) > 1 and data.get("topk_method") != "greedy":
            spec["moe"] |= {"expert_groups": int(data["n_group"]), "group_top_k": int(data.get("topk_group") or 1)}
        if data.get("shared_expert_intermediate_size"):  # Qwen2-MoE: one shared expert of its own size
            spec["moe"] |= {"shared_experts": 1, "shared_ffn": int(data["shared_expert_intermediate_size"])}
    if data.get("swiglu_limit"):  # GPT-OSS's clamped SwiGLU (Model.glu_clamp)
        spec["glu_clamp"] = float(data["swiglu_limit"])
    if data.get("num_nextn_predict_layers"):  # DeepSeek-V3's multi-token-prediction modules (Model.mtp_layers)
        spec["mtp_layers"] = int(data["num_nextn_predict_layers"])
    if data.get("kv_lora_rank"):
        spec["mla"] = {"kv_lora_rank": int(data["kv_lora_rank"]), "q_lora_rank": data.get("q_lora_rank"),
                       **{field: int(_first(data, (key,), key)) for field, key in (
                           ("rope_head_dim", "qk_rope_head_dim"), ("nope_head_dim", "qk_nope_head_dim"),
                           ("v_head_dim", "v_head_dim"))}}
        spec |= {"kv_heads": None, "head_dim": None}
    layer_types = data.get("layer_types")
    if spec.get("attention_sinks") or layer_types:
        spec["linear_bias"] = bool(data.get("attention_bias", False))
    if data.get("sliding_window") and layer_types:
        spec["window_layers"] = sum(t == "sliding_attention" for t in layer_types) / len(layer_types)
        spec["sliding_window"] = int(data["sliding_window"])
    return spec


def _matmul_free(data: dict[str, Any], name: str | None) -> Model:
    """The MatMul-free LM (ridgerchu/matmulfreellm, HGRNBitConfig): MLGRU token mixer, ternary BitLinear
    layers, GLU channel mixer of 256 * ceil(hidden * hidden_ratio * 2/3 / 256) unless intermediate_size is
    given (the modelling code's default)."""
    hidden = int(_first(data, ("hidden_size",), "hidden_size"))
    ffn = data.get("intermediate_size") or 256 * -(-int(hidden * (data.get("hidden_ratio") or 4) * 2 / 3) // 256)
    return _validated({
        "name": name or data.get("_name_or_path") or "hgrn_bit",
        "layers": int(_first(data, ("num_hidden_layers",), "num_hidden_layers")),
        "hidden": hidden, "heads": int(data.get("num_heads") or 1), "ffn": int(ffn), "mlp": MlpKind.SWIGLU,
        "norm": NormKind.RMSNORM, "position": PositionKind.NONE,
        "vocab": int(_first(data, ("vocab_size",), "vocab_size")),
        "max_seq_len": int(data.get("max_position_embeddings") or 2048),
        "tied_embeddings": bool(data.get("tie_word_embeddings", False)),
        "token_mixer": "mlgru", "bitlinear": {}, "sources": {"*": "Hugging Face config.json (hgrn_bit)"},
    }, data)


def _dbrx(data: dict[str, Any], name: str | None) -> Model:
    """DBRX (transformers DbrxConfig): every block attention (attn_config.kv_n_heads KV heads, fused Wqkv, no
    biases) and a mixture of ffn_config.moe_num_experts GLU experts of ffn_hidden_size, moe_top_k per token;
    LayerNorm without bias (the spec's LayerNorm counts one: 0.0004% of DBRX's parameters), rotary positions."""
    attn, ffn = data.get("attn_config") or {}, data.get("ffn_config") or {}
    # the nested keys as "attn_config.kv_n_heads"..., for the checks and the errors
    flat = {**data, **{f"{group}.{k}": v for group, keys in (("attn_config", attn), ("ffn_config", ffn))
                       for k, v in keys.items()}}
    for key in ("attn_config.kv_n_heads", "ffn_config.ffn_hidden_size", "ffn_config.moe_num_experts",
                "ffn_config.moe_top_k"):
        _check_whole(key, flat.get(key))
    act = ffn.get("ffn_act_fn") or {"name": "silu"}  # DbrxFFNConfig's default
    act_name = str(act.get("name", "silu") if isinstance(act, dict) else act).lower()
    if act_name not in _GATED_ACTIVATIONS:
        raise ValueError(f"config.json ffn_config.ffn_act_fn: {shown_value(act_name)} is not modelled; DBRX's experts "
                         f"are gated with one of {sorted(_GATED_ACTIVATIONS)}")
    width = int(_first(ffn, ("ffn_hidden_size",), "ffn_config.ffn_hidden_size"))
    heads = int(_get(data, "heads"))
    spec: dict[str, Any] = {
        "name": name or data.get("_name_or_path") or "dbrx",
        "layers": int(_get(data, "layers")), "hidden": int(_get(data, "hidden")), "heads": heads,
        "kv_heads": int(attn.get("kv_n_heads") or heads), "vocab": int(_get(data, "vocab")),
        "max_seq_len": int(data.get("max_seq_len") or 2048), "ffn": width, "mlp": MlpKind.SWIGLU,
        "norm": NormKind.LAYERNORM, "position": PositionKind.ROTARY, "linear_bias": False,
        "tied_embeddings": bool(data.get("tie_word_embeddings", False)),
        "moe": {"experts": int(_first(ffn, ("moe_num_experts",), "ffn_config.moe_num_experts")),
                "top_k": int(_first(ffn, ("moe_top_k",), "ffn_config.moe_top_k")), "expert_ffn": width,
                "shared_experts": 0, "dense_layers": 0},
        "sources": {"*": "Hugging Face config.json (dbrx)"}}
    # nested keys read above or without cost (a clamp, router noise, loss weights, ids)
    known = {"kv_n_heads", "ffn_hidden_size", "moe_num_experts", "moe_top_k", "ffn_act_fn", "model_type", "rope_theta",
             "attn_pdrop", "clip_qkv", "moe_jitter_eps", "moe_loss_weight", "moe_normalize_expert_weights"}
    nested = [k for k in flat if "." in k and k.split(".", 1)[1] not in known]
    if unread := (*unread_keys(data), *nested):
        spec["sources"][UNREAD] = ", ".join(unread)
    return _validated(spec, flat)


# the config.json keys each Model field is read from, for errors the Model itself finds (hidden not a multiple
# of heads, top_k above the experts...)
_KEYS_OF = {**_ALIASES, "heads": (*_ALIASES["heads"], "num_heads"),
            "kv_heads": ("num_key_value_heads", "attn_config.kv_n_heads"),
            "head_dim": ("head_dim",),
            "ffn": ("intermediate_size", "n_inner", "ffn_dim", "expansion_ratio", "hidden_ratio",
                    "ffn_config.ffn_hidden_size"),
            "max_seq_len": ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length"),
            "sliding_window": ("sliding_window",), "window_layers": ("layer_types",), "name": ("_name_or_path",),
            "experts": (*_EXPERTS, "ffn_config.moe_num_experts"), "top_k": (*_TOP_K, "ffn_config.moe_top_k"),
            "expert_ffn": (*_EXPERT_FFN, "ffn_config.ffn_hidden_size"),
            "shared_experts": ("n_shared_experts",), "shared_ffn": ("shared_expert_intermediate_size",),
            "dense_layers": ("first_k_dense_replace",), "kv_lora_rank": ("kv_lora_rank",),
            "q_lora_rank": ("q_lora_rank",), "rope_head_dim": ("qk_rope_head_dim",),
            "nope_head_dim": ("qk_nope_head_dim",), "v_head_dim": ("v_head_dim",),
            "mtp_layers": ("num_nextn_predict_layers",)}


def _validated(spec: dict[str, Any], data: dict[str, Any]) -> Model:
    """The Model of `spec`; an error it finds names the config.json keys of the fields involved."""
    try:
        return Model.model_validate(spec)
    except ValidationError as err:
        problems = []
        for e in err.errors():
            words = {str(x) for x in e["loc"]} | set(re.findall(r"[a-z_]+", e["msg"]))
            keys = [k for field in _KEYS_OF if field in words
                    for k in ([k for k in _KEYS_OF[field] if k in data] or _KEYS_OF[field][:1])]
            problems.append(f"config.json {', '.join(dict.fromkeys(keys)) or 'model'}: {e['msg']}")
        raise ValueError("; ".join(problems)) from None
