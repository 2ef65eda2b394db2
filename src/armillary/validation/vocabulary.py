"""How people write the columns of published measurements, read into our terms.

Rows are written by many hands: "none (activation checkpointing off)", "NVLS disabled", "default",
"Llama-2-70B", "LLAMA3.1_405B", "H100 SXM 96GB HBM2e". Every reader here returns None for a value that is
not stated (so the caller records what it assumed instead), and never guesses silently.

This module reads what any column may say (stated or not, a yes/no flag, a row's kind, pip's version pins);
the words of one subject have their own: `model_words` (model names), `gpu_words` (GPU names and their
memory), `precision_words` (training and inference precisions), `strategy_words` (recomputation, sharding,
dispatch, pipeline layout), `fabric_words` (networks).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")

# a column that says nothing: empty, "n/a", "not stated ...", "per recipe (not in table)", "default", "?"
_UNSTATED = re.compile(r"^(|-+|\?|n/?a|na|none stated|unknown|unspecified|"
                       r"not (stated|given|reported|transcribed|published|looked up)\b.*|"
                       r"per recipe\b.*|per \S+ default\b.*|default\b.*|auto\b.*|tbd)$")


def clean(text: str | None) -> str:
    """Lower case, single spaces, no surrounding blanks or quotes."""
    return re.sub(r"\s+", " ", (text or "").strip().strip("\"'").lower())


def stated(text: str | None) -> str | None:
    """The column in lower case, or None when it states nothing ("", "n/a", "not stated", "default"...)."""
    value = clean(text)
    return None if _UNSTATED.match(value) else value


def head(text: str | None) -> str | None:
    """The value before its qualifiers: "none (activation checkpointing off)" -> "none", "yes; 8 rails"
    -> "yes"; None when nothing is stated."""
    value = stated(text)
    if value is None:
        return None
    first = re.split(r"\s*[(;,\[]", value, maxsplit=1)[0].strip()
    return stated(first) if first else None


def first_named(text: str, table: Sequence[tuple[str | re.Pattern[str], T]]) -> T | None:
    """The value of the first (pattern, value) of `table` whose pattern `text` contains; None when none."""
    return next((value for pattern, value in table if re.search(pattern, text)), None)


# the words of a yes / no column (`flag`), and of a switch said on or off (`strategy_words.recompute_of`)
YES_WORDS = {"yes", "y", "true", "on", "enabled", "enable", "1", "used", "with"}
NO_WORDS = {"no", "n", "false", "off", "disabled", "disable", "0", "none", "unused", "without"}


def flag(text: str | None) -> bool | None:
    """A yes/no column ("yes", "on", "enabled", "TRUE", "no (...)", "disabled"), also written as a setting
    ("sequence_parallel=True", "SP: on", "SP=1"), a bare switch ("--sequence-parallel") or a negation ("not
    used", "not enabled"); None when not stated."""
    value = head(text)
    if value is None:
        return None
    words = value.split()
    if words[0] in ("not", "never") and len(words) > 1:  # "not used", "not enabled": the negated word's opposite
        said = flag(" ".join(words[1:]))
        return None if said is None else not said
    setting = re.fullmatch(r"[\w .-]+?\s*[=:]\s*(\S+)", value)  # key=value, key: value
    if setting:
        return flag(setting.group(1))
    if words[0] in YES_WORDS or words[-1] in YES_WORDS:
        return True
    if words[0] in NO_WORDS or words[-1] in NO_WORDS:
        return False
    if re.fullmatch(r"--[a-z][a-z0-9-]*", value):  # a command-line switch given alone turns its option on
        return True
    return None


# an offline / max-load benchmark: every request queued at t = 0 (trtllm-bench throughput, vLLM
# benchmark_throughput, MLPerf Offline), however it is worded
OFFLINE_LOAD = (r"\boffline\b|max[- ]?load|infinite request rate|request[-_ ]rate\s*[ =:]?\s*inf\b|"
                r"all\b.{0,40}\b(queued|at t\s*=\s*0)")


# a package pinned as pip writes it ("vllm==0.7.3", "sglang>=0.4"): the name and its version, as the engine and
# stack patterns read them ("vllm 0.7.3")
_PIN = re.compile(r"\b([a-z][a-z0-9_.-]*)\s*(?:==|~=|>=)\s*v?(\d)", re.I)


# an engine's container image with its release as the tag ("vllm/vllm-openai:v0.7.3", "lmsysorg/sglang:v0.4.3.post2-
# cu125", "nvcr.io/nvidia/tensorrt-llm/release:0.17.0"): the engine and its version, as a pin is read; a tag that is
# not a release ("rocm/vllm-dev:vllm-ds3-staging-0217", "lmsysorg/sglang:latest") is left as written
_IMAGE = re.compile(r"(?<![\w.-])(?:[\w.-]+/)*(vllm|sglang|tensorrt-llm)(?:-openai|/release)?:v?(\d+\.\d+)", re.I)


# TensorRT-LLM as its 1.x documentation ("TensorRT LLM") and its Python package ("tensorrt_llm") write it
_TENSORRT_LLM = re.compile(r"\btensorrt[ _]llm\b", re.I)


def framework_words(text: str | None) -> str:
    """A framework text with pip's version pins and container image tags read as words ("vllm==0.7.3",
    "vllm/vllm-openai:v0.7.3" -> "vllm 0.7.3"), and TensorRT-LLM's other spellings ("TensorRT LLM",
    "tensorrt_llm") as its name."""
    text = _TENSORRT_LLM.sub("TensorRT-LLM", text or "")
    return _IMAGE.sub(r"\1 \2", _PIN.sub(r"\1 \2", text))


# a row's kind as sources word it: "Training", "pre-training", "fine-tuning", "Inference (offline)", "serving",
# "nccl-tests": the harness's kinds (training, inference, collective, memory); None for a kind it has none for
_KINDS = (("memory", r"^memory\b"), ("collective", r"^(collective|nccl|rccl|communication)"),
          ("inference", r"^(inference|serving|decode|generation)\b"),
          ("training", r"^((pre|post)?[- ]?training|fine[- ]?tun(e|ing)|finetun(e|ing))\b"))


def kind_of(text: str | None) -> str | None:
    """The harness's kind for a row's `kind` text; None when it names none of them."""
    value = clean(text)
    return next((kind for kind, words in _KINDS if re.match(words, value)), None)


def metric_words(text: str | None) -> str:
    """A metric or unit in the words the reader matches: InferenceMAX's json keys ("output_tput_per_gpu",
    "median_e2el", "p99_ttft") with spaces, its "tput" as throughput, "TPS/GPU" as tokens/s per GPU; a footnote marker
    ("tok/s/GPU*", "(†)") dropped."""
    out = clean(text).replace("_", " ")
    out = re.sub(r"\btput\b", "throughput", out)
    # "TPS/GPU" is tokens/s per GPU; a bare "TPS" is refused (round 2: per user as often as the server's)
    out = re.sub(r"\btps(?=\s*(/|per)\s*(gpu|device|chip)\b)", "tokens/s", out)
    return re.sub(r"\s*(\*+|[†‡§]|\((\*|†|‡)\))(?=\s|$|/)", "", out).strip()
