"""How people write the columns of published measurements, read into our terms.

Rows are written by many hands: "none (activation checkpointing off)", "NVLS disabled", "default",
"Llama-2-70B", "LLAMA3.1_405B", "H100 SXM 96GB HBM2e". Every reader here returns None for a value that is
not stated (so the caller records what it assumed instead), and never guesses silently.
"""

from __future__ import annotations

import functools
import re

from armillary.presets.registry import find_preset, preset_names, read_data_file
from armillary.specs.strategy import BlockFormat, Recompute, RecomputeModule, TrainingPrecision, ZeroStage
from armillary.validation.reading import about_the_run

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


_YES = {"yes", "y", "true", "on", "enabled", "enable", "1", "used", "with"}
_NO = {"no", "n", "false", "off", "disabled", "disable", "0", "none", "unused", "without"}


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
    if words[0] in _YES or words[-1] in _YES:
        return True
    if words[0] in _NO or words[-1] in _NO:
        return False
    if re.fullmatch(r"--[a-z][a-z0-9-]*", value):  # a command-line switch given alone turns its option on
        return True
    return None


def recompute_of(text: str | None) -> Recompute | None:
    """Activation recomputation from its description; None when not stated."""
    value = stated(text)
    if value is None:
        return None
    first = head(value) or ""
    # "none set in config", "ACT_CKPT_* = null", "remat_policy=none": a configuration that turns nothing on;
    # "activation checkpointing: off", "recompute: false", "AC disabled", "no AC": a switch said to be off
    if first in _NO or re.match(r"(no|without) (activation )?(checkpointing|recompute|recomputation)", value) \
            or re.match(r"(none|nothing|not) set\b", value) or re.search(r"remat_policy\s*[=:]\s*none", value) \
            or flag(first) is False:
        return Recompute.NONE
    if recompute_modules_of(value) is not None:
        return Recompute.SELECTIVE
    if re.search(r"remat_policy\s*[=:]\s*full\b", value):
        return Recompute.FULL
    if re.search(r"remat_policy\s*[=:]", value):
        return None  # MaxText's partial policies (minimal, save_dot_except_*) save other tensors than ours
    if "selective" in value:
        return Recompute.SELECTIVE
    # Hugging Face's "gradient checkpointing" recomputes every layer; Megatron's --recompute-num-layers and
    # --recompute-method apply only to full recomputation (megatron/training/arguments.py)
    if "full" in value or first in _YES or re.match(r"(activation |gradient )?(checkpointing|recompute|"
                                                    r"rematerialization)", first) \
            or re.search(r"recompute[-_ ](num[-_ ]layers|method)", value):
        return Recompute.FULL
    return None


def recompute_layers_of(text: str | None) -> tuple[int, str | None] | None:
    """The layers a full recomputation names and its method ("full, 8 layers", "full (block, 4 layers)",
    "--recompute-method uniform --recompute-num-layers 2"): (layers, "block" / "uniform" / None when the method
    is not named); None when no layer count is named."""
    value = clean(text)
    found = re.search(r"recompute[-_ ]num[-_ ]layers\s*[=: ]\s*(\d+)", value) or re.search(r"\b(\d+)\s*layers?\b",
                                                                                        value)
    if found is None:
        return None
    method = re.search(r"\b(uniform|block)\b", value)
    return int(found.group(1)), (method.group(1) if method else None)


def recompute_modules_of(text: str | None) -> tuple[RecomputeModule, ...] | None:
    """The modules a selective recomputation names ("selective: core_attn, moe_act", "--recompute-modules
    layernorm mla_up_proj"), in Megatron-Core's names; None when it names none."""
    value = clean(text)
    named = tuple(m for m in RecomputeModule if re.search(rf"(?<![a-z_]){m.value}(?![a-z_])", value))
    return named or None


def precision_of(text: str | None) -> TrainingPrecision | None:
    """The GEMM precision of a training recipe ("amp_bf16", "FP8-CS", "Float8 + BF16", "fp16 mixed");
    None when not stated or only "16-bit" (which could be either)."""
    value = _without_negated_formats(stated(text))
    if value is None:
        return None
    if re.search(r"fp8|float8|mxfp8|e4m3|e5m2|nvfp4|fp4", value):
        return TrainingPrecision.FP8
    if re.search(r"bf16|bfloat16", value):
        return TrainingPrecision.BF16
    if re.search(r"fp16|float16|half", value):
        return TrainingPrecision.FP16
    if re.search(r"fp32|float32|tf32|single", value):
        return TrainingPrecision.FP32
    return None


