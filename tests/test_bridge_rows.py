"""The bridge test: published rows stated by hand, as a user would write them from the source, against the
harness's reading of the same rows. A misreading (a number taken from the wrong clause, a default the run did
not use) makes the two predictions differ. Each hand statement says in words what it takes from where."""

from __future__ import annotations

import math
from typing import Any

import pytest

from armillary import api
from armillary.estimate.result import StepEstimate
from armillary.validation.run import read_rows, run_row

ROWS = {r["id"]: r for r in read_rows()}
MEGATRON_2021 = dict(attention="standard", sequence_parallel=False, zero=0, precision="fp16",
                     overlap=dict(dp_grad_reduce=False, param_gather=False, tp_comm=False, ep_comm=False))
NEMO = dict(attention="flash3", sequence_parallel=True, zero=1, precision="fp8",
            overlap=dict(dp_grad_reduce=True, param_gather=True, tp_comm=True, ep_comm=False))
MLPERF_NEMO = NEMO  # config_tp_h100.sh / config_DGXH100_*.sh: TP_COMM_OVERLAP=True, SP, distributed optimizer


def _nic_gbps(system: str, gbps_per_gpu: float, gpus: int) -> Any:
    """A system preset whose scale-out network runs at the row's per-GPU rate."""
    from armillary.specs.loading import load_system

    return load_system(system, gpus).with_dimension(-1, bandwidth=gbps_per_gpu * 1e9 / 8)


def _roce(system: str, gbps_per_gpu: float, gpus: int) -> Any:
    """A system preset whose scale-out tier is the RoCE fabric preset at the row's per-GPU rate."""
    from armillary.comm.fabrics import with_fabric

    return with_fabric(_nic_gbps(system, gbps_per_gpu, gpus), "roce-oci", gbps_per_gpu * 1e9 / 8)


def _step(model: Any, system: Any, strategy: dict[str, Any], seq: int, gbs: int, gpus: int) -> StepEstimate:
    result = api.estimate(model, system, strategy, {"seq_len": seq, "global_batch": gbs}, gpus=gpus)
    assert isinstance(result, StepEstimate)
    return result


def _per_gpu_tokens(r: StepEstimate, gpus: int) -> float:
    return float(r.tokens_per_s) / gpus


