"""TP communication overlapped tile by tile (comm/overlap.py; estimate/layer.py `_tensor_parallel`): the closed
forms against a step-by-step schedule of the tiles, monotone in GEMM and communication time, and the two
methods (Transformer Engine's userbuffers, ring exchange / async TP) in the estimator."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

import armillary
from armillary.comm.overlap import pipelined_exposed, ring_exchange_exposed

times = hs.floats(0.0, 10.0)


def ring_schedule(comm: float, gemm: float, tiles: int) -> float:
    """An all-gather into a GEMM, tile by tile: the local tile is there at once, tile k arrives after k ring
    steps of comm / (tiles - 1); each tile's GEMM starts when the previous one is done and the tile is in."""
    step, g, end = comm / (tiles - 1), gemm / tiles, 0.0
    for k in range(tiles):
        end = max(end, k * step) + g
    return end - gemm


def pipelined_schedule(comm: float, gemm: float, splits: int, slowdown: float) -> float:
    """A GEMM in `splits` pieces back to back, every piece after the first slowed while a reduce-scatter
    runs; piece k's reduce-scatter starts when the piece is done and the previous one has been sent."""
    g, c = gemm / splits, comm / splits
    gemm_end, sent = g, 0.0
    for k in range(splits):
        sent = max(sent, gemm_end) + c
        if k < splits - 1:
            gemm_end += g / (1 - slowdown)
    return sent - gemm


@settings(max_examples=200, deadline=None)
@given(comm=times, gemm=times, tiles=hs.integers(2, 16))
def test_ring_exchange_matches_its_tile_schedule(comm, gemm, tiles):
    assert float(ring_exchange_exposed(comm, gemm, tiles)) == pytest.approx(ring_schedule(comm, gemm, tiles),
                                                                            abs=1e-9)


@settings(max_examples=200, deadline=None)
@given(comm=times, gemm=times, splits=hs.integers(1, 8), slowdown=hs.floats(0.0, 0.5))
def test_pipelined_reduce_scatter_matches_its_tile_schedule(comm, gemm, splits, slowdown):
    assert float(pipelined_exposed(comm, gemm, splits, slowdown)) == pytest.approx(
        pipelined_schedule(comm, gemm, splits, slowdown), abs=1e-9)


def test_by_hand():
    """4 tiles, 4 s of GEMM: 3 s of gathering hides behind the last 3 tiles (0 exposed), 6 s leaves 3 s;
    a reduce-scatter of 4 s in 4 pieces with 1/5 of the SMs held: 1 + 3 max(1.25, 1) + 1 - 4 = 1.75 s."""
    assert float(ring_exchange_exposed(3.0, 4.0, 4)) == 0.0
    assert float(ring_exchange_exposed(6.0, 4.0, 4)) == pytest.approx(3.0)
    assert float(pipelined_exposed(4.0, 4.0, 4, 0.2)) == pytest.approx(1.75)


@settings(max_examples=200, deadline=None)
@given(comm=times, gemm=times, more=hs.floats(0.0, 5.0), tiles=hs.integers(2, 16), slowdown=hs.floats(0.0, 0.5))
def test_a_longer_gemm_or_collective_never_shortens_the_pair(comm, gemm, more, tiles, slowdown):
    """One schedule: faster compute may expose more communication, but the GEMM with its collective never
    takes longer when either gets faster."""
    for f in (lambda c, g: g + ring_exchange_exposed(c, g, tiles),
              lambda c, g: g + pipelined_exposed(c, g, 4, slowdown)):
        base = float(f(comm, gemm))
        assert float(f(comm + more, gemm)) >= base - 1e-12
        assert float(f(comm, gemm + more)) >= base - 1e-12


def _tp_exposed(method: str, system: str = "dgx-h100", sp: bool = True) -> float:
    st = {"tp": 8, "sequence_parallel": sp, "attention": "flash3", "precision": "bf16",
          "overlap": {"tp_comm": True, "tp_comm_method": method}}
    r = armillary.estimate("llama3-70b", system, st, {"seq_len": 8192, "global_batch": 8}, gpus=8)
    return float(r.layer.tp_forward_s + r.layer.tp_backward_s)


def test_userbuffers_hold_sms_that_ring_exchange_does_not():
    """Same layer, same collectives: TE's pipelined reduce-scatter slows the GEMM beside it by the SMs it holds
    (16 of H100's 132), so userbuffers expose more than ring exchange; both far less than no overlap."""
    plain = armillary.estimate("llama3-70b", "dgx-h100", {"tp": 8, "sequence_parallel": True, "attention": "flash3"},
                               {"seq_len": 8192, "global_batch": 8}, gpus=8)
    none = float(plain.layer.tp_forward_s + plain.layer.tp_backward_s)
    assert _tp_exposed("ring") < _tp_exposed("userbuffers") < 0.5 * none


def test_torchtitan_async_tp_is_ring_exchange():
    from armillary.specs.loading import load_stack

    assert load_stack("torchtitan").overlap.tp_comm_method.value == "ring"