def _without_negated_formats(value: str | None) -> str | None:
    """A precision text without the formats it says were not used ("BF16 (FP8 disabled)", "bf16, no fp8")."""
    if value is None:
        return None
    fmt = r"(?:(?:mx|nv)?fp[48]\w*|float8\w*)"
    return re.sub(rf"\b(?:no|without|not|w/o)\s+{fmt}|\b{fmt}\s+(?:disabled|off|not used|unused)\b", " ", value)


def block_format_of(text: str | None) -> BlockFormat | None:
    """The block-scaled GEMM format a training precision names in its value, not in its qualifiers: "FP8-MX",
    "MXFP8" (Transformer Engine's MXFP8BlockScaling, Megatron --fp8-recipe mxfp8: Megatron-Bridge's FP8-MX,
    `bf16_with_mxfp8_mixed` in its precision configs), "NVFP4", "MXFP4"; None when the value names none
    ("FP8-CS (FP8-MX)" is current scaling, the MX figure being the one in parentheses)."""
    value = _without_negated_formats(head(text))
    if value is None:
        return None
    if re.search(r"\bnvfp4\b", value):
        return BlockFormat.NVFP4
    if re.search(r"\bmxfp4\b", value):
        return BlockFormat.MXFP4
    if re.search(r"\bmxfp8\b|\bfp8[- _]?mx\b", value):
        return BlockFormat.MXFP8
    return None


def sharding_of(text: str | None) -> ZeroStage | None:
    """Data-parallel sharding named in a framework description (FSDP strategies, ZeRO stages, the
    distributed optimizer); None when none is named."""
    value = clean(text)
    if re.search(r"no_shard|ddp only|zero[- ]?(stage[- ]?)?0\b", value):
        return ZeroStage.NONE
    # FSDP that keeps the gathered parameters from the forward to the backward holds them like ZeRO-2
    if re.search(r"shard_grad_op|zero[- ]?(stage[- ]?)?2\b|not reshard(ed)? after (the )?forward|"
                 r"reshard_after_forward\s*[=:]\s*false", value):
        return ZeroStage.GRADIENTS
    if re.search(r"full_shard|hybrid_shard|zero[- ]?(stage[- ]?)?3\b|\bfsdp|fully_shard|zero[- ]infinity", value):
        return ZeroStage.PARAMETERS
    if re.search(r"zero[- ]?(stage[- ]?)?1\b|distributed optimi[sz]er", value):
        return ZeroStage.OPTIMIZER
    return None


def deduplicated_dispatch(text: str | None) -> bool:
    """Whether a description names a dispatcher that sends each token once per node and device (DeepEP,
    HybridEP, Megatron-Core's flex dispatcher; `Routing.dispatch_dedup`)."""
    named = r"deep[- ]?ep|hybrid[- ]?ep|flex[- ]dispatcher|dispatcher[- ]type[ =]*flex"
    return re.search(named, clean(text)) is not None


# an offline / max-load benchmark: every request queued at t = 0 (trtllm-bench throughput, vLLM
# benchmark_throughput, MLPerf Offline), however it is worded
OFFLINE_LOAD = (r"\boffline\b|max[- ]?load|infinite request rate|request[-_ ]rate\s*[ =:]?\s*inf\b|"
                r"all\b.{0,40}\b(queued|at t\s*=\s*0)")


# words that name a variant of the same architecture, not another model
# ("meta": the publisher's prefix of Hugging Face's "meta-llama/Meta-Llama-3.1-405B")
_NOT_ARCHITECTURE = {"megatron", "instruct", "chat", "base", "hf", "fp8", "fp16", "bf16", "kv", "it", "moe",
                     "the", "model", "dense", "meta"}


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


