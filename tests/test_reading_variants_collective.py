"""Shipped collective (nccl-tests) and memory rows reworded as other publishers write them: the harness reads the
same collective, size, metric and unit, converts to the row's unit, or refuses naming the column; never a
silently different reading (docs/validation.md, "Words the harness reads"; tools/reading_variants.py --collective).
"""

from __future__ import annotations

import functools

import pytest

from armillary.specs.communication import Collective
from armillary.validation.collective_reading import message_bytes, read_op
from armillary.validation.collective_rows import predict_collective
from armillary.validation.flagged_sweeps import monotone_rows
from armillary.validation.memory_rows import MEMORY_CSV, measure_of, unit_bytes
from armillary.validation.row_columns import Unsupported
from armillary.validation.run import DEFAULT_CSV, read_rows

BUSBW_ROW = "CO-H200x8-NCCLTESTS-16"  # all_reduce, 1 GiB, busbw GB/s, 8 GPUs
TIME_ROW = "CO-H100-IBNDR-2N-AR-qoofyk-01"  # all_reduce, 8 B, time us, 16 GPUs
SWEEP_ROW = "CO-H100-IBNDR-2N-AR-qoofyk-20"  # all_reduce, 4 MiB, busbw (out-of-place), 16 GPUs


@functools.cache
def _rows() -> dict[str, dict[str, str]]:
    return {r["id"]: r for r in read_rows(DEFAULT_CSV)}


def _row(row_id: str, **change: str) -> dict[str, str]:
    return {**_rows()[row_id], **change}


@pytest.mark.parametrize(("words", "op"), [
    ("allreduce", Collective.ALL_REDUCE), ("all_reduce_perf", Collective.ALL_REDUCE),
    ("AllReduce", Collective.ALL_REDUCE), ("all-reduce (in-place)", Collective.ALL_REDUCE),
    ("ncclAllReduce", Collective.ALL_REDUCE), ("reduce_scatter_perf", Collective.REDUCE_SCATTER),
    ("ReduceScatter", Collective.REDUCE_SCATTER), ("alltoall", Collective.ALL_TO_ALL),
    ("all-to-all", Collective.ALL_TO_ALL), ("sendrecv", Collective.SEND_RECV), ("send/recv", Collective.SEND_RECV),
    ("all_gather_perf -b 8 -e 8G", Collective.ALL_GATHER), ("reduce_perf", Collective.REDUCE),
])
def test_op_spellings_read_as_the_collective(words: str, op: Collective) -> None:
    assert read_op(words) is op


@pytest.mark.parametrize("words", ["alltoallv", "hypercube_perf", "gather_perf", "scatter_perf", "all_reduce_sum_max"])
def test_other_ops_are_refused_naming_the_column(words: str) -> None:
    with pytest.raises(Unsupported, match=r"^op"):
        read_op(words)


@pytest.mark.parametrize(("words", "size"), [
    ("1073741824", 2**30), ("1G", 2**30), ("1 GiB", 2**30), ("1GiB", 2**30), ("2^30", 2**30), ("1,073,741,824", 2**30),
    ("1073741824 B", 2**30), ("128M", 128 * 2**20), ("128 MiB", 2**27), ("2^27", 2**27), ("1024K", 2**20),
    ("8 B", 8), ("8B", 8), ("8", 8),
])
def test_message_sizes_read_in_bytes(words: str, size: int) -> None:
    # nccl-tests' -b / -e take K, M, G as powers of 1024 (src/common.cu parsesize)
    assert message_bytes({"msg_bytes": words}) == size


@pytest.mark.parametrize("words", ["1GB", "128MB", "8 KB", "1e9", "nan", "-8", "0", "", "large"])
def test_ambiguous_or_bad_sizes_are_refused_naming_msg_bytes(words: str) -> None:
    with pytest.raises(Unsupported, match=r"^msg_bytes"):
        message_bytes({"msg_bytes": words})


def test_a_reworded_size_predicts_what_the_shipped_row_does() -> None:
    base = predict_collective(_row(BUSBW_ROW))
    for words in ("1G", "1 GiB", "2^30"):
        assert predict_collective(_row(BUSBW_ROW, msg_bytes=words)) == base


@pytest.mark.parametrize(("metric", "unit", "scale"), [
    ("busbw", "GB/s", 1.0), ("bus bandwidth (GB/s)", "", 1.0), ("busBW", "GBps", 1.0), ("busbw (GB/s)", "", 1.0),
    ("busbw", "Gb/s", 8.0), ("busbw", "Gbps", 8.0), ("bus bandwidth", "Gbit/s", 8.0),
    ("busbw", "GiB/s", 1e9 / 2**30), ("busbw", "MB/s", 1e3),
])
def test_bus_bandwidth_in_the_rows_unit(metric: str, unit: str, scale: float) -> None:
    # Gb/s is bits: the prediction in the row's unit is 8x the GB/s figure, never the GB/s figure read as Gb/s
    _, value, notes = predict_collective(_row(BUSBW_ROW))
    new_label, new_value, new_notes = predict_collective(_row(BUSBW_ROW, metric=metric, unit=unit))
    assert new_label.startswith("busbw [") and new_notes == notes
    assert new_value == pytest.approx(value * scale, rel=1e-12)


def test_algorithm_bandwidth_is_the_bus_bandwidth_over_the_bus_factor() -> None:
    # nccl-tests: busbw = algbw * 2 (n - 1) / n for all-reduce; 8 GPUs: 1.75
    _, busbw, _ = predict_collective(_row(BUSBW_ROW))
    for metric, unit, scale in (("algbw", "GB/s", 1.0), ("algorithm bandwidth", "GB/s", 1.0),
                                ("algbw (GB/s)", "", 1.0), ("algBW", "Gbps", 8.0)):
        label, algbw, _ = predict_collective(_row(BUSBW_ROW, metric=metric, unit=unit))
        assert label.startswith("algbw") and algbw == pytest.approx(busbw / 1.75 * scale, rel=1e-12)


