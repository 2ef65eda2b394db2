"""Calibration reads a measured size as the validation harness does: the faster of nccl-tests' out-of-place and
in-place runs (validation/collective_reading.best_of_runs), both from a user's nccl-tests log (calibrate-network)
and from the validation rows (tools/calibrate_fabric.py), so a fit and its check compare against one figure."""

import importlib.util
from pathlib import Path

import pytest

from armillary.comm.calibration import parse_nccl_tests
from armillary.specs.loading import load_system
from armillary.validation.collective_reading import best_of_runs

TOOL = Path(__file__).resolve().parent.parent / "tools" / "calibrate_fabric.py"

# two sizes of an all-reduce log as nccl-tests prints them (the 2-node A4 all-gather's 1 and 4 MiB rows'
# times): in place faster at 1 MiB, out of place faster at 4 MiB; and an alltoall line, whose in-place
# #wrong column reads N/A
LOG = """#  size   count   type   redop   root   time   algbw   busbw #wrong   time   algbw   busbw #wrong
     1048576        262144     float    none      -1    998.2    1.05    0.98      0    972.4    1.08    1.01      0
     4194304       1048576     float    none      -1    933.6    4.49    4.21      0    958.6    4.38    4.10      0
  8589934592      16777216     float    none      -1   180191   47.67   47.30      0   179150   47.95   47.57    N/A
"""


def _tool():
    spec = importlib.util.spec_from_file_location("calibrate_fabric", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_log_is_read_as_each_sizes_faster_run():
    times = {m.size_bytes: m.time_s for m in parse_nccl_tests(LOG)}
    assert times[1048576] == pytest.approx(972.4e-6)  # in place faster
    assert times[4194304] == pytest.approx(933.6e-6)  # out of place faster
    assert times[8589934592] == pytest.approx(179150e-6)  # N/A in the last column does not stop the reading


def _row(size, busbw, other):
    return {"id": f"CO-TEST-2N-AR-{size}", "op": "all_reduce", "n_gpus": "16", "msg_bytes": str(size),
            "metric": "busbw (out-of-place)", "value": str(busbw), "unit": "GB/s", "other_reported": other}


def test_the_tool_reads_a_row_as_the_harness_does():
    """Hand calculation: an all-reduce of S bytes on 16 GPUs at busbw B takes S x 2 x 15/16 / B."""
    rows = [_row(1024, 0.01, ""),  # the smallest size: left out
            _row(2 ** 30, 300.0, "out-of-place time 6710 us; in-place time 6500 us, algbw 165.2 GB/s, "
                                 "busbw 309.7 GB/s"),
            _row(2 ** 31, 320.0, "in-place time 13500 us, algbw 159.1 GB/s, busbw 298.3 GB/s")]
    _, gpus, points = _tool().sweep(rows)
    assert gpus == 16 and [p.size_bytes for p in points] == [2 ** 30, 2 ** 31]
    assert best_of_runs(rows[1], 300.0) == (309.7, True)
    assert points[0].time_s == pytest.approx(2 ** 30 * 2 * 15 / 16 / 309.7e9)  # the in-place run, faster
    assert points[1].time_s == pytest.approx(2 ** 31 * 2 * 15 / 16 / 320.0e9)  # the out-of-place run, faster


def test_copies_of_the_calibrated_infiniband_rails_match_dgx_h100():
    """azure-nd-h100-v5, dgx-h100-cxl-pool and dgx-superpod-h100 state dgx-h100's fitted InfiniBand rails as
    their own: a refit of dgx-h100 must reach every copy."""
    rails = load_system("dgx-h100").network[-1]
    fields = ("latency", "efficiency", "tree_efficiency", "channels", "channel_bandwidth")
    for preset in ("azure-nd-h100-v5", "dgx-h100-cxl-pool", "dgx-superpod-h100"):
        for dim in load_system(preset).network[1:]:
            assert all(getattr(dim, f) == getattr(rails, f) for f in fields), (preset, dim.name)
            assert dim.size_efficiency is not None and rails.size_efficiency is not None
            assert dim.size_efficiency.points == rails.size_efficiency.points, preset
            assert dim.tree_size_efficiency is not None and rails.tree_size_efficiency is not None
            assert dim.tree_size_efficiency.points == rails.tree_size_efficiency.points, preset
