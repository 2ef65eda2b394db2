"""Speed of `import armillary`, of `armillary estimate` end to end, of one estimate in-process and (with
--max-rate) of `armillary serve --max-rate`.

Run: python benchmarks/bench_estimate.py [--against REV] [--max-rate] [--profile]
(targets: import < 0.4 s, CLI < 1 s end to end, estimate() < 0.1 ms per call, serve --max-rate < 3 s).
With --profile, only where one estimate() of the quick-start example spends its time: the facade's own
steps and the training estimator's parts, in CPU microseconds per call, and its Python calls.

In-process also over 48 strategies of the quick-start run (tp, pp, vpp, micro-batch, recomputation): new points
(nothing kept from an earlier pass applies) and the same points again.

With --against, the source tree of git revision REV is timed alternately with this one in the same run (the
machine's load moves both alike). Subprocess times are medians of --runs, wall and CPU (CPU moves less with
other load on a shared machine), with the bytecode cache as the environment has it ("as is": this project's
container sets PYTHONDONTWRITEBYTECODE, so armillary's modules are compiled on every run) and with a warm
one (as an installed package has it). In-process: CPU time per estimate() call, the best of 7 repeats.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from io import BytesIO
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "gpt3-175b-a100.yaml"
SERVING = ROOT / "examples" / "llama2-70b-serving-h100.yaml"
IMPORT = ["-c", "import armillary"]
FLOOR = ["-c", "import numpy, pydantic, typer"]  # what the CLI's own dependencies cost
CLI = ["-m", "armillary.cli", "estimate", str(EXAMPLE)]
MAX_RATE = ["-m", "armillary.cli", "serve", str(SERVING), "--max-rate", "--json"]
# one estimate() in-process: CPU microseconds per call, spec objects and preset names
PER_CALL = f"""
import time, timeit
import armillary
from armillary.specs.run import load_run
model, system, strategy, workload = load_run({str(EXAMPLE)!r})
def per_call(fn, number):
    fn()
    return min(timeit.Timer(fn, timer=time.process_time).repeat(number=number, repeat=7)) / number * 1e6
print(per_call(lambda: armillary.estimate(model, system, strategy, workload), 300),
      per_call(lambda: armillary.estimate("gpt3-175b", "dgx-a100", strategy, workload, gpus=1024), 100))
"""

# estimate() over 48 strategies of the quick-start run (tp, pp, vpp, micro-batch and recomputation varied), in CPU
# microseconds per estimate: "new", each repeat on fresh copies of the specs with the strategies' coded points
# dropped (nothing kept from an earlier repeat applies: what the points of one sweep share is all that is kept, as
# for a sweep's first pass); "again", the same points re-estimated (everything kept applies)
VARIED = f"""
import itertools, time
import armillary
from armillary.plan import arrays
from armillary.specs.run import load_run
model, system, strategy, workload = load_run({str(EXAMPLE)!r})
grid = list(itertools.product((4, 8), (8, 16, 32), (1, 3), (1, 2), ("selective", "full")))
def sweep(fresh):
    if fresh:
        m, s = model.model_copy(), system.model_copy(update={{"device": system.device.model_copy()}})
        points = [type(strategy).model_validate(strategy.model_dump() | dict(tp=tp, pp=pp, vpp=vpp, micro_batch=mb,
                                                                            recompute=rc))
                  for tp, pp, vpp, mb, rc in grid]
        getattr(arrays, "_strategy_arrays").cache_clear()
        kept[:] = [m, s, points]
    m, s, points = kept
    t0 = time.process_time()
    for point in points:
        armillary.estimate(m, s, point, workload)
    return (time.process_time() - t0) / len(points) * 1e6
