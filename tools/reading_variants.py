"""Rewordings of the shipped validation rows as other publishers would write them, and whether the harness
reads each the same (docs/validation.md, "Words the harness reads"; tests/test_reading_variants.py).

    PYTHONPATH=src python tools/reading_variants.py            # counts per class of wording, then examples
    PYTHONPATH=src python tools/reading_variants.py --collective   # the collective (nccl-tests) and memory rows

For every shipped training and inference row the harness reads, each rewording of one column is read again and
compared with the original's reading (the built model, system, strategy, workload, engine, client and the
metric's value on a stand-in estimate; never the error): "same", "refused" (naming the column), "differs"
(where another reading is right), "MISREAD" (a different specification read silently, or a reading where
only a refusal is right) or "CRASH". Run it with another tree's src first on PYTHONPATH for a before / after.
With --collective, one row of each nccl-tests sweep (and the sizes SIZE_SAME rewrites) is reworded in its op,
msg_bytes, metric / unit and n_gpus and predicted again (`predict_collective`: the figure in the row's unit,
so "Gb/s" must give 8x the "GB/s" figure), and each memory row in its unit and metric (`unit_bytes`,
`measure_of`; tests/test_reading_variants_collective.py).
"""

# ruff: noqa: E501
# mypy: ignore-errors
from __future__ import annotations

import collections
import csv
import re
from types import SimpleNamespace as NS  # noqa: N814

from armillary.validation.gpu_words import system_preset_for
from armillary.validation.precision_words import block_format_of, precision_of
from armillary.validation.reading import fp8_params_stated
from armillary.validation.row_columns import Unsupported
from armillary.validation.strategy_words import recompute_of
from armillary.validation.vocabulary import flag


