"""Collective rows of the validation CSV (nccl-tests sweeps): predicted vs measured bus bandwidth."""

from __future__ import annotations

import re

from armillary.comm.channels import ChannelSettings, with_channels
from armillary.comm.collectives import collective
from armillary.comm.sweep import bus_factor, group_of
from armillary.specs.communication import Algorithm, Collective
from armillary.specs.loading import load_system
from armillary.units import MIB
from armillary.validation.rows import Unsupported, int_column
from armillary.validation.vocabulary import clean, system_preset_for

SMALL_MESSAGE_BYTES = MIB  # below this, collectives are latency-bound: reported as their own group


def pinned_algorithm(op_text: str, metric: str) -> Algorithm:
    """The algorithm a row pins: NCCL_ALGO=... in the op, or "ring" / "NVLS" in the metric ("NVLS off",
    "NVLS disabled" pin nothing but turn the in-network path off, which the ring then is)."""
    pinned = re.search(r"nccl_algo\s*=\s*([a-z_]+)", op_text)
    name = pinned.group(1) if pinned else ""
    nvls_off = re.search(r"nvls\W*(off|disabled|no)\b|no nvls|without nvls", metric) is not None
    if name in ("nvls", "nvlstree", "collnet", "collnetdirect", "collnetchain") or (
            "nvls" in metric and not nvls_off):
        return Algorithm.IN_NETWORK
    if name == "ring" or "ring" in metric or nvls_off:
        return Algorithm.RING
    if name == "tree":
        return Algorithm.TREE
    return Algorithm.AUTO


_CHANNEL_SETTING = re.compile(r"nccl_(min|max)_(nchannels|nrings|ctas)\s*=\s*(\d+)")


def channel_settings(text: str) -> ChannelSettings:
    """The NCCL channel settings a row states (NCCL_MIN_NCHANNELS=32, NCCL_MIN_CTAS=24, ...; the older
    NCCL_MIN_NRINGS / NCCL_MAX_NRINGS count as the channel settings, connect.cc)."""
    found: dict[str, int] = {}
    for bound, kind, value in _CHANNEL_SETTING.findall(text):
        found[f"{bound}_{'ctas' if kind == 'ctas' else 'channels'}"] = int(value)
    return ChannelSettings(**found)


_IN_PLACE_BUSBW = re.compile(r"in-place\b[^;|]*?\bbusbw\s+([\d.]+)\s*gb/s")
_IN_PLACE_TIME = re.compile(r"in-place\s+time\s+([\d.]+)\s*(us|µs|ms|s)\b")


def best_of_runs(row: dict[str, str], measured: float) -> tuple[float, bool]:
    """nccl-tests runs every size twice, out of place and in place, and prints both; where the row states
    the in-place figure too (`other_reported`), the faster of the two (higher busbw / algbw, lower time) is
    the measurement: noise and warm-up only ever slow a run (e.g. a 1 MiB all-reduce at 6.4 GB/s out of
    place, 21.8 in place). Returns the value and whether the in-place run was the faster."""
    other, metric = clean(row.get("other_reported")), clean(row.get("metric"))
    if metric.startswith("busbw") or "bus bandwidth" in metric:
        found = _IN_PLACE_BUSBW.search(other)
        if found and float(found.group(1)) > measured:
            return float(found.group(1)), True
    elif ((metric.startswith("time") or "latency" in metric) and (found := _IN_PLACE_TIME.search(other))
          and found.group(2) == clean(row.get("unit")) and 0 < float(found.group(1)) < measured):
        return float(found.group(1)), True
    return measured, False


def predict_collective(row: dict[str, str]) -> tuple[str, float, tuple[str, ...]]:
    """(what is compared, the predicted value in the row's unit, what was assumed) for a collective row:
    nccl-tests bus bandwidth in GB/s, or its time (us, ms, s)."""
    metric, unit = clean(row.get("metric")), clean(row.get("unit"))
    op_text = clean(row.get("op"))
    try:
        op = Collective(re.split(r"[\s(]", op_text, maxsplit=1)[0])
    except ValueError:
        raise Unsupported(f"op {row.get('op')!r}: not one of {', '.join(c.value for c in Collective)}") from None
    n_gpus = int_column(row, "n_gpus")
    if n_gpus is None:
        raise Unsupported(f"n_gpus: not stated ({row.get('n_gpus')!r})")
    try:
        size = float(row.get("msg_bytes") or "")
    except ValueError:
        raise Unsupported(f"msg_bytes: the message size is not stated ({row.get('msg_bytes')!r})") from None
    preset = system_preset_for(row.get("gpu"))
    if preset is None:
        raise Unsupported(f"gpu: no system preset for {row.get('gpu')!r}")
    settings = channel_settings(f"{op_text} {clean(row.get('framework'))}")
    system = with_channels(load_system(preset, n_gpus), settings)
    algorithm = pinned_algorithm(op_text, metric)
    group = group_of(system, n_gpus)
    time = float(collective(op, size, group, system, algorithm).cost.time)
    notes = (f"system {preset}", f"algorithm {algorithm.value}") + (
        (f"ring channels {max(d.channels or 0 for d in system.network)} (NCCL settings)",) if settings.any else ())
    if metric.startswith("busbw") or "bus bandwidth" in metric:
        return "busbw [GB/s]", size / time * float(bus_factor(op, group.size)) / 1e9, notes
    if metric.startswith("algbw"):
        return "algbw [GB/s]", size / time / 1e9, notes
    if metric.startswith("time") or "latency" in metric:
        scale = {"us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0}.get(unit)
        if scale is None:
            raise Unsupported(f"unit {row.get('unit')!r}: a time in us, ms or s")
        return f"time [{unit}]", time / scale, notes
    raise Unsupported(f"metric {row.get('metric')!r}: not predicted (busbw, algbw or time of one collective)")
