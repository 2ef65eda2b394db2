"""A second round of shipped rows reworded as other publishers write them (docs/validation.md, "Words the harness
reads"): the harness reads the same specification, or refuses naming the column, never a silently different one.

The first round (tests/test_reading_variants.py, tests/test_reading_variants_collective.py) took its words from our
own rows' sources; these are taken from the printouts and tables of other tools and publishers: vLLM's
benchmark_serving and SGLang's bench_serving result blocks ("Total throughput (tok/s)", "Peak output token
throughput (tok/s)", "Mean E2EL (ms)", "Median E2E Latency (ms)"), trtllm-bench's PERFORMANCE OVERVIEW ("Per GPU
Output Throughput (tps/gpu)", "Total Token Throughput (tokens/sec)", "Average time-to-first-token [TTFT] (ms)"),
MLPerf Inference <= v5.0 system descriptions ("NVIDIA H100-SXM-80GB", "8x 4th Gen NVLink, 900GB/s"), torchtitan and
NeMo tables ("TPS/GPU", "Seq.Len=8192, TP=1, PP=1"), Megatron's logs, nccl-tests headers. Each case is
(class, row, changed columns, expectation); `outcome` judges one case: "right" (the expected reading or refusal),
"refused" (a refusal where a reading is right), "MISREAD" (a different reading without refusing) or "CRASH".
`python tests/test_reading_variants_round2.py` prints the counts per class (run it with another tree's src on
PYTHONPATH for a before / after).
"""

from __future__ import annotations

import re

import pytest
from reading_variant_cases import (
    SAME,
    Case,
    _c,
    _inference_formats,
    _precision_is,
    _rows,
    outcome,
    report,
)

NEMO = "TR-NEMO2407-01"  # H100, FP8, 64 GPUs, tokens/s/GPU
KOR = "TR-KOR-T5-22B-FULL"  # A100 80GB, tp 8, step time in s
SC21 = "TR-SC21-T1-05"  # A100, tp 8 pp 2, 512 GPUs, Eq. 3 TFLOP/s per GPU
MLM = "TR-MLM-H100-01"  # per-GPU model TFLOP/s
B200_MOE = "TR-MBRIDGE-25.11-B200-19"  # DeepSeek-V3 on 256 B200, ep 8
TTT = "TR-MLPERF-v3.0-dgxh100-n64-nemo-TTT"  # time to train in min, 512 H100
EOS = "TR-MLPERF-v4.0-eos-dfw-n1344-ngc24-04-nemo-TTT"  # 10,752 H100 on 1344 nodes
VLLM = "SRV-VLLM-DSR1-MI300X-C128-O800"  # output tok/s of the server
SGL = "SRV-SGLANG-DSR1-H200-C128-O800"
TRT_SRV = "SRV-TRTLLM-DSR1-H200-C004-O800"
TRT_STATIC = "INF-TRT061-14"  # 8 H100, output tok/s per GPU
TRT_TTFT = "INF-TRT061-30"  # first-token latency in ms
CO = "CO-H200x8-NCCLTESTS-16"  # all_reduce 1 GiB busbw GB/s