# a pipeline layout a row states in Megatron-Core's syntax: "--pipeline-model-parallel-layout Et|(tt|)*30L",
# "pipeline_model_parallel_layout=...", "pipeline layout: ..." (case kept: 'E', 't', 'm', 'L' differ)
_LAYOUT = re.compile(r"(?:--pipeline-model-parallel-layout|pipeline_model_parallel_layout|pipeline layout)\s*[=:]?\s*"
                     r"['\"]?([EtmL|()*\d,]+)")


def pipeline_layout_of(text: str | None) -> str | None:
    """The Megatron-Core pipeline layout string a row's words state; None when they state none."""
    found = _LAYOUT.search(text or "")
    return found.group(1) if found else None


# GPU text -> system preset; the first pattern that matches wins (cloud instances before their GPU, GB200
# before B200)
_GPU_SYSTEMS = (
    (re.compile(r"a3[\s-]?mega", re.I), "gcp-a3-mega"),
    (re.compile(r"\ba4-highgpu|\bgcp a4\b", re.I), "gcp-a4"),
    (re.compile(r"\bp5e\b", re.I), "aws-p5e"),
    (re.compile(r"\bp5\b", re.I), "aws-p5"),
    (re.compile(r"\bp4dn?\b", re.I), "aws-p4d"),
    (re.compile(r"\bnd[\s-]?h100[\s-]?v5\b", re.I), "azure-nd-h100-v5"),
    (re.compile(r"a100.*\b40\s*gb|a100[_-]40", re.I), "dgx-a100-40gb"),
    (re.compile(r"a100", re.I), "dgx-a100"),
    (re.compile(r"h800", re.I), "dgx-h800"),
    (re.compile(r"h200", re.I), "hgx-h200"),
    (re.compile(r"h100", re.I), "dgx-h100"),
    (re.compile(r"\bh20\b", re.I), "hgx-h20"),
    (re.compile(r"gb300|nvl72.*b300|b300.*nvl72", re.I), "gb300-nvl72"),
    (re.compile(r"b300", re.I), "dgx-b300"),
    (re.compile(r"gb200", re.I), "gb200-nvl72"),
    (re.compile(r"b200", re.I), "dgx-b200"),
    (re.compile(r"mi300x", re.I), "mi300x-8"),
    (re.compile(r"mi325x", re.I), "mi325x-8"),
    (re.compile(r"mi355x", re.I), "mi355x-8"),
    (re.compile(r"gaudi\s*3", re.I), "hls-gaudi3"),
    (re.compile(r"tpu\s*v5p", re.I), "tpu-v5p-slice"),
    (re.compile(r"tpu\s*v4", re.I), "tpu-v4-pod-slice"),
    (re.compile(r"tpu\s*v6e|trillium", re.I), "tpu-v6e-slice"),
    (re.compile(r"tpu\s*7x|ironwood", re.I), "tpu7x-slice"),
    (re.compile(r"trn2|trainium\s*2", re.I), "trn2-16"),
)


# parts of the same name that no shipped system is: PCIe cards and the NVL PCIe boards (H100 NVL, H200 NVL: lower
# power and clocks, no NVSwitch; NVIDIA's H100 / H200 datasheets), Grace Hopper's GH200 superchip (its own HBM and
# the CPU over NVLink-C2C), GB200 NVL2 / NVL4 boards (not an NVL72 rack; NVIDIA GB200 NVL4 announcement, SC24)
OTHER_PARTS = re.compile(r"pci-?e|\b[hg]\d{2,3}\s*nvl\b(?!-?\s?(?:36|72|144)\b)|\bgh200\b|\bnvl\s*[24]\b", re.I)


def system_preset_for(gpu: str | None) -> str | None:
    """The system preset of a row's `gpu` text; None when no shipped system has that GPU, or the text names
    another part of its name (`OTHER_PARTS`: "H100 PCIe", "H200 NVL", "GH200"). A clause about something else
    ("llm-analysis README says 40GB") is not read."""
    text = "; ".join(about_the_run(gpu or ""))
    if OTHER_PARTS.search(text):
        return None
    return next((p for rx, p in _GPU_SYSTEMS if rx.search(text)), None)


