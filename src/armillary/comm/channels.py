"""NCCL's ring channels: how many a ring runs with, and the settings that change it (docs/formulas.md §1.6).

A channel is one CTA that moves its own slice of the message around the ring; a message is split evenly
over the channels (enqueue.cc, per-channel parts), so a ring whose channels each move at most
`channel_bandwidth` reaches at most channels x channel_bandwidth of bus bandwidth. The default count is the
ring graph's (a dimension's `channels`: NCCL's search finds one channel per NIC, connect.cc doubles them);
NCCL then applies the user's limits (connect.cc, ncclTopoPostset, "Honor NCCL_MIN_NRINGS/NCCL_MAX_NRINGS"):
first the maximum (NCCL_MAX_NCHANNELS, NCCL_MAX_CTAS), then it copies channels up to the minimum
(NCCL_MIN_NCHANNELS, NCCL_MIN_CTAS), never beyond MAXCHANNELS.
"""

from __future__ import annotations

from dataclasses import dataclass

from armillary.specs.system import System

MAX_CHANNELS = 64  # NCCL src/include/device.h MAXCHANNELS


@dataclass(frozen=True)
class ChannelSettings:
    """The NCCL settings that change the channel count (None: not set)."""

    min_channels: int | None = None  # NCCL_MIN_NCHANNELS (older name NCCL_MIN_NRINGS)
    max_channels: int | None = None  # NCCL_MAX_NCHANNELS (NCCL_MAX_NRINGS)
    min_ctas: int | None = None  # NCCL_MIN_CTAS (communicator config minCTAs)
    max_ctas: int | None = None  # NCCL_MAX_CTAS (maxCTAs)

    @property
    def any(self) -> bool:
        return any(v is not None for v in (self.min_channels, self.max_channels, self.min_ctas, self.max_ctas))


def nccl_channels(default: int, settings: ChannelSettings) -> int:
    """The channels a ring runs with: the default cut to the maxima, then copied up to the minima (a minimum
    CTA count above the maximum is lowered to it, init.cc)."""
    max_ctas = min(settings.max_ctas or MAX_CHANNELS, MAX_CHANNELS)
    min_ctas = min(settings.min_ctas or 1, max_ctas)
    count = min(default, settings.max_channels or MAX_CHANNELS, max_ctas)
    return max(1, min(max(count, settings.min_channels or 0, min_ctas), MAX_CHANNELS))


def with_channels(system: System, settings: ChannelSettings) -> System:
    """`system` with the channel count the settings give on every dimension that has a per-channel limit."""
    if not settings.any or all(d.channels is None for d in system.network):
        return system
    network = tuple(d if d.channels is None else d.model_copy(update={"channels": nccl_channels(d.channels, settings)})
                    for d in system.network)
    return system.model_copy(update={"network": network})
