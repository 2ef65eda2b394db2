"""A fourth round of shipped rows reworded as the newest public benchmark publications write them (docs/validation.md,
"Words the harness reads"): the harness reads the same specification, or refuses naming the column, never a silently
different one.

The words come from: SemiAnalysis InferenceMAX (2025-26: "Token Throughput per GPU", its json's "tput_per_gpu" that
counts input and output tokens (InferenceMAX issue #293) beside "output_tput_per_gpu", "Interactivity (tok/s/user)",
"E2E Latency", "TP4EP1", "conc", "1k/1k", MTP / speculative decoding, disaggregated prefill / decode, FP4 / MXFP4 /
NVFP4), vLLM 2025-26 recipes ("--data-parallel-size", "-tp 8 -dp 8", "--enable-expert-parallel",
"--speculative-config"), SGLang's ("--tp-size", "--dp-size", "--enable-dp-attention", "--speculative-algorithm
EAGLE"), NVIDIA Dynamo / llm-d (prefill and decode workers), Megatron-Bridge's performance summary ("Tokens / sec /
GPU", "Model TFLOP / sec / GPU", "MXFP8", "NVFP4"), MaxText's and torchtitan's logs ("per_device_tflops",
"tps", "it/s"), Megatron's log ("elapsed time per iteration (ms)"), Blackwell / MI355X / Ironwood names, nccl-tests'
and rccl-tests' sizes and units; and the cross-column cases: a parallel degree that contradicts the device count,
footnote markers, ranges and approximations. `python tests/test_reading_variants_round4.py` prints the counts per
class (run it with another tree's src on PYTHONPATH for a before / after).
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from reading_variant_cases import SAME, Case, _c, _rows, outcome, report

from armillary.validation.collective_rows import predict_collective

VLLM = "SRV-VLLM-DSR1-MI300X-C128-O800"  # 8 MI300X, tp 8, ISL 3200 / OSL 800, concurrency 128, output tok/s (server)
SGL = "SRV-SGLANG-DSR1-H200-C128-O800"  # 8 H200, --tp 8 --enable-dp-attention
TRT_SRV = "SRV-TRTLLM-DSR1-H200-C004-O800"  # --tp_size 8 --ep_size 4
TRT_STATIC = "INF-TRT061-14"  # 8 H100, output tok/s per GPU
NEMO = "TR-NEMO2407-01"  # H100, FP8, 64 GPUs, tp 1 pp 1 dp 64, tokens/s/GPU
MLM = "TR-MLM-H100-01"  # per-GPU model TFLOP/s, 48 H100
KOR = "TR-KOR-T5-22B-FULL"  # A100 80GB, tp 8, step time in s
MB26 = "TR-MBRIDGE-26.04.01-07"  # Llama 3 70B, 64 H100, tp 4 pp 8 dp 2 vpp 5, tokens/s/GPU
B200_MOE = "TR-MBRIDGE-25.11-B200-19"  # DeepSeek-V3 on 256 B200, FP8-MX, tp 1 pp 16 dp 16 ep 8
GB200 = "TR-MBRIDGE-25.11-GB200-09"  # Llama 3 8B on 8 GB200 (NVL72)
GB300 = "TR-MBRIDGE-25.11-GB300-01"
B200 = "TR-MBRIDGE-25.11-B200-17"  # Llama 3 8B on 8 B200
TRILLIUM = "TR-MLPERF-v4.1-Google-cloud-tpu-trillium-512-maxtext-GPT3-TTT"
CO = "CO-H200x8-NCCLTESTS-16"  # all_reduce 1 GiB busbw GB/s
MI355 = "CO-MI355X-Pollara-OCI-2N-AR-01"  # rccl-tests all_reduce on 16 MI355X, 8 GiB, 8 x 400 Gb/s Pollara per node
B300 = "CO-B300-OCI-2N-AR-01"  # 16 B300 on 2 nodes, RoCE 8 x 2 x 400 Gb/s per node
GB300_CO = "CO-GB300-OCI-2N-AR-01"  # 8 GB300 on 2 hosts of an NVL72 rack


def _system(name: str) -> Any:
    return ("check", lambda r: name in r[2][1].name.lower())


def _train_system(name: str) -> Any:
    return ("check", lambda r: all(name in s[1].name.lower() for s in r[2]))


def _block(fmt: str) -> Any:
    return ("check", lambda r: all(s[2].block_format is not None and s[2].block_format.value == fmt for s in r[2]))


def _closed_loop(concurrency: int) -> Any:
    return ("check", lambda r: r[2][5].concurrency == concurrency and r[2][5].rate is None)


def _open_loop(rate: float) -> Any:
    return ("check", lambda r: r[2][5].rate == rate and r[2][5].concurrency is None)


def _same_collective(row: str) -> Any:
    """The original's figure, system and fabric (the notes quote the words, which differ)."""
    def check(r: tuple[Any, ...]) -> bool:
        base = predict_collective(dict(_rows()[row]))
        return bool(r[0][:2] == base[:2] and r[0][2][:2] == base[2][:2])
    return ("check", check)


