"""torch.profiler import and replay: a hand-made two-rank trace (always), and traces recorded here from 2 gloo
processes running a transformer layer step with DDP on the CPU (needs torch: skipped without it)."""

from __future__ import annotations

import pytest

from armillary.ingest.torch_replay import measured_network, replay
from armillary.ingest.torch_trace import read_torch_traces
from armillary.specs.communication import Collective
from armillary.specs.loading import load_system


def _host(world: int, matrix: float = 1e11) -> dict[str, object]:
    """A host-CPU system; its network is fitted to the trace's collectives below (compute is replayed as
    measured, so the device's rates do not enter)."""
    return {"name": "host", "device": {"name": "host CPU", "matrix_flops": {"fp32": matrix},
                                       "vector_flops": {"fp32": 1e11}, "matrix_efficiency": {"points": [[1e9, 1.0]]},
                                       "memory": [{"name": "DRAM", "capacity": 1e10, "bandwidth": 1e15}]},
            "network": [{"name": "loopback (gloo)", "size": world, "bandwidth": 1e11, "latency": 1e-5,
                         "efficiency": 1.0}]}


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    pytest.importorskip("torch")
    from armillary.ingest.torch_record import record

    folder = tmp_path_factory.mktemp("torch_trace")
    record(folder, ranks=2, steps=3)  # three steps: a single one on a 2-core machine varies by +-10%
    return read_torch_traces(folder)


def test_trace_contents(traces):
    assert [r.rank for r in traces.ranks] == [0, 1]
    sizes = [c.bytes for c in traces.ranks[0].collectives]
    # DDP's gradient buckets (1 MB cap) hold every parameter once, fp32: a transformer layer of width 256,
    # feed-forward 1024 (4 x 256^2 + 2 x 256 x 1024 weights, 3 x 256 + 256 + 1024 + 256 + 4 x 256 biases and
    # norms) and a 256 x 256 linear with bias
    params = 4 * 256 * 256 + 3 * 256 + 256 + 2 * 256 * 1024 + 1024 + 256 + 4 * 256 + 256 * 256 + 256
    assert sum(sizes) == 3 * 4 * params  # three steps
    assert all(c.op is Collective.ALL_REDUCE and c.group_size == 2 for c in traces.ranks[0].collectives)
    assert sizes == [c.bytes for c in traces.ranks[1].collectives]


def test_replay_on_own_machine_and_faster_network(traces):
    own = measured_network(traces, load_system(_host(2)))
    base = replay(traces, own)
    assert base.step_time_s == pytest.approx(traces.measured_step_s, rel=0.10)
    faster = replay(traces, own.with_dimension(0, bandwidth=2 * own.network[0].bandwidth))
    assert faster.compute_s == base.compute_s  # compute is kept as measured
    assert faster.communication_s < base.communication_s
    assert faster.step_time_s <= base.step_time_s


def test_gemms_rescaled_by_the_device_model(traces):
    """A device with twice the matrix peak (GEMMs compute-bound on both): each recorded GEMM takes half its
    measured time, everything else stays."""
    gemms = traces.ranks[0].gemms
    assert gemms and all(g.flop > 0 for g in gemms)
    own = measured_network(traces, load_system(_host(2)))
    faster = own.model_copy(update={"device": load_system(_host(2, matrix=2e11)).device})
    same = replay(traces, own, own)
    rescaled = replay(traces, faster, own)
    assert same.compute_s == pytest.approx(replay(traces, own).compute_s, abs=1e-9)
    saved = sum(g.dur_us for g in gemms) / 1e6 / 2
    assert same.compute_s - rescaled.compute_s == pytest.approx(saved, rel=1e-3)


def test_hand_made_trace_by_hand():
    """A two-rank trace written by hand (Kineto's event layout): 2.0 ms GEMM, the all-reduce issued at
    3.1 ms, 1.9 ms more compute, an idle wait until the all-reduce ends (7.99 ms), 3.0 ms after it. Replayed
    with the network fitted to that all-reduce (4.89 ms), the step is 2.1 + 4.89 + 3.0 ms (the measured
    10 ms, less the 10 us the wait outlasts the collective); with twice the bandwidth only the
    collective's time shrinks."""
    from pathlib import Path

    traces = read_torch_traces(Path(__file__).parent / "data" / "torch_trace")
    rank = traces.ranks[1]
    assert rank.rank == 1 and rank.step_s == pytest.approx(0.010)
    (c,) = rank.collectives
    assert c.op is Collective.ALL_REDUCE and c.bytes == 250_000 * 4 and c.issued_us == 3100.0
    (g,) = rank.gemms
    assert g.flop == 2 * 64 * 128 * 256 and g.bytes == (64 * 128 + 128 * 256 + 64 * 256) * 4
    own = measured_network(traces, load_system(_host(2)))
    base = replay(traces, own)
    assert base.communication_s == pytest.approx(4.89e-3, rel=1e-3)
    assert base.compute_s == pytest.approx((2.1 + 1.9 + 3.0) * 1e-3, rel=1e-6)
    assert base.step_time_s == pytest.approx((2.1 + 4.89 + 3.0) * 1e-3, rel=1e-3)
    faster = replay(traces, own.with_dimension(0, bandwidth=2 * own.network[0].bandwidth))
    assert faster.compute_s == base.compute_s
    saved = base.communication_s - faster.communication_s
    assert base.step_time_s - faster.step_time_s == pytest.approx(saved, rel=1e-3)
