"""Speed and memory of the strategy search and of the co-design study.

Run: python benchmarks/bench_search.py [--against REV [--src PATH] [--against-src PATH] [--rounds N] [--several]]
[--profile] [--codesign-1e9]
(targets, issue 47: >= 10,000,000 evaluated configurations per second per core on the GPT-3 175B / 64-GPU
strategy space, a 1e9-point co-design space in under 2 minutes; Calculon: 134 per CPU-second, 1.3k with
logging silenced)

With --profile, the whole default search is split first (CPU ms in the axes, the layouts' bounds, the block
with the training estimator and the collective composer within it, the winner's full re-estimate, the rest),
then only the default space's one block is evaluated, and the milliseconds it spends in each part of the
training estimator and in the collective composer are printed (where the time goes).

With --against, only the default GPT-3 175B / 64 A100 search is timed, in CPU seconds, in subprocesses that
alternate between this tree's src/ (or --src) and git revision REV's, round after round (the machine's load
moves both alike); each round reports the median of 11 searches per tree, and the top 10 of both trees are
compared. With --several as well, seven different searches (64-256 GPUs, global batch 32-512) are timed instead,
each once per round (no search repeats within a process), their evaluated configurations per CPU-second summed
over the seven, and every search's top 10 compared.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from io import BytesIO
from pathlib import Path
from typing import Any

from armillary.search.run import search
from armillary.search.space import StrategySpace
from armillary.specs.loading import load_model, load_strategy, load_system, load_workload

ROOT = Path(__file__).parent.parent


def timed(label: str, model: str, gpus: int, global_batch: int, space: StrategySpace | None = None,
          chunk: int = 262144) -> None:
    m, system = load_model(model), load_system("dgx-a100", gpus)
    workload = load_workload({"seq_len": 2048, "global_batch": global_batch})
    base = load_strategy({"attention": "flash"})
    search(m, system, workload, base, space, chunk=chunk)  # warm the caches (presets, efficiency curves)
    runs = []
    for _ in range(11):
        t0 = time.perf_counter()
        r = search(m, system, workload, base, space, top_k=1, chunk=chunk)  # one winner re-estimated in full
        runs.append(time.perf_counter() - t0)
    median = statistics.median(runs)
    print(f"{label}: {r.points:,} points ({r.pruned:,} pruned, {r.bounded:,} of them by the time bound), "
          f"{r.evaluated:,} evaluated, median {median:.3f} s "
          f"(best {min(runs):.3f}) -> {r.evaluated / median:,.0f} evaluated/s, {r.points / median:,.0f} points/s "
          "(one core)")


# one tree's default search: CPU seconds per search (median of 11 after a warm-up), counts and the top 10
ALTERNATE = """
import statistics, time
from armillary.search.run import search
from armillary.specs.loading import load_model, load_strategy, load_system, load_workload
m, system = load_model("gpt3-175b"), load_system("dgx-a100", 64)
workload = load_workload({"seq_len": 2048, "global_batch": 64})
base = load_strategy({"attention": "flash"})
top = search(m, system, workload, base, top_k=10)
runs = []
for _ in range(11):
    t0 = time.process_time()
    r = search(m, system, workload, base, top_k=1)
    runs.append(time.process_time() - t0)
print(statistics.median(runs), r.evaluated, r.points, [(c.index, c.step_time_s) for c in top.top])
"""

# with --several: different GPT-3 175B searches (GPU count / global batch), each once after a warm-up search of
# another problem, so nothing one search keeps serves the next as the same search: their CPU seconds, evaluated
# configurations and points summed, and every search's top 10
SEVERAL = """
import time
from armillary.search.run import search
from armillary.specs.loading import load_model, load_strategy, load_system, load_workload
m, base = load_model("gpt3-175b"), load_strategy({"attention": "flash"})
search(m, load_system("dgx-a100", 16), load_workload({"seq_len": 2048, "global_batch": 16}), base, top_k=1)
seconds, evaluated, points, tops = 0.0, 0, 0, []
for gpus, global_batch in ((64, 32), (64, 128), (64, 256), (64, 512), (128, 128), (256, 256), (64, 96)):
    system, workload = load_system("dgx-a100", gpus), load_workload({"seq_len": 2048, "global_batch": global_batch})
    t0 = time.process_time()
    r = search(m, system, workload, base, top_k=10)
    seconds += time.process_time() - t0
    evaluated, points = evaluated + r.evaluated, points + r.points
    tops.append([(c.index, c.step_time_s) for c in r.top])