def _attention_dp(groups: int) -> Any:
    return ("check", lambda r: r[2][2].attention_dp == groups)


CASES: list[Case] = [
    # --- serving throughput as InferenceMAX and its json name it -----------------------------------------------
    # InferenceMAX's "Token Throughput per GPU" / "tput_per_gpu" counts input and output tokens (issue #293)
    *[_c("serve-tput", "serving", VLLM, ("label", lab, v), metric=m, unit=u) for m, u, lab, v in (
        ("Output Token Throughput per GPU", "tok/s/gpu", "output tok/s per GPU", 625.0),
        ("output_tput_per_gpu", "", "output tok/s per GPU", 625.0),
        ("tput_per_gpu (input + output)", "tok/s/gpu", "total tok/s per GPU", 1125.0),
        ("Total Token Throughput per GPU", "tok/s/gpu", "total tok/s per GPU", 1125.0),
        ("Output throughput", "tok/s (whole server, 8 GPUs)", "output tok/s (server)", 5000.0),
        ("Output tokens per second per GPU", "", "output tok/s per GPU", 625.0),
        ("output token throughput", "tokens/s/GPU*", "output tok/s per GPU", 625.0),
        ("Output TPS/GPU", "", "output tok/s per GPU", 625.0))],
    *[_c("serve-tput-other", "serving", VLLM, re.compile(r"^(metric|unit)"), metric=m, unit=u) for m, u in (
        ("Token Throughput per GPU", "tok/s/gpu"), ("tput_per_gpu", ""), ("Throughput per GPU", "tok/s/gpu"),
        ("Interactivity", "tok/s/user"), ("interactivity (tok/s/user)", ""), ("Tok/s/user", ""),
        ("input_tput_per_gpu", ""), ("Prefill throughput per GPU", "tok/s"), ("Decode TPS per user", ""),
        ("Output throughput", "tok/s per rack"), ("Output throughput per NVL72", "tok/s"),
        ("Token Throughput per MW", "tok/s"), ("throughput", "tok/s/MW"),
        ("Throughput", "TPS"), ("TPS", ""), ("Output throughput", "M tok/s"),
        ("output token throughput", "tok/s/GPU (decode GPUs only)"))],
    # latency as InferenceMAX's plots and json write it
    *[_c("serve-latency", "serving", VLLM, ("label", lab, v), metric=m, unit=u) for m, u, lab, v in (
        ("E2E Latency", "s", "mean E2E", 9.0), ("median_e2el", "ms", "p50 E2E", 8100.0),
        ("p99_ttft", "ms", "p99 TTFT", 400.0), ("mean_tpot", "ms", "mean TPOT", 30.0),
        ("TTFT", "seconds", "mean TTFT", 0.2), ("End-to-end latency (median)", "s", "p50 E2E", 8.1),
        ("mean_itl", "ms", "mean ITL", 31.0), ("TPOT (avg)", "ms/tok", "mean TPOT", 30.0))],
    *[_c("serve-latency-other", "serving", VLLM, re.compile(r"^(metric|unit)"), metric=m, unit=u) for m, u in (
        ("std_ttft", "ms"), ("TTFT p95", "ms"), ("TTFT", "ms (p99.9)"), ("TTFT", ""), ("E2E latency", "µs/tok"))],
    # --- the launch as the 2025-26 recipes write it ---------------------------------------------------------------
    *[_c("serve-flags", "serving", SGL, SAME, framework=f) for f in (
        "SGLang 0.4.3.post2 (lmsysorg/sglang:latest): python3 -m sglang.launch_server --tp-size 8 "
        "--enable-dp-attention",
        "SGLang 0.4.3.post2: launch_server --tp 8 --dp 8 --enable-dp-attention",
        "SGLang 0.4.3.post2: launch_server --tp 8 --enable_dp_attention",
        "SGLang 0.4.3.post2: launch_server --tensor-parallel-size 8 --data-parallel-size 8 --enable-dp-attention")],
    # dp attention over fewer groups than tp ranks: read as its groups, or refused, never as tp groups
    *[_c("serve-flags-dp", "serving", SGL, _attention_dp(4), framework=f)
      for f in ("SGLang 0.4.3.post2: launch_server --tp 8 --dp 4 --enable-dp-attention",
                "SGLang 0.4.3.post2: launch_server --tp-size 8 --dp-size 4 --enable-dp-attention")],
    # speculative decoding (MTP, EAGLE, ngram draft) changes the tokens per step: not simulated, refused
    *[_c("serve-flags-spec", "serving", SGL, "refuse:framework", framework=f) for f in (
        "SGLang 0.4.3.post2: launch_server --tp 8 --enable-dp-attention --speculative-algorithm EAGLE "
        "--speculative-num-steps 3 --speculative-eagle-topk 1 --speculative-num-draft-tokens 4",
        "SGLang 0.4.3.post2: launch_server --tp 8 --enable-dp-attention (MTP, 3 draft tokens)",
        "SGLang 0.4.3.post2: launch_server --tp 8 --enable-dp-attention --speculative-algorithm NEXTN")],
    *[_c("serve-flags-spec", "serving", VLLM, "refuse:framework", framework=f) for f in (
        "vLLM 0.7.3.dev138+g21f6ca217: --tensor-parallel-size 8 --speculative-config "
        "'{\"method\": \"deepseek_mtp\", \"num_speculative_tokens\": 1}'",
        "vLLM 0.7.3.dev138+g21f6ca217: --tensor-parallel-size 8 --speculative_config.method=ngram "
        "--num-speculative-tokens 5",
        "vLLM 0.7.3.dev138+g21f6ca217 with MTP speculative decoding, -tp 8")],
    *[_c("serve-flags-spec", "serving", TRT_SRV, "refuse:framework", framework=f) for f in (
        "TensorRT-LLM 0.17.post1.dev (PyTorch backend): trtllm-serve --tp_size 8 --ep_size 4 --pp_size 1 "
        "(speculative_config: decoding_type MTP, num_nextn_predict_layers 3)",
        "TensorRT-LLM 0.17.post1.dev: trtllm-serve --tp_size 8 --ep_size 4 --extra_llm_api_options mtp.yaml "
        "(MTP3)")],
    # a disaggregated deployment (prefill and decode workers, Dynamo / llm-d / SGLang PD): not simulated, refused
    *[_c("serve-flags-disagg", "serving", SGL, "refuse:framework", framework=f) for f in (
        "SGLang 0.4.3.post2: --disaggregation-mode prefill --tp 8 --enable-dp-attention",
        "NVIDIA Dynamo 0.4 + SGLang 0.4.3.post2: disaggregated prefill/decode, --tp 8 --enable-dp-attention",
        "SGLang 0.4.3.post2 (1P1D disaggregated, --tp 8 --enable-dp-attention)")],
    # vLLM's data parallel (several engine replicas): not this row's single tp-8 replica
    *[_c("serve-flags-vllm-dp", "serving", VLLM, re.compile(r"^(framework|tp)"), framework=f) for f in (
        "vLLM 0.7.3.dev138+g21f6ca217: --data-parallel-size 8 --enable-expert-parallel",
        "vLLM 0.7.3.dev138+g21f6ca217: -tp 1 -dp 8 --enable-expert-parallel",
        "vLLM 0.7.3.dev138+g21f6ca217: --tensor-parallel-size 4 --max-model-len 32768",
        "vLLM 0.7.3.dev138+g21f6ca217: -tp 8 -pp 2")],
    *[_c("serve-flags-tp", "serving", VLLM, SAME, framework=f) for f in (
        "vLLM 0.7.3.dev138+g21f6ca217 (rocm/vllm-dev:vllm-ds3-staging-0217): -tp 8 --max-model-len 32768",
        "vLLM 0.7.3.dev138+g21f6ca217: vllm serve deepseek-ai/DeepSeek-R1 --tensor-parallel-size=8 "
        "--max-model-len=32768")],
    # InferenceMAX's compact strategy in the tp column
    *[_c("serve-tp", "serving", TRT_SRV, SAME, tp=w) for w in ("TP8EP4", "TP8 EP4", "tp=8, ep=4")],
    # a tp the launch (--tensor-parallel-size 8) contradicts, a second degree no column states, more GPUs than the
    # row's: refused naming tp
    *[_c("serve-tp-other", "serving", VLLM, re.compile(r"^(tp|framework)"), tp=w) for w in (
        "TP4EP1", "4", "TP8 DP2", "16", "3")],
    # --- serving lengths and concurrency as InferenceMAX and the recipes write them --------------------------------
    *[_c("serve-lengths", "serving", VLLM, SAME, **{col: w}) for col, w in (
        ("isl", "3,200"), ("isl", "ISL 3200"), ("osl", "OSL=800"), ("isl", "3200 tokens (fixed)"),
        ("isl", "~3200"))],
    # the original's "500 prompts" left out: the closed loop's concurrency read (the request count then follows
    # from the server, as for any row that does not state it)
    *[_c("serve-conc", "serving", VLLM, _closed_loop(128), batch_or_concurrency=w) for w in (
        "conc 128", "concurrency=128", "--max-concurrency 128", "128 concurrent requests", "Conc: 128")],
    # an open loop at 128 requests/s is another load, read as such
    *[_c("serve-conc", "serving", VLLM, _open_loop(128.0), batch_or_concurrency=w) for w in (
        "128 requests/s", "request rate 128")],
    *[_c("serve-lengths-other", "serving", VLLM, re.compile(r"^(isl|osl)"), **{col: w}) for col, w in (
        ("isl", "3.2k"), ("isl", "1k-8k"), ("osl", "0.8k"), ("isl", "3200 ± 10%"),
        ("osl", "800 (max)"), ("isl", "3200-4000"))],
    *[_c("serve-conc-other", "serving", VLLM, re.compile(r"^batch"), batch_or_concurrency=w) for w in (
        "16 per GPU", "conc 4-128")],
    # --- serving GPUs as the newest publications name them --------------------------------------------------------
    *[_c("serve-gpu", "serving", VLLM, SAME, gpu=w) for w in (
        "8x AMD Instinct MI300X OAM 192GB", "MI300X (192 GB HBM3, 750 W)", "AMD MI300X")],
    *[_c("serve-gpu-other", "serving", VLLM, _system(name), gpu=w) for w, name in (
        ("MI355X", "mi355x"), ("AMD Instinct MI355X 288GB", "mi355x"), ("MI325X", "mi325x"))],
    *[_c("serve-gpu-other", "serving", VLLM, "refuse:", gpu=w) for w in ("MI300A", "MI350X")],
    *[_c("serve-gpu", "serving", SGL, SAME, gpu=w) for w in (
        "H200 141GB HBM3e", "NVIDIA H200-SXM-141GB", "8x H200 SXM")],
    *[_c("serve-gpu-other", "serving", SGL, _system(name), gpu=w) for w, name in (
        ("B200", "b200"), ("GB200 NVL72", "gb200"), ("B300", "b300"), ("GB300 NVL72", "gb300"))],
    *[_c("serve-gpu-other", "serving", SGL, "refuse:", gpu=w) for w in (
        "H200 NVL", "GH200", "GH200 144GB", "Blackwell", "GB200 NVL36")],
    # --- serving precision: InferenceMAX's FP4 / FP8 ---------------------------------------------------------------
    *[_c("serve-precision-other", "serving", VLLM, "refuse:precision", precision=w) for w in (
        "FP4", "NVFP4", "MXFP4", "nvidia/DeepSeek-R1-FP4 (NVFP4 weights)", "amd/DeepSeek-R1-MXFP4-Preview",
        "W4A4 MXFP4", "fp4 (modelopt)")],
    # --- static (offline) throughput ------------------------------------------------------------------------------
    *[_c("static-metric", "static", TRT_STATIC, ("label", lab, v), metric=m, unit=u) for m, u, lab, v in (
        ("Output Throughput per GPU", "tok/s/gpu", "output tok/s per GPU", 777.0),
        ("output_tput_per_gpu", "", "output tok/s per GPU", 777.0),
        ("Offline throughput", "output tok/s/GPU", "output tok/s per GPU", 777.0))],
    *[_c("static-metric-other", "static", TRT_STATIC, re.compile(r"^(metric|unit)"), metric=m, unit=u) for m, u in (
        ("Token Throughput per GPU", "tok/s/gpu"), ("tput_per_gpu", ""), ("Throughput", "tok/s/user"),
        ("Interactivity", "tok/s/user"), ("Offline throughput", "tok/s per node"), ("Throughput", "TPS"))],
    *[_c("static-precision-other", "static", TRT_STATIC, "refuse:precision", precision=w) for w in (
        "NVFP4", "NVFP4 weights, FP8 KV cache", "MXFP4 (MoE weights), BF16 attention", "FP4 (E2M1)")],
    # --- training metrics: Megatron-Bridge 26.x, MaxText, torchtitan, Megatron's log ------------------------------
    *[_c("train-tokens", "training", NEMO, ("scale", k), metric=m, unit=u) for m, u, k in (
        ("Tokens / sec / GPU", "", 1), ("tokens/sec/GPU", "", 1), ("per_device_tokens_per_sec", "", 1),
        ("Tokens per GPU per second", "", 1), ("Throughput", "tokens/s/GPU*", 1), ("Throughput", "tok/s/gpu", 1),
        ("tokens/s/GPU", "tok/s/GPU (†)", 1), ("Throughput (k tokens/s/GPU)", "", 1e-3))],
    *[_c("train-tokens-other", "training", NEMO, re.compile(r"^(metric|unit)"), metric=m, unit=u) for m, u in (
        ("tps", ""), ("TPS", ""), ("throughput", "tok/s"), ("Tokens / sec", ""), ("Throughput", "tokens/s/rack"),
        ("tokens/s/GPU", "tokens/day"), ("wps", ""))],
    *[_c("train-flops", "training", MLM, ("scale", 1), metric=m, unit=u) for m, u in (
        ("Model TFLOP / sec / GPU", ""), ("per_device_tflops", ""), ("TFLOP/s/GPU", ""),
        ("throughput per GPU (TFLOP/s/GPU)", ""), ("Model TFLOPS/GPU", ""), ("tflops", "TFLOP/s per GPU"))],
    *[_c("train-flops-other", "training", MLM, re.compile(r"^(metric|unit)"), metric=m, unit=u) for m, u in (
        ("tflops", ""), ("TFLOPS", "(64 GPUs)"), ("throughput", "PFLOP/s"), ("Model TFLOP / sec", ""),
        ("per_device_tflops", "TFLOP/s (cluster)"))],
    *[_c("train-time", "training", KOR, ("scale", k), metric=m, unit=u) for m, u, k in (
        ("elapsed time per iteration (ms)", "", 1e3), ("step_time_seconds", "", 1), ("Step time", "ms/iter", 1e3),
        ("Step time", "s/step", 1), ("avg step time", "sec", 1), ("Time per step", "s/it", 1),
        ("iteration time", "msec/iter", 1e3))],
    # a rate of steps (tqdm's "it/s"), not a time per step: the inverse, refused
    *[_c("train-time-other", "training", KOR, re.compile(r"^(metric|unit)"), metric=m, unit=u) for m, u in (
        ("iterations per second", ""), ("training speed", "it/s"), ("Step time", "steps/s"),
        ("Step time", ""), ("steps/sec", ""))],
    *[_c("train-time", "training", KOR, ("scale", k), metric="step time", unit=u) for u, k in (
        ("µs", 1e6), ("min", 1 / 60))],
    # --- training GPUs: Blackwell, Blackwell Ultra, Ironwood ------------------------------------------------------
    *[_c("train-gpu", "training", GB200, SAME, gpu=w) for w in (
        "GB200 NVL72", "NVIDIA GB200 NVL72 (72 GPUs/rack)", "GB200 (Grace Blackwell, NVL72)", "DGX GB200")],
    *[_c("train-gpu", "training", GB300, SAME, gpu=w) for w in ("GB300 NVL72", "NVIDIA GB300 NVL72", "DGX GB300")]
    ,
    *[_c("train-gpu", "training", B200, SAME, gpu=w) for w in (
        "B200", "HGX B200", "DGX B200 (8x B200 180GB)", "NVIDIA B200 SXM 180GB", "8x NVIDIA B200")],
    *[_c("train-gpu-other", "training", B200, "refuse:gpu", gpu=w) for w in (
        "Blackwell", "Blackwell Ultra", "B100", "RTX PRO 6000 Blackwell", "GB10")],
    *[_c("train-gpu-other", "training", GB200, "refuse:gpu", gpu=w) for w in (
        "Grace Blackwell", "GB200 NVL4", "GB200 NVL36", "GB200 NVL36x2")],
    *[_c("train-gpu-other", "training", NEMO, "refuse:gpu", gpu=w) for w in ("H800 PCIe",)],
    # GPUs the catalogue has: read as that GPU's system, never as the row's
    *[_c("train-gpu-catalogue", "training", row, _train_system(name), gpu=w) for row, w, name in (
        (B200, "B300", "b300"), (B200, "HGX B300", "b300"), (GB200, "GB300 NVL72", "gb300"),
        (TRILLIUM, "Ironwood", "tpu7x"), (TRILLIUM, "TPU v7", "tpu7x"), (TRILLIUM, "TPU7x", "tpu7x"),
        (TRILLIUM, "TPU v7 (Ironwood) 192GB", "tpu7x"),
        (NEMO, "MI355X", "mi355x"), (NEMO, "MI325X", "mi325x"), (NEMO, "AMD Instinct MI355X OAM 288GB", "mi355x"),
        (NEMO, "H20", "h20"))],
    # --- training precision: Megatron-Bridge 26.x -------------------------------------------------------------------
    *[_c("train-precision", "training", B200_MOE, SAME, precision=w) for w in (
        "MXFP8", "mxfp8", "FP8 MX", "fp8_mx", "FP8 (MXFP8 block scaling)")],
    *[_c("train-precision-other", "training", B200, "refuse:precision", precision=w) for w in (
        "FP4", "fp4 (e2m1)")],
    # Megatron-Bridge's FP4 recipes are modelled (`Strategy.block_format`): read as that format
    *[_c("train-precision-fp4", "training", B200, _block(f), precision=w) for w, f in (
        ("NVFP4", "nvfp4"), ("nvfp4", "nvfp4"), ("MXFP4", "mxfp4"), ("NVFP4 (with BF16 last layers)", "nvfp4"))],
    # --- training parallel degrees: Megatron-Bridge table words and cross-column contradictions --------------------
    *[_c("train-strategy", "training", MB26, SAME, **{col: w}) for col, w in (
        ("tp", "TP=4"), ("tp", "TP4"), ("pp", "PP 8"), ("dp", "DP=2"), ("vpp", "VP=5"), ("vpp", "VPP 5"),
        ("ep", "-"), ("ep", "—"), ("ep", "N/A"), ("cp", "CP=1"), ("n_gpus", "64*"), ("n_gpus", "64 (8 nodes)"),
        ("n_gpus", "64 GPUs (8x DGX H100)"), ("dp", "2 (derived)"), ("gbs", "256*"), ("seq", "8,192"))],
    # degrees whose product is not the devices, a node count for the devices, a range: refused naming a column
    *[_c("train-strategy-other", "training", MB26, re.compile(r"^(tp|pp|dp|cp|ep|vpp|n_gpus|gbs|seq)"),
         **{col: w}) for col, w in (
        ("dp", "4"), ("tp", "8"), ("pp", "4"), ("n_gpus", "128"), ("n_gpus", "8 nodes"), ("n_gpus", "8x8"),
        ("tp", "4-8"), ("gbs", "256-512"), ("n_gpus", "~64"), ("tp", "TP4EP2"), ("tp", "TP4 DP4"))],
    # a length in K is a power of two (reading.read_int); a parenthesised vpp beside the pp it belongs to
    *[_c("train-strategy", "training", MB26, SAME, **{col: w}) for col, w in (
        ("seq", "8k"), ("seq", "8K"), ("pp", "8 (VP 5)"), ("tp", "TP4 PP8"), ("tp", "TP4, PP8, DP2"))],
    *[_c("train-strategy-moe", "training", B200_MOE, SAME, **{col: w}) for col, w in (
        ("ep", "EP=8"), ("ep", "EP8"), ("tp", "TP1"), ("pp", "PP=16"), ("n_gpus", "256 (32 nodes x 8)"))],
    *[_c("train-strategy-moe-other", "training", B200_MOE, re.compile(r"^(tp|pp|dp|cp|ep|vpp|n_gpus)"), **{col: w})
      for col, w in (("ep", "EP=32"), ("ep", "8 (ETP 2)"), ("dp", "8"))],
    # --- collectives: nccl-tests / rccl-tests sizes and units -------------------------------------------------------
    *[_c("collective", "collective", CO, SAME, **dict(change)) for change in (
        (("msg_bytes", "1,073,741,824"),), (("msg_bytes", "1073741824 (1 GiB)"),), (("msg_bytes", "1024M"),),
        (("msg_bytes", "1 GiB*"),), (("unit", "GB/s (busbw)"),), (("metric", "busbw (GB/s)"), ("unit", "")),
        (("op", "all_reduce_perf"),), (("op", "ncclAllReduce"),), (("op", "AllReduce (sum)"),),
        (("metric", "Bus BW"),), (("metric", "busbw, out-of-place"),), (("metric", "busBW"), ("unit", "GB/sec")))],
    *[_c("collective-other", "collective", CO, re.compile(r"^(msg_bytes|unit|op|metric)"), **dict(change))
      for change in (
        (("msg_bytes", "1GB"),), (("msg_bytes", "~1G"),), (("msg_bytes", "1M-8G"),), (("msg_bytes", "1 Gb"),),
        (("unit", "GB/s per node"),), (("unit", "TB/s (aggregate)"),), (("op", "AR"),),
        (("metric", "time"), ("unit", "")), (("unit", "GB/s/GPU (algbw x 2)"),))],
    # other units and another collective, read as such
    *[_c("collective-units", "collective", CO, ("check", lambda r, lab=lab: r[0][0] == lab), **dict(change))
      for change, lab in (((("unit", "GiB/s"),), "busbw [GiB/s]"), ((("unit", "MB/s"),), "busbw [MB/s]"))],
    *[_c("collective-units", "collective", CO, ("differ",), op=w) for w in ("reduce", "AllGather", "alltoall")],
    *[_c("collective-rccl", "collective", MI355, SAME, **dict(change)) for change in (
        (("msg_bytes", "8G"),), (("msg_bytes", "8 GiB"),), (("op", "allreduce"),),
        (("framework", "rccl-tests all_reduce_perf (RCCL 2.26.6)"),))],
    *[_c("collective-rccl-other", "collective", MI355, re.compile(r"^(msg_bytes|unit|op|metric|gpu)"), **dict(change))
      for change in ((("msg_bytes", "8GB"),), (("gpu", "MI350X"),), (("gpu", "MI355"),))],
]



