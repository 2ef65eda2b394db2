"""Speed of `import armillary`, of `armillary estimate` end to end and of one estimate in-process.

Run: python benchmarks/bench_estimate.py [--against REV]   (targets: import < 0.4 s, CLI < 1 s end to end,
estimate() < 0.1 ms per call). With --against, the source tree of git revision REV is timed alternately with
this one in the same run (the machine's load moves both alike). Subprocess times are medians of --runs, with
the bytecode cache as the environment has it ("as is": this project's container sets PYTHONDONTWRITEBYTECODE,
so armillary's modules are compiled on every run) and with a warm one (as an installed package has it).
"""

from __future__ import annotations

import argparse
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
IMPORT = ["-c", "import armillary"]
FLOOR = ["-c", "import numpy, pydantic, typer"]  # what the CLI's own dependencies cost
CLI = ["-m", "armillary.cli", "estimate", str(EXAMPLE)]


def per_call(fn: Callable[[], object], repeats: int = 2000) -> float:
    fn()
    samples = []
    for _ in range(5):
        t0 = time.perf_counter()
        for _ in range(repeats // 5):
            fn()
        samples.append((time.perf_counter() - t0) / (repeats // 5))
    return statistics.median(samples)


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


def timed(args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall, CPU) seconds of one subprocess: CPU time moves less with the machine's other load."""
    before, t0 = resource.getrusage(resource.RUSAGE_CHILDREN), time.perf_counter()
    subprocess.run([sys.executable, *args], check=True, capture_output=True, env=env)
    elapsed, after = time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_CHILDREN)
    return elapsed, after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime


def subprocess_times(trees: dict[str, Path], runs: int, scratch: Path) -> None:
    """Median wall time of each command per tree, the trees alternated run by run."""
    cases = [("import armillary", IMPORT), ("armillary estimate", CLI), ("numpy+pydantic+typer", FLOOR)]
    for cached in (False, True):
        envs = {name: environment(src, scratch / f"pyc-{name}" if cached else None) for name, src in trees.items()}
        for label, args in cases:
            times: dict[str, list[tuple[float, float]]] = {name: [] for name in trees}
            for env in envs.values():
                timed(args, env)  # warm the file cache (and the bytecode cache)
            for _ in range(runs):
                for name, env in envs.items():
                    times[name].append(timed(args, env))
            line = ", ".join(f"{name} {statistics.median(w for w, _ in t):.3f} s (CPU "
                             f"{statistics.median(c for _, c in t):.3f} s)" for name, t in times.items())
            print(f"{label:22s} ({'warm bytecode' if cached else 'as is'}): {line}   (median of {runs})")
            if label == "numpy+pydantic+typer":
                break  # the same for every tree


def in_process() -> None:
    import armillary
    from armillary.specs.run import load_run

    model, system, strategy, workload = load_run(EXAMPLE)
    t_specs = per_call(lambda: armillary.estimate(model, system, strategy, workload))
    print(f"estimate(), spec objects:            {t_specs * 1e3:.3f} ms per call")
    t_names = per_call(lambda: armillary.estimate("gpt3-175b", "dgx-a100", strategy, workload, gpus=1024), 200)
    print(f"estimate(), preset names (cached):     {t_names * 1e3:.3f} ms per call")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--against", help="a git revision to time alternately with this tree")
    parser.add_argument("--runs", type=int, default=10)
    args = parser.parse_args()
    in_process()
    with tempfile.TemporaryDirectory() as tmp:
        scratch = Path(tmp)
        # copies without bytecode, so that "as is" compiles every tree's modules alike
        trees = {"this": Path(shutil.copytree(ROOT / "src", scratch / "this" / "src",
                                              ignore=shutil.ignore_patterns("__pycache__")))}
        if args.against:
            trees[args.against] = source_tree(args.against, scratch / "against")
        subprocess_times(trees, args.runs, scratch)


if __name__ == "__main__":
    main()