print(seconds, evaluated, points, tops)
"""


def against(rev: str, src: Path, rounds: int, base: Path | None = None, script: str = ALTERNATE) -> None:
    """The default search (or `script`'s searches) timed alternately in this tree and in revision `rev` (or the
    source folder `base`)."""
    with tempfile.TemporaryDirectory() as tmp:
        if base is None:
            archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src"], check=True,
                                     capture_output=True).stdout
            with tarfile.open(fileobj=BytesIO(archive)) as tar:
                tar.extractall(tmp, filter="data")
        trees = {"this": src, rev: Path(tmp) / "src" if base is None else base}
        found: dict[str, list[float]] = {name: [] for name in trees}
        counts: dict[str, tuple[int, int]] = {}
        tops = {}
        for _ in range(rounds):
            for name, tree in trees.items():
                out = subprocess.run([sys.executable, "-c", script], check=True, capture_output=True, text=True,
                                     env=dict(os.environ, PYTHONPATH=str(tree))).stdout.split(maxsplit=3)
                seconds, evaluated, points, tops[name] = float(out[0]), int(out[1]), int(out[2]), out[3].strip()
                found[name].append(evaluated / seconds)
                counts[name] = evaluated, points
        # evaluated: the points that pass the shape rules, run through the estimator (the block computes every
        # point of its outer product, the invalid ones masked); points: the whole space, pruned layouts included
        for name, rates in found.items():
            evaluated, points = counts[name]
            median = statistics.median(rates)
            print(f"{name}: {evaluated:,} evaluated of {points:,} points per search, median {median:,.0f} evaluated "
                  f"configurations per CPU-second ({median * points / evaluated:,.0f} points per CPU-second; rounds: "
                  f"{', '.join(f'{r:,.0f}' for r in rates)})")
        print("top 10 identical" if len(set(tops.values())) == 1 else f"top 10 DIFFER: {tops}")


def profile(repeats: int = 7) -> None:
    """Milliseconds of the default space's block (all of it: one block) in each part of the estimator."""
    import importlib
    from collections import Counter

    from armillary.search.run import Objective, Problem
    from armillary.search.space import resolve_axes

    m, system = load_model("gpt3-175b"), load_system("dgx-a100", 64)
    workload = load_workload({"seq_len": 2048, "global_batch": 64})
    base, space = load_strategy({"attention": "flash"}), StrategySpace()
    axes = resolve_axes(space, m, system.devices, system.devices_per_node, base, system.device.hbm.capacity,
                        False, workload)
    problem = Problem(m, system, base, workload, space, axes, Objective.TIME, 10)
    whole_search(m, system, workload, base)  # first: the parts below stay wrapped
    spent: Counter[str] = Counter()
    parts = [("armillary.estimate.training", name) for name in (
        "training_layers", "_pipeline_sends", "_stage_times", "_data_parallel", "_flops", "_calls", "check",
        "exposed_together", "critical_stage", "memory_and_optimizer")]
    parts += [("armillary.comm.collectives", "compose"), ("armillary.search.run", "shape_rules")]

    def timed_part(module: object, name: str) -> None:
        f = getattr(module, name)

        def part(*args: object, **kwargs: object) -> object:
            t0 = time.perf_counter()
            try:
                return f(*args, **kwargs)
            finally:
                spent[name] += time.perf_counter() - t0
        setattr(module, name, part)

    for module, name in parts:
        timed_part(importlib.import_module(module), name)
    problem.evaluate(0, axes.size)
    spent.clear()
    t0 = time.perf_counter()
    for _ in range(repeats):
        problem.evaluate(0, axes.size)
    total = (time.perf_counter() - t0) / repeats
    print(f"default space, one block of {axes.size:,} points: {total * 1e3:.1f} ms")
    for name, seconds in spent.most_common():
        within = " (collectives, within the parts above)" if name == "compose" else ""
        print(f"  {name:24} {seconds / repeats * 1e3:6.1f} ms{within}")
    composer_calls(problem, axes.size, repeats)


