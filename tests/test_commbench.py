"""A real gloo benchmark on this machine feeds the calibration end to end (needs torch: the CI installs it)."""

import pytest

from armillary.comm.bench import BenchConfig, nccl_tests_table, run_benchmark
from armillary.comm.calibration import fit_tier, parse_nccl_tests
from armillary.comm.collectives import collective
from armillary.comm.sweep import group_of
from armillary.specs.communication import Collective
from armillary.specs.loading import load_device
from armillary.specs.network import NetworkDimension
from armillary.specs.system import System

pytest.importorskip("torch")


def loopback(ranks: int) -> System:
    """Processes on one host talking over loopback TCP: one tier, ring only (what gloo runs)."""
    net = NetworkDimension(name="loopback TCP (gloo)", bandwidth="50 GB/s", latency="100 us", efficiency=0.5,
                  algorithms=["ring"])
    return System(name="localhost", device=load_device("a100-sxm4-80gb"), devices_per_node=ranks,
                  scale_up=net, scale_out=net)


def test_gloo_run_calibrates_a_network():
    op, ranks = Collective.ALL_REDUCE, 2
    sizes = tuple(float(2**k) for k in range(10, 25, 2))  # 1 KiB .. 4 MiB: the largest is bandwidth-bound
    measured = run_benchmark(BenchConfig(op, sizes, ranks, "gloo", warmup=3, iters=15))
    assert [int(s) for s, _ in measured] == [int(s) for s in sizes] and all(t > 0 for _, t in measured)
    log = nccl_tests_table(op, ranks, measured)
    rows = parse_nccl_tests(log)
    fitted = fit_tier(rows, op, ranks, loopback(ranks))
    net = fitted.network[0]
    assert 0 < net.latency < 0.1 and 0 < net.efficiency <= 1
    group = group_of(fitted, ranks)

    def predicted(size: float) -> float:
        return float(collective(op, size, group, fitted).cost.time)

    # the fitted description reproduces the measured sweep where it is determined: the largest message
    # exactly (its bandwidth), the small ones within the spread of their noisy times (TCP loopback on a
    # busy 2-core machine is bimodal here, about 0.3 ms or 1 to 3 ms)
    largest = rows[-1]
    assert predicted(largest.size_bytes) == pytest.approx(largest.time_s, rel=0.05)
    small = [r.time_s for r in rows if r.size_bytes <= 64 * 1024]
    assert min(small) / 2 < predicted(rows[0].size_bytes) < 2 * max(small)