# row id -> the figure in the row's unit, from a hand statement of the row
TRAINING = {
    # Korthikanti et al. Table 5: 175B, TP 8 PP 8, 3 interleaved chunks, batch 64, selective + SP, 16-bit,
    # 8 HDR NICs per DGX A100 (200 Gb/s per GPU); Megatron-LM of 2022 otherwise as in 2021 (no fused attention)
    "TR-KOR-T5-175B-SEL": lambda: float(_step(
        "korthikanti-175b", _nic_gbps("dgx-a100", 200, 64),
        {**MEGATRON_2021, "tp": 8, "pp": 8, "vpp": 3, "micro_batch": 1, "recompute": "selective",
         "sequence_parallel": True}, 2048, 64, 64).step_time_s),
    "TR-KOR-T5-175B-FULL": lambda: float(_step(
        "korthikanti-175b", _nic_gbps("dgx-a100", 200, 64),
        {**MEGATRON_2021, "tp": 8, "pp": 8, "vpp": 3, "micro_batch": 1, "recompute": "full"}, 2048, 64, 64
    ).step_time_s),
    # SC'21 Table 1, 39.1B: TP 8 PP 2, batch 1536 in micro-batches of 4, full recompute, fp16, Megatron-LM 2021;
    # TFLOP/s counted by the paper's Eq. 3 (96 B s l h^2 (1 + s/6h + V/16lh), recompute forward included)
    "TR-SC21-T1-05": lambda: _eq3(48, 8192, 51200, 2048, 1536) / float(_step(
        "megatron-39.1b", _nic_gbps("dgx-a100", 200, 512),
        {**MEGATRON_2021, "tp": 8, "pp": 2, "micro_batch": 4, "recompute": "full"}, 2048, 1536, 512
    ).step_time_s) / 512 / 1e12,
    # NeMo 24.07 GPT-3 175B FP8 on 128 H100: TP 4 PP 8 VP 6, mbs 1, batch 256; NeMo's recipe defaults (SP, TP
    # overlap, distributed optimizer); recompute not stated and none fits; tokens/s per GPU
    "TR-NEMO2407-03": lambda: _per_gpu_tokens(_step(
        "gpt3-175b", "dgx-h100", {**NEMO, "tp": 4, "pp": 8, "vpp": 6, "micro_batch": 1, "recompute": "none"},
        2048, 256, 128), 128),
    # Megatron-Bridge 25.09 Llama 3 70B on 64 H100: TP 4 PP 8 VP 5, mbs 1, batch 128, 8K; the table's precision is
    # not stated (the recipes are FP8), recompute none fits; the recipe reduces gradients in bf16
    # (configs/llama3/llama3_70b_llm_pretrain.yaml at r0.1.0: grad_reduce_in_fp32 false)
    "TR-MBRIDGE-25.09-02": lambda: _per_gpu_tokens(_step(
        "llama3-70b", "dgx-h100", {**NEMO, "tp": 4, "pp": 8, "vpp": 5, "micro_batch": 1, "recompute": "none",
                                   "grad_reduce_in_bf16": True},
        8192, 128, 64), 64),
    # llm-foundry MPT-70B on 512 H100: FSDP FULL_SHARD only, micro-batch 8, batch 4096, bf16, activation
    # checkpointing of every block, FlashAttention
    "TR-FOUNDRY-001": lambda: _per_gpu_tokens(_step(
        "mpt-70b", "dgx-h100", {"tp": 1, "pp": 1, "zero": 3, "attention": "flash", "sequence_parallel": False,
                                "precision": "bf16", "micro_batch": 8, "recompute": "full",
                                "overlap": dict(dp_grad_reduce=True, param_gather=True, tp_comm=False)},
        2048, 4096, 512), 512),
    # BLOOM 176B: TP 4 PP 12 DP 8 on 384 A100, micro-batch 2, batch 2048, bf16, full checkpointing, ZeRO-1
    # (Megatron-DeepSpeed); the 70 layers over 12 stages with the embedding and loss standing in for layers
    "TR-BLOOM-1": lambda: float(_step(
        "bloom-176b", "dgx-a100",
        {"tp": 4, "pp": 12, "micro_batch": 2, "zero": 1, "attention": "standard", "sequence_parallel": False,
         "precision": "bf16", "recompute": "full", "first_stage_layers": 5, "last_stage_layers": 5,
         "overlap": dict(dp_grad_reduce=True, param_gather=False, tp_comm=False)}, 2048, 2048, 384).step_time_s),
    # MT-NLG 530B: TP 8 PP 35 on 2240 A100 80GB, batch 1920 of 2048 tokens, micro-batch not stated (1); a 2021
    # Megatron-DeepSpeed stack offers no selective recomputation: full is the least that fits
    "TR-MTNLG-1": lambda: float(_step(
        "megatron-529.6b", _nic_gbps("dgx-a100", 200, 2240),
        {"tp": 8, "pp": 35, "micro_batch": 1, "zero": 1, "attention": "standard", "sequence_parallel": False,
         "precision": "fp16", "recompute": "full",
         "overlap": dict(dp_grad_reduce=True, param_gather=False, tp_comm=False)}, 2048, 1920, 2240).step_time_s),
    # MLPerf v3.1 GPT-3 on 512 DGX H100 (eos-dfw): TP 4 PP 8 VP 12, mbs 1, batch 2048, FP8, no checkpointing,
    # TP_COMM_OVERLAP=True; step time and time to train (1,207,959,552 trained tokens, with the v3.1 rules'
    # evaluations: the row's "eval every 20 steps-equivalent" is not read)
    "TR-MLPERF-v3.1-eos-dfw-n512-ngc23-09-nemo-STEP": lambda: float(_mlperf_gpt3(4096, 2048).step_time_s),
    "TR-MLPERF-v3.1-eos-dfw-n512-ngc23-09-nemo-TTT": lambda: _mlperf_ttt(_mlperf_gpt3(4096, 2048), 1207959552, 2048),
    # Llama 3 405B, Table 4: 8,192 H100, TP 8 PP 16 DP 64, batch 2048 x 8K, BF16, no checkpointing, FSDP that keeps
    # the gathered weights through the backward (ZeRO-2), SP assumed with TP; interleaving depth not stated (1);
    # RoCE at 400 Gb/s per GPU (the RoCE fabric preset); model TFLOP/s per GPU
    "TR-LLAMA3-405B-1": lambda: _model_tflops(_step(
        _llama405_vocab_128000(), _roce("dgx-h100", 400, 8192),
        {"tp": 8, "pp": 16, "micro_batch": 1, "zero": 2, "attention": "flash", "sequence_parallel": True,
         "precision": "bf16", "recompute": "none", "first_stage_layers": 7, "last_stage_layers": 7,
         "overlap": dict(dp_grad_reduce=True, param_gather=True, tp_comm=False)}, 8192, 2048, 8192), 8192),
}