CASES: list[Case] = [
    # --- gpu: MLPerf Inference system descriptions (accelerator_model_name, system names), NVIDIA datasheets --------
    *[_c("gpu", "training", NEMO, SAME, gpu=w) for w in (
        "NVIDIA H100-SXM-80GB", "8x NVIDIA H100-SXM5-80GB", "HPE Cray XD670 (8x H100-SXM-80GB, TensorRT)",
        "DGX H100 (8x H100 SXM)", "H100 80GB HBM3", "NVIDIA H100 80GB HBM3 (700W)",
        "NVIDIA H100 Tensor Core GPU (SXM5)",
        "NVIDIA DGX H100 (8x H100 80GB, 2TB host memory)")],
    # a bandwidth beside the memory is not a memory size: "900GB/s" is NVLink's, "3.35 TB/s" the HBM's
    *[_c("gpu-bandwidth", "training", NEMO, SAME, gpu=w) for w in (
        "H100 SXM5 80GB; 8x 4th Gen NVLink, 900GB/s", "H100 80GB (NVLink 900 GB/s)", "H100 SXM 80GB HBM3 3.35TB/s")],
    *[_c("gpu", "training", KOR, SAME, gpu=w) for w in (
        "NVIDIA A100-SXM-80GB", "DGX A100 (8x A100 80GB SXM4)", "A100 80GB HBM2e, 600 GB/s NVLink")],
    *[_c("gpu", "serving", VLLM, SAME, gpu=w) for w in (
        "AMD Instinct MI300X OAM 192GB", "MI300X OAM 192GB (8x)", "AMD MI300X-192GB", "8x MI300X (OAM, 750W)",
        "AMD Instinct MI300X 192GB HBM3, 5.3 TB/s")],
    *[_c("gpu", "serving", SGL, SAME, gpu=w) for w in (
        "NVIDIA H200-SXM-141GB", "H200 141GB HBM3e", "HGX H200 (8x H200 SXM 141GB)", "NVIDIA H200 (141GB, 4.8TB/s)")],
    *[_c("gpu-other", "training", NEMO, "refuse:gpu", gpu=w) for w in (
        "NVIDIA H100-PCIe-80GB", "ESC8000A-E12 (8x H100-PCIe-80GB, TensorRT)", "A10G", "A800 80GB", "MI308X",
        "GH200 144GB HBM3e", "NVIDIA Grace Hopper Superchip", "TPU v5 lite (v5litepod-256)",
        "Trainium (trn1.32xlarge)")],
    # --- n_gpus ------------------------------------------------------------------------------------------------------
    *[_c("n_gpus", "training", NEMO, SAME, n_gpus=w) for w in (
        "64 (8 nodes x 8 GPUs)", "64 GPUs across 8 nodes", "64 (8x DGX H100)", "64 accelerators")],
    *[_c("n_gpus", "training", EOS, SAME, n_gpus=w) for w in ("10,752", "10,752 GPUs", "10752 (1344 nodes)")],
    # a TPU v4 / v5p chip has two TensorCores ("v5p-512" is 256 chips): a count of cores is not one of devices
    *[_c("n_gpus-other", "training", NEMO, "refuse:n_gpus", n_gpus=w) for w in (
        "8 nodes (64 GPUs)", "128 TensorCores", "128 cores", "8 GPUs/node x 8 nodes")],
    # --- parallel degrees and batches as tables and configs write them ---------------------------------------------
    *[_c("labelled-number", "training", KOR, SAME, **{col: w}) for col, w in (
        ("tp", "TP=8, PP=1"), ("pp", "TP=8, PP=1"), ("tp", "tensor parallel 8"), ("tp", "TP size 8"),
        ("tp", "8-way tensor parallel"), ("pp", "PP size 1"), ("tp", "tensor_model_parallel_size=8"),
        ("pp", "pipeline_model_parallel_size: 1"), ("mbs", "micro-batch size 4"), ("seq", "Seq.Len=2048"),
        ("seq", "seq_length: 2048"), ("gbs", "GBS=4, MBS=4"), ("mbs", "GBS=4, MBS=4"))],
    *[_c("labelled-number", "training", B200_MOE, SAME, ep=w) for w in ("EP size 8", "expert_model_parallel_size=8",
                                                                      "EP=8 (MoE layers)")],
    *[_c("labelled-number", "training", NEMO, SAME, **{col: w}) for col, w in (
        ("gbs", "2,048"), ("seq", "2,048"), ("gbs", "2,048 sequences"))],
    # a number the column cannot place is refused, never taken as "not stated" (then assumed)
    *[_c("labelled-number-other", "training", B200_MOE, f"refuse:{col}", **{col: w}) for col, w in (
        ("ep", "8 experts per rank"), ("ep", "TP=1, PP=16"), ("mbs", "per-device batch 1"), ("seq", "context 4k"))],
    # --- precision (training): Megatron / NeMo configs, Transformer Engine, FSDP MixedPrecision ---------------------
    *[_c("precision", "training", NEMO, SAME, precision=w) for w in (
        "FP8 (E4M3) via Transformer Engine", "fp8_format=hybrid", "--fp8-format hybrid", "FP8-DS",
        "FP8 current scaling", "Float8 (tensorwise)", "fp8 + bf16 master weights")],
    *[_c("precision", "training", KOR, ("check", _precision_is("bf16")), precision=w) for w in (
        "BF16 mixed precision (AMP O2)", "--bf16", "bf16: True", "param_dtype=bfloat16, reduce_dtype=float32",
        "torch.autocast(dtype=torch.bfloat16)")],
    # fp8 switched off in a setting is not fp8 (NeMo's fp8: False / null; Megatron's fp8=None)
    *[_c("precision-off", "training", NEMO, ("check", _precision_is("bf16")), precision=w) for w in (
        "bf16 (fp8: False)", "BF16, fp8=None", "bf16; fp8: null", "bf16 (fp8 off)", "bf16 (no FP8)")],
    # --- precision (inference, static batch) ------------------------------------------------------------------------
    *[_c("precision", "static", TRT_STATIC, ("check", _inference_formats("fp8", "fp8")), precision=w) for w in (
        "FP8 weights and KV cache", "fp8 (e4m3) weights, fp8 KV cache", "float8_e4m3fn (weights + KV)")],
    *[_c("precision", "static", TRT_STATIC, ("check", _inference_formats("fp8", None)), precision=w) for w in (
        "FP8 W8A8", "fp8 (per-tensor, static)", "FP8 weights, BF16 KV cache")],
    # a KV cache in fp8 beside 16-bit weights: the weights stay 16-bit
    *[_c("precision-kv", "static", TRT_STATIC, ("check", _inference_formats(None, "fp8")), precision=w) for w in (
        "FP16 weights, FP8 KV cache", "BF16 (KV cache FP8)", "bf16 + fp8 kv cache", "bf16, --kv-cache-dtype fp8")],
    *[_c("precision-other", kind, row, "refuse:precision", precision=w) for kind, row in (
        ("static", TRT_STATIC), ("serving", VLLM)) for w in (
        "w8a8", "W8A8 (SmoothQuant)", "8-bit (bitsandbytes)", "NF4 (QLoRA)", "Q4_K_M (GGUF)", "FP6", "int8 weight-only",
        "FP8 weights, INT8 KV cache")],
    # --- training metrics --------------------------------------------------------------------------------------------
    *[_c("train-metric", "training", KOR, ("scale", k), metric=m, unit=u) for m, u, k in (
        ("ms/iter", "", 1e3), ("s/step", "", 1), ("iteration time [ms]", "", 1e3),
        ("step time", "ms per iteration", 1e3),
        ("Train step time, in milliseconds", "", 1e3), ("elapsed time per iteration (ms)", "", 1e3),
        ("step time [s]", "", 1), ("time per step", "sec", 1), ("step time", "min", 1 / 60))],
    *[_c("train-metric", "training", NEMO, ("scale", k), metric=m, unit=u) for m, u, k in (
        ("TPS/GPU", "", 1), ("tps/gpu", "", 1), ("Tokens/s/device", "", 1), ("throughput", "tokens/s per chip", 1),
        ("throughput", "tokens/s per TPU chip", 1), ("throughput", "kTok/s/GPU", 1e-3),
        ("throughput", "tokens/s/GPU (x1000)", 1e-3), ("throughput", "tokens/s/GPU (K)", 1e-3),
        ("throughput", "thousand tokens/s per GPU", 1e-3))],
    *[_c("train-metric", "training", MLM, ("scale", k), metric=m, unit=u) for m, u, k in (
        ("TFLOPS/GPU", "", 1), ("TFLOP/s/device", "", 1), ("model TFLOPs per GPU", "TFLOPS", 1),
        ("achieved model FLOP/s per GPU", "GFLOP/s", 1e3), ("model FLOP/s per GPU", "PFLOP/s", 1e-3))],
    *[_c("train-metric", "training", TTT, ("scale", k), metric=m, unit=u) for m, u, k in (
        ("Time to train [hours]", "", 1 / 60), ("time to train, h", "", 1 / 60), ("TTT [min]", "", 1),
        ("time to train, in hours", "", 1 / 60), ("Time to Train (min)", "", 1))],
    # a rate over a minute, an hour or a day is not per second; "TPS" alone says neither per GPU nor total
    *[_c("train-metric-other", "training", NEMO, re.compile(r"^(metric|unit)"), metric=m, unit=u) for m, u in (
        ("throughput", "tokens/day/GPU"), ("throughput", "tokens/min per GPU"),
        ("throughput", "tokens per hour per GPU"),
        ("tps", ""), ("WPS", ""), ("throughput", "samples/min per GPU"))],
    # --- serving metrics: vLLM benchmark_serving, SGLang bench_serving, trtllm-bench, genai-perf --------------------
    *[_c("serve-metric", "serving", VLLM, ("label", label, value), metric=m, unit=u) for m, u, label, value in (
        ("Total throughput (tok/s)", "", "total tok/s", 9000.0),  # SGLang: input + output
        ("Total Token throughput (tok/s)", "", "total tok/s", 9000.0),
        ("Total Output Throughput (tokens/sec)", "", "output tok/s (server)", 5000.0),
        ("Total Token Throughput (tokens/sec)", "", "total tok/s", 9000.0),
        ("Per GPU Output Throughput (tokens/sec/gpu)", "", "output tok/s per GPU", 625.0),
        ("Per GPU Output Throughput (tps/gpu)", "", "output tok/s per GPU", 625.0),
        ("Request Throughput (req/sec)", "", "requests/s", 3.0),
        ("Output token throughput (per sec)", "", "output tok/s (server)", 5000.0),
        ("Mean E2EL (ms)", "", "mean E2E", 9000.0), ("Median E2EL (ms)", "", "p50 E2E", 8100.0),
        ("Median E2E Latency (ms)", "", "p50 E2E", 8100.0), ("Average request latency (ms)", "", "mean E2E", 9000.0),
        ("Average time-to-first-token [TTFT] (ms)", "", "mean TTFT", 200.0),
        ("Average time-per-output-token [TPOT] (ms)", "", "mean TPOT", 30.0),
        ("Time to first token (ms) p99", "", "p99 TTFT", 400.0), ("Mean TTFT [s]", "", "mean TTFT", 0.2),
        ("Mean TTFT, s", "", "mean TTFT", 0.2), ("E2E latency in sec", "", "mean E2E", 9.0),
        ("TTFT (p50, s)", "", "p50 TTFT", 0.18), ("P90 TPOT (ms)", "", "p90 TPOT", 45.0),
        ("TTFT (msec)", "", "mean TTFT", 200.0))],
    *[_c("serve-metric-other", "serving", VLLM, "refuse:metric", metric=m, unit=u) for m, u in (
        ("Peak output token throughput (tok/s)", ""), ("Peak concurrent requests", ""),
        ("Per User Output Speed [1/TPOT] (tokens/sec/user)", ""), ("Per User Output Throughput (tps/user)", ""),
        ("Input token throughput (tok/s)", ""), ("output throughput", "tokens/min"), ("request throughput", "req/min"),
        ("Request goodput (req/s)", ""), ("goodput", "req/s"), ("Output TPS", ""), ("[Latency] P95", "ms"),
        ("Total Latency (ms)", ""))],
    # --- static-batch inference metrics ------------------------------------------------------------------------------
    *[_c("static-metric", "static", TRT_STATIC, ("label", label, value), metric=m, unit=u) for m, u, label, value in (
        ("Per GPU Output Throughput (tokens/sec/gpu)", "", "output tok/s per GPU", 777.0),
        ("Total Output Throughput (tokens/sec)", "", "output tok/s (all GPUs)", 777.0 * 8),
        ("throughput", "output tokens/s (8 GPUs)", "output tok/s (all GPUs)", 777.0 * 8),
        ("output throughput", "tok/s/GPU", "output tok/s per GPU", 777.0))],
    *[_c("static-metric", "static", TRT_TTFT, ("label", label, value), metric=m, unit=u) for m, u, label, value in (
        ("first token latency [s]", "", "first-token latency", 0.123), ("TTFT, s", "", "first-token latency", 0.123),
        ("1st token latency", "sec", "first-token latency", 0.123),
        ("first-token latency (ms)", "", "first-token latency", 123.0))],
    # per GPU or the whole server's not said, on more than one GPU; input and output tokens; requests or samples
    *[_c("static-metric-other", "static", TRT_STATIC, re.compile(r"^(metric|unit)"), metric=m, unit=u) for m, u in (
        ("throughput", "tokens/s"), ("Output token throughput (tok/s)", ""),
        ("Total Token Throughput (tokens/sec)", ""),
        ("throughput", "requests/s"), ("throughput", "samples/s"), ("throughput", "tokens/min/GPU"),
        ("Peak output token throughput (tok/s)", ""))],
    # --- serving client -------------------------------------------------------------------------------------------
    *[_c("concurrency", "serving", VLLM, SAME, batch_or_concurrency=w) for w in (
        "Maximum request concurrency: 128 (500 prompts)", "Max request concurrency: 128; 500 prompts",
        "--max-concurrency=128 --num-prompts 500", "concurrency 128, 500 requests",
        "Traffic request rate: inf; Maximum request concurrency: 128; 500 prompts")],
    # a finite rate with a concurrency cap (benchmark_serving --request-rate 16 --max-concurrency 128)
    *[_c("concurrency-other", "serving", VLLM, "refuse:batch_or_concurrency", batch_or_concurrency=w) for w in (
        "--request-rate 16 --max-concurrency 128 --num-prompts 500",
        "Traffic request rate: 16.0; Maximum request concurrency: 128", "CON128")],
    # --- engines, as images, pins and release names write them ------------------------------------------------------
    *[_c("framework", "serving", VLLM, SAME, framework=_rows()[VLLM]["framework"].replace(
        "vLLM 0.7.3.dev138+g21f6ca217", w)) for w in ("vLLM v0.7.3", "vllm/vllm-openai:v0.7.3", "vllm==0.7.3",
                                                      "vLLM 0.7.3.post1")],
    *[_c("framework", "serving", SGL, SAME, framework=_rows()[SGL]["framework"].replace("SGLang 0.4.3.post2", w))
      for w in ("SGLang v0.4.3.post2", "sglang==0.4.3.post2", "lmsysorg/sglang:v0.4.3.post2-cu125")],
    *[_c("framework", "serving", TRT_SRV, SAME, framework=_rows()[TRT_SRV]["framework"].replace(
        "TensorRT-LLM 0.17.post1.dev", w)) for w in ("TensorRT LLM 0.17.post1.dev", "tensorrt_llm==0.17.0",
                                                     "TRT-LLM v0.17", "nvcr.io/nvidia/tensorrt-llm/release:0.17.0")],
    # the V1 engine switched on in a V0 release, another family's release: never the row's engine silently
    *[_c("framework-other", "serving", VLLM, ("differ",), framework=_rows()[VLLM]["framework"].replace(
        "vLLM 0.7.3.dev138+g21f6ca217", w)) for w in ("vLLM 0.7.3 (V1 engine, VLLM_USE_V1=1)", "vLLM v0.6.3.post1",
                                                      "SGLang v0.4.1", "TRT-LLM 0.15", "LMDeploy v0.7.0")],
    # --- request lengths --------------------------------------------------------------------------------------------
    *[_c("isl", "serving", VLLM, SAME, isl=w) for w in ("3,200", "3200 tokens", "ISL 3200", "isl=3200")],
    *[_c("isl-other", "serving", VLLM, "refuse:isl", isl=w) for w in (
        "ISL/OSL 3200/800", "input 3.2k / output 800", "3.2K", "3200/800")],
    *[_c("isl-other", "static", TRT_STATIC, "refuse:", isl=w) for w in ("ISL/OSL 128/128", "1.5K")],
    # --- the scale-out network of a training row -------------------------------------------------------------------
    *[_c("inter_net", "training", TTT, SAME, inter_net=w) for w in (
        "InfiniBand NDR400 (8x ConnectX-7)", "8x NVIDIA ConnectX-7 400Gb/s InfiniBand",
        "8x400G NDR InfiniBand per node",
        "NDR 400 Gb/s InfiniBand, 8 HCAs per node (1 per GPU)", "Quantum-2 NDR InfiniBand, 8x 400 Gb/s per node",
        "8x NDR400 per node", "8x InfiniBand NDR400")],
    *[_c("inter_net-other", "training", TTT, ("differ",), inter_net=w) for w in (
        "RoCEv2 400G", "8x 400GbE RoCE", "InfiniBand NDR200 (8x ConnectX-7)", "8x 200 Gb/s HDR InfiniBand",
        "4x 400 Gb/s InfiniBand per node", "4x NDR400 per node (1 per 2 GPUs)", "8x NDR200 per node")],
    # --- TPU slices: "v5p-4096" names 4096 TensorCores, 2048 chips (MLPerf Training v4.1 Google rows) ---------------
    *[_c("gpu", "training", "TR-MLPERF-v4.1-Google-cloud-tpu-v5p-4096-maxtext-GPT3-TTT", SAME, gpu=w) for w in (
        "TPU v5p-4096", "Cloud TPU v5p (95GB HBM2e)", "TPU v5p 95GB, v5p-4096 slice")],
    *[_c("n_gpus-other", "training", "TR-MLPERF-v4.1-Google-cloud-tpu-v5p-4096-maxtext-GPT3-TTT", "refuse:n_gpus",
         n_gpus=w) for w in ("4096 TensorCores", "v5p-4096", "4096 (v5p-4096)")],
    *[_c("n_gpus", "training", "TR-MLPERF-v4.1-Google-cloud-tpu-v5p-4096-maxtext-GPT3-TTT", SAME, n_gpus=w)
      for w in ("2048 chips", "2,048 chips (v5p-4096 is TensorCores)")],
    # --- recomputation as configs write it ---------------------------------------------------------------------------
    *[_c("recompute", "training", KOR, SAME, recompute=w) for w in (
        "AC=full", "activation_checkpoint.mode=full", "full activation checkpointing (every transformer layer)")],
    *[_c("recompute", "training", "TR-KOR-T5-22B-SEL", SAME, recompute=w) for w in (
        "--recompute-activations", "recompute_activations=True", "--recompute-granularity selective")],
    *[_c("recompute", "training", "TR-KOR-T4-1", SAME, recompute=w)
      for w in ("AC=none", "activation_checkpoint.mode=none")],
    # --- model names with a release's date tag; a size after the date is no date --------------------------------
    *[_c("model", "training", "TR-MBRIDGE-25.09-06", SAME, model=w) for w in (
        "Qwen/Qwen3-235B-A22B-Instruct-2507", "Qwen3-235B-A22B-Thinking-2507")],
    *[_c("model-other", "serving", VLLM, "refuse:model", model=w) for w in ("Qwen3-235B-2507", "Llama-3.1-2507")],
    # --- collectives: nccl-tests and rccl-tests printouts -------------------------------------------------------------
    *[_c("collective", "collective", CO, SAME, **dict(change)) for change in (
        (("msg_bytes", "1073741824 bytes"),), (("msg_bytes", "1073741824 (1 GiB)"),), (("msg_bytes", "1024 MiB"),),
        (("unit", "GB/sec"),), (("metric", "busbw [GB/s]"), ("unit", "")), (("op", "AllReduce (sum, float)"),),
        (("op", "all_reduce_perf -b 8 -e 8G -f 2 -g 1"),))],
    *[_c("collective-other", "collective", CO, re.compile(r"^(msg_bytes|unit|op)"), **dict(change)) for change in (
        (("msg_bytes", "1 GB"),), (("msg_bytes", "1,000 MB"),), (("unit", "GB/s per GPU"),), (("unit", "TB/s"),),
        (("op", "AR"),))],
    # --- memory units ------------------------------------------------------------------------------------------------
    *[_c("memory-unit", "memory", "", ("value", v), unit=u) for u, v in (
        ("GiB/GPU", 2**30), ("GB per device", 1e9), ("MiB per rank", 2**20), ("GiB", 2**30))],
    *[_c("memory-unit-other", "memory", "", "refuse:unit", unit=u) for u in (
        "GiB (sum of 8 GPUs)", "% of 80 GB", "Gbit", "GiB per node", "TiB")],
]


@pytest.mark.parametrize("case", CASES, ids=str)
def test_a_reworded_row_reads_the_same_or_is_refused_naming_the_column(case: Case) -> None:
    result, said = outcome(case)
    assert result == "right", said


if __name__ == "__main__":
    report(CASES)