CASES += [
    # --- second pass: values with footnote markers and approximations, GPU counts in units, weights, TPU-style
    # and torchtitan degrees, nccl-tests' bidirectional figures -----------------------------------------------------
    *[_c("value", "value", VLLM, ("value", v), value=w) for w, v in (("914.74", 914.74), ("9.1474e2", 914.74))],
    *[_c("value-other", "value", VLLM, "refuse:value", value=w) for w in (
        "914.74*", "≈915", "~915", "914.74 (†)", "0.9k", "914.74 tok/s", "1,234")],
    # a GPU count in the unit that is not the row's: never read as the whole server's
    *[_c("serve-unit-gpus", "serving", VLLM, ("label", "output tok/s (server)", 5000.0), metric="output throughput",
         unit=u) for u in ("tok/s (8 GPUs)", "output tokens/s per 8 GPUs", "tok/s (8x MI300X)")],
    *[_c("serve-unit-gpus-other", "serving", VLLM, re.compile(r"^(metric|unit)"), metric="output throughput",
         unit=u) for u in ("tok/s (4 GPUs)", "output tokens/s per 4 GPUs", "tok/s (16 GPUs, 2 nodes)")],
    *[_c("static-unit-gpus", "static", TRT_STATIC, ("label", "output tok/s (all GPUs)", 777.0 * 8),
         metric="offline throughput", unit=u) for u in ("output tok/s (8 GPUs)", "output tokens/s, 8 GPUs total")],
    *[_c("static-unit-gpus-other", "static", TRT_STATIC, re.compile(r"^(metric|unit)"), metric="offline throughput",
         unit=u) for u in ("output tok/s (4 GPUs)", "output tok/s (16 GPUs)")],
    # serving weights: DeepSeek-R1's own checkpoint is block-scaled fp8; a bf16 copy is another model's weights
    *[_c("serve-weights", "serving", VLLM, SAME, precision=w) for w in (
        "FP8 (deepseek-ai checkpoint, block-scaled 128x128)", "fp8 weights as published (deepseek-ai/DeepSeek-R1)")],
    *[_c("serve-weights-other", "serving", VLLM, ("check", lambda r: r[2][3].weights is None), precision=w)
      for w in ("BF16 (upcast checkpoint)", "bf16")],
    # the lengths written together in one column
    *[_c("serve-lengths-other", "serving", VLLM, re.compile(r"^(isl|osl)"), isl=w, osl="") for w in (
        "3200/800", "ISL/OSL 3200/800")],
    *[_c("serve-lengths", "serving", VLLM, SAME, osl=w) for w in ("800 (ignore_eos)", "800 tokens, ignore_eos=True")],
    # torchtitan's data_parallel_shard_degree -1: the rest of the GPUs (dp derived from n_gpus)
    *[_c("train-strategy", "training", MB26, SAME, dp=w) for w in ("-1", "-1 (auto)")],
    *[_c("train-strategy-other", "training", MB26, re.compile(r"^(dp|n_gpus)"), dp=w) for w in ("-2", "0")],
    # nccl-tests' busbw is per direction; a bidirectional figure doubles it
    *[_c("collective-other", "collective", CO, re.compile(r"^(unit|metric)"), **dict(change)) for change in (
        (("unit", "GB/s (bidirectional)"),), (("metric", "busbw, bidirectional"),), (("unit", "GB/s bidir"),))],
]

