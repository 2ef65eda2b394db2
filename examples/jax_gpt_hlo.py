"""A GPT layer stack in JAX, sharded tensor-, data- or fully-sharded-data-parallel over 8 host devices,
lowered and compiled on the CPU: writes the compiled HLO text that `armillary simulate --hlo` reads, and
optionally times the step on this machine.

    XLA_FLAGS=--xla_force_host_platform_device_count=8 python examples/jax_gpt_hlo.py OUT_DIR [--measure]
    python examples/jax_gpt_hlo.py OUT_DIR --large --target h100 [--cublas] [--unrolled] [--cudnn]

Needs the `jax` extra (pip install 'armillary[jax]'). The tests' fixtures in tests/data/hlo were made by it.
`--target h100` compiles for 8 H100s without a GPU (JAX's deviceless ahead-of-time compilation: a CUDA
topology described by XLA's GpuTargetConfig, `jax.experimental.topologies`); it needs the CUDA plugin
(pip install jax-cuda12-plugin jax-cuda12-pjrt of jax's version; no CUDA libraries or driver), and with no
device to autotune on, XLA keeps its default GEMM choice (Triton fusions; `--cublas`: cuBLAS calls). For a GPU
target FSDP is written out per device (`shard_map`, as in JAX's FSDP example): each weight all-gathered
where it is used, whose transpose reduce-scatters its gradient (ZeRO-3). Left to the SPMD partitioner (the CPU
fixtures), the GPU program reshards activations instead (3x the collective bytes), and a weight gathered by a
sharding constraint has its gradient all-reduced where the partitioner sees no reduce-scatter (the embedding).
`--unrolled`: the layers as a Python loop instead of a `lax.scan` (whose backward reads what it saved from
per-layer stacks); `--cudnn`: bf16 with cuDNN fused attention (pip install nvidia-cudnn-cu12 to compile).
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path
from typing import Any

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=8")
if "--target" in sys.argv:  # the CUDA plugin loads without CUDA libraries: only the compiler is used
    os.environ.setdefault("JAX_SKIP_CUDA_CONSTRAINTS_CHECK", "1")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    if "--cublas" in sys.argv:  # GEMMs as cuBLAS calls (custom-call __cublas$lt$matmul) instead of Triton fusions
        os.environ["XLA_FLAGS"] += " --xla_gpu_enable_triton_gemm=false"

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P


@dataclass(frozen=True)
class Config:
    layers: int = 2
    hidden: int = 256
    heads: int = 8
    ffn: int = 1024
    vocab: int = 1024
    seq: int = 128
    batch: int = 8
    dtype: str = "float32"
    scan: bool = True  # the layers as one lax.scan (False: unrolled, no stacked residuals for the backward)
    attention: str = "standard"  # "cudnn": cuDNN fused attention (bf16; needs nvidia-cudnn-cu12 to compile)


def init(cfg: Config) -> dict[str, Any]:
    k = jax.random.split(jax.random.PRNGKey(0), 6)
    L, h, n, f, d = cfg.layers, cfg.hidden, cfg.heads, cfg.ffn, cfg.hidden // cfg.heads
    dt = jnp.dtype(cfg.dtype)

    def w(key: Any, *shape: int) -> Any:
        return (0.02 * jax.random.normal(key, shape)).astype(dt)

    return {"emb": w(k[0], cfg.vocab, h), "pos": w(k[1], cfg.seq, h),
            "ln1": jnp.ones((L, 2, h), dt), "ln2": jnp.ones((L, 2, h), dt), "lnf": jnp.ones((2, h), dt),
            "wqkv": w(k[2], L, h, 3, n, d), "bqkv": jnp.zeros((L, 3, n, d), dt),
            "wo": w(k[3], L, n, d, h), "bo": jnp.zeros((L, h), dt),
            "w1": w(k[4], L, h, f), "b1": jnp.zeros((L, f), dt), "w2": w(k[5], L, f, h), "b2": jnp.zeros((L, h), dt)}


def _ln(x: Any, g: Any) -> Any:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + 1e-5) * g[0] + g[1]


LAYER_WEIGHTS = ("ln1", "ln2", "wqkv", "bqkv", "wo", "bo", "w1", "b1", "w2", "b2")


def _whole(name: str, p: Any) -> Any:
    return p


def loss(params: dict[str, Any], tokens: Any, gather: Any = _whole, scan: bool = True,
         attention: str = "standard") -> Any:
    """`gather(name, weight)` makes a weight whole where it is used (FSDP: an all-gather, whose transpose
    reduce-scatters the gradient; Zhao et al. 2023 §3.2); by default the partitioner decides."""
    emb = gather("emb", params["emb"])
    x = emb[tokens] + gather("pos", params["pos"])[None]
    s = tokens.shape[1]
    mask = jnp.tril(jnp.ones((s, s), bool))

    def layer(x: Any, p: tuple[Any, ...]) -> tuple[Any, None]:
        ln1, ln2, wqkv, bqkv, wo, bo, w1, b1, w2, b2 = (gather(n, w) for n, w in zip(LAYER_WEIGHTS, p, strict=True))
        qkv = jnp.einsum("bsh,htnd->bstnd", _ln(x, ln1), wqkv) + bqkv
        q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
        if attention == "cudnn":
            o = jax.nn.dot_product_attention(q, k, v, is_causal=True, implementation="cudnn")
            x = x + jnp.einsum("bqnd,ndh->bqh", o, wo) + bo
        else:
            scores = jnp.einsum("bqnd,bknd->bnqk", q, k) / jnp.sqrt(q.shape[-1]).astype(x.dtype)
            probs = jax.nn.softmax(jnp.where(mask, scores, -1e9), axis=-1)
            x = x + jnp.einsum("bnqk,bknd,ndh->bqh", probs, v, wo) + bo
        x = x + jax.nn.gelu(_ln(x, ln2) @ w1 + b1) @ w2 + b2
        return x, None

    stacked = tuple(params[n] for n in LAYER_WEIGHTS)
    if scan:
        x, _ = jax.lax.scan(layer, x, stacked)
    else:  # what scan saves for the backward is written into per-layer stacks: unrolled, it stays in place
        for i in range(stacked[0].shape[0]):
            x, _ = layer(x, tuple(w[i] for w in stacked))
    logits = (_ln(x, gather("lnf", params["lnf"])) @ emb.T).astype(jnp.float32)
    labels = jnp.roll(tokens, -1, axis=1)
    return -jnp.mean(jnp.take_along_axis(jax.nn.log_softmax(logits), labels[..., None], axis=-1))


def step(params: dict[str, Any], m: dict[str, Any], v: dict[str, Any], tokens: Any, gather: Any = _whole,
         scan: bool = True, attention: str = "standard") -> tuple[Any, ...]:
    """One training step with Adam (Kingma & Ba 2015, Algorithm 1; no bias correction). Under `shard_map`
    (`gather` all-gathers over "dp") each device's loss is its share of the global mean."""
    share = 1.0 if gather is _whole else 1.0 / jax.lax.axis_size("dp")
    grads = jax.grad(lambda p: share * loss(p, tokens, gather, scan, attention))(params)
    m = jax.tree.map(lambda a, g: 0.9 * a + 0.1 * g.astype(jnp.float32), m, grads)
    v = jax.tree.map(lambda a, g: 0.999 * a + 0.001 * jnp.square(g.astype(jnp.float32)), v, grads)
    params = jax.tree.map(lambda p, a, b: (p - 1e-4 * a / (jnp.sqrt(b) + 1e-8)).astype(p.dtype), params, m, v)
    return params, m, v


