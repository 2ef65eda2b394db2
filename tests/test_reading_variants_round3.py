"""A third round of shipped rows reworded as other publishers write them (docs/validation.md, "Words the harness
reads"): the harness reads the same specification, or refuses naming the column, never a silently different one.

The first two rounds (tests/test_reading_variants.py, tests/test_reading_variants_collective.py,
tests/test_reading_variants_round2.py) took their words from our own rows' sources and from the serving clients'
printouts; this round takes them from the sources neither covered: papers' tables (Megatron-LM SC'21 "Achieved
teraFLOP/s per GPU" / "Achieved aggregate petaFLOP/s", Korthikanti et al. 2022 "Model FLOPs Utilization" /
"Hardware FLOPs Utilization", MegaScale's "Aggregate PFlops/s", the Llama 3 paper's "TFLOPs/GPU", PaLM's MFU
"with self-attention"), Hugging Face config.json keys in the architecture columns ("hidden_size: 16384",
"num_key_value_heads: 8", "n_routed_experts: 256", "num_experts_per_tok: 8"), Megatron arguments
("--ffn-hidden-size", "num_query_groups"), PEFT / NeMo LoRA settings ("lora_r: 16", "target_modules=[q_proj, v_proj]",
"all-linear"), PyTorch Lightning and Hugging Face Trainer precisions ("16-mixed", "bf16=False, fp16=True"), AMD
ROCm / Quark formats ("fp8_e4m3fnuz", "MXFP4"), Google TPU names ("v5p", "v6e", "chips"), Intel Gaudi's "HPU",
torch's and nvidia-smi's memory figures ("max_memory_allocated", "memory used (nvidia-smi)"), nccl-tests' units
and sizes. `python tests/test_reading_variants_round3.py` prints the counts per class (run it with another tree's
src on PYTHONPATH for a before / after).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from reading_variant_cases import SAME, Case, _c, _inference_formats, _precision_is, _rows, outcome, report

from armillary.specs.workload import LoraTarget

KOR = "TR-KOR-T5-22B-FULL"  # A100 80GB, tp 8, step time in s, mixed precision (16-bit)
APPC = "TR-KOR-APPC-175B"  # MFU in %, 64 A100
MLM = "TR-MLM-H100-01"  # per-GPU model TFLOP/s, 48 H100
NEMO = "TR-NEMO2407-01"  # H100, FP8, 64 GPUs, tokens/s/GPU
L3 = "TR-LLAMA3-405B-1"  # Llama 3 405B, no preset: the architecture columns build the model (llama3 family)
DSV3 = "TR-MBRIDGE-25.09-04"  # DeepSeek-V3 preset, 256 experts top-8
QWEN = "TR-MBRIDGE-25.09-05"  # Qwen3-30B-A3B preset, 128 experts top-8
TTT = "TR-MLPERF-v3.0-dgxh100-n64-nemo-TTT"  # time to train in min
TRILLIUM = "TR-MLPERF-v4.1-Google-cloud-tpu-trillium-512-maxtext-GPT3-TTT"  # 512 v6e chips
V5P = "TR-MLPERF-v4.1-Google-cloud-tpu-v5p-4096-maxtext-GPT3-TTT"
LORA = "TR-MLPERF-v4.1-NVIDIA-eos-ngc24.09-nemo-L70B-LORA-THR"  # Llama 2 70B LoRA rank 16, 8 H100
VLLM = "SRV-VLLM-DSR1-MI300X-C128-O800"
TRT_STATIC = "INF-TRT061-14"  # 8 H100, output tok/s per GPU
CO = "CO-H200x8-NCCLTESTS-16"  # all_reduce 1 GiB busbw GB/s


def _devices(row: str) -> int:
    return int(_rows()[row]["n_gpus"].replace(",", ""))


def _lora(rank: int, targets: tuple[LoraTarget, ...] | None) -> Callable[[tuple[Any, ...]], bool]:
    def check(r: tuple[Any, ...]) -> bool:
        lora = r[2][0][3].finetune
        return lora is not None and lora.rank == rank and (targets is None or set(lora.target_modules) == set(
            targets))
    return check


def _moe_widths(dense: int, expert: int) -> Callable[[tuple[Any, ...]], bool]:
    return lambda r: all((s[0]["ffn"], s[0]["moe"]["expert_ffn"]) == (dense, expert) for s in r[2])


def _label(prefix: str) -> Callable[[tuple[Any, ...]], bool]:
    return lambda r: str(r[0]).startswith(prefix)


_Q, _K, _V, _O = LoraTarget.Q, LoraTarget.K, LoraTarget.V, LoraTarget.O
_ALL_LINEAR = (_Q, _K, _V, _O, LoraTarget.GATE, LoraTarget.UP, LoraTarget.DOWN)


CASES: list[Case] = [
    # --- architecture columns as Hugging Face config.json, Megatron arguments and papers' tables write them -----
    *[_c("arch", "training", L3, SAME, **{col: w}) for col, w in (
        ("layers", "num_hidden_layers: 126"), ("layers", "126 layers"), ("layers", "n_layers=126"),
        ("hidden", "hidden_size: 16384"), ("hidden", "d_model 16384"), ("hidden", "16,384"), ("hidden", "dim=16384"),
        ("heads", "num_attention_heads: 128"), ("heads", "n_heads=128"), ("heads", "128 (query heads)"),
        ("kv_heads", "num_key_value_heads: 8"), ("kv_heads", "8 (GQA)"), ("kv_heads", "n_kv_heads=8"),
        ("kv_heads", "num_query_groups=8"), ("kv_heads", "8 KV heads"),
        ("ffn", "intermediate_size: 53248"), ("ffn", "ffn_hidden_size=53248"), ("ffn", "53,248"),
        ("ffn", "--ffn-hidden-size 53248"), ("vocab", "vocab_size: 128000"), ("vocab", "128,000"))],
    # a number the column cannot place, a shape said in words without its number ("GQA"), a size in K (128K is
    # 128,000 or 131,072): refused, never left to a preset or to kv_heads = heads
    *[_c("arch-other", "training", L3, f"refuse:{col}", **{col: w}) for col, w in (
        ("kv_heads", "GQA"), ("kv_heads", "grouped-query attention"), ("hidden", "model dim 16k"),
        ("vocab", "128K"), ("ffn", "3.25 x hidden"), ("heads", "128 query / 8 KV"), ("layers", "L=126 (TP=8)"))],
    # multi-query attention is one KV head: "MQA" read as 1, never kv_heads = heads
    *[_c("arch-mqa", "training", L3, ("check", lambda r: all(s[0]["kv_heads"] == 1 for s in r[2])), kv_heads=w)
      for w in ("MQA", "multi-query", "1 (MQA)", "num_key_value_heads: 1")],
    # --- mixture of experts as model cards and Megatron write it ------------------------------------------------
    *[_c("moe", "training", DSV3, SAME, **{col: w}) for col, w in (
        ("experts", "n_routed_experts: 256"), ("experts", "256 routed experts"), ("experts", "num_experts=256"),
        ("experts", "--num-experts 256"), ("topk", "num_experts_per_tok: 8"), ("topk", "top-8"),
        ("topk", "moe_router_topk=8"), ("topk", "top_k: 8"), ("topk", "8 (top-k)"))],
    *[_c("moe", "training", QWEN, SAME, **{col: w}) for col, w in (
        ("experts", "num_experts: 128"), ("topk", "num_experts_per_tok=8"), ("ffn", "moe_intermediate_size: 768"))],
    *[_c("moe-other", "training", DSV3, f"refuse:{col}", **{col: w}) for col, w in (
        ("experts", "fine-grained experts (256 + 1 shared)"), ("topk", "routed to 8 of them"))],
    # --- training throughput: papers' tables ----------------------------------------------------------------------
    *[_c("train-flops", "training", MLM, ("scale", k), metric=m, unit=u) for m, u, k in (
        ("Achieved teraFLOP/s per GPU", "", 1), ("model teraFLOPS per GPU", "", 1), ("TFLOPs/GPU", "", 1),
        ("TFLOP/s per accelerator", "", 1), ("TFLOP/sec/chip", "", 1), ("model TFLOP/s per HPU", "", 1),
        ("Throughput per GPU (TFLOPS)", "", 1), ("model FLOPs per second per GPU", "TFLOP/s", 1))],
    # the whole job's FLOP/s: the stand-in's 3e18 model FLOPs over its 2 s step, in PFLOP/s
    *[_c("train-flops", "training", MLM, ("label", "model PFLOP/s total", 1500.0), metric=m, unit=u) for m, u in (
        ("Achieved aggregate petaFLOP/s", ""), ("Aggregate PFlops/s", ""), ("aggregate throughput", "PFLOP/s"))],
    *[_c("train-flops", "training", MLM, ("check", _label("hardware")), metric=m, unit=u) for m, u in (
        ("hardware TFLOP/s per GPU", ""), ("HW TFLOPS/GPU (incl. recompute)", ""))],
    # FLOPs counted without attention (6N per token, "6ND") are not our model FLOPs; neither total nor per GPU said
    *[_c("train-flops-other", "training", MLM, re.compile(r"^(metric|unit)"), metric=m, unit=u) for m, u in (
        ("model TFLOP/s per GPU (6ND, no attention)", ""), ("TFLOP/s per GPU, excluding attention", ""),
        ("TFLOPS", ""), ("Throughput", "TFLOPS"), ("teraFLOP/s", ""))],
    *[_c("mfu", "training", APPC, ("check", _label(lab)), metric=m, unit=u) for m, u, lab in (
        ("Model FLOPs Utilization", "%", "MFU"), ("MFU", "percent", "MFU"),
        ("model FLOPs utilization (MFU)", "%", "MFU"),
        ("MFU (with self-attention)", "%", "MFU"), ("BF16 MFU", "%", "MFU"),
        ("Hardware FLOPs Utilization", "%", "HFU"), ("HFU (includes recompute)", "%", "HFU"))],
    *[_c("mfu-other", "training", APPC, "refuse:metric", metric=m, unit=u) for m, u in (
        ("MFU (without attention)", "%"), ("MFU (6ND)", "%"), ("MFU, 6N FLOPs per token", "%"),
        ("MFU excluding self-attention FLOPs", "%"))],
    *[_c("train-time", "training", KOR, ("scale", k), metric=m, unit=u) for m, u, k in (
        ("Iteration Time (s)", "", 1), ("iteration time", "seconds/iteration", 1),
        ("time per iteration", "sec/iter", 1),
        ("Step time (ms)", "", 1e3), ("step time", "ms/step", 1e3), ("Time per step (msec)", "", 1e3),
        ("elapsed time per iteration (s)", "", 1), ("Time per iteration", "ms", 1e3))],
    *[_c("train-tokens", "training", NEMO, ("scale", k), metric=m, unit=u) for m, u, k in (
        ("Tokens/sec/chip", "", 1), ("tokens per second per device", "", 1), ("tokens/sec/HPU", "", 1),
        ("Throughput per GPU (tokens/s)", "", 1), ("tokens/s/GPU (thousands)", "", 1e-3))],
    # the whole job's or one node's: the stand-in's 12345 tokens/s over the job's 8 nodes
    *[_c("train-tokens", "training", NEMO, ("label", lab, v), metric=m, unit=u) for m, u, lab, v in (
        ("Aggregate throughput (tokens/s)", "", "tokens/s total", 12345.0),
        ("global throughput", "tokens/s", "tokens/s total", 12345.0),
        ("throughput", "tokens/s per node", "tokens/s per node", 12345.0 / 8),
        ("Training throughput (tokens/s, all GPUs)", "", "tokens/s total", 12345.0))],
    *[_c("train-tokens-other", "training", NEMO, re.compile(r"^(metric|unit)"), metric=m, unit=u) for m, u in (
        ("Throughput (tokens/s)", ""), ("Training throughput", "tokens/s"), ("words per second", ""),
        ("throughput", "sequences/min"))],
    *[_c("ttt", "training", TTT, ("scale", k), metric=m, unit=u) for m, u, k in (
        ("Training time (days)", "", 1 / 1440), ("Time-to-train (hours)", "", 1 / 60),
        ("wall clock time [h]", "", 1 / 60),
        ("TTT (minutes)", "", 1), ("Time to train", "hrs", 1 / 60), ("time to train, days", "", 1 / 1440))],
    # --- second pass: MaxText's and Megatron-Bridge's headers, Intel Gaudi's model tables, torchtune's memory log ---
    *[_c("train-flops", "training", MLM, ("scale", 1), metric=m, unit="") for m in (
        "TFLOP/chip/sec", "Model TFLOP/sec/GPU", "TFLOP/s/device")],
    *[_c("train-samples", "training", LORA, ("scale", k), metric=m, unit=u) for m, u, k in (
        ("throughput", "samples/s (whole system)", 1),)],
    # the row's samples/s (the stand-in's 12345 tokens/s over its sequences) per one of its 8 devices
    *[_c("train-samples", "training", LORA, ("label", "samples/s per GPU", 1.5069580078125 / 8), metric="throughput",
         unit=u) for u in ("sentences/sec per HPU", "samples/s/GPU")],
    *[_c("train-samples-other", "training", LORA, re.compile(r"^(metric|unit)"), metric=m, unit=u) for m, u in (
        ("Throughput", "sentences/sec"), ("throughput", "sentences/min"), ("Throughput", "sentences/sec (8 HPUs)"))],
    *[_c("recompute", "training", KOR, SAME, recompute=w) for w in (
        "activation_checkpointing: true", "gradient_checkpointing=True", "enable_activation_checkpointing: True",
        "activation checkpointing (every layer)")],
    *[_c("recompute", "training", "TR-KOR-T4-1", SAME, recompute=w) for w in (
        "activation_checkpointing: false", "gradient_checkpointing=False", "enable_activation_checkpointing: False")],
    *[_c("memory-measure", "measure", "", ("value", m), metric=w) for w, m in (
        ("peak_memory_alloc", "allocated"), ("peak_memory_reserved", "reserved"))],
    *[_c("memory-measure-other", "measure", "", "refuse:metric", metric=w) for w in (
        "peak_memory_active", "peak memory active (torch.cuda.memory_stats active_bytes)")],
    *[_c("moe", "training", DSV3, SAME, topk=w) for w in ("--moe-router-topk 8", "moe_router_topk: 8")],
    *[_c("moe", "training", "TR-MBRIDGE-25.09-05", SAME, experts=w) for w in ("num_local_experts: 128",)],
    # --- third pass: latency statistics as genai-perf / ROCm blogs print them; an MoE no preset names, its widths
    # as config.json keys (DeepSeek-V3's intermediate_size 18432, moe_intermediate_size 2048) ----------------------
    *[_c("serve-latency", "serving", VLLM, ("label", lab, v), metric=m, unit=u) for m, u, lab, v in (
        ("TTFT P99 (ms)", "", "p99 TTFT", 400.0), ("99th percentile TTFT", "s", "p99 TTFT", 0.4),
        ("TTFT (median, ms)", "", "p50 TTFT", 180.0), ("Inter-token latency (ms)", "", "mean ITL", 31.0),
        ("TPOT P90 (ms)", "", "p90 TPOT", 45.0), ("Request latency (avg)", "s", "mean E2E", 9.0))],
    *[_c("serve-latency-other", "serving", VLLM, "refuse:metric", metric=m, unit=u) for m, u in (
        ("ITL P50 (ms)", ""), ("TTFT (max, ms)", ""), ("TTFT std (ms)", ""))],
    *[_c("static-metric", "static", TRT_STATIC, ("label", lab, v), metric=m, unit=u) for m, u, lab, v in (
        ("Offline throughput", "output tokens/s (8 GPUs)", "output tok/s (all GPUs)", 777.0 * 8),
        ("output throughput", "tokens/s/gpu", "output tok/s per GPU", 777.0))],
    *[_c("static-metric-other", "static", TRT_STATIC, re.compile(r"^(metric|unit)"), metric=m, unit=u) for m, u in (
        ("Throughput (tokens/s)", "(8x MI300X)"), ("Offline samples/s", ""), ("throughput", "tokens/s per node"))],
    *[_c("moe-columns", "training", DSV3, ("check", _moe_widths(18432, 2048)), model="Custom MoE 671B", ffn=w)
      for w in ("dense 18432 / expert 2048", "intermediate_size: 18432; moe_intermediate_size: 2048",
                "dense 18432, expert 2048")],
    *[_c("moe-columns", "training", QWEN, ("check", _moe_widths(768, 768)), model="Custom MoE 30B", ffn=w)
      for w in ("moe_intermediate_size: 768", "expert 768")],
    *[_c("moe-columns-other", "training", DSV3, "refuse:", model="Custom MoE 671B", ffn=w)
      for w in ("18432 / 2048",)],
    # --- precision (training): Lightning, Hugging Face Trainer, accelerate, Transformer Engine --------------------
    *[_c("precision", "training", KOR, ("check", _precision_is(p)), precision=w) for w, p in (
        ("bf16-mixed", "bf16"), ("BF16 with FP32 master weights", "bf16"), ("mixed_precision: bf16", "bf16"),
        ("bf16=True, fp16=False", "bf16"), ("16-mixed", "fp16"), ("fp16 (dynamic loss scaling)", "fp16"),
        ("fp16=True, bf16=False", "fp16"), ("bf16: false, fp16: true", "fp16"), ("torch_dtype=torch.float16", "fp16"))],
    *[_c("precision", "training", NEMO, ("check", _precision_is("fp8")), precision=w) for w in (
        "fp8 (delayed scaling, amax_history_len=1024)", "FP8 hybrid (E4M3 fwd, E5M2 bwd)", "TE FP8 + BF16 params")],
    # --- precision (inference): AMD Quark / ROCm, MLPerf <= v5.0 descriptions -------------------------------------
    *[_c("precision", "static", TRT_STATIC, ("check", _inference_formats(w_, kv)), precision=w) for w, w_, kv in (
        ("FP8 (OCP E4M3) weights and activations, FP8 KV cache", "fp8", "fp8"), ("fp8_e4m3fnuz", "fp8", None),
        ("Quark FP8 (per-tensor)", "fp8", None), ("w8a8-fp8", "fp8", None), ("FP8 KV cache only", None, "fp8"),
        ("BF16 weights; KV cache fp8_e4m3", None, "fp8"))],
    *[_c("precision-other", "static", TRT_STATIC, "refuse:precision", precision=w) for w in (
        "MXFP4 weights", "FP4", "INT4 AWQ", "W4A8 (FP8 activations)", "W4A16 (GPTQ)", "MXFP4 (OCP MX)")],
    # --- LoRA: PEFT, NeMo and torchtune settings ------------------------------------------------------------------
    # (the row's notes, which state the rank too, left out: the model column alone is read)
    *[_c("lora", "training", LORA, ("check", _lora(16, targets)), model=w, notes="") for w, targets in (
        ("Llama 2 70B LoRA (r=16)", None), ("Llama 2 70B LoRA (lora_r: 16)", None),
        ("Llama 2 70B LoRA, lora_rank=16", None), ("Llama 2 70B LoRA (lora_alpha=32, r=16)", None),
        ("Llama 2 70B LoRA rank 16 on q_proj, v_proj", (_Q, _V)),
        ("Llama 2 70B LoRA, rank 16, target_modules=[q_proj, k_proj, v_proj, o_proj]", (_Q, _K, _V, _O)),
        ("Llama 2 70B LoRA rank 16, target_modules: all-linear", _ALL_LINEAR))],
    *[_c("lora-other", "training", LORA, "refuse:model", model=w, notes="") for w in (
        "Llama 2 70B LoRA (lora_alpha=32)", "Llama 2 70B LoRA rank 16, target_modules: mlp layers only",
        "Llama 2 70B LoRA (lora_alpha=32, lora_dropout=0.1)")],
    *[_c("lora", "training", LORA, ("check", _lora(16, None)), model=w, notes="") for w in (
        "Llama 2 70B LoRA rank 16, target_modules: ['attention']", "Llama 2 70B LoRA rank-16")],
    # --- GPUs: AMD, Google, Intel, NVIDIA spellings ---------------------------------------------------------------
    *[_c("gpu", "serving", VLLM, SAME, gpu=w) for w in (
        "AMD Instinct™ MI300X (192 GB HBM3)", "MI300X 192GB 750W OAM", "8 x AMD MI300X GPUs (192 GB each)",
        "AMD Instinct MI300X accelerator")],
    *[_c("gpu", "training", NEMO, SAME, gpu=w) for w in (
        "NVIDIA H100 80GB HBM3 SXM5 (DGX H100)", "H100-SXM5-80GB", "Hopper H100 SXM 80 GB",
        "NVIDIA H100 Tensor Core GPU, 80 GB")],
    *[_c("gpu", "training", TRILLIUM, SAME, gpu=w) for w in ("Trillium", "Cloud TPU v6e (Trillium)", "v6e (32 GB)")],
    *[_c("gpu", "training", V5P, SAME, gpu=w) for w in ("Cloud TPU v5p", "v5p (95 GB HBM2e)", "TPU v5p chip")],
    *[_c("gpu-other", "training", NEMO, "refuse:gpu", gpu=w) for w in (
        "H100 NVL 94GB", "A100 40GB PCIe", "L40S", "Intel Gaudi 2 (HL-225H)", "TPU v5e", "v5litepod-256",
        "Tesla V100-SXM2-32GB", "MI250X", "MI210", "MI300A", "RTX 4090")],
    # --- device counts --------------------------------------------------------------------------------------------
    *[_c("n_gpus", "training", NEMO, SAME, n_gpus=w) for w in (
        "64 x H100", "64 H100 GPUs", "64 (8 DGX H100 nodes)", "64 HPUs")],
    *[_c("n_gpus-other", "training", NEMO, "refuse:n_gpus", n_gpus=w) for w in ("8x8", "8 x 8 GPUs", "8 DGX H100")],
    *[_c("n_gpus", "training", TRILLIUM, SAME, n_gpus=w) for w in ("512 chips", "512 TPU v6e chips",
                                                                  "512 (2 x v6e-256)")],
    # --- serving and static metrics -------------------------------------------------------------------------------
    *[_c("serve-metric", "serving", VLLM, ("label", lab, v), metric=m, unit=u) for m, u, lab, v in (
        ("Output token throughput (tok/s/GPU)", "", "output tok/s per GPU", 625.0),
        ("Mean ITL (ms)", "", "mean ITL", 31.0),
        ("Median TPOT (ms)", "", "p50 TPOT", 27.0), ("TPOT", "ms/token", "mean TPOT", 30.0),
        ("Time per output token (s)", "", "mean TPOT", 0.03), ("Throughput (req/s)", "", "requests/s", 3.0),
        ("generation throughput", "tokens/s", "output tok/s", 5000.0))],
    *[_c("serve-metric-other", "serving", VLLM, "refuse:metric", metric=m, unit=u) for m, u in (
        ("Throughput (tokens/s)", ""), ("throughput", "tokens/s"), ("P99 ITL (ms)", ""))],
    *[_c("static-metric", "static", TRT_STATIC, ("label", lab, v), metric=m, unit=u) for m, u, lab, v in (
        ("Throughput (tok/s/GPU)", "", "output tok/s per GPU", 777.0),
        ("Generation throughput (tokens/s/GPU)", "", "output tok/s per GPU", 777.0))],
    # --- serving lengths as the clients' flags and papers write them ----------------------------------------------
    *[_c("lengths", "serving", VLLM, SAME, **{col: w}) for col, w in (
        ("isl", "prompt length 3200"), ("isl", "--random-input-len 3200"), ("isl", "3200 input tokens"),
        ("osl", "--random-output-len 800"), ("osl", "800 output tokens"))],
    # a cap on the output (max_tokens, max_new_tokens) is not its length: a request may stop before it
    *[_c("lengths-other", "serving", VLLM, "refuse:isl", osl=w) for w in ("max_tokens=800", "max new tokens 800")],
    # --- collectives ----------------------------------------------------------------------------------------------
    *[_c("collective", "collective", CO, SAME, **dict(change)) for change in (
        (("msg_bytes", "1G"),), (("msg_bytes", "1 GiB"),), (("msg_bytes", "1073741824 B"),), (("msg_bytes", "1GiB"),),
        (("msg_bytes", "2^30 bytes"),), (("metric", "Bus bandwidth (GB/s)"), ("unit", "")), (("metric", "busBW"),),
        (("op", "AllReduce"),), (("op", "all-reduce"),))],
    *[_c("collective-bits", "collective", CO, ("check", lambda r: r[0][0].startswith("busbw")), **dict(change))
      for change in ((("unit", "Gbps"),), (("unit", "Gb/s"),))],
    *[_c("collective-other", "collective", CO, re.compile(r"^(msg_bytes|unit|op|metric)"), **dict(change))
      for change in ((("unit", "gbps"),), (("msg_bytes", "1.07 GB"),), (("unit", "GB/s (algbw)"),),
                     (("metric", "Avg bus bandwidth"),))],
    # --- memory: what the figure counts, and its unit -------------------------------------------------------------
    *[_c("memory-measure", "measure", "", ("value", m), metric=w) for w, m in (
        ("torch.cuda.max_memory_allocated()", "allocated"), ("Peak allocated memory (GiB)", "allocated"),
        ("max_memory_allocated", "allocated"), ("torch.cuda.max_memory_reserved", "reserved"),
        ("peak reserved (caching allocator)", "reserved"), ("Memory reserved (GiB)", "reserved"))],
    *[_c("memory-measure-other", "measure", "", "refuse:metric", metric=w) for w in (
        "Peak memory (GiB)", "GPU memory used (nvidia-smi)", "Memory (GiB)",
        "nvidia-smi memory usage (includes CUDA context and the reserved pool)",
        "memory allocated to the process as nvidia-smi reports it", "peak reserved + CUDA context",
        "peak memory (allocated and reserved)")],
    *[_c("memory-unit", "memory", "", ("value", v), unit=u) for u, v in (
        ("gigabytes/GPU", 1e9), ("GiB/rank", 2**30), ("MiB/device", 2**20), ("GB per GPU", 1e9))],
    *[_c("memory-unit-other", "memory", "", "refuse:unit", unit=u) for u in (
        "GiB total", "GB (all GPUs)", "Gib", "GiB/node", "G", "% HBM", "MiB (nvidia-smi)")],
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_a_reworded_row_reads_the_same_or_is_refused_naming_the_column(case: Case) -> None:
    result, said = outcome(case)
    assert result == "right", said


if __name__ == "__main__":
    report(CASES)
