"""NCCL ring channels: the count NCCL's settings give, and the per-channel limit of a ring across nodes."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from armillary.comm.channels import MAX_CHANNELS, ChannelSettings, nccl_channels, with_channels
from armillary.comm.collectives import collective
from armillary.comm.sweep import group_of
from armillary.specs.communication import Algorithm, Collective
from armillary.specs.loading import load_system
from armillary.specs.network import NetworkDimension
from armillary.validation.collective_rows import channel_settings

GiB = 2.0**30


@pytest.mark.parametrize(("settings_", "expected"), [
    (ChannelSettings(), 16),
    (ChannelSettings(min_channels=32), 32),  # the RoCE 128-node row
    (ChannelSettings(min_ctas=24), 24),  # NCCL_MIN_CTAS=24, as the maintainer suggested
    (ChannelSettings(max_channels=8), 8),
    (ChannelSettings(max_channels=8, min_channels=12), 12),  # the maximum first, then copied up to the minimum
    (ChannelSettings(min_ctas=100), MAX_CHANNELS),
    (ChannelSettings(min_ctas=40, max_ctas=20), 20),  # minCTAs above maxCTAs is lowered to it (init.cc)
    (ChannelSettings(min_channels=4), 16),  # a minimum below the default changes nothing
])
def test_channel_count_follows_nccl_topo_postset(settings_, expected):
    assert nccl_channels(16, settings_) == expected


def test_row_settings_are_read_from_the_stated_environment():
    roce = channel_settings("nccl_algo=ring nccl_proto=ll128 nccl_min_nchannels=32 nccl_ib_qps_per_connection=2")
    assert roce == ChannelSettings(min_channels=32)
    assert channel_settings("nccl_min_ctas=24, nccl_max_nrings=40") == ChannelSettings(min_ctas=24, max_channels=40)
    assert not channel_settings("default nccl settings").any


def test_a_ring_across_nodes_runs_at_channels_times_the_channel_rate():
    """Hand calculation: 8 nodes of dgx-h100 (16 channels of 20.5 GB/s = 328 GB/s, below the 8 x 400 Gb/s
    NICs): doubling a Simple ring all-reduce from 4 to 8 GiB adds 2(p-1)/p x 4 GiB / 328 GB/s; with 24
    channels (492 GB/s) the NICs set the pace again and the increment is smaller."""
    system = load_system("dgx-h100", 64)
    group = group_of(system, 64)
    rail = system.network[1]
    assert (rail.channels, rail.channel_bandwidth) == (16, 20.5e9)

    def step(s):
        return (float(collective(Collective.ALL_REDUCE, 8 * GiB, group, s, Algorithm.RING).cost.time)
                - float(collective(Collective.ALL_REDUCE, 4 * GiB, group, s, Algorithm.RING).cost.time))

    assert step(system) == pytest.approx(2 * 63 / 64 * 4 * GiB / (16 * 20.5e9), rel=1e-9)
    wider = with_channels(system, ChannelSettings(min_ctas=24))
    assert wider.network[1].channels == 24 and wider.network[0].channels is None
    nic_bound = 2 * 63 / 64 * 4 * GiB / (8 * rail.efficiency * rail.bandwidth)
    assert step(wider) == pytest.approx(nic_bound, rel=0.05)  # the NVLink share may pace it a little
    assert step(wider) < step(system)


def test_a_group_inside_one_node_has_no_channel_limit():
    system = load_system("dgx-h100", 8)
    group = group_of(system, 8)
    few = with_channels(system, ChannelSettings(max_channels=1))
    n = GiB
    assert (float(collective(Collective.ALL_REDUCE, n, group, few, Algorithm.RING).cost.time)
            == float(collective(Collective.ALL_REDUCE, n, group, system, Algorithm.RING).cost.time))


@settings(max_examples=40, deadline=None)
@given(n=hs.floats(1.0, 1e11), fewer=hs.integers(1, 15), gpus=hs.sampled_from([16, 64, 512]),
       op=hs.sampled_from([Collective.ALL_REDUCE, Collective.ALL_GATHER, Collective.REDUCE_SCATTER]))
def test_more_channels_never_slow_a_collective(n, fewer, gpus, op):
    system = load_system("dgx-h100", gpus)
    group = group_of(system, gpus)
    base = float(collective(op, n, group, system).cost.time)
    cut = with_channels(system, ChannelSettings(max_channels=fewer))
    assert float(collective(op, n, group, cut).cost.time) >= base * (1 - 1e-12)


def test_channels_and_their_rate_go_together():
    with pytest.raises(ValueError, match="channels and channel_bandwidth"):
        NetworkDimension(name="rails", bandwidth=50e9, latency=1e-5, efficiency=0.9, channels=16)
