"""The compute calibration's acceptance on this machine (needs torch): the whole default calibration timed,
the fitted device's error on the held-out GEMM shapes, and a small GPT training step measured with torch vs
estimated by armillary on the fitted device.

    python benchmarks/bench_compute_calibration.py [--threads N] [--out DIR]
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from armillary.calibrate.compute_bench import machine, set_threads
from armillary.calibrate.compute_kernels import default_sweep
from armillary.calibrate.compute_records import group_errors, round_trip
from armillary.calibrate.run import calibrate, write
from armillary.calibrate.train_step import StepConfig, estimate_step, measure_step
from armillary.specs.device import Precision

STEPS = (StepConfig(), StepConfig(layers=2, hidden=384, heads=6, vocab=8192, seq=256, batch=2),
         StepConfig(layers=6, hidden=768, heads=12, vocab=16384, seq=256, batch=2))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--out", type=Path, default=None,
                        help="where to write the device file and measurements (default: a temporary folder)")
    args = parser.parse_args()
    set_threads(args.threads)
    here = machine()
    out = (args.out or Path(tempfile.mkdtemp())) / "this-machine.yaml"
    out.parent.mkdir(parents=True, exist_ok=True)
    done = calibrate("this-machine", default_sweep((Precision.FP32,), here.accelerator, quick=False), here, out)
    write(done, out)
    device, measured = done.device, done.measured
    print(f"{here.describe()}: {len(measured)} kernels measured and fitted in {done.seconds:.1f} s; written to {out}")
    for g in group_errors(round_trip(measured, device)):
        print(f"  {g.group.value:22s} {g.kernels:3d} kernels: mean |error| {g.mean_abs:6.1%}, max {g.max_abs:6.1%}, "
              f"sum {g.total:+6.1%}")
    for config in STEPS:
        real, model = measure_step(config), estimate_step(config, device)
        print(f"  step {config}: measured {real:.3f} s, estimated {model:.3f} s ({model / real - 1:+.1%})")


if __name__ == "__main__":
    main()