# SC'21 Table 1 (Megatron-LM 2021, full recompute, fp16, 200 Gb/s per A100): (preset, layers, hidden, batch,
# micro-batch, tp, pp, interleaved chunks, GPUs); TFLOP/s per GPU by the paper's Eq. 3
SC21 = {"TR-SC21-T1-01": ("megatron-1.7b", 24, 2304, 512, 16, 1, 1, 1, 32),
        "TR-SC21-T1-04": ("megatron-18.4b", 40, 6144, 1024, 8, 8, 1, 1, 256),
        "TR-SC21-T1-07": ("megatron-145.6b", 80, 12288, 2304, 2, 8, 8, 2, 1536),
        "TR-SC21-T1-10": ("megatron-1t", 128, 25600, 3072, 1, 8, 64, 1, 3072)}
for _id, (_preset, _l, _h, _b, _mb, _tp, _pp, _vp, _g) in SC21.items():
    TRAINING[_id] = (lambda p=_preset, layers=_l, h=_h, b=_b, mb=_mb, tp=_tp, pp=_pp, vp=_vp, g=_g: _eq3(
        layers, h, 51200, 2048, b) / float(_step(p, _nic_gbps("dgx-a100", 200, g), {
            **MEGATRON_2021, "tp": tp, "pp": pp, "vpp": vp, "micro_batch": mb, "recompute": "full"},
            2048, b, g).step_time_s) / g / 1e12)
# MLPerf GPT-3 on DGX H100 (mbs 1, FP8, TP overlap): (GPUs, batch, pp, interleaved chunks, trained tokens or None
# for a step time); the 2024 submissions keep fp8 parameters (config_common.sh FP8_PARAMS=True), 2023's do not
MLPERF = {"TR-MLPERF-v3.1-eos-dfw-n1024-ngc23-09-nemo-STEP": (8192, 4096, 8, 12, None),
          "TR-MLPERF-v3.1-eos-n64-ngc23-09-nemo-TTT": (512, 2048, 8, 12, 1207959552),
          "TR-MLPERF-v4.0-eos-dfw-n1344-ngc24-04-nemo-TTT": (10752, 2688, 6, 8, 1211105280)}
for _id, (_g, _b, _pp, _vp, _tokens) in MLPERF.items():
    TRAINING[_id] = (lambda g=_g, b=_b, pp=_pp, vp=_vp, t=_tokens, f="v4." in _id: float(
        _mlperf_gpt3(g, b, pp, vp, f).step_time_s) if t is None else _mlperf_ttt(_mlperf_gpt3(g, b, pp, vp, f), t, b))


