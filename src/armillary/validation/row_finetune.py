"""A training row's LoRA / QLoRA fine-tuning: the adapters' rank, targets, dropout and the frozen base."""

from __future__ import annotations

import re

from armillary.specs.workload import BasePrecision, Lora, LoraTarget
from armillary.validation.row_columns import Unsupported
from armillary.validation.vocabulary import clean


def read_finetune(row: dict[str, str], notes: list[str]) -> Lora | None:
    """LoRA / QLoRA fine-tuning where the model or framework says so: the rank from the row's words
    ("LoRA rank 16"; refused when not stated), the adapters on the attention projections (MLPerf Llama 2
    70B LoRA: its reference adapts qkv_proj and o_proj, NVIDIA's NeMo submissions target_modules
    ['attention'], fused linear_qkv and linear_proj), the frozen base in 4-bit NF4 for QLoRA, in fp8 where
    the row's precision has FP8 (MLPerf's NeMo LoRA keeps the frozen base as fp8 parameters), else bf16."""
    named = clean(f"{row.get('model')} {row.get('framework')}")
    kind = re.search(r"\b(q?lora)\b", named, re.IGNORECASE)
    if kind is None:
        return None
    text = f"{named} {clean(row.get('notes'))}"
    # "LoRA rank 16", "rank-16", PEFT's "r=16", NeMo's / torchtune's "lora_r: 16", "lora_rank=16" (never lora_alpha)
    ranks = {int(r) for r in re.findall(r"\b(?:lora\s+)?rank[-\s]*(?:r\s*=\s*|=\s*|of\s+)?(\d+)|"
                                        r"\blora[-_ ]?r(?:ank)?\s*[=:]\s*(\d+)|(?<![\w.-])r\s*[=:]\s*(\d+)", text,
                                        re.IGNORECASE) for r in r if r}
    if len(ranks) != 1:
        raise Unsupported("model: a LoRA row must state one adapter rank ('LoRA rank 16'); "
                          + ("none stated" if not ranks else f"several: {sorted(ranks)}"))
    rank = ranks.pop()
    qlora = re.search(r"\bqlora\b", named, re.IGNORECASE) is not None  # "finetune/lora.py: QLoRA" is QLoRA
    precision = clean(row.get("precision")).lower()
    base = BasePrecision.NF4 if qlora else BasePrecision.FP8 if "fp8" in precision else BasePrecision.BF16
    named_targets = _lora_targets(text)
    targets = ("adapters on q, k, v, o (fused QKV; MLPerf Llama 2 70B LoRA's targets, not stated by the row)"
               if named_targets is None else
               f"adapters on {', '.join(t.value for t in named_targets)} (read from the row; one per projection)")
    notes.append(f"{'QLoRA' if qlora else 'LoRA'} rank {rank} (read from the row), {targets}, frozen base {base.value}"
                 + (" (the row's precision has FP8: NeMo's fp8 parameters)" if base is BasePrecision.FP8 else "")
                 + "; every sample priced as one sequence of the row's seq tokens (MLPerf pads / packs GovReport "
                   "to max_seq_length)")
    dropout = _lora_dropout(named)
    if dropout:
        notes.append(f"LoRA dropout {dropout:g} (read from the row: its mask and dropped input kept for backward)")
    if named_targets is None:
        return Lora(rank=rank, base_precision=base, dropout=dropout)
    return Lora(rank=rank, base_precision=base, target_modules=named_targets, fused=False, dropout=dropout)


def _lora_dropout(text: str) -> float:
    """The adapters' dropout probability the model or framework column states ("lora_r 8, alpha 16, dropout
    0.05", "lora_dropout=0.1"); 0 when none is stated (PEFT's and NeMo's default)."""
    found = re.search(r"\b(?:lora_)?dropout\s*(?:=|:|\bp\b)?\s*(\d*\.?\d+)", text, re.IGNORECASE)
    return float(found.group(1)) if found and float(found.group(1)) < 1 else 0.0


# the words a row uses for LoRA's target layers ("LoRA rank 8 on query and value"; LitGPT's lora_query, ...;
# PEFT's q_proj, ...), in Hugging Face PEFT's names
_LORA_TARGETS = ((LoraTarget.Q, r"query|q_proj"), (LoraTarget.K, r"key|k_proj"), (LoraTarget.V, r"value|v_proj"),
                 (LoraTarget.O, r"projection|o_proj|output projection"), (LoraTarget.GATE, r"gate|gate_proj"),
                 (LoraTarget.UP, r"up_proj|fc1"), (LoraTarget.DOWN, r"down_proj|fc2"))


def _lora_targets(text: str) -> tuple[LoraTarget, ...] | None:
    """The adapted layers a row names after 'on' ("rank 8 on query and value", "rank 16 on q_proj, v_proj") or
    in PEFT's target_modules ("target_modules=[q_proj, v_proj]"; "all-linear": every linear layer of the decoder
    but the output head, PEFT's tuners_utils); None when it names none. Targets named in words none of which it
    reads are refused (never the attention projections in their place)."""
    found = re.search(r"rank\s*\d+\s+on\s+([^;(.]*)|target[-_ ]?modules\s*[=:]\s*\[?([^\];(]*)", text, re.IGNORECASE)
    if found is None:
        return None
    words_named = found.group(1) or found.group(2)
    if re.search(r"\ball[-_ ]linear\b", words_named, re.IGNORECASE):
        return tuple(LoraTarget)
    named = tuple(t for t, words in _LORA_TARGETS if re.search(rf"\b(?:{words})\b", words_named, re.IGNORECASE))
    if not named and re.search(r"\battention\b", words_named, re.IGNORECASE):
        return None  # NeMo's target_modules ['attention']: linear_qkv and linear_proj, the default
    if not named:
        raise Unsupported(f"model: LoRA targets {words_named.strip()!r} name none of the layers read (q_proj, k_proj, "
                          "v_proj, o_proj, gate_proj, up_proj, down_proj, all-linear)")
    return named