def composer_calls(problem: Any, size: int, repeats: int) -> None:
    """The block's collective composer calls one by one (in call order): the operation, the estimator's function
    that asked for it, the distinct points of its bytes and spans (`comm.distinct_points.Flattened`: what a group
    across dimensions is composed on; a group inside one dimension at every point is composed in the sweep's
    shape) and the microseconds per call (outside a search's memo: every call composed)."""
    import sys as system_module

    import armillary.comm.collectives as collectives
    from armillary.comm.distinct_points import Flattened

    compose = collectives.compose  # (the part timer above, which calls the composer)
    found: dict[int, list[Any]] = {}
    order = [0]

    def call(op: Any, n: Any, group: Any, system: Any, algorithm: Any, bandwidths: Any, composition: Any) -> Any:
        frame: Any = system_module._getframe(1)
        caller = "?"
        while frame is not None and caller == "?":  # the first caller outside the comm package and the helpers
            name, module = frame.f_code.co_name, frame.f_globals.get("__name__", "")
            if not module.startswith("armillary.comm") and name not in ("<lambda>", "needed", "paired"):
                caller = name
            frame = frame.f_back
        flat = Flattened.of(n, group, bandwidths or (None,) * len(system.network))
        t0 = time.perf_counter()
        try:
            return compose(op, n, group, system, algorithm, bandwidths, composition)
        finally:
            entry = found.setdefault(order[0], [op.value, caller, 1 if flat is None else flat.n_bytes.size, 0.0])
            entry[3] += time.perf_counter() - t0
            order[0] += 1

    setattr(collectives, "compose", call)  # noqa: B010 (the composer's signature, untyped here)
    try:
        for _ in range(repeats):
            order[0] = 0
            problem.evaluate(0, size)
    finally:
        setattr(collectives, "compose", compose)  # noqa: B010
    print(f"  the composer's {len(found)} calls in one block (operation, asked by, distinct points, us per call):")
    for op, caller, points, seconds in found.values():
        print(f"    {op:15} {caller:24} {points!s:>4} {seconds / repeats * 1e6:7.0f}")


def whole_search(m: Any, system: Any, workload: Any, base: Any, repeats: int = 21) -> None:
    """CPU milliseconds of the whole default search (top_k=1, as --against times it) in each of its parts: the
    axes, the layouts' bounds, the block (the training estimator and, within it, the collective composer; the
    rest of the block is the search's own masking and top-k), the winner re-estimated in full, the rest."""
    import armillary.comm.collectives as collectives
    import armillary.search.run as run

    spent: dict[str, float] = {}

    def timed_part(module: Any, name: str, label: str) -> Any:
        f = getattr(module, name)

        def part(*args: Any, **kwargs: Any) -> Any:
            t0 = time.process_time()
            try:
                return f(*args, **kwargs)
            finally:
                spent[label] = spent.get(label, 0.0) + time.process_time() - t0
        setattr(module, name, part)
        return f

    parts = ((run, "resolve_axes", "axes (resolve_axes)"), (run, "layout_bounds", "layout bounds"),
             (run.Problem, "evaluate", "block (Problem.evaluate)"), (run, "estimate_training", "  training estimator"),
             (collectives, "compose", "    collective composer"), (run, "_candidate", "winner re-estimated"))
    originals = [(module, name, timed_part(module, name, label)) for module, name, label in parts]
    try:
        search(m, system, workload, base, top_k=1)
        spent.clear()
        t0 = time.process_time()
        for _ in range(repeats):
            search(m, system, workload, base, top_k=1)
        total = (time.process_time() - t0) / repeats
    finally:
        for module, name, f in originals:
            setattr(module, name, f)
    print(f"whole default search (top_k=1), mean of {repeats}: {total * 1e3:.2f} ms CPU")
    for _, _, label in parts:
        print(f"  {label:28} {spent.get(label, 0.0) / repeats * 1e3:6.2f} ms")
    outer = sum(seconds for label, seconds in spent.items() if not label.startswith(" ")) / repeats
    print(f"  {'rest (search loop, merge)':28} {(total - outer) * 1e3:6.2f} ms")


def _timed_codesign(extra: dict[str, list[str]]) -> tuple[Any, int, float, float]:
    """The co-design example's system space widened by `extra` (system field -> values), each system searched
    over the example's strategies: (result, points, wall s, CPU s)."""
    from armillary.search.systems import SystemSpace, codesign
    from armillary.specs.loading import read_spec_file

    study = ROOT / "examples" / "codesign"
    values = read_spec_file(study / "megatron-1t-system-space.yaml", "space")
    assert isinstance(values, dict)
    space = SystemSpace.model_validate(values | extra)
    strategies = StrategySpace.model_validate(read_spec_file(study / "strategies.yaml", "strategies"))
    m, system = load_model("megatron-1t"), load_system("dgx-a100", 8)
    workload = load_workload({"seq_len": 2048, "global_batch": 3072})
    t0, c0 = time.perf_counter(), time.process_time()
    result = codesign(m, system, workload, space, load_strategy({"attention": "flash"}), strategies)
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    return result, len(result.points) * strategies_points(m, system, workload, strategies), elapsed, cpu