def _hbm(system: str, gib: float, gpus: int) -> Any:
    """A system preset whose devices hold the HBM the row's GPU text states (its peak rates kept)."""
    from armillary.specs.loading import load_system

    s = load_system(system, gpus)
    hbm = s.device.hbm.model_copy(update={"capacity": gib * 2**30})
    return s.model_copy(update={"device": s.device.model_copy(update={"memory": (hbm, *s.device.memory[1:])})})


TORCHTITAN = dict(attention="flash", zero=3, precision="bf16", sequence_parallel=False,
                  overlap=dict(dp_grad_reduce=True, param_gather=True, tp_comm=False, tp_comm_method="ring"))
TRAINING.update({
    # Korthikanti Table 5, 22B: TP 8 on one DGX A100, batch 4 in one micro-batch, selective + SP, 16-bit
    "TR-KOR-T5-22B-SEL": lambda: float(_step(
        "korthikanti-22b", _nic_gbps("dgx-a100", 200, 8),
        {**MEGATRON_2021, "tp": 8, "micro_batch": 4, "recompute": "selective", "sequence_parallel": True},
        2048, 4, 8).step_time_s),
    # NeMo 24.07 GPT-3 5B FP8 on 64 H100: data parallel only, mbs 4, batch 2048; GPT conventions (vocab 51200)
    "TR-NEMO2407-01": lambda: _per_gpu_tokens(_step(
        _gpt("megatron-1.7b", 24, 4096, 32, 16384, 51200, 2048), "dgx-h100",
        {**NEMO, "tp": 1, "sequence_parallel": False, "micro_batch": 4, "recompute": "none",
         "overlap": {**NEMO["overlap"], "tp_comm": False}}, 2048, 2048, 64), 64),
    # Megatron-Core r0.8 weak scaling, 7.1B on 96 H100: TP 2, batch 192 of 4096 tokens, vocab 131072; precision
    # not stated but its MFU is taken of the BF16 peak; micro-batch not stated (1); the notes' overlap flags
    # (--overlap-grad-reduce --overlap-param-gather --tp-comm-overlap); model TFLOP/s per GPU
    "TR-MLM-H100-02": lambda: _model_tflops(_step(
        _gpt("megatron-1.7b", 30, 4096, 32, 16384, 131072, 4096), "dgx-h100",
        {"tp": 2, "attention": "flash3", "sequence_parallel": True, "zero": 1, "precision": "bf16",
         "micro_batch": 1, "recompute": "none",
         "overlap": dict(dp_grad_reduce=True, param_gather=True, tp_comm=True)}, 4096, 192, 96), 96),
    # torchtitan Llama 3.1 8B, FSDP2 on 8 H100 96GB: local batch 2 (batch 16), 8K tokens (its configs'), BF16,
    # selective checkpointing as torchtitan's 'op' mode does it
    "TR-TORCHTITAN-2412-T1-FSDP": lambda: _per_gpu_tokens(_step(
        "llama3.1-8b", _hbm("dgx-h100", 96, 8),
        {**TORCHTITAN, "micro_batch": 2, "recompute": "selective",
         "recompute_modules": ["elementwise", "alternate_matmuls"]}, 8192, 16, 8), 8),
    # torchtitan Llama 3.1 8B on 32 H200: FSDP2, local batch 2 (batch 64), Float8 GEMMs, 8K tokens, checkpointing
    # left at the config's default (not stated): none fits
    "TR-TORCHTITAN-H200-TRAINY-4N": lambda: _per_gpu_tokens(_step(
        "llama3.1-8b", "hgx-h200", {**TORCHTITAN, "precision": "fp8", "micro_batch": 2, "recompute": "none"},
        8192, 64, 32), 32),
})


def _gpt(family: str, layers: int, hidden: int, heads: int, ffn: int, vocab: int, seq: int) -> Any:
    """A GPT-style model of the row's shape over a family preset's conventions (positions for its sequence)."""
    from armillary.specs.loading import load_model

    base = load_model(family)
    return base.model_copy(update=dict(layers=layers, hidden=hidden, heads=heads, kv_heads=heads, ffn=ffn,
                                       vocab=vocab, max_seq_len=max(base.max_seq_len, seq)))


