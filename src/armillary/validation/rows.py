"""Turn one measured training row of the validation CSV into specifications.

The model comes from the row's architecture columns; a family preset fills only what the row leaves
empty (MLP kind, norm, positions). The system comes from `gpu`, `n_gpus` and the network columns; the
strategy from the parallelism columns. Whatever the row does not state is assumed and written down.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from armillary.specs.loading import load_model, load_system
from armillary.specs.model import Model
from armillary.specs.strategy import Strategy
from armillary.specs.system import System
from armillary.specs.workload import Training


class Unsupported(Exception):  # noqa: N818 - a reason, not a failure
    """The row cannot be run yet; the message says why."""


# family defaults: (name pattern, preset whose non-shape fields fill the gaps)
_FAMILIES = (
    (re.compile(r"llama[ _-]?3", re.I), "llama3-8b"),  # vocabulary 128256
    (re.compile(r"llama", re.I), "llama2-7b"),
    (re.compile(r"mpt", re.I), "mpt-125m"),  # llm-foundry benchmark configs: learned positions, biases
    (re.compile(r"nemotron", re.I), "nemotron4-340b"),
    (re.compile(r"gpt|megatron", re.I), "megatron-1.7b"),
)
_SHAPE = ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab")
# mixture-of-experts rows state only part of the architecture: the model's preset gives the rest
_MOE_PRESETS = (
    (re.compile(r"deepseek[ _-]?v3", re.I), "deepseek-v3"),
    (re.compile(r"qwen3[ _-]?30b", re.I), "qwen3-30b-a3b"),
    (re.compile(r"qwen3[ _-]?235b", re.I), "qwen3-235b-a22b"),
    (re.compile(r"mixtral[ _-]?8x7b", re.I), "mixtral-8x7b"),
    (re.compile(r"mixtral[ _-]?8x22b", re.I), "mixtral-8x22b"),
)
_GPU_SYSTEMS = (
    (re.compile(r"a100.*40", re.I), "dgx-a100-40gb"),
    (re.compile(r"a100", re.I), "dgx-a100"),
    (re.compile(r"h100", re.I), "dgx-h100"),
    (re.compile(r"h200", re.I), "hgx-h200"),
    (re.compile(r"b200", re.I), "dgx-b200"),
)


@dataclass(frozen=True)
class RowSpecs:
    model: Model
    system: System
    strategy: Strategy
    workload: Training
    assumptions: tuple[str, ...] = field(default_factory=tuple)


def int_column(row: dict[str, str], key: str) -> int | None:
    """An integer column of a row, None when empty or not a number."""
    value = row.get(key, "").strip()
    try:
        return int(float(value))
    except ValueError:
        return None


def _moe_model(row: dict[str, str], notes: list[str]) -> Model:
    preset = next((p for rx, p in _MOE_PRESETS if rx.search(row.get("model", ""))), None)
    if preset is None:
        raise Unsupported(f"no mixture-of-experts preset for {row.get('model')!r}")
    model = load_model(preset)
    assert model.moe is not None
    stated = {"layers": model.layers, "hidden": model.hidden, "experts": model.moe.experts, "topk": model.moe.top_k}
    differ = [f"{k} {int_column(row, k)} vs {v}" for k, v in stated.items() if int_column(row, k) not in (None, v)]
    if differ:
        raise Unsupported(f"the row's architecture differs from the {preset} preset: {', '.join(differ)}")
    notes.append(f"architecture from the {preset} preset (the row states layers, hidden, experts, top-k)")
    return model


def _model(row: dict[str, str], notes: list[str]) -> Model:
    if int_column(row, "experts"):
        return _moe_model(row, notes)
    shape = {k: int_column(row, k) for k in _SHAPE}
    missing = [k for k in ("layers", "hidden", "heads") if shape[k] is None]
    if missing:
        raise Unsupported(f"architecture columns missing: {', '.join(missing)}")
    family = next((p for rx, p in _FAMILIES if rx.search(row.get("model", ""))), None)
    if family is None:
        raise Unsupported(f"no model family known for {row.get('model')!r}")
    base = load_model(family).model_dump()
    filled = {k: v for k, v in shape.items() if v is not None}
    for k in _SHAPE:
        if k not in filled and k != "kv_heads":
            notes.append(f"{k}={base[k]} from the {family} preset")
    base.update(filled, name=row.get("model") or "row", head_dim=None, sources={"*": row.get("source", "")})
    if "kv_heads" not in filled:
        base["kv_heads"] = filled["heads"]
        notes.append("kv_heads = heads (not stated)")
    seq = int_column(row, "seq") or 2048
    base["max_seq_len"] = max(base["max_seq_len"], seq)
    notes.append(f"mlp={base['mlp']}, norm={base['norm']}, position={base['position']} ({family} family)")
    return Model.model_validate(base)


def system_preset_for(gpu: str) -> str:
    """The system preset of a row's `gpu` column."""
    preset = next((p for rx, p in _GPU_SYSTEMS if rx.search(gpu)), None)
    if preset is None:
        raise Unsupported(f"no system preset for gpu {gpu!r}")
    return preset


