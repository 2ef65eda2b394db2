"""How rows name their model: any spelling of a shipped model preset ("Llama-2-70B", "LLAMA2_70B", "DeepSeek V3
671B"), and whether its multi-token-prediction modules were trained."""

from __future__ import annotations

import functools
import re

from armillary.presets.registry import find_preset, preset_names, read_data_file

# words that name a variant of the same architecture, not another model
# ("meta": the publisher's prefix of Hugging Face's "meta-llama/Meta-Llama-3.1-405B")
# ("thinking": Qwen3's "-Thinking-2507" release, the same weights' shapes as "-Instruct-2507")
_NOT_ARCHITECTURE = {"megatron", "instruct", "chat", "base", "hf", "fp8", "fp16", "bf16", "kv", "it", "moe",
                     "the", "model", "dense", "meta", "thinking"}


def _model_words(name: str) -> list[str]:
    text = name.lower()
    while re.search(r"\([^()]*\)", text):
        text = re.sub(r"\([^()]*\)", " ", text)
    text = text.split("/")[-1]  # "meta-llama/Llama-3.1-405B" -> the model's own name
    return [w for w in re.split(r"[^a-z0-9.]+", text) if w and w not in _NOT_ARCHITECTURE]


def model_key(name: str) -> str:
    """A spelling-free key of a model name: "Llama-2-70B", "LLAMA2_70B" and "llama 2 70b (chat)" all give
    "llama270b". Parenthesised qualifiers and words such as "instruct" or "FP8" are dropped."""
    return "".join(_model_words(name)).strip(".")


@functools.cache
def _model_keys() -> dict[str, str]:
    """Key -> model preset, from each preset's file name, `name` and `aliases`."""
    keys: dict[str, str] = {}
    for stem in preset_names("models"):
        path = find_preset("models", stem)
        data = read_data_file(path) if path is not None else {}
        for spelling in (stem, data.get("name", ""), *data.get("aliases", ())):
            keys.setdefault(model_key(spelling), stem)
    return keys


@functools.cache
def _published_total(stem: str) -> float | None:
    """The total parameters a model preset's `published` block gives; None when it gives none."""
    path = find_preset("models", stem)
    published = (read_data_file(path) if path is not None else {}).get("published") or {}
    return float(published["total"]) if "total" in published else None


def model_preset_for(name: str | None) -> str | None:
    """The shipped model preset a row's model text names, whatever its spelling; None when none does. A name
    followed by its size ("DeepSeek V3 671B") names the preset of that name whose published total size it is
    (to the stated digits)."""
    key = model_key(name or "")
    if not key:
        return None
    found = _model_keys().get(key)
    words = _model_words(name or "")
    if found is None and len(words) > 2 and re.fullmatch(r"\d{4}", words[-1]):
        # a release's date tag after the name ("Qwen3-235B-A22B-Instruct-2507", "DeepSeek-V3-0324",
        # "DeepSeek-R1-0528"): a re-release of the same architecture (its Hugging Face config.json keeps the
        # layers, widths and experts)
        found = _model_keys().get("".join(words[:-1]).strip("."))
    size = re.fullmatch(r"(\d+(?:\.\d+)?)b", words[-1]) if found is None and len(words) > 1 else None
    if size is not None:
        stem = _model_keys().get("".join(words[:-1]).strip("."))
        total = _published_total(stem) if stem is not None else None
        decimals = len(size.group(1).partition(".")[2])
        if total is not None and round(total / 1e9, decimals) == float(size.group(1)):
            return stem
    return found


# multi-token prediction in a model's name: "DeepSeekV3 (w/ MTP)", "(w/o MTP)", "with MTP", "without MTP",
# "no MTP" (Megatron-Bridge's performance summary names its DeepSeek-V3 runs so)
_MTP_ON = re.compile(r"\b(?:w/|with)[\s_-]*mtp\b", re.I)
_MTP_OFF = re.compile(r"(?:\bw/o|\bwithout|\bno)[\s_-]*mtp\b", re.I)


def mtp_of(name: str | None) -> bool | None:
    """Whether a model text says its multi-token-prediction modules were trained; None when it says nothing."""
    text = name or ""
    if _MTP_OFF.search(text):
        return False
    return True if _MTP_ON.search(text) else None