def _eq3(layers: int, hidden: int, vocab: int, seq: int, batch: int) -> float:
    return 96 * batch * seq * layers * hidden**2 * (1 + seq / (6 * hidden) + vocab / (16 * layers * hidden))


def _model_tflops(r: StepEstimate, gpus: int) -> float:
    return float(r.model_flop) / float(r.step_time_s) / gpus / 1e12


def _mlperf_gpt3(gpus: int, gbs: int, pp: int = 8, vpp: int = 12, fp8_params: bool = False) -> StepEstimate:
    return _step("gpt3-175b", "dgx-h100", {**MLPERF_NEMO, "tp": 4, "pp": pp, "vpp": vpp, "micro_batch": 1,
                                           "recompute": "none", "fp8_params": fp8_params}, 2048, gbs, gpus)


def _mlperf_ttt(r: StepEstimate, tokens: int, gbs: int) -> float:
    """Minutes of an MLPerf GPT-3 time to train by the rules (training_rules.adoc, v3.0-v4.1): the trained steps,
    and an evaluation every CEIL(24576 / GBS) steps on the 5662 sequences of 2048 tokens of the validation set,
    each sequence at the forward share of a trained sequence's time."""
    steps = tokens / (gbs * 2048)
    evaluations = steps // math.ceil(24576 / gbs)  # 24 at GBS 2048 (12 steps), 22 at 2688 (10 steps)
    layer = r.layer
    f, bi, bw = (float(p.time_s) for p in (layer.forward, layer.backward_input, layer.backward_weight))
    evaluating = evaluations * 5662 / gbs * float(r.breakdown.forward_backward) * f / (f + bi + bw)
    return (steps * float(r.step_time_s) + evaluating) / 60


def _llama405_vocab_128000() -> Any:
    from armillary.specs.loading import load_model

    return load_model("llama3.1-405b").model_copy(update={"vocab": 128000})


@pytest.mark.parametrize("row_id", sorted(TRAINING))
def test_the_harness_reads_a_training_row_as_stated_by_hand(row_id: str) -> None:
    result = run_row(ROWS[row_id])
    assert result.skipped is None and result.predicted is not None
    assert result.predicted == pytest.approx(TRAINING[row_id](), rel=1e-9), result.assumptions


def _static(model: str, system: str, gpus: int, strategy: dict[str, Any], workload: dict[str, Any]) -> float:
    result = api.estimate(model, system, strategy, {"kind": "inference", **workload}, gpus=gpus)
    return float(result.output_tokens_per_s_per_device)


def _served(model: str, system: str, gpus: int, strategy: dict[str, Any], workload: dict[str, Any],
            requests: int, rate: float, concurrency: int | None, steady: bool) -> float:
    from armillary.serving.trace import benchmark_trace
    from armillary.serving.window import steady_throughput
    from armillary.specs.workload import Arrivals

    arrivals = Arrivals.OFFLINE if concurrency is not None or math.isinf(rate) else Arrivals.POISSON
    trace = benchmark_trace(requests, 0.0 if math.isinf(rate) else rate, workload["input_len"],
                            workload["output_len"], arrivals)
    serving = {**workload.pop("serving", {}), "concurrency": concurrency}
    result = api.simulate_serving(model, system, strategy, {"kind": "inference", **workload, "serving": serving},
                                  gpus=gpus, trace=trace)
    return float(steady_throughput(result.times).output_tokens_per_s if steady else result.output_tokens_per_s)


def _trtllm_bench(model: str, system: str, gpus: int, strategy: dict[str, Any], workload: dict[str, Any],
                  requests: int) -> float:
    """An offline trtllm-bench throughput run of `requests` requests, the whole run as it reports it."""
    result = api.serve_benchmark(model, system, strategy, {"kind": "inference", **workload},
                                 {"mode": "offline", "requests": requests, "client": "trtllm-bench"}, gpus=gpus)
    return float(result.output_tokens_per_s)