CASES += [
    # --- third pass: multi-node fabrics and device counts of the 2025-26 collective pages -------------------------
    *[_c("fabric", "collective", MI355, _same_collective(MI355), inter_net=w) for w in (
        "2 nodes; 8x AMD Pensando Pollara 400 AI NIC (400 Gb/s RoCEv2 each) per node",
        "2 nodes; Pollara 400 AINIC, 8 x 400 Gbps per node", "2 nodes; 8 x 400GbE Pollara NICs per node")],
    # 400 GB/s (bytes) per NIC or a node total in Tb/s other than 8 x 400 Gb/s: another rate, never this one
    *[_c("fabric-other", "collective", MI355, ("differ",), inter_net=w) for w in (
        "2 nodes; Pollara, 8 x 200 Gb/s per node", "2 nodes; Pollara 400 AI NIC, 4 x 400 Gb/s per node",
        "2 nodes; 8x AMD Pensando Pollara NIC (200 Gb/s each) per node")],
    *[_c("fabric", "collective", B300, _same_collective(B300), inter_net=w) for w in (
        "2 nodes; RoCE 16 x 400 Gb/s = 6.4 Tb/s per node", "2 nodes; RoCEv2, 8 x 2 x 400 Gb/s per node")],
    *[_c("co-gpus", "collective", MI355, SAME, n_gpus=w) for w in ("16 (2 nodes x 8)", "16 ranks", "16 GPUs")],
    *[_c("co-gpus-other", "collective", MI355, re.compile(r"^n_gpus"), n_gpus=w) for w in (
        "2 nodes", "2x8", "2 x 8 GPUs")],
    *[_c("co-gpu", "collective", GB300_CO, SAME, gpu=w) for w in (
        "NVIDIA GB300 NVL72 (OCI BM.GPU.GB300.4, 4 GPUs/host)", "GB300 NVL72", "Blackwell Ultra GB300 (NVL72)")],
    *[_c("co-gpu-other", "collective", GB300_CO, re.compile(r"^(gpu|model)"), gpu=w) for w in (
        "GB300 NVL36", "Blackwell Ultra", "Grace Blackwell")],
]