def rows():
    from armillary.validation.run import DEFAULT_CSV

    with open(DEFAULT_CSV, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _model_key(m):
    d = m.model_dump()
    for k in ("name", "sources", "aliases"):
        d.pop(k, None)
    return d

def _est():
    layer = NS(total_s=0.05)
    return NS(step_time_s=2.0, tokens_per_s=12345.0, model_flop=3e18, hardware_flop=4e18, mfu=0.41, hfu=0.52, layer=layer)

def _lat(a):
    return NS(mean=a, p50=a * 0.9, p90=a * 1.5, p99=a * 2.0)


def _srv():
    lat = _lat
    return NS(ttft_s=lat(0.2), tpot_s=lat(0.03), e2e_s=lat(9.0), itl_mean_s=0.031, output_tokens_per_s=5000.0,
              total_tokens_per_s=9000.0, requests_per_s=3.0, devices=8, times=None)

def route(row):
    from armillary.validation.run import is_serving_row
    k = row.get("kind")
    if k == "inference":
        return "serving" if is_serving_row(row) else "inference"
    return k

def fingerprint(row):
    """('ok', what) or ('refused', reason)."""
    r = route(row)
    try:
        if r == "training":
            from armillary.validation.metrics import read_metric
            from armillary.validation.rows import row_specs
            m = read_metric(row)
            specs = row_specs(row)
            rs = specs[0]
            val = m.read(_est(), rs)
            return ("ok", (m.label, round(val, 9), tuple((_model_key(s.model), s.system, s.strategy, s.workload) for s in specs)))
        if r == "inference":
            from armillary.validation import inference_rows as ir
            s = ir.inference_row_specs(row)
            metric = ir.read_inference_metric(row) if hasattr(ir, "read_inference_metric") else None
            lab = None
            if metric is not None:
                fake = NS(output_tokens_per_s_per_device=777.0, ttft_s=0.123, devices=s.system.devices)
                lab = (metric[0], round(metric[1](fake, s), 9))
            return ("ok", (lab, _model_key(s.model), s.system, s.strategy, s.workload))
        if r == "serving":
            from armillary.validation.serving_metrics import read_serving_metric
            from armillary.validation.serving_rows import serving_row_specs
            m = read_serving_metric(row)
            s = serving_row_specs(row)
            return ("ok", (m.label, round(m.read(_srv()), 9), _model_key(s.model), s.system, s.strategy, s.workload, s.engine, s.benchmark))
    except (Unsupported, ValueError) as e:
        return ("refused", str(e))
    except Exception as e:
        return ("CRASH", f"{type(e).__name__}: {e}")
    return ("refused", f"kind {r}")


SAME, REFUSE, DIFFER = "same", "refuse", "differ"  # REFUSE: only a refusal is right   # DIFFER: must not read the original's spec (refusal also fine)

GPU_WORDS = {
    "dgx-h100": ["NVIDIA H100 80GB HBM3", "H100-SXM5-80G", "8x H100 SXM", "H100 SXM5 80GB", "HGX H100 8-GPU",
                 "DGX H100", "NVIDIA H100 SXM", "H100 SXM (80 GB)"],
    "hgx-h200": ["NVIDIA H200 141GB HBM3e", "H200-SXM-141GB", "HGX H200", "8x H200 SXM", "NVIDIA H200"],
    "dgx-b200": ["HGX B200", "NVIDIA B200", "DGX B200", "8x B200 SXM", "B200 SXM6"],
    "gb200-nvl72": ["GB200 NVL72 (rack)", "NVIDIA GB200", "GB200 NVL72", "GB200 Grace Blackwell Superchip"],
    "gb300-nvl72": ["GB300 NVL72", "NVIDIA GB300 (NVL72 rack)"],
    "mi300x-8": ["MI300X OAM", "AMD MI300X", "8x AMD Instinct MI300X", "Instinct MI300X 192GB HBM3"],
    "dgx-a100": ["NVIDIA A100-SXM4-80GB", "A100 SXM 80GB", "8x A100 80GB", "A100 80GB SXM4"],
    "dgx-a100-40gb": ["A100-SXM4-40GB", "NVIDIA A100 40GB", "A100 SXM4 40GB"],
}
# GPUs that are not the shipped system's (another part, or none shipped): never the original's reading
GPU_OTHER = ["H100 PCIe 80GB", "H100 NVL 94GB", "GH200 Grace Hopper", "H200 NVL", "A100 PCIe 40GB", "A100-PCIE-80GB",
             "Gaudi 2", "L40S", "RTX 4090", "MI250X", "B100", "A800 80GB", "V100 32GB", "TPU v5e",
             "GB200 NVL4", "RTX PRO 6000 Blackwell", "MI300A"]

PREC_SAME = {
    "BF16": ["bf16 mixed", "BF16", "bfloat16", "mixed precision (bf16)", "BF16 AMP", "amp_bf16", "bf16-mixed",
             "torch.bfloat16"],
    "FP16": ["fp16 mixed", "FP16", "float16 (AMP)", "16-bit floating point (fp16)", "fp16-mixed"],
    "FP8": ["FP8 (delayed scaling)", "fp8 e4m3", "FP8 hybrid", "fp8 (E4M3 fwd / E5M2 bwd)", "FP8 tensor-wise scaling",
            "Transformer Engine FP8", "fp8 + bf16"],
}
# training precisions that must not read as the original's: (words, precision they state)
PREC_TRAIN_OTHER = [("BF16 (FP8 disabled)", "BF16"), ("bf16, no fp8", "BF16"), ("MXFP8", "MXFP8"),
                    ("NVFP4 weights, FP8 KV", "NVFP4"), ("FP8 e5m2", "FP8")]
INF_PREC_SAME = {"FP8": ["fp8", "FP8 (e4m3)", "fp8 (W8A8)"], "FP16": ["fp16", "float16", "FP16 (half)"]}
INF_PREC_OTHER = ["NVFP4 weights, FP8 KV", "INT8 SmoothQuant (W8A8)", "INT4 AWQ (W4A16)", "W4A8", "GPTQ 4-bit",
                  "FP4", "MXFP4 (gpt-oss)"]

RECOMPUTE_SAME = {
    "none": ["none", "off", "disabled", "no recompute", "activation checkpointing: off", "no activation checkpointing",
             "recompute: false", "activation checkpointing disabled", "no AC", "None (no activation recomputation)"],
    "full": ["full", "full (every layer)", "activation checkpointing: on", "full activation recomputation",
             "gradient checkpointing", "recompute_granularity=full", "full AC", "activation checkpointing enabled",
             "full, uniform, 1 layer"],
    "selective": ["selective", "selective activation recomputation", "recompute_granularity=selective",
                  "selective (Korthikanti et al.)"],
}
RECOMPUTE_OTHER = ["full, 8 layers", "full (block, 4 layers)", "--recompute-num-layers 2 --recompute-method block",
                   "selective (core_attn)", "offload activations to CPU"]

SP_SAME = {True: ["yes", "on", "enabled", "true", "SP on", "sequence parallel: yes", "sequence_parallel=True", "Y",
                  "yes (with TP)", "enabled (Megatron SP)", "SP=1", "--sequence-parallel"],
           False: ["no", "off", "disabled", "false", "SP off", "sequence_parallel=False", "N", "not used", "SP=0",
                   "none"]}

# training metrics: (original label prefix, [(metric, unit, scale of the read value vs the original)])
TRAIN_METRIC = {
    "tokens/s per GPU": [("tokens/sec/gpu", "", 1), ("throughput", "tokens/sec/GPU", 1),
                         ("Tokens per second per GPU", "", 1), ("tok/s/GPU", "", 1), ("throughput", "tokens/s per GPU", 1),
                         ("TGS (tokens/GPU/s)", "", 1), ("tokens per GPU per second", "", 1),
                         ("throughput", "tokens/s per H100", 1), ("throughput", "k tokens/s/GPU", 1e-3),
                         ("training throughput", "tokens per second per device", 1)],
    "model TFLOP/s per GPU": [("TFLOPS per GPU", "", 1), ("model TFLOPS/GPU", "TFLOPS", 1),
                              ("achieved TFLOP/s", "TFLOP/s per GPU", 1), ("Model TFLOPs per GPU", "", 1),
                              ("per-GPU model TFLOP/s", "TFLOP/s", 1)],
    "MFU": [("MFU %", "", 1), ("Model FLOPs Utilization", "%", 1), ("model FLOP utilization (%)", "", 1),
            ("MFU", "percent", 1), ("MFU (%)", "", 1)],
    "time to train [": [("time-to-train", "minutes", 1), ("TTT", "min", 1), ("time to convergence", "min", 1),
                        ("TTT (minutes)", "", 1), ("time to train (h)", "", 1 / 60), ("time to train", "hours", 1 / 60)],
    "step time [row unit]": [("step time (s)", "", 1), ("seconds/iteration", "", 1), ("time per iteration", "s", 1),
                             ("s/it", "", 1), ("iteration time", "sec", 1), ("step time", "seconds", 1),
                             ("step time (ms)", "", 1e3), ("train_step_timing", "s", 1), ("sec/step", "", 1),
                             ("elapsed time per iteration (ms)", "", 1e3), ("iteration time", "msec", 1e3)],
}
TRAIN_METRIC_OTHER = [("it/s", ""), ("iterations per second", ""), ("throughput", "it/s"), ("tokens/s", ""),
                      ("samples/s", ""), ("MFU", "TFLOP/s"), ("ms/token", ""), ("throughput", "tokens/s/node"),
                      ("throughput", "tokens/s (8 GPUs)"), ("TFLOPS", ""), ("step time", "")]

SERVE_METRIC = {  # original label prefix -> variants (metric, unit, scale)
    "output tok/s (server)": [("Output token throughput (tok/s)", "", 1), ("output tokens/s", "", 1),
                              ("Output throughput", "tok/s", 1), ("output throughput", "tokens/sec", 1),
                              ("generation throughput", "tokens/s (server)", 1)],
    "output tok/s per GPU": [("output tokens/s/GPU", "", 1), ("output throughput", "tok/s per GPU", 1)],
}
SERVE_METRIC_EXTRA = [("TTFT p50 (ms)", "", "p50 TTFT"), ("Median TTFT", "ms", "p50 TTFT"),
                      ("TTFT (50th percentile)", "ms", "p50 TTFT"), ("Mean TTFT (ms)", "", "mean TTFT"),
                      ("TTFT p50 (s)", "", "p50 TTFT"), ("TTFT p99", "ms", "p99 TTFT"), ("Mean TPOT", "ms", "mean TPOT"),
                      ("request throughput", "req/s", "requests/s"), ("Total token throughput", "tok/s", "total tok/s")]
SERVE_METRIC_OTHER = [("tok/s/user", ""), ("output speed", "tokens/s/user"), ("TTFT p95 (ms)", ""),
                      ("input token throughput", "tok/s"), ("prefill throughput", "tokens/s"), ("P99 ITL", "ms"),
                      ("TTFT p99.9", "ms"), ("throughput", "tokens/s per node"), ("tokens/s per request", ""),
                      ("interactivity", "tok/s/user"), ("max TTFT", "ms")]

N_GPUS = [("{n} GPUs", SAME), ("{n} (8 per node)", SAME), ("{nodes}x8", SAME), ("{nodes} x 8", SAME),
          ("{nodes} nodes", REFUSE), ("{nodes} nodes x 8 GPUs", SAME), ("{nodes} hosts", REFUSE),
          ("{nodes} x DGX H100", REFUSE), ("{n} H100s", SAME)]


def variants(row: dict[str, str]):
    """(class, example words, changed columns, expectation) for the row."""
    out = []
    kind = row["kind"]
    preset = system_preset_for(row.get("gpu"))
    from armillary.validation.gpu_words import memory_gb_of
    nominal = {"dgx-h100": 80, "hgx-h200": 141, "dgx-a100": 80, "dgx-a100-40gb": 40, "mi300x-8": 192}
    if memory_gb_of(row.get("gpu")) not in (None, nominal.get(preset)):
        preset = None
    if preset in GPU_WORDS:
        for w in GPU_WORDS[preset]:
            out.append(("gpu", w, {"gpu": w}, SAME))
    for w in GPU_OTHER:
        out.append(("gpu-other", w, {"gpu": w}, REFUSE))
    prec = row.get("precision", "")
    if kind == "training":
        p = precision_of(prec)
        if p is not None and block_format_of(prec) is None and not fp8_params_stated(row) and p.name in PREC_SAME:
            for w in PREC_SAME[p.name]:
                out.append(("precision", w, {"precision": w}, SAME))
            for w, _ in PREC_TRAIN_OTHER:
                if _ != p.name:
                    out.append(("precision-other", w, {"precision": w}, DIFFER))
        rc = row.get("recompute", "")
        r = recompute_of(rc)
        if r is not None and rc.strip().lower() in ("none", "full", "selective", "full (activation checkpointing)",
                                                     "selective activation checkpointing", "full activation checkpointing"):
            for w in RECOMPUTE_SAME[r.value]:
                out.append(("recompute", w, {"recompute": w}, SAME))
            for w in RECOMPUTE_OTHER:
                out.append(("recompute-other", w, {"recompute": w}, DIFFER))
        sp = flag(row.get("seq_parallel"))
        tp = row.get("tp", "").strip()
        if sp is not None and tp.isdigit() and int(tp) > 1:
            for w in SP_SAME[sp]:
                out.append(("seq_parallel", w, {"seq_parallel": w}, SAME))
            for w in ("yes (DeepSpeed-Ulysses)", "ring attention"):
                out.append(("seq_parallel-other", w, {"seq_parallel": w}, REFUSE))
        for col, labels in (("tp", ("TP{}", "TP={}", "tensor-parallel-size {}")), ("pp", ("PP{}", "PP={}")),
                            ("ep", ("EP={}",)), ("mbs", ("micro batch {}", "MBS={}")), ("gbs", ("GBS={}",))):
            v = row.get(col, "").strip()
            if v.isdigit():
                for w in labels:
                    out.append(("labelled-number", w, {col: w.format(v)}, SAME))
        n = row.get("n_gpus", "").strip()
        if n.isdigit() and int(n) % 8 == 0 and int(n) > 8:
            for tmpl, exp in N_GPUS:
                w = tmpl.format(n=n, nodes=int(n) // 8)
                out.append(("n_gpus", w, {"n_gpus": w}, exp))
    else:
        if prec.strip() in ("FP8", "FP16"):
            for w in INF_PREC_SAME[prec.strip()]:
                out.append(("precision", w, {"precision": w}, SAME))
        for w in INF_PREC_OTHER:
            out.append(("precision-other", w, {"precision": w}, REFUSE))
    return out


MODEL_SAME = {
    "llama3.1-405b": ["Llama-3.1-405B-Instruct", "meta-llama/Llama-3.1-405B", "Meta-Llama-3.1-405B", "llama3.1_405b",
                      "LLaMA 3.1 405B"],
    "llama3.1-70b": ["meta-llama/Llama-3.3-70B", "Llama-3.3-70B-Instruct", "Meta-Llama-3.1-70B-Instruct"],
    "llama3.1-8b": ["meta-llama/Meta-Llama-3.1-8B", "Llama-3.1-8B-Instruct"],
    "llama3-70b": ["Meta-Llama-3-70B", "meta-llama/Meta-Llama-3-70B-Instruct", "Llama3 70B"],
    "llama3-8b": ["Meta-Llama-3-8B", "llama3_8b", "LLaMA-3 8B"],
    "llama2-70b": ["meta-llama/Llama-2-70b-hf", "Llama-2-70b-chat-hf", "LLaMA2-70B"],
    "llama2-7b": ["meta-llama/Llama-2-7b-hf", "Llama-2-7B"],
    "deepseek-v3": ["DeepSeek-R1-0528", "deepseek-ai/DeepSeek-R1", "DeepSeek-V3-0324", "DeepSeek V3 671B",
                    "DeepSeek-V3 (671B)"],
    "mixtral-8x22b": ["Mixtral 8x22B", "mistralai/Mixtral-8x22B-v0.1", "Mixtral-8x22B-Instruct-v0.1"],
    "mixtral-8x7b": ["Mixtral 8x7B", "mistralai/Mixtral-8x7B-v0.1", "Mixtral-8x7B-Instruct-v0.1"],
    "qwen2.5-72b": ["Qwen2.5-72B", "Qwen/Qwen2.5-72B-Instruct", "Qwen 2.5 72B"],
    "qwen3-30b-a3b": ["Qwen3-30B-A3B", "Qwen/Qwen3-30B-A3B-Base", "Qwen3 30B-A3B"],
    "qwen3-235b-a22b": ["Qwen3-235B-A22B", "Qwen/Qwen3-235B-A22B-Instruct-2507"],
    "gpt3-175b": ["GPT-3 175B", "GPT3-175B", "gpt3_175b"],
    "nemotron4-340b": ["Nemotron-4-340B", "nvidia/Nemotron-4-340B-Base"],
}
MODEL_OTHER = ["Llama-3.2-90B-Vision", "DeepSeek-V2.5", "Llama-4-Maverick-17B-128E", "Qwen2.5-32B", "Mixtral 8x7B",
               "Llama 3.1 70B", "Mistral-7B-v0.3", "Qwen3-32B", "Kimi-K2"]

INTER_SAME = {  # (ib per GPU Gb/s) -> words
    "ib400": ["8x400G CX-7 NDR IB", "8x ConnectX-7 NDR 400Gb/s InfiniBand", "InfiniBand NDR 400 Gb/s per GPU",
              "NDR400 IB, 8 per node", "3.2 Tbps InfiniBand per node", "8 x 400 Gbps IB"],
    "single": ["none (single node)", "single node", "n/a", "-", "N/A (one node)"],
}

FRAMEWORK_SAME = [  # (pattern in the original, replacement keeping the rest)
    (r"^NeMo 24\.07$", ["NVIDIA NeMo 24.07", "NeMo Framework 24.07 container", "nemo:24.07"]),
    (r"^Megatron-Core r0\.8\.0$", ["Megatron-LM core_r0.8.0", "MCore 0.8.0", "megatron-core==0.8.0"]),
    (r"^vLLM 0\.7\.", ["vllm==0.7.", "vLLM v0.7.", "VLLM 0.7."]),
    (r"^vLLM 0\.6\.", ["vllm==0.6.", "vLLM v0.6."]),
    (r"^SGLang 0\.4\.", ["SGLang v0.4.", "sglang==0.4.", "sgl 0.4."]),
    (r"^TensorRT-LLM 0\.17", ["TRT-LLM 0.17", "TensorRT LLM v0.17", "trtllm 0.17"]),
    (r"^TensorRT-LLM v0\.6\.1", ["TRT-LLM v0.6.1", "TensorRT-LLM 0.6.1"]),
]
FRAMEWORK_OTHER = ["vLLM 0.8.4", "SGLang v0.5.2", "TRT-LLM 0.5", "LMDeploy 0.7", "TGI 3.0", "llama.cpp",
                   "TorchTitan", "DeepSpeed-MII"]

CONCURRENCY_SAME = ["--max-concurrency {c}", "max concurrency: {c}", "{c} concurrent requests", "concurrency={c}",
                    "concurrency {c} (closed loop)", "{c} concurrent users"]


def all_variants(row, base):
    out = list(variants(row))
    kind = route(row)
    from armillary.validation.model_words import model_preset_for
    mp = model_preset_for(row.get("model"))
    if mp in MODEL_SAME and not re.search(r"fp8|mtp", row.get("model", ""), re.I):
        for w in MODEL_SAME[mp]:
            out.append(("model", w, {"model": w}, SAME))
        for w in MODEL_OTHER:
            if model_preset_for(w) != mp and (kind != "training" or not row.get("layers", "").strip()):
                out.append(("model-other", w, {"model": w}, DIFFER))
    inter = row.get("inter_net", "")
    key = "ib400" if inter in ("8x ConnectX-7 IB NDR 400 Gb/s per node", "8x Quantum-2 CX7 IB 400 Gb/s per node") \
        else "single" if inter == "n/a (single node)" else None
    if key and kind == "training":
        for w in INTER_SAME[key]:
            out.append(("inter_net", w, {"inter_net": w}, SAME))
    if key == "ib400" and kind == "training":
        for w in ["RoCEv2 400GbE", "EFAv3 3200 Gbps", "Spectrum-X 400G", "8x 200G HDR IB", "2x 400G per node"]:
            out.append(("inter_net-other", w, {"inter_net": w}, DIFFER))
    if kind == "training":
        seq = row.get("seq", "").strip()
        if seq.isdigit() and int(seq) % 1024 == 0:
            for w in (f"{int(seq)//1024}K", f"{int(seq)//1024}k tokens", f"{seq} tokens"):
                out.append(("seq", w, {"seq": w}, SAME))
        gbs = row.get("gbs", "").strip()
        if gbs.isdigit():
            for w in (f"{gbs} sequences", f"{gbs} (global)", f"{gbs} samples"):
                out.append(("gbs", w, {"gbs": w}, SAME))
            if seq.isdigit():
                out.append(("gbs-other", "NM tokens", {"gbs": f"{int(gbs)*int(seq)/1e6:g}M tokens"}, REFUSE))
                out.append(("gbs-other", "N tokens", {"gbs": f"{int(gbs)*int(seq)} tokens"}, REFUSE))
        from armillary.validation.gpu_words import memory_gb_of, system_preset_for
        if system_preset_for(row.get("gpu")) == "dgx-h100" and memory_gb_of(row.get("gpu")) in (None, 80):
            for w in ("8x H100 80GB (640GB total)", "H100 80GB, 2 TB DDR5 host", "NVIDIA H100 80GB HBM3 (8 per node)"):
                out.append(("gpu-memory", w, {"gpu": w}, SAME))
    if kind in ("inference", "serving"):
        for col in ("isl", "osl"):
            v = row.get(col, "").strip()
            if v.isdigit() and int(v) % 1024 == 0:
                out.append((col, f"{int(v)//1024}K", {col: f"{int(v)//1024}K"}, SAME))
    fw = row.get("framework", "")
    for pat, subs in FRAMEWORK_SAME:
        m = re.search(pat, fw)
        if m:
            for s in subs:
                out.append(("framework", s, {"framework": fw[:m.start()] + s + fw[m.end():]}, SAME))
    if kind == "serving":
        for w in FRAMEWORK_OTHER:
            out.append(("framework-other", w, {"framework": w}, DIFFER))
        c = re.match(r"max-concurrency (\d+)( .*)?$", row.get("batch_or_concurrency", ""))
        if c:
            for t in CONCURRENCY_SAME:
                out.append(("concurrency", t, {"batch_or_concurrency": t.format(c=c.group(1)) + (c.group(2) or "")}, SAME))
        lab = base[1][0]
        for prefix, vs in SERVE_METRIC.items():
            if lab.startswith(prefix):
                for m, u, k in vs:
                    out.append(("serve-metric", f"{m} | {u}", {"metric": m, "unit": u}, ("scale", k)))
        for m, u, exp in SERVE_METRIC_EXTRA:
            out.append(("serve-metric-extra", f"{m} | {u}", {"metric": m, "unit": u}, ("label", exp)))
        for m, u in SERVE_METRIC_OTHER:
            out.append(("serve-metric-other", f"{m} | {u}", {"metric": m, "unit": u}, REFUSE))
    if kind == "training":
        lab = base[1][0]
        for prefix, vs in TRAIN_METRIC.items():
            if lab.startswith(prefix):
                for m, u, k in vs:
                    out.append(("train-metric", f"{m} | {u}", {"metric": m, "unit": u}, ("scale", k)))
                for m, u in TRAIN_METRIC_OTHER:
                    out.append(("train-metric-other", f"{m} | {u}", {"metric": m, "unit": u}, DIFFER))
    return out

def judge(base, new, exp):
    if new[0] == "CRASH":
        return "CRASH"
    if new[0] == "refused":
        return "refused"
    if exp == REFUSE:
        return "MISREAD"
    if exp == SAME:
        return "same" if new == base else "MISREAD"
    if exp == DIFFER:
        return "MISREAD" if new == base else "differs"
    if exp[0] == "scale":
        b, n = base[1], new[1]
        ok = re.sub(r"\[\w+\]", "", n[0].split(" (in ")[0]) == re.sub(r"\[\w+\]", "", b[0]) and abs(n[1] - b[1] * exp[1]) <= 1e-6 * abs(b[1] * exp[1]) and n[2:] == b[2:]
        return "same" if ok else "MISREAD"
    if exp[0] == "label":
        return "same" if new[1][0].startswith(exp[1]) else "MISREAD"

def main(limit_per_group=None):
    stats = collections.defaultdict(collections.Counter)
    examples = collections.defaultdict(list)
    seen = set()
    n = 0
    for row in rows():
        if row["kind"] not in ("training", "inference"):
            continue
        base = fingerprint(row)
        if base[0] != "ok":
            continue
        for cls, words, change, exp in all_variants(row, base):
            key = (cls, words, row["id"].rsplit("-", 1)[0])
            if key in seen:
                continue
            seen.add(key)
            n += 1
            new = fingerprint({**row, **change})
            j = judge(base, new, exp)
            stats[cls][j] += 1
            if j in ("MISREAD", "refused", "CRASH") and len([e for e in examples[(cls, j)] if e[1] == words]) == 0:
                examples[(cls, j)].append((row["id"], words, new[1][:160] if new[0] in ("refused", "CRASH") else ""))
    print("variants tried", n)
    tot = collections.Counter()
    for c in stats.values():
        tot.update(c)
    print("total", dict(tot))
    for cls, c in sorted(stats.items()):
        print(f"{cls:22s} {dict(c)}")
    for (cls, j), ex in sorted(examples.items()):
        print("==", cls, j)
        for e in ex[:40]:
            print("   ", e)





# ---- collective rows (nccl-tests sweeps) and memory rows ------------------------------------------------------
# (class, column changes, expectation): ("scale", k) means the prediction is the original's times k in the new unit
# nccl-tests spellings of the op (its binaries all_reduce_perf..., its print names); {op} is the original's
OP_SAME = {"all_reduce": ["allreduce", "all_reduce_perf", "AllReduce", "all-reduce (in-place)", "ncclAllReduce"],
           "all_gather": ["allgather", "all_gather_perf", "AllGather", "all-gather"],
           "alltoall": ["alltoall", "alltoall_perf", "AllToAll", "all-to-all"],
           "reduce_scatter": ["reduce_scatter_perf", "ReduceScatter", "reducescatter"]}
OP_OTHER = ["alltoallv", "hypercube_perf", "gather_perf", "scatter_perf", "all_reduce_sum_max"]
BUSBW_SAME = [("busbw", "GB/s", 1), ("bus bandwidth (GB/s)", "", 1), ("busBW", "GB/s", 1), ("busbw", "GBps", 1),
              ("busbw", "Gb/s", 8), ("busbw", "Gbps", 8), ("bus bandwidth", "Gbit/s", 8), ("busbw", "GiB/s", 1e9 / 2**30),
              ("busbw (GB/s)", "", 1), ("busbw", "MB/s", 1e3)]
ALGBW_SAME = [("algbw", "GB/s", 1), ("algorithm bandwidth", "GB/s", 1), ("algbw (GB/s)", "", 1), ("algBW", "Gbps", 8)]
TIME_SAME = [("time (us)", "", 1), ("time", "us", 1), ("latency (ms)", "", 1e-3), ("time", "ms", 1e-3),
             ("latency", "usec", 1), ("time", "microseconds", 1), ("time (µs)", "", 1)]
BW_OTHER = [("busbw", "gb/s"), ("busbw", "GT/s"), ("busbw", "%"), ("bandwidth", "GB/s"), ("busbw", "")]
SIZE_SAME = {2**30: ["1G", "1 GiB", "2^30", "1GiB", "1073741824 B", "1,073,741,824"],
             2**27: ["128M", "128 MiB", "2^27"], 2**20: ["1M", "1 MiB", "1024K", "1 M"], 8: ["8 B", "8", "8B"]}
SIZE_OTHER = ["1GB", "128MB", "1e9", "nan", "-8", "8 KB"]


def _outcome(read):
    """('ok', what `read()` returns), ('refused', reason) for the harness's refusals, or ('CRASH', error)."""
    try:
        return ("ok", read())
    except (Unsupported, ValueError) as e:
        return ("refused", str(e))
    except Exception as e:
        return ("CRASH", f"{type(e).__name__}: {e}")


def collective_fingerprint(row):
    from armillary.validation.collective_rows import predict_collective
    return _outcome(lambda: tuple(predict_collective(row)))


def collective_variants(row, base):
    out = []
    op = re.split(r"[\s(]", row["op"].strip(), maxsplit=1)[0]
    for w in OP_SAME.get(op, []):
        out.append(("coll-op", w, {"op": row["op"].replace(op, w, 1)}, SAME))
    for w in OP_OTHER:
        out.append(("coll-op-other", w, {"op": w}, REFUSE))
    lab = base[1][0]
    plain = row["metric"].strip().lower() in ("busbw", "busbw (out-of-place)") or row["metric"].startswith("time (out-of-place")
    if lab.startswith("busbw") and plain:
        for m, u, k in BUSBW_SAME:
            out.append(("coll-busbw", f"{m} | {u}", {"metric": m, "unit": u}, ("cscale", k)))
        ref = collective_fingerprint({**row, "metric": "algbw", "unit": "GB/s"})  # the GB/s algbw, to scale
        for m, u, k in ALGBW_SAME:
            out.append(("coll-algbw", f"{m} | {u}", {"metric": m, "unit": u}, ("clabel", "algbw", ref[1][1], k)))
        for m, u in BW_OTHER:
            out.append(("coll-metric-other", f"{m} | {u}", {"metric": m, "unit": u}, REFUSE))
    if lab.startswith("time") and plain:
        for m, u, k in TIME_SAME:
            out.append(("coll-time", f"{m} | {u}", {"metric": m, "unit": u}, ("cscale", k)))
        for m, u in [("time", ""), ("time", "cycles"), ("time (s/iter)", "")]:
            out.append(("coll-metric-other", f"{m} | {u}", {"metric": m, "unit": u}, REFUSE))
    size = int(row["msg_bytes"]) if row["msg_bytes"].isdigit() else None
    for w in SIZE_SAME.get(size, []):
        out.append(("coll-msg_bytes", w, {"msg_bytes": w}, SAME))
    if size in SIZE_SAME:
        for w in SIZE_OTHER:
            out.append(("coll-msg_bytes-other", w, {"msg_bytes": w}, REFUSE))
    n = row["n_gpus"].strip()
    if n.isdigit() and int(n) % 8 == 0 and int(n) > 8:
        nodes = int(n) // 8
        for w, exp in [(f"{n} ({nodes} nodes x 8)", SAME), (f"{nodes}x8", SAME), (f"{n} GPUs", SAME),
                       (f"{nodes} nodes", REFUSE), (f"{nodes} x 8 GPUs", SAME), (f"{nodes}", DIFFER)]:
            out.append(("coll-n_gpus", w, {"n_gpus": w}, exp))
    return out


def judge_collective(base, new, exp):
    if new[0] in ("CRASH", "refused"):
        return new[0]
    if exp == REFUSE:
        return "MISREAD"
    if exp == SAME:
        return "same" if new == base else "MISREAD"
    if exp == DIFFER:
        return "MISREAD" if new == base else "differs"
    b, n = base[1], new[1]
    k = exp[-1]
    if exp[0] == "clabel" and not n[0].startswith(exp[1]):
        return "MISREAD"
    if exp[0] == "clabel":
        return "same" if n[2] == b[2] and abs(n[1] - exp[2] * k) <= 1e-9 * exp[2] * k else "MISREAD"
    ok = n[0].split(" [")[0] == b[0].split(" [")[0] and abs(n[1] - b[1] * k) <= 1e-9 * abs(b[1] * k) and n[2] == b[2]
    return "same" if ok else "MISREAD"


MEMORY_UNIT_SAME = {"GiB": ["GiB", "GiB per GPU", "GiB/GPU", "gibibytes"], "GB": ["GB", "GB per GPU", "gigabytes"]}
MEMORY_UNIT_OTHER = ["Gb", "G", "GiB total", "GB (8 GPUs)", "%", "GiB/s"]
MEMORY_METRIC_SAME = {"reserved": ["max_memory_reserved", "torch.cuda.max_memory_reserved()", "peak reserved memory",
                                   "memory reserved (GiB)"],
                      "allocated": ["max_memory_allocated", "torch.cuda.max_memory_allocated()", "peak allocated memory"]}
MEMORY_METRIC_OTHER = ["peak memory", "nvidia-smi memory used", "max_memory_allocated / max_memory_reserved",
                       "memory (GiB)", "not reserved but allocated"]


def memory_fingerprint(row):
    from armillary.validation.memory_rows import measure_of, unit_bytes
    return _outcome(lambda: (measure_of(row), unit_bytes(row)))


def memory_variants(row, base):
    out = []
    unit = row["unit"].strip()
    for w in MEMORY_UNIT_SAME.get(unit, []):
        out.append(("mem-unit", w, {"unit": w}, SAME))
    for w in MEMORY_UNIT_OTHER:
        out.append(("mem-unit-other", w, {"unit": w}, REFUSE))
    for w in MEMORY_METRIC_SAME[base[1][0]]:
        out.append(("mem-metric", w, {"metric": w}, SAME))
    for w in MEMORY_METRIC_OTHER:
        out.append(("mem-metric-other", w, {"metric": w}, REFUSE))
    return out


def main_collective_memory():
    from armillary.validation.flagged_sweeps import sweep_of
    from armillary.validation.memory_rows import MEMORY_CSV
    stats = collections.defaultdict(collections.Counter)
    examples = collections.defaultdict(list)
    with open(MEMORY_CSV, newline="", encoding="utf-8") as f:
        memory = list(csv.DictReader(f))
    sweeps, n = set(), 0
    work = []
    for row in rows():
        if row["kind"] != "collective" or (sweep_of(row["id"]), row["msg_bytes"]) in sweeps:
            continue
        if row["msg_bytes"].isdigit() and int(row["msg_bytes"]) not in SIZE_SAME and any(s == sweep_of(row["id"]) for s, _ in sweeps):
            continue  # one row a sweep, plus the sizes SIZE_SAME rewrites
        sweeps.add((sweep_of(row["id"]), row["msg_bytes"]))
        work.append((row, collective_fingerprint, collective_variants, judge_collective))
    work += [(row, memory_fingerprint, memory_variants, judge) for row in memory]
    for row, fp, vs, jd in work:
        base = fp(row)
        if base[0] != "ok":
            continue
        for cls, words, change, exp in vs(row, base):
            n += 1
            new = fp({**row, **change})
            j = jd(base, new, exp)
            stats[cls][j] += 1
            if j in ("MISREAD", "refused", "CRASH") and not any(e[1] == words for e in examples[(cls, j)]):
                examples[(cls, j)].append((row["id"], words, new[1][:140] if new[0] != "ok" else str(new[1][:2])[:140]))
    print("collective / memory variants tried", n)
    for cls, c in sorted(stats.items()):
        print(f"{cls:22s} {dict(c)}")
    for (cls, j), ex in sorted(examples.items()):
        print("==", cls, j)
        for e in ex[:12]:
            print("   ", e)


if __name__ == "__main__":
    import sys
    if "--collective" in sys.argv:
        main_collective_memory()
    else:
        main()