TRT061 = dict(weights="fp8", decode_attention="per_query_head")  # TensorRT-LLM <= 0.6: MHA reads per query head
SESSION_KV = dict(precision="fp8", block_tokens=1, memory_fraction=1.0)  # gptSessionBenchmark: contiguous cache
INFERENCE = {
    # TensorRT-LLM v0.6.1 static batches (gptSessionBenchmark), GPT-J 6B FP8 weights and KV cache on one H100
    "INF-TRT061-01": lambda: _static("gpt-j-6b", "dgx-h100", 1, {"tp": 1, "precision": "fp8", "attention": "flash"},
                                     dict(TRT061, batch=1024, input_len=128, output_len=128, kv_cache=SESSION_KV)),
    "INF-TRT061-02": lambda: _static("gpt-j-6b", "dgx-h100", 1, {"tp": 1, "precision": "fp8", "attention": "flash"},
                                     dict(TRT061, batch=120, input_len=128, output_len=2048, kv_cache=SESSION_KV)),
    # trtllm-bench max-throughput (TensorRT-LLM 1.0 profile), all requests queued: the overview's dataset of
    # 30,000 requests of 128 + 128 tokens, the whole run as trtllm-bench reports it, trtllm-bench the client (its
    # decode CUDA graphs to its whole batch). The ModelOpt checkpoint's KV cache in fp8 (kv_cache dtype "auto");
    # trtllm-bench's heuristic limits: (141 GiB - 8.03e9 x 1 byte) x 0.9 / (64 KiB x 256 tokens) = 7691
    # requests, capped at 4096, 4096 x 2 = 8192 tokens
    "INF-TRT10-01": lambda: _trtllm_bench(
        "llama3.1-8b", "hgx-h200", 1, {"tp": 1, "precision": "fp8", "attention": "flash3"},
        dict(input_len=128, output_len=128, weights="fp8", kv_cache={"precision": "fp8"},
             serving={"engine": "tensorrt-llm-1.0", "max_batch": 4096, "max_batched_tokens": 8192}), 30000),
    # the same at 20,000 + 2,000 tokens on two H100 (TP 2), 1,000 requests: (2 x 80 GiB - 70.6e9 bytes) x 0.9 /
    # (160 KiB x 22,000) = 25 requests -> 64 sequences, 20,000 + 64 tokens (no chunked prefill)
    "INF-TRT10-40": lambda: _trtllm_bench(
        "llama3.1-70b", "dgx-h100", 2, {"tp": 2, "precision": "fp8", "attention": "flash3"},
        dict(input_len=20000, output_len=2000, weights="fp8", kv_cache={"precision": "fp8"},
             serving={"engine": "tensorrt-llm-1.0", "max_batch": 64, "max_batched_tokens": 20064}), 1000),
    # TensorRT-LLM 0.17 serving DeepSeek-R1 (block-scaled fp8 checkpoint) on 8 H200: --tp_size 8 --ep_size 4
    # (experts over 4 ranks, each split in 2), --max_batch_size 512 --max_num_tokens 16384; 500 prompts of
    # 3,200 + 800 tokens at concurrency 4; the 0.17 profile (no CUDA graphs by default)
    "SRV-TRTLLM-DSR1-H200-C004-O800": lambda: _served(
        "deepseek-v3", "hgx-h200", 8, {"tp": 8, "ep": 4, "expert_tp": 2, "precision": "fp8", "attention": "flash3"},
        dict(input_len=3200, output_len=800, weights="fp8", weight_scales="block",
             serving={"engine": "tensorrt-llm-0.17", "max_batch": 512, "max_batched_tokens": 16384}),
        requests=500, rate=math.inf, concurrency=4, steady=False),
}


@pytest.mark.parametrize("row_id", sorted(INFERENCE))
def test_the_harness_reads_an_inference_row_as_stated_by_hand(row_id: str) -> None:
    result = run_row(ROWS[row_id])
    assert result.skipped is None and result.predicted is not None
    assert result.predicted == pytest.approx(INFERENCE[row_id](), rel=1e-9), result.assumptions