def _system(row: dict[str, str], n_gpus: int, notes: list[str]) -> System:
    preset = system_preset_for(row.get("gpu", ""))
    system = load_system(preset)
    inter = row.get("inter_net", "")
    per_node = re.search(r"(\d+)\s*Gbps node-node", inter)
    per_nic = re.search(r"(\d+)x\s.*?(\d+)\s*Gb/s", inter)
    if per_node:
        gbps = float(per_node.group(1)) / system.devices_per_node
    elif per_nic:
        gbps = float(per_nic.group(1)) * float(per_nic.group(2)) / system.devices_per_node
    else:
        gbps = None
        notes.append(f"scale-out network not stated: {system.network[-1].name} of the {preset} preset")
    if gbps is not None:
        system = system.with_dimension(-1, bandwidth=gbps * 1e9 / 8)
    return system.with_devices(n_gpus)


def _text(row: dict[str, str], key: str) -> str:
    return row.get(key, "").strip().lower()


def _strategy(row: dict[str, str], n_gpus: int, notes: list[str]) -> dict[str, Any]:
    tp, pp = int_column(row, "tp"), int_column(row, "pp")
    if tp is None or pp is None:
        raise Unsupported("parallel configuration (tp, pp) not stated")
    cp = int_column(row, "cp") or 1
    dp = int_column(row, "dp") or n_gpus // (tp * cp * pp)
    mbs = int_column(row, "mbs")
    if mbs is None:
        mbs = 1
        notes.append("micro_batch=1 (not stated)")
    vpp = int_column(row, "vpp") or 1
    framework = _text(row, "framework")
    notes_text = _text(row, "notes")
    sp_text = _text(row, "seq_parallel")
    if sp_text in ("yes", "no"):
        sp = sp_text == "yes"
    else:
        sp = tp > 1 and "megatron-lm (20" not in framework
        notes.append(f"sequence_parallel={sp} (not stated)")
    prec = _text(row, "precision")
    precision = ("fp8" if "fp8" in prec else "bf16" if "bf16" in prec else "fp16" if "fp16" in prec else None)
    if precision is None:
        if "megatron-lm (20" in framework:
            precision = "fp16"
        elif "nemo" in framework or "megatron-bridge" in framework:
            precision = "fp8"  # NVIDIA's NeMo / Megatron-Bridge performance tables are FP8 recipes
        else:
            precision = "bf16"
        notes.append(f"precision={precision} ({row.get('precision') or 'not stated'})")
    legacy = "megatron-lm (20" in framework or (framework == "megatron-lm" and "a100" in _text(row, "gpu"))
    fsdp_degree = re.search(r"fsdp=(\d+)", _text(row, "other_reported"))
    fsdp = "fsdp" in framework or "zero-3" in framework or bool(fsdp_degree and int(fsdp_degree.group(1)) > 0)
    zero = 2 if "shard_grad_op" in framework else 3 if fsdp else 0 if legacy else 1
    flash = "flash" in framework or not legacy
    # Megatron-Core / NeMo / Bridge run cuDNN fused attention (FlashAttention-3 class) on Hopper
    hopper = bool(re.search(r"h100|h200|h800", _text(row, "gpu")))
    attention = "standard" if not flash else "flash3" if (hopper and "fsdp" not in framework
                                                          and "mosaic" not in framework) else "flash"
    nvidia_recipe = "nemo" in framework or "megatron-bridge" in framework
    tp_overlap = "tp-comm-overlap" in notes_text or (nvidia_recipe and tp > 1)
    if not legacy and not fsdp:
        notes.append("distributed optimizer, overlapped grad reduce / param gather, FlashAttention "
                     "(Megatron-Core / NeMo defaults)")
    if tp_overlap and "tp-comm-overlap" not in notes_text:
        notes.append("TP communication overlapped with GEMMs (NeMo performance recipes)")
    if legacy:
        notes.append("no DP overlap, standard attention (Megatron-LM before 2023)")
    moe: dict[str, Any] = {}
    if int_column(row, "experts"):
        moe = dict(ep=int_column(row, "ep") or 1, expert_tp=1)
        notes.append("expert_tp=1, balanced routing (the benchmarks force-balance the tokens), dispatch and "
                     "combine all-to-alls not overlapped")
    return dict(
        **moe,
        tp=tp, pp=pp, cp=cp, dp=dp, vpp=vpp, micro_batch=mbs, sequence_parallel=sp and tp > 1,
        zero=zero, precision=precision, attention=attention,
        overlap=dict(dp_grad_reduce=not legacy, param_gather=not legacy,
                     tp_comm=tp_overlap),
    )


