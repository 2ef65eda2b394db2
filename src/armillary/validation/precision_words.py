"""How rows word their precision: a training recipe's GEMM precision and block-scaled format, and an inference
row's weight and KV-cache formats (fp8, fp16, or one its reading does not take)."""

from __future__ import annotations

import re

from armillary.specs.strategy import BlockFormat, TrainingPrecision
from armillary.validation.vocabulary import clean, first_named, head, stated

# a recipe's GEMM precision as sources name it; the first found wins ("Float8 + BF16" is fp8)
_PRECISIONS = ((r"fp8|float8|mxfp8|e4m3|e5m2|nvfp4|fp4", TrainingPrecision.FP8),
               (r"bf16|bfloat16", TrainingPrecision.BF16), (r"fp16|float16|half", TrainingPrecision.FP16),
               (r"fp32|float32|tf32|single", TrainingPrecision.FP32))


def precision_of(text: str | None) -> TrainingPrecision | None:
    """The GEMM precision of a training recipe ("amp_bf16", "FP8-CS", "Float8 + BF16", "fp16 mixed");
    None when not stated or only "16-bit" (which could be either)."""
    value = _without_negated_formats(stated(text))
    return None if value is None else first_named(value, _PRECISIONS)


def _without_negated_formats(value: str | None) -> str | None:
    """A precision text without the formats it says were not used ("BF16 (FP8 disabled)", "bf16, no fp8")."""
    if value is None:
        return None
    fmt = r"(?:(?:mx|nv)?fp[48]\w*|float8\w*)"
    # also a setting that turns it off: NeMo's "fp8: False" / "fp8: null", Megatron's "fp8=None"; and a 16-bit
    # switch set off beside the one set on (Hugging Face TrainingArguments "fp16=True, bf16=False")
    return re.sub(rf"\b(?:no|without|not|w/o)\s+{fmt}|\b{fmt}\s+(?:disabled|off|not used|unused)\b|"
                  rf"\b(?:{fmt}|bf16|fp16)\s*[:=]\s*(?:false|none|null|off|no|0)\b", " ", value)


# the block-scaled formats (specs.formats) as sources name them
# (int8: AQT's dynamic int8, MaxText quantization=int8: every linear layer's GEMMs, forward and both backward,
# with int8 inputs scaled per channel; layers/quantizations.py _get_int8_quant_config, branch mlperf/4.1)
_BLOCK_FORMATS = ((r"\bnvfp4\b", BlockFormat.NVFP4), (r"\bmxfp4\b", BlockFormat.MXFP4),
                  (r"\bmxfp8\b|\bfp8[- _]?mx\b", BlockFormat.MXFP8), (r"\bint8\b", BlockFormat.INT8))


def block_format_of(text: str | None) -> BlockFormat | None:
    """The block-scaled GEMM format a training precision names in its value, not in its qualifiers: "FP8-MX",
    "MXFP8" (Transformer Engine's MXFP8BlockScaling, Megatron --fp8-recipe mxfp8: Megatron-Bridge's FP8-MX,
    `bf16_with_mxfp8_mixed` in its precision configs), "NVFP4", "MXFP4", "int8" (AQT); None when the value names none
    ("FP8-CS (FP8-MX)" is current scaling, the MX figure being the one in parentheses)."""
    value = _without_negated_formats(head(text))
    if value in ("fp8", "fp8 mixed") and re.search(r"\b(mxfp8|fp8[- _]?mx)\b[^;)]*\b(block|recipe|scaling)\b",
                                                   clean(text)):
        # "FP8 (MXFP8 block scaling)": the recipe of a bare FP8, not a second figure beside another recipe
        return BlockFormat.MXFP8
    return None if value is None else first_named(value, _BLOCK_FORMATS)