# Megatron-style tensor parallelism: heads and the MLP's inner dimension split, the vocabulary split
_TP = {"emb": P("tp", None), "wqkv": P(None, None, None, "tp", None), "bqkv": P(None, None, "tp", None),
       "wo": P(None, "tp", None, None), "w1": P(None, None, "tp"), "b1": P(None, "tp"), "w2": P(None, "tp", None)}
# FSDP / ZeRO-3: every weight split along its largest dimension over the data-parallel devices
_FSDP = {"emb": P("dp", None), "pos": P("dp", None), "wqkv": P(None, "dp", None, None, None),
         "wo": P(None, None, None, "dp"), "w1": P(None, None, "dp"), "w2": P(None, "dp", None),
         "bo": P(None, "dp"), "b1": P(None, "dp"), "b2": P(None, "dp"), "ln1": P(None, None, "dp"),
         "ln2": P(None, None, "dp"), "lnf": P(None, "dp"), "bqkv": P(None, None, "dp", None)}


# XLA's description of an H100 SXM (xla/tools/hlo_opt/gpu_specs/h100_sxm.txtpb), with the CUDA 12.8 and
# cuDNN 9.7 versions the compiler plans for (no runtime is asked: there is no device)
H100_TARGET = """gpu_device_info {
  threads_per_block_limit: 1024 threads_per_warp: 32 shared_memory_per_block: 49152
  shared_memory_per_core: 233472 threads_per_core_limit: 2048 core_count: 132 fpus_per_core: 128
  block_dim_limit_x: 2147483647 block_dim_limit_y: 65535 block_dim_limit_z: 65535
  memory_bandwidth: 3352320000000 l2_cache_size: 52428800 clock_rate_ghz: 1.98
  device_memory_size: 84978434048 shared_memory_per_block_optin: 232448
  cuda_compute_capability { major: 9 } registers_per_core_limit: 65536 registers_per_block_limit: 65536
}
platform_name: "CUDA"
runtime_version { major: 12 minor: 8 patch: 0 }
dnn_version_info { major: 9 minor: 7 }
device_description_str: "NVIDIA H100 80GB HBM3"
"""


def target_devices(target: str | None, count: int = 8) -> list[Any]:
    """This machine's devices, or `count` devices of a GPU target (one node) for ahead-of-time compilation."""
    if target is None:
        return list(jax.devices())
    from jax.experimental import topologies

    if target != "h100":
        raise SystemExit(f"--target {target}: only h100 is described")
    return list(topologies.get_topology_desc("h100", "cuda", target_config=H100_TARGET,
                                             topology=f"1x1x{count}").devices)