# module recompute of the MoE recipes (Megatron MoE model zoo, Qwen3 and DeepSeek-V3 best practice on H100:
# "norm, act", plus MLA's up-projections for DeepSeek)
_MOE_MODULES = ("core_attn", "layernorm", "moe_act")


def _recompute_choices(row: dict[str, str], model: Model, notes: list[str]) -> list[dict[str, Any]]:
    text = _text(row, "recompute")
    if "selective" in text:
        return [{"recompute": "selective"}]
    if text.startswith("full"):
        return [{"recompute": "full"}]
    if text == "none":
        return [{"recompute": "none"}]
    notes.append("recompute not stated: the least recomputation that fits memory")
    choices: list[dict[str, Any]] = [{"recompute": "none"}, {"recompute": "selective"}]
    if model.moe is not None:
        modules = _MOE_MODULES + (("mla_up_proj",) if model.mla is not None else ())
        choices.append({"recompute": "selective", "recompute_modules": modules})
    return [*choices, {"recompute": "full"}]


def row_specs(row: dict[str, str]) -> list[RowSpecs]:
    """Candidate specifications for a row (several when recomputation is not stated, least first)."""
    n_gpus = int_column(row, "n_gpus")
    if n_gpus is None:
        raise Unsupported("n_gpus not stated")
    seq, gbs = int_column(row, "seq"), int_column(row, "gbs")
    if seq is None or gbs is None:
        raise Unsupported("seq or global batch not stated")
    notes: list[str] = []
    model = _model(row, notes)
    system = _system(row, n_gpus, notes)
    strategy = _strategy(row, n_gpus, notes)
    workload = Training(seq_len=seq, global_batch=gbs)
    out = []
    for recompute in _recompute_choices(row, model, notes):
        st = Strategy.model_validate({**strategy, **recompute})
        described = ", ".join(f"{k}={'+'.join(v) if isinstance(v, tuple) else v}" for k, v in recompute.items())
        out.append(RowSpecs(model, system, st, workload, (*notes, described)))
    return out