def codesign_rate() -> None:
    """The co-design example (18 systems x 442,368 strategies) in-process: points per second, and how long a
    1e9-point co-design space would take at that rate."""
    result, points, elapsed, cpu = _timed_codesign({})
    print(f"co-design example in-process: {points:,} points ({result.strategies_evaluated:,} evaluated) in "
          f"{elapsed:.2f} s ({cpu:.2f} s CPU): {points / cpu:,.0f} points per CPU-second; a 1e9-point space at "
          f"that rate: {1e9 / (points / cpu):,.0f} s (target < 120 s)")


def codesign_1e9() -> None:
    """A 1,003,192,320-point co-design space: the example's 18 systems (3 GPU counts x 3 HBM x 2 second-tier
    sizes) x 14 scale-out x 9 HBM bandwidths = 2,268 systems, each with the example's 442,368 strategies."""
    result, points, elapsed, cpu = _timed_codesign({
        "scale_out_bandwidth": [f"{g} GB/s" for g in (6.25, 12.5, 25, 37.5, 50, 62.5, 75, 100, 125, 150, 200, 250,
                                                      300, 400)],
        "hbm_bandwidth": [f"{t} TB/s" for t in (1.0, 1.2, 1.4, 1.6, 1.8, 2.0, 2.4, 3.0, 3.35)]})
    best = result.best()
    print(f"co-design, {len(result.points):,} systems: {points:,} points in {elapsed:.1f} s ({cpu:.1f} s CPU; target "
          f"< 120 s); fastest {best.step_time_s if best else float('nan'):.2f} s, {len(result.pareto)} on the front")


def strategies_points(m: object, system: object, workload: object, strategies: StrategySpace) -> int:
    """Points of the strategy space per system (the same for every system of the example)."""
    from armillary.search.run import search as searched

    found = searched(m, system.with_devices(1024), workload, load_strategy({"attention": "flash"}),  # type: ignore[arg-type, attr-defined]
                     strategies, top_k=1)
    return found.points


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--against", help="a git revision to time alternately with this tree")
    parser.add_argument("--src", type=Path, default=ROOT / "src", help="this tree's source folder")
    parser.add_argument("--against-src", type=Path, help="with --against: time this source folder, named by "
                        "--against, instead of the revision (e.g. a worktree with one file changed)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--several", action="store_true", help="with --against: seven different GPT-3 175B "
                        "searches (GPU counts 64-256, global batches 32-512), each once, instead of the default one")
    parser.add_argument("--profile", action="store_true", help="where the default block's time goes")
    parser.add_argument("--codesign-1e9", action="store_true", help="only a 1e9-point co-design space")
    args = parser.parse_args()
    if args.profile:
        profile()
        return
    if args.codesign_1e9:
        codesign_1e9()
        return
    if args.against:
        against(args.against, args.src, args.rounds, args.against_src, SEVERAL if args.several else ALTERNATE)
        return
    timed("GPT-3 175B, 64 A100", "gpt3-175b", 64, 64)
    wide = StrategySpace(cp=(1, 2, 4), micro_batch=(1, 2, 4, 8, 16), offload_optimizer=(False, True),
                         offload_activations=(False, True))
    timed("GPT-3 175B, 64 A100, wide space (cp, offload, mb 16)", "gpt3-175b", 64, 64, wide)
    timed("GPT-3 175B, 64 A100, wide space, blocks of 4,096", "gpt3-175b", 64, 64, wide, 4096)
    timed("Megatron 1T, 4,096 A100", "megatron-1t", 4096, 3072)
    timed("Megatron 1T, 4,096 A100, blocks of 4,096", "megatron-1t", 4096, 3072, chunk=4096)
    print(f"peak memory of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    t0 = time.perf_counter()
    study = ROOT / "examples" / "codesign"
    space, strategies = study / "megatron-1t-system-space.yaml", study / "strategies.yaml"
    subprocess.run([sys.executable, "-m", "armillary.cli", "search", "--model", "megatron-1t", "--system", "dgx-a100",
                    "--gpus", "8", "--global-batch", "3072", "--space", str(space), "--strategies", str(strategies),
                    "--json"], check=True, capture_output=True)
    print(f"co-design example (18 systems), end to end: {time.perf_counter() - t0:.2f} s")
    codesign_rate()


if __name__ == "__main__":
    main()