kept = []
new = min(sweep(True) for _ in range(7))
again = min(sweep(False) for _ in range(7))
print(new, again, len(grid))
"""


def source_tree(rev: str, into: Path) -> Path:
    """The src/ folder of git revision `rev`, extracted under `into`."""
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src"], check=True, capture_output=True).stdout
    with tarfile.open(fileobj=BytesIO(archive)) as tar:
        tar.extractall(into, filter="data")
    return into / "src"


def environment(src: Path, cache: Path | None) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(src))
    if cache is not None:  # a warm bytecode cache of its own
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(cache)
    return env


def timed(args: list[str], env: dict[str, str]) -> tuple[float, float, str]:
    """(wall, CPU) seconds and the output of one subprocess."""
    before, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    out = subprocess.run([sys.executable, *args], check=True, capture_output=True, env=env, text=True).stdout
    elapsed, after = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    return elapsed, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, out


Timings = dict[str, list[tuple[float, float, str]]]  # per tree: (wall, CPU, output) of each run


def alternated(args: list[str], envs: dict[str, dict[str, str]], runs: int) -> Timings:
    """`runs` timings of `args` per tree, the trees alternated run by run after one warm-up each."""
    for env in envs.values():
        timed(args, env)  # warm the file cache (and the bytecode cache)
    times: Timings = {name: [] for name in envs}
    for _ in range(runs):
        for name, env in envs.items():
            times[name].append(timed(args, env))
    return times


def medians(times: Timings) -> str:
    return ", ".join(f"{name} {statistics.median(w for w, _, _ in t):.3f} s (CPU "
                     f"{statistics.median(c for _, c, _ in t):.3f} s)" for name, t in times.items())


def subprocess_times(trees: dict[str, Path], runs: int, scratch: Path) -> None:
    """Median wall and CPU time of each command per tree."""
    for cached in (False, True):
        mode = "warm bytecode" if cached else "as is"
        envs = {name: environment(src, scratch / f"pyc-{name}" if cached else None) for name, src in trees.items()}
        for label, args in (("import armillary", IMPORT), ("armillary estimate", CLI)):
            print(f"{label:22s} ({mode}): {medians(alternated(args, envs, runs))}   (median of {runs})")
        first = {name: env for name, env in list(envs.items())[:1]}  # the same for every tree
        print(f"{'numpy+pydantic+typer':22s} ({mode}): {medians(alternated(FLOOR, first, runs))}")


def in_process(trees: dict[str, Path], scratch: Path) -> None:
    envs = {name: environment(src, scratch / f"pyc-{name}") for name, src in trees.items()}
    found = alternated(["-c", PER_CALL], envs, 3)
    for name, t in found.items():
        specs, names = (min(float(out.split()[i]) for _, _, out in t) for i in (0, 1))
        print(f"estimate() in-process, {name}: {specs:.0f} us CPU per call (spec objects), {names:.0f} us "
              "(preset names)")
    varied = alternated(["-c", VARIED], envs, 3)
    for name, t in varied.items():
        new, again = (min(float(out.split()[i]) for _, _, out in t) for i in (0, 1))
        print(f"estimate() over {t[0][2].split()[2]} strategies, {name}: {new:.0f} us CPU per estimate (new points), "
              f"{again:.0f} us (the same points again)")


def max_rate(trees: dict[str, Path], runs: int, scratch: Path) -> None:
    envs = {name: environment(src, scratch / f"pyc-{name}") for name, src in trees.items()}
    found = alternated(MAX_RATE, envs, runs)
    print(f"serve --max-rate (warm bytecode): {medians(found)}   (median of {runs})")
    for name, t in found.items():
        answer = json.loads(t[0][2])
        print(f"  {name}: max rate {answer['max_rate']:.4g} requests/s, {len(answer['rates_tried'])} simulations")


def profile(number: int = 300) -> None:
    """CPU microseconds per call of one estimate()'s steps (the best of 7 repeats), this tree only."""
    import cProfile
    import importlib
    import pstats
    import timeit
    from collections import Counter

    import armillary
    from armillary.estimate.invariants import check_estimate
    from armillary.estimate.result import RunConfig
    from armillary.estimate.training import estimate_training
    from armillary.memo import quick_replace
    from armillary.plan.arrays import ModelArrays, StrategyArrays, TrainingArrays
    from armillary.plan.layout import data_parallel
    from armillary.specs.loading import load_model
    from armillary.specs.run import load_run
    from armillary.validation.bands import error_band

    model, system, strategy, workload = load_run(EXAMPLE)

    def cpu_us(fn: object) -> float:
        fn()  # type: ignore[operator]
        return min(timeit.Timer(fn, timer=time.process_time).repeat(number=number, repeat=7)) / number * 1e6  # type: ignore[arg-type]

    arrays = (ModelArrays.of(model), StrategyArrays.of(strategy, data_parallel(strategy, system)),
              TrainingArrays.of(workload))
    result = estimate_training(*arrays, system)  # type: ignore[arg-type]
    band = error_band(model, system, strategy)
    steps = {
        "estimate() in all": lambda: armillary.estimate(model, system, strategy, workload),
        "  loading the specs (cached)": lambda: load_model(model),
        "  ModelArrays.of": lambda: ModelArrays.of(model),
        "  estimate_training": lambda: estimate_training(*arrays, system),  # type: ignore[arg-type]
        "  check_estimate (invariants)": lambda: check_estimate(result),
        "  error_band": lambda: error_band(model, system, strategy),
        "  the result's copy with band and inputs": lambda: quick_replace(result, error_band=band,
                                                                           config=RunConfig(model, system, strategy,
                                                                                            workload)),
    }
    for label, fn in steps.items():
        print(f"{label:42s} {cpu_us(fn):8.1f} us")
    training = importlib.import_module("armillary.estimate.training")
    training_memory = importlib.import_module("armillary.estimate.training_memory")
    spent: Counter[str] = Counter()
    # (the parts kept under their inputs, `_layers`, `memory_and_optimizer`, `_pipeline`, `_calls_and_traffic` ...,
    # show the time of a look-up; what they make on a miss is timed under the names of the makers)
    names = [(training, name) for name in (
        "_layers", "_made_layers", "memory_and_optimizer", "_data_parallel", "_kept_data_parallel", "check",
        "_pipeline", "_stage_times", "_calls_and_traffic", "_calls", "_stage_params", "_pipeline_sends",
        "place_groups", "_flops", "split_stages", "critical_stage", "exposed_together", "pipeline_time", "replace")]
    names += [(training_memory, name) for name in ("stage_memories", "optimizer_and_offload")]
    originals = {(module, name): getattr(module, name) for module, name in names}
    for module, name in names:
        def part(*args: object, _f: object = originals[module, name], _name: str = name, **kwargs: object) -> object:
            t0 = time.process_time()
            try:
                return _f(*args, **kwargs)  # type: ignore[operator]
            finally:
                spent[_name] += time.process_time() - t0
        setattr(module, name, part)
    t0 = time.process_time()
    for _ in range(number):
        estimate_training(*arrays, system)  # type: ignore[arg-type]
    total = time.process_time() - t0
    print(f"estimate_training's parts (timed each, so the sum runs slower: {total / number * 1e6:.0f} us a call):")
    for name, seconds in spent.most_common():
        print(f"  {name:40s} {seconds / number * 1e6:8.1f} us  ({seconds / total:.0%})")
    for (module, name), original in originals.items():
        setattr(module, name, original)
    replayed(model, system, strategy, workload, cpu_us)
    counter = cProfile.Profile()
    counter.runcall(lambda: [armillary.estimate(model, system, strategy, workload) for _ in range(10)])
    print(f"Python calls per estimate(): {pstats.Stats(counter).total_calls / 10:,.0f}")  # type: ignore[attr-defined]


