"""Compute microbenchmarks with torch on whatever is present: the first CUDA/ROCm GPU, else the CPU.

Each kernel of a `compute_kernels.Sweep` runs once to warm up, once to size the rounds, then in 3 to 5
rounds of about `round_s` seconds (at least one call each); its time is the fastest round's mean (timeit's
rule: the minimum is the least disturbed by other work on the machine). With one CPU thread the clock is the
process's CPU time (`clock`). torch is an optional dependency (extra `commbench`), imported only here when
a benchmark runs.
"""

from __future__ import annotations

import math
import os
import platform
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from armillary.calibrate.compute_kernels import Kernel, KernelKind
from armillary.errors import MissingExtra, SpecError
from armillary.specs.device import Precision

Progress = Callable[[Iterable[Kernel]], Iterable[Kernel]]


@dataclass(frozen=True)
class Measurement:
    kernel: Kernel
    time_s: float


@dataclass(frozen=True)
class Machine:
    """Where the measurements were taken."""

    accelerator: bool
    name: str  # GPU name, or the CPU's model name
    threads: int  # torch's intra-op threads (CPU) or streaming multiprocessors (GPU)
    memory_bytes: float
    torch: str
    software: str  # CUDA / ROCm version, or the platform

    def describe(self) -> str:
        kind = f"GPU, {self.threads} SMs" if self.accelerator else (
            f"CPU, {self.threads} threads" if self.threads > 1 else "CPU, 1 thread, timed in process CPU time")
        return f"{self.name} ({kind}); torch {self.torch}; {self.software}"


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise MissingExtra("calibrate-compute", "commbench", "torch") from None
    return torch


def machine() -> Machine:
    torch = _torch()
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        version = f"CUDA {torch.version.cuda}" if torch.version.cuda else f"ROCm {torch.version.hip}"
        return Machine(True, props.name, props.multi_processor_count, float(props.total_memory), torch.__version__,
                       version)
    return Machine(False, _cpu_name(), torch.get_num_threads(), _host_memory(), torch.__version__,
                   f"{platform.system()} {platform.release()} {platform.machine()}")


def set_threads(threads: int | None) -> None:
    """The CPU threads torch's kernels use (None: torch's default, one per core)."""
    if threads is not None:
        if threads < 1:
            raise SpecError(f"--threads {threads}: at least 1")
        _torch().set_num_threads(threads)


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _host_memory() -> float:
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 16e9


def _dtype(torch: Any, precision: Precision) -> Any:
    table = {Precision.FP32: torch.float32, Precision.TF32: torch.float32, Precision.BF16: torch.bfloat16,
             Precision.FP16: torch.float16}
    if precision not in table:
        raise SpecError(f"--precisions: {precision.value} GEMMs are not benchmarked; one of "
                        f"{', '.join(p.value for p in table)}")
    return table[precision]


def _kernel_fn(torch: Any, k: Kernel, dev: Any) -> Callable[[], object]:
    """A closure running kernel `k` once on fresh random operands."""
    dt = _dtype(torch, k.precision)

    def rand(*shape: int) -> Any:
        return torch.randn(*shape, device=dev, dtype=dt)

    if k.kind is KernelKind.GEMM:
        a, b = (rand(k.m, k.k), rand(k.k, k.n)) if k.batch == 1 else (rand(k.batch, k.m, k.k), rand(k.batch, k.k, k.n))
        return lambda: torch.matmul(a, b)
    if k.kind in (KernelKind.ATTENTION, KernelKind.FUSED_ATTENTION):
        q, kk, v = (rand(1, k.batch, k.m, k.n) for _ in range(3))
        if k.kind is KernelKind.FUSED_ATTENTION:
            sdpa = torch.nn.functional.scaled_dot_product_attention
            return lambda: sdpa(q, kk, v, is_causal=True)
        return lambda: torch.matmul(torch.softmax(torch.matmul(q, kk.transpose(-1, -2)), dim=-1), v)
    if k.kind is KernelKind.OPTIMIZER:
        param = torch.nn.Parameter(torch.randn(k.m, device=dev))
        param.grad = torch.randn_like(param)
        # the fused (single-kernel) step, as GPU training runs it; CPU's default foreach step is ~8x slower
        return torch.optim.AdamW([param], lr=1e-4, fused=True).step  # type: ignore[no-any-return]
    if k.kind is KernelKind.LAUNCH:
        x, y = rand(k.m), rand(k.m)
        return lambda: x + y
    rows = max(k.m // 1024, 1)
    x = rand(rows, min(k.m, 1024))
    if k.kind is KernelKind.COPY:
        y = torch.empty_like(x)
        return lambda: y.copy_(x)
    if k.kind is KernelKind.LAYERNORM:
        return lambda: torch.nn.functional.layer_norm(x, (x.shape[-1],))
    return lambda: torch.softmax(x, dim=-1)


def clock() -> Callable[[], float]:
    """The timer: the process's CPU time where torch runs one CPU thread (then the calling thread does all
    the work, and time spent descheduled by other load on the machine does not count), else wall time."""
    torch = _torch()
    return time.process_time if not torch.cuda.is_available() and torch.get_num_threads() == 1 else time.perf_counter


def _timed(fn: Callable[[], object], sync: Callable[[], None], round_s: float, now: Callable[[], float]) -> float:
    fn()
    sync()  # warm-up: first-touch allocation, kernel selection
    start = now()
    fn()
    sync()
    once = now() - start
    reps = int(min(max(round_s / max(once, 1e-9), 1), 1000))
    best = once
    for _ in range(5 if once < round_s else 3):  # more rounds for the short kernels: cheap, and noisier
        start = now()
        for _ in range(reps):
            fn()
        sync()
        best = min(best, (now() - start) / reps)
    return best


def measure(kernels: tuple[Kernel, ...], progress: Progress | None = None,
            round_s: float = 0.05) -> tuple[Measurement, ...]:
    """Time every kernel on the first GPU, else the CPU."""
    torch = _torch()
    gpu = torch.cuda.is_available()
    dev = torch.device("cuda", 0) if gpu else torch.device("cpu")
    if gpu:
        # fp32 recipes run their GEMMs as TF32 (cost.compute)
        torch.backends.cuda.matmul.allow_tf32 = any(k.precision in (Precision.FP32, Precision.TF32) for k in kernels)
    sync: Callable[[], None] = torch.cuda.synchronize if gpu else (lambda: None)
    out, now = [], clock()
    with torch.no_grad():
        for k in (progress or (lambda x: x))(kernels):
            if k.kind is KernelKind.OPTIMIZER:
                with torch.enable_grad():
                    seconds = _timed(_kernel_fn(torch, k, dev), sync, round_s, now)
            else:
                seconds = _timed(_kernel_fn(torch, k, dev), sync, round_s, now)
            if not math.isfinite(seconds) or seconds <= 0:
                raise RuntimeError(f"kernel {k.label}: no valid time measured")
            out.append(Measurement(k, seconds))
    return tuple(out)