def memory_gb_of(gpu: str | None) -> float | None:
    """The HBM capacity a GPU text states ("H100 SXM 96GB HBM2e" -> 96): the size written next to HBM, else
    the largest size named (a second, smaller size is usually the other variant or host memory); never a size
    said to be the node's total or host memory ("8x H100 80GB (640GB total)" -> 80)."""
    text = clean("; ".join(about_the_run(gpu or "")))
    # a size of the node or the host is not one GPU's: "640GB total", "2 TB system memory", "480GB LPDDR5X"
    sizes = [(float(m.group(1)), m.end()) for m in re.finditer(r"(\d+(?:\.\d+)?)\s*gi?b\b(?!\s*(total|aggregate|"
                                                                r"per (node|server|host|system)|system|host|cpu|"
                                                                r"l?pddr\w*|ddr\w*|nvme|ssd))", text)]
    if not sizes:
        return None
    beside_hbm = [s for s, end in sizes if re.match(r"\s*(of\s*)?hbm", text[end:])]
    return beside_hbm[0] if beside_hbm else max(s for s, _ in sizes)


# weight formats an inference row may name that its reading does not take yet: weight-only int8 / int4 (AWQ,
# GPTQ, W4A16, W8A16, W4A8), SmoothQuant's int8 W8A8 (named by its int8), block-scaled fp4 (NVFP4, MXFP4); an fp8
# "W8A8" is fp8
_OTHER_WEIGHTS = re.compile(r"\bint[48]\b|\bawq\b|\bgptq\b|\bw4a\d+\b|\bw8a16\b|smoothquant|fp4\b|\b4[- ]?bit\b")


def unread_weight_format(text: str | None) -> str | None:
    """The words of an inference row's precision that name a weight format it does not read (int8, int4, AWQ,
    GPTQ, NVFP4...); None when it names none."""
    found = _OTHER_WEIGHTS.search(_without_negated_formats(clean(text)) or "")
    return found.group(0) if found else None


def fp8_of(text: str | None) -> bool:
    """Whether an inference row's precision says fp8 weights and GEMMs ("FP8", "fp8 (W8A8)", "FP8 weights")."""
    return re.search(r"fp8|float8|e4m3", _without_negated_formats(clean(text)) or "") is not None


def fp16_of(text: str | None) -> bool:
    """Whether a precision text says fp16 ("FP16", "float16", "half"; not bfloat16)."""
    return re.search(r"fp16|(?<!b)float16|\bhalf\b", clean(text)) is not None


def kv_fp8_of(text: str | None) -> bool:
    """Whether an inference row's precision puts its KV cache in fp8 ("FP8 (weights+KV cache)", "FP8 weights +
    FP8 KV cache", "fp8 kv"): fp8 named, and the KV cache named without a 16-bit precision of its own."""
    value = clean(text)
    return fp8_of(value) and re.search(r"\bkv\b", value) is not None \
        and re.search(r"(bf16|fp16|16[- ]bit)\s*kv|\bkv\b[^;,+]*\b(bf16|fp16|16[- ]bit)", value) is None


# a package pinned as pip writes it ("vllm==0.7.3", "sglang>=0.4"): the name and its version, as the engine and
# stack patterns read them ("vllm 0.7.3")
_PIN = re.compile(r"\b([a-z][a-z0-9_.-]*)\s*(?:==|~=|>=)\s*v?(\d)", re.I)


def framework_words(text: str | None) -> str:
    """A framework text with pip's version pins read as words ("vllm==0.7.3" -> "vllm 0.7.3")."""
    return _PIN.sub(r"\1 \2", text or "")


# a row's kind as sources word it: "Training", "pre-training", "fine-tuning", "Inference (offline)", "serving",
# "nccl-tests": the harness's kinds (training, inference, collective, memory); None for a kind it has none for
_KINDS = (("memory", r"^memory\b"), ("collective", r"^(collective|nccl|rccl|communication)"),
          ("inference", r"^(inference|serving|decode|generation)\b"),
          ("training", r"^((pre|post)?[- ]?training|fine[- ]?tun(e|ing)|finetun(e|ing))\b"))


def kind_of(text: str | None) -> str | None:
    """The harness's kind for a row's `kind` text; None when it names none of them."""
    value = clean(text)
    return next((kind for kind, words in _KINDS if re.match(words, value)), None)