def compile_step(cfg: Config, strategy: str, abstract: bool = False, target: str | None = None
                 ) -> tuple[Any, tuple[Any, ...]]:
    """The compiled step and its (sharded) arguments. strategy: tp, dp or fsdp over all 8 devices.
    `abstract`: compile from shapes only (no arrays: a model too large for this machine's memory, or a
    `target` that is not this machine)."""
    devices = target_devices(target)
    grid = np.array(devices).reshape((1, len(devices)) if strategy == "tp" else (len(devices), 1))
    mesh = Mesh(grid, ("dp", "tp"))
    specs = {"tp": _TP, "dp": {}, "fsdp": _FSDP}[strategy]
    params = jax.eval_shape(lambda: init(cfg)) if abstract else init(cfg)
    shard = {n: NamedSharding(mesh, specs.get(n, P())) for n in params}
    batch = NamedSharding(mesh, P("dp", None))
    body: Any = partial(step, scan=cfg.scan, attention=cfg.attention)
    if strategy == "fsdp" and target is not None:  # ZeRO-3 written per device: gather each weight where it is used
        def gather(name: str, w: Any) -> Any:
            spec = tuple(specs[name])[-w.ndim:]  # a layer's slice of a stacked weight drops the layer axis
            return jax.lax.all_gather(w, "dp", axis=spec.index("dp"), tiled=True)

        pspec = {n: specs.get(n, P()) for n in params}
        body = jax.shard_map(partial(body, gather=gather), mesh=mesh, in_specs=(pspec, pspec, pspec, P("dp", None)),
                             out_specs=(pspec, pspec, pspec))
    fn = jax.jit(body, in_shardings=(shard, shard, shard, batch), out_shardings=(shard, shard, shard))
    if abstract:
        spec = {n: jax.ShapeDtypeStruct(p.shape, p.dtype, sharding=shard[n]) for n, p in params.items()}
        state = {n: jax.ShapeDtypeStruct(p.shape, jnp.float32, sharding=shard[n]) for n, p in params.items()}
        shapes = (spec, state, state, jax.ShapeDtypeStruct((cfg.batch, cfg.seq), jnp.int32, sharding=batch))
        return fn.lower(*shapes).compile(), ()
    zeros = jax.tree.map(lambda p: jnp.zeros(p.shape, jnp.float32), params)
    tokens = jnp.zeros((cfg.batch, cfg.seq), jnp.int32)
    args = (jax.device_put(params, shard), jax.device_put(zeros, shard), jax.device_put(zeros, shard),
            jax.device_put(tokens, batch))
    return fn.lower(*args).compile(), args


def measure(compiled: Any, args: tuple[Any, ...], repeats: int = 10) -> float:
    """Median wall time of the compiled step (after two warm-up runs)."""
    for _ in range(2):
        jax.block_until_ready(compiled(*args))
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - t)
    return sorted(times)[len(times) // 2]


def _lean(text: str) -> str:
    """The HLO text without source metadata and stack-frame tables (a third of the size)."""
    text = re.sub(r", metadata=\{[^}]*\}", "", text)
    return re.sub(r"\n(FileNames|FunctionNames|FileLocations|StackFrames)\n.*?\n\n", "\n", text, flags=re.S)


def main(out: Path, run: bool, cfg: Config, tag: str, abstract: bool = False, target: str | None = None) -> None:
    out.mkdir(parents=True, exist_ok=True)
    results = {}
    for strategy in ("tp", "dp", "fsdp"):
        compiled, args = compile_step(cfg, strategy, abstract or target is not None, target)
        (out / f"gpt_{tag}_{strategy}.hlo.txt").write_text(_lean(compiled.as_text()))
        if run:
            results[strategy] = measure(compiled, args)
            print(strategy, f"{results[strategy] * 1e3:.2f} ms", flush=True)
    (out / f"gpt_{tag}.json").write_text(json.dumps({"config": asdict(cfg), "measured_s": results}, indent=1))


if __name__ == "__main__":
    small = Config()
    # an H100-sized step in fp32 (the CPU backend computes bf16 dots and collectives in f32 anyway)
    cudnn = "--cudnn" in sys.argv  # bf16 with cuDNN fused attention (a GPU target only)
    large = Config(layers=4, hidden=2048, heads=16, ffn=8192, vocab=32768, seq=2048, batch=8,
                   dtype="bfloat16" if cudnn else "float32", scan="--unrolled" not in sys.argv,
                   attention="cudnn" if cudnn else "standard")
    out = Path(sys.argv[1])
    gpu = sys.argv[sys.argv.index("--target") + 1] if "--target" in sys.argv else None
    suffix = ("" if gpu is None else f"_{gpu}") + ("_cublas" if "--cublas" in sys.argv else "") + (
        "_unrolled" if "--unrolled" in sys.argv else "") + ("_cudnn" if cudnn else "")
    if "--small" in sys.argv or "--large" not in sys.argv:
        main(out, "--measure" in sys.argv and gpu is None, small, f"small{suffix}", target=gpu)
    if "--large" in sys.argv:
        main(out, False, large, f"large{suffix}", abstract=True, target=gpu)