# weight formats an inference row may name that its reading does not take yet: weight-only int8 / int4 (AWQ,
# GPTQ, W4A16, W8A16, W4A8), SmoothQuant's int8 W8A8 (named by its int8), block-scaled fp4 (NVFP4, MXFP4); an fp8
# "W8A8" is fp8
# bitsandbytes' 8-bit and NF4, GGUF's k-quants ("Q4_K_M"), FP6 (also weights the reading does not take); a "W8A8" or
# an "8-bit" that does not name fp8 is SmoothQuant's int8 as often as fp8 (vLLM's and llm-compressor's "w8a8" names
# both), so it is refused unless fp8 is named
_OTHER_WEIGHTS = re.compile(r"\bint[48]\b|\bawq\b|\bgptq\b|\bw4a\d+\b|\bw8a16\b|smoothquant|fp4\b|\b4[- ]?bit\b|"
                            r"\bnf4\b|bitsandbytes|\bbnb\b|\bgguf\b|\bq[2-8]_(?:k|0|1)\w*|\bfp6\b|\bint2\b")
_FP8_OR_OTHER = re.compile(r"\bw8a8\b|\b8[- ]?bit\b")
_FP8 = r"fp8|float8|e4m3"


def unread_weight_format(text: str | None) -> str | None:
    """The words of an inference row's precision that name a weight format it does not read (int8, int4, AWQ,
    GPTQ, NVFP4, NF4, GGUF...); None when it names none."""
    value = _without_negated_formats(clean(text)) or ""
    found = _OTHER_WEIGHTS.search(value) or (None if re.search(_FP8, value) else _FP8_OR_OTHER.search(value))
    return found.group(0) if found else None


# the KV cache's own precision, named apart from the weights': "FP8 KV cache", "KV cache FP8", "fp8 kv",
# vLLM's "--kv-cache-dtype fp8" / "kv_cache_dtype=fp8_e4m3"
_KV_SETTING = re.compile(r"kv[-_ ]?cache[-_ ]dtype\s*[ =:]?\s*(\w+)")
_KV_CLAUSE = re.compile(rf"(?:{_FP8})\w*\s*kv(?:[-_ ]?cache)?\b|\bkv[-_ ]?cache\s*(?:in\s*|=\s*|:\s*)?(?:{_FP8})\w*|"
                        + _KV_SETTING.pattern)


def fp8_of(text: str | None) -> bool:
    """Whether an inference row's precision says fp8 weights and GEMMs ("FP8", "fp8 (W8A8)", "FP8 weights"); an
    fp8 named only for the KV cache beside 16-bit weights ("FP16 weights, FP8 KV cache", "bf16, --kv-cache-dtype
    fp8") is not the weights'."""
    value = _without_negated_formats(clean(text)) or ""
    if re.search(r"\bkv(?:[-_ ]?cache)?\b[^;,]*\bonly\b|\bonly\b[^;,]*\bkv\b", value):
        return False  # "FP8 KV cache only": the weights keep the model's 16-bit format
    if re.search(_FP8, _KV_CLAUSE.sub(" ", value)):
        return True
    # fp8 only in the KV cache's words: the weights' are the 16-bit format named, else (nothing else named) fp8
    return re.search(_FP8, value) is not None and not re.search(r"bf16|bfloat16|fp16|float16|\bhalf\b|16[- ]bit",
                                                                value)


def fp16_of(text: str | None) -> bool:
    """Whether a precision text says fp16 ("FP16", "float16", "half"; not bfloat16)."""
    return re.search(r"fp16|(?<!b)float16|\bhalf\b", clean(text)) is not None


def kv_fp8_of(text: str | None) -> bool:
    """Whether an inference row's precision puts its KV cache in fp8 ("FP8 (weights+KV cache)", "FP8 weights +
    FP8 KV cache", "fp8 kv"): fp8 named, and the KV cache named without a 16-bit precision of its own."""
    value = _without_negated_formats(clean(text)) or ""
    setting = _KV_SETTING.search(value)
    if setting:  # vLLM's --kv-cache-dtype: fp8, fp8_e4m3, fp8_e5m2; "auto" keeps the model's
        return re.match(_FP8, setting.group(1)) is not None
    return re.search(_FP8, value) is not None and re.search(r"\bkv\b", value) is not None \
        and re.search(r"(bf16|fp16|16[- ]bit)\s*kv|\bkv\b[^;,+]*\b(bf16|fp16|16[- ]bit)", value) is None