def replayed(model: object, system: object, strategy: object, workload: object,
             cpu_us: Callable[[Callable[[], object]], float]) -> None:
    """CPU microseconds of each collective, send-receive and kernel_times / kernel_seconds call of one estimate(),
    replayed with its own arguments (comm/ and cost/compute.py: the shared formulas' scalar path)."""
    import armillary
    from armillary.comm import collectives
    from armillary.cost import compute

    calls: list[tuple[str, Callable[..., object], tuple[object, ...], dict[str, object]]] = []
    patched = [(collectives, "collective"), (collectives, "send_recv"), (compute, "kernel_times"),
               (compute, "kernel_seconds")]
    originals: list[Callable[..., object]] = [getattr(module, name) for module, name in patched]

    def recording(name: str, fn: Callable[..., object]) -> Callable[..., object]:
        def call(*args: object, **kwargs: object) -> object:
            calls.append((name, fn, args, kwargs))
            return fn(*args, **kwargs)
        return call

    users = [m for m in list(sys.modules.values()) if getattr(m, "__name__", "").startswith("armillary.")]
    rebound: list[tuple[object, str, Callable[..., object]]] = [
        (m, attr, fn) for (_, attr), fn in zip(patched, originals, strict=True)
        for m in users if getattr(m, attr, None) is fn]
    for m, attr, fn in rebound:
        setattr(m, attr, recording(attr, fn))
    try:
        armillary.estimate(model, system, strategy, workload)  # type: ignore[arg-type, operator]
    finally:
        for m, attr, fn in rebound:
            setattr(m, attr, fn)
    print("the estimate's shared formulas, each call replayed:" if calls else
          "the estimate's shared formulas: none called (every collective, send and kernel time kept)")
    for name, fn, args, kwargs in calls:
        what = getattr(args[0], "value", f"{len(args[0])} ops" if isinstance(args[0], tuple) else "")
        us = cpu_us(lambda fn=fn, args=args, kwargs=kwargs: fn(*args, **kwargs))  # type: ignore[misc]
        print(f"  {name:14s} {what:28s} {us:8.1f} us")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--against", help="a git revision to time alternately with this tree")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--max-rate", action="store_true", help="also time serve --max-rate on the serving example")
    parser.add_argument("--profile", action="store_true", help="only where one estimate() spends its time")
    args = parser.parse_args()
    if args.profile:
        profile()
        return
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        # copies without bytecode, so that "as is" compiles every tree's modules alike
        trees = {"this": Path(shutil.copytree(ROOT / "src", scratch / "this" / "src",
                                              ignore=shutil.ignore_patterns("__pycache__")))}
        if args.against:
            trees[args.against] = source_tree(args.against, scratch / "against")
        in_process(trees, scratch)
        subprocess_times(trees, args.runs, scratch)
        if args.max_rate:
            max_rate(trees, max(args.runs // 3, 1), scratch)


if __name__ == "__main__":
    main()