@pytest.mark.parametrize(("metric", "unit"), [("busbw", "gb/s"), ("busbw", "GT/s"), ("busbw", "%"), ("busbw", ""),
                                              ("algbw", "TB")])
def test_bandwidth_units_not_known_are_refused_naming_the_unit(metric: str, unit: str) -> None:
    with pytest.raises(Unsupported, match=r"^unit"):
        predict_collective(_row(BUSBW_ROW, metric=metric, unit=unit))


@pytest.mark.parametrize(("metric", "unit", "scale"), [
    ("time (us)", "", 1.0), ("time", "us", 1.0), ("latency (ms)", "", 1e-3), ("time", "ms", 1e-3),
    ("latency", "usec", 1.0), ("time", "microseconds", 1.0), ("time (µs)", "", 1.0),
])
def test_times_in_the_rows_unit(metric: str, unit: str, scale: float) -> None:
    _, value, notes = predict_collective(_row(TIME_ROW))
    label, new_value, new_notes = predict_collective(_row(TIME_ROW, metric=metric, unit=unit))
    assert label.startswith("time [") and new_notes == notes
    assert new_value == pytest.approx(value * scale, rel=1e-12)


@pytest.mark.parametrize(("metric", "unit"), [("time", ""), ("time", "cycles"), ("time (s/iter)", "")])
def test_times_without_a_unit_are_refused_naming_the_unit(metric: str, unit: str) -> None:
    with pytest.raises(Unsupported, match=r"^unit"):
        predict_collective(_row(TIME_ROW, metric=metric, unit=unit))


@pytest.mark.parametrize(("words", "same"), [("16 (2 nodes x 8)", True), ("16 GPUs", True), ("2 x 8 GPUs", None),
                                             ("2x8", None), ("2 nodes", None)])
def test_gpu_counts_read_or_refused(words: str, same: bool | None) -> None:
    base = predict_collective(_row(SWEEP_ROW))
    if same:
        assert predict_collective(_row(SWEEP_ROW, n_gpus=words)) == base
    else:
        with pytest.raises(Unsupported, match=r"^n_gpus"):
            predict_collective(_row(SWEEP_ROW, n_gpus=words))


def test_a_sweep_reworded_keeps_its_monotone_rows() -> None:
    sweep = [r for r in _rows().values() if r["id"].startswith("CO-B200-4N-")]
    binary = {2**k: f"{2**(k - 20)}M" for k in range(20, 31)}
    reworded = [{**r, "msg_bytes": binary.get(int(r["msg_bytes"]), r["msg_bytes"])} for r in sweep]
    assert [r["id"] for r in monotone_rows(reworded)] == [r["id"] for r in monotone_rows(sweep)]


@functools.cache
def _memory() -> list[dict[str, str]]:
    return read_rows(MEMORY_CSV)


@pytest.mark.parametrize(("unit", "size"), [("GiB", 2**30), ("GiB per GPU", 2**30), ("GiB/GPU", 2**30),
                                            ("gibibytes", 2**30), ("GB", 1e9), ("gigabytes", 1e9), ("MiB", 2**20),
                                            ("MB", 1e6)])
def test_memory_units(unit: str, size: float) -> None:
    assert unit_bytes({**_memory()[0], "unit": unit}) == size


@pytest.mark.parametrize("unit", ["Gb", "Mb", "G", "GiB total", "GB (8 GPUs)", "%", "GiB/s"])
def test_memory_units_not_bytes_per_gpu_are_refused(unit: str) -> None:
    with pytest.raises(Unsupported, match=r"^unit"):
        unit_bytes({**_memory()[0], "unit": unit})


@pytest.mark.parametrize(("metric", "measure"), [
    ("max_memory_reserved", "reserved"), ("torch.cuda.max_memory_reserved()", "reserved"),
    ("peak reserved memory", "reserved"), ("max_memory_allocated", "allocated"),
    ("torch.cuda.max_memory_allocated()", "allocated"),
])
def test_memory_metrics(metric: str, measure: str) -> None:
    assert measure_of({"metric": metric}) == measure


@pytest.mark.parametrize("metric", ["peak memory", "nvidia-smi memory used", "memory (GiB)",
                                    "max_memory_allocated / max_memory_reserved"])
def test_memory_metrics_naming_neither_or_both_are_refused(metric: str) -> None:
    with pytest.raises(Unsupported, match=r"^metric"):
        measure_of({"metric": metric})


@pytest.mark.parametrize(("size", "written"), [(1 << 30, "1G"), (128 << 20, "128M"), (8, "8 B")])
def test_a_size_written_short_is_run_and_grouped_as_its_bytes(size: int, written: str) -> None:
    """`validate` runs a row whose size is written "1G" / "128M" / "8 B" as the same row in bytes: the same
    prediction and the same size group (below 1 MiB or not)."""
    from armillary.validation.run import run_row

    row = next((r for r in read_rows(DEFAULT_CSV) if r["kind"] == "collective" and r["msg_bytes"] == str(size)
                and run_row(r).predicted is not None), None)
    if row is None:
        pytest.skip(f"no shipped collective row of {size} bytes")
    original, reworded = run_row(row), run_row({**row, "msg_bytes": written})
    assert (reworded.group, reworded.predicted) == (original.group, original.predicted)