L70 = "TR-MBRIDGE-25.09-02"  # LLAMA3_70B
Q30 = "TR-MBRIDGE-25.11-GB300-07"  # Qwen3_30B_a3B (MoE)
Q235 = "TR-MBRIDGE-25.11-GB300-08"  # Qwen3_235B_a22B (MoE)
DSV3_NOMTP = "TR-MBRIDGE-25.11-GB300-04"  # DeepSeekV3 (w/o MTP)

CASES += [
    # --- fourth pass: model names as Hugging Face repositories, Megatron-Bridge recipes and InferenceMAX write them
    *[_c("model", "training", row, SAME, model=w) for row, w in (
        (L70, "Llama 3 70B"), (L70, "Llama-3-70B"), (L70, "meta-llama/Meta-Llama-3-70B"), (L70, "llama3_70b"),
        (L70, "Llama3 70B (pretrain)"),
        (Q30, "Qwen3-30B-A3B"), (Q30, "Qwen/Qwen3-30B-A3B"), (Q30, "qwen3_30b_a3b"),
        (Q235, "Qwen3-235B-A22B"), (Q235, "Qwen/Qwen3-235B-A22B (MoE)"),
        (DSV3_NOMTP, "DeepSeek-V3 (w/o MTP)"), (DSV3_NOMTP, "deepseek-ai/DeepSeek-V3 (no MTP)"),
        (DSV3_NOMTP, "DeepSeek V3 671B (without MTP)"))],
    # another model of the family: read as that one (another shape) or refused, never as the row's
    *[_c("model-other", "training", row, ("differ",), model=w) for row, w in (
        (L70, "Llama 3 8B"), (L70, "Llama 3.1 405B"), (Q30, "Qwen3-235B-A22B"), (Q235, "Qwen3-30B-A3B"))],
    # a preset's model over columns of another depth and width: refused naming the model
    *[_c("model-other", "training", row, re.compile(r"^(model|layers|hidden|heads|kv_heads|ffn|vocab|experts|topk)"),
         model=w) for row, w in (
        (DSV3_NOMTP, "DeepSeek-V2"), (DSV3_NOMTP, "DeepSeek-V2-Lite"), (L70, "gpt-oss-120b"))],
    *[_c("model-serve", "serving", VLLM, SAME, model=w) for w in (
        "DeepSeek-R1", "deepseek-ai/DeepSeek-R1", "DeepSeek-R1 671B (MoE, MLA)")],
    *[_c("model-serve-other", "serving", VLLM, re.compile(r"^(model|precision)"), model=w) for w in (
        "DeepSeek-R1-Distill-Llama-70B", "DeepSeek-R1-Distill-Qwen-32B", "nvidia/DeepSeek-R1-FP4",
        "amd/DeepSeek-R1-MXFP4-Preview", "DeepSeek-R1 (NVFP4)")],
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_a_reworded_row_reads_the_same_or_is_refused_naming_the_column(case: Case) -> None:
    result, said = outcome(case)
    assert result == "right", said


if __name__ == "__main__":
    report(CASES)
