"""An inference configuration as vLLM (`vllm serve`, engine arguments v0.8+) and TensorRT-LLM
(`trtllm-serve serve` with --extra_llm_api_options YAML, `trtllm-build` for a TensorRT engine) arguments;
what they cannot express goes into the notes."""

from __future__ import annotations

import yaml

from armillary.report.launch import Command, Deployment, Target
from armillary.specs.model import Model
from armillary.specs.strategy import Strategy, TrainingPrecision
from armillary.specs.system import System
from armillary.specs.workload import Inference, StoredPrecision


def _served_weights(s: Strategy, w: Inference) -> StoredPrecision | None:
    """The weights' precision a serving estimate assumed (`serving.benchmark.served_weights`, the rule the
    trtllm-bench client sizes its heuristic with)."""
    from armillary.serving.benchmark import served_weights

    return w.weights if w.weights is not None else served_weights(s)


# NeMo 2.0 LoRA target names (nemo/collections/llm/peft/lora.py: linear_qkv, linear_proj, linear_fc1, linear_fc2)


def _serving_checks(s: Strategy, w: Inference, notes: list[str]) -> None:
    from armillary.estimate.inference_precision import serving_block_format

    serving_block_format(s)  # the block formats serving refuses (int8: AQT's training recipe), as the estimate does
    if s.cp > 1:
        notes.append(f"cp {s.cp}: context parallelism has no serving-engine flag here")
    if w.serving.prefill_replicas:
        notes.append(f"{w.serving.prefill_replicas} prefill-only replicas: disaggregated serving needs the "
                     "engine's disaggregation setup (not expressed by these flags)")
    if w.kv_cache.precision in (StoredPrecision.MXFP8, StoredPrecision.MXFP4):
        notes.append(f"kv cache {w.kv_cache.precision.value}: the engines' cache dtypes are fp8 and nvfp4; no flag "
                     "for it")


# vLLM's quantization methods for block-scaled checkpoints: NVIDIA ModelOpt NVFP4 (modelopt_fp4), OCP MXFP4
# (mxfp4, as gpt-oss ships)


_VLLM_QUANTIZATION = {StoredPrecision.NVFP4: "modelopt_fp4", StoredPrecision.MXFP4: "mxfp4"}


def vllm(model: Model, system: System, s: Strategy, w: Inference) -> Deployment:
    """`vllm serve` flags: parallelism, batch limits, cache and weight precision, chunked prefill."""
    notes: list[str] = []
    _serving_checks(s, w, notes)
    replicas = system.devices // (s.tp * s.pp)
    args = ["vllm", "serve", model.name, "--tensor-parallel-size", str(s.tp), "--pipeline-parallel-size", str(s.pp)]
    if replicas > 1:
        args += ["--data-parallel-size", str(replicas)]
    if s.ep > 1:  # vLLM then spreads the experts over tp x dp ranks
        args += ["--enable-expert-parallel"]
        if s.ep not in (1, s.tp * replicas):
            notes.append(f"ep {s.ep}: vLLM's expert parallelism spans tp x dp = {s.tp * replicas} ranks")
    sv = w.serving
    args += ["--max-model-len", str(w.input_len + w.output_len), "--max-num-seqs", str(sv.max_batch),
             "--max-num-batched-tokens", str(sv.max_batched_tokens),
             "--enable-chunked-prefill" if sv.chunked_prefill else "--no-enable-chunked-prefill",
             "--dtype", "float16" if s.precision is TrainingPrecision.FP16 else "bfloat16"]
    if w.kv_cache.block_tokens in (1, 8, 16, 32, 64, 128):
        args += ["--block-size", str(w.kv_cache.block_tokens)]
    if w.kv_cache.precision in (StoredPrecision.FP8, StoredPrecision.NVFP4):  # vLLM --kv-cache-dtype nvfp4: Blackwell
        args += ["--kv-cache-dtype", w.kv_cache.precision.value]
    weights = _served_weights(s, w)
    if weights is StoredPrecision.FP8:
        args += ["--quantization", "fp8"]
    elif weights in _VLLM_QUANTIZATION:
        args += ["--quantization", _VLLM_QUANTIZATION[weights]]
    elif weights is StoredPrecision.MXFP8:
        notes.append("mxfp8 weights: serve an MXFP8 checkpoint; vLLM reads its quantization from the checkpoint")
    elif weights in (StoredPrecision.INT8, StoredPrecision.INT4):
        notes.append(f"{weights.value} weights: serve a pre-quantized checkpoint (GPTQ / AWQ); vLLM reads its "
                     "quantization from the checkpoint")
    if sv.prefix_hit_rate > 0:
        args += ["--enable-prefix-caching"]
    notes.append(f"model {model.name!r}: replace with its Hugging Face id or local path")
    return Deployment(Target.VLLM, (Command(tuple(args)),), notes=tuple(notes))


def trtllm(model: Model, s: Strategy, w: Inference) -> Deployment:
    """`trtllm-serve serve` (PyTorch backend) flags and its --extra_llm_api_options YAML; the `trtllm-build`
    limits of a TensorRT engine for the same batch as a second command."""
    notes: list[str] = []
    _serving_checks(s, w, notes)
    sv, seq = w.serving, w.input_len + w.output_len
    args = ["trtllm-serve", "serve", model.name, "--backend", "pytorch", "--tp_size", str(s.tp),
            "--pp_size", str(s.pp)]
    if s.ep > 1:
        args += ["--ep_size", str(s.ep)]
    args += ["--max_batch_size", str(sv.max_batch), "--max_num_tokens", str(sv.max_batched_tokens),
             "--max_seq_len", str(seq), "--extra_llm_api_options", "extra_llm_api_options.yaml"]
    kv: dict[str, object] = {"tokens_per_block": w.kv_cache.block_tokens, "enable_block_reuse": sv.prefix_hit_rate > 0}
    if w.kv_cache.precision in (StoredPrecision.FP8, StoredPrecision.NVFP4):  # KvCacheConfig.dtype
        kv["dtype"] = w.kv_cache.precision.value
    options = {"enable_chunked_prefill": sv.chunked_prefill, "kv_cache_config": kv}
    weights = _served_weights(s, w)
    if weights is not None and weights not in (StoredPrecision.BF16, StoredPrecision.FP16):
        notes.append(f"{weights.value} weights: serve a checkpoint quantized with TensorRT Model Optimizer")
    build = ("trtllm-build", "--checkpoint_dir", "checkpoint", "--output_dir", "engine",
             "--max_batch_size", str(sv.max_batch), "--max_input_len", str(w.input_len), "--max_seq_len", str(seq),
             "--max_num_tokens", str(sv.max_batched_tokens), "--tokens_per_block", str(w.kv_cache.block_tokens),
             "--kv_cache_type", "paged", "--use_paged_context_fmha", "enable", "--gemm_plugin", "auto")
    notes.append("the TensorRT backend instead: convert_checkpoint.py --tp_size/--pp_size, then trtllm-build "
                 "(second command), then trtllm-serve engine --backend tensorrt")
    notes.append(f"model {model.name!r}: replace with its Hugging Face id or local path")
    return Deployment(Target.TRTLLM, (Command(tuple(args)), Command(build)),
                      (("extra_llm_api_options.yaml", yaml.safe_dump(options, sort_keys=False)),), tuple(notes))
