"""What a collective row's op, metric and framework columns say: the collective (nccl-tests spellings), NVLink
SHARP on or off, the algorithm pinned, the NCCL channel settings, and the faster of the out-of-place and
in-place runs nccl-tests prints."""

from __future__ import annotations

import re

from armillary.comm.channels import ChannelSettings
from armillary.specs.communication import Algorithm, Collective
from armillary.validation.row_columns import Unsupported
from armillary.validation.vocabulary import clean

# nccl-tests' binaries and op names (all_reduce_perf, alltoall, reducescatter, sendrecv...) and the usual
# spellings, without separators
_OPS = {"allreduce": Collective.ALL_REDUCE, "reducescatter": Collective.REDUCE_SCATTER,
        "allgather": Collective.ALL_GATHER, "alltoall": Collective.ALL_TO_ALL, "broadcast": Collective.BROADCAST,
        "bcast": Collective.BROADCAST, "reduce": Collective.REDUCE, "sendrecv": Collective.SEND_RECV}


def read_op(text: str) -> Collective:
    """The collective of the op column: its first word, as nccl-tests / rccl-tests or NCCL spell it
    ("all_reduce", "allreduce", "all-reduce", "all_reduce_perf", "AllReduce", "ncclAllReduce", "alltoall",
    "send/recv")."""
    first = re.split(r"[\s(,;]", clean(text).strip(), maxsplit=1)[0]
    # "ncclAllReduce": NCCL's API name (nccl.h); "rcclAllReduce" is not a name RCCL uses, so only nccl
    key = re.sub(r"[_\-/.]", "", first).removesuffix("perf").removeprefix("nccl")
    if key not in _OPS:
        raise Unsupported(f"op {text!r}: not a collective; one of {', '.join(c.value for c in Collective)} "
                          f"(nccl-tests spellings such as allreduce, alltoall, sendrecv are read too)")
    return _OPS[key]


def nvls_enabled(text: str) -> bool | None:
    """Whether the row turns NVLink SHARP on or off: NCCL_NVLS_ENABLE=0 / =1 (init.cc), "NVLS off",
    "NVLS disabled", "without NVLS"; None where it says nothing (NCCL's default: on where the switch reduces).
    "NCCL_NVLS_ENABLE=0" is off, never read as NVLS on."""
    setting = re.search(r"nccl_nvls_enable\s*=\s*(\d)", text)
    if setting:
        return setting.group(1) != "0"
    if re.search(r"nvls\W*(off|disabled|no)\b|\bno nvls|without nvls", text):
        return False
    return None


def pinned_algorithm(op_text: str, metric: str) -> Algorithm:
    """The algorithm a row pins: NCCL_ALGO=... in the op, or "ring" / "NVLS" naming the measured algorithm in
    the metric. NVLS off (NCCL_NVLS_ENABLE=0, "NVLS off") pins nothing by itself: it turns the in-switch
    reduction off (`nvls_enabled`); a metric that says NVLS ran "if chosen" (NCCL's default) pins nothing."""
    pinned = re.search(r"nccl_algo\s*=\s*([a-z_]+)", op_text)
    name = pinned.group(1) if pinned else ""
    nvls_off = nvls_enabled(metric) is False
    named_nvls = re.search(r"\bnvls\b(?!\s+if\b)", re.sub(r"nccl_nvls_enable\s*=\s*\d", "", metric))
    if name in ("nvls", "nvlstree", "collnet", "collnetdirect", "collnetchain") or (named_nvls and not nvls_off):
        return Algorithm.IN_NETWORK
    if name == "ring" or re.search(r"\bring\b", metric):
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


# nccl-tests' size arguments (-b 8 -e 8G) take K, M, G as powers of 1024 (src/common.cu parsesize), as do KiB,
# MiB, GiB (IEC); "2^30" is a power of two. "1GB" / "128 MB" are refused: decimal in SI, binary in nccl-tests'
# own usage, and 7% apart at 1 GB.
_SIZE = re.compile(r"(\d+)\s*(?:([kmg])(?:ib)?|(b|bytes?))?")
_BINARY = {"k": 2**10, "m": 2**20, "g": 2**30}


def message_bytes(row: dict[str, str]) -> int:
    """The message size of a collective row in bytes: "1073741824", "8 B", "1G", "128M", "1 GiB", "2^30",
    "1,073,741,824" (Unsupported naming msg_bytes otherwise)."""
    text = clean(row.get("msg_bytes")).replace(",", "")
    # a footnote marker after the size ("1 GiB*", "1G †", "1G (a)"): not part of it
    text = re.sub(r"\s*(?:\*+|[†‡§]|\((?:\*|†|‡|[a-z]|\d)\)|\[\d+\])$", "", text)
    # a size with its restatement in a parenthesis ("1073741824 (1 GiB)"): the size before it is read
    text = re.sub(r"^([^()]+?)\s*\([^()]*\)$", r"\1", text)
    power = re.fullmatch(r"2\s*\^\s*(\d+)(?:\s*(?:b|bytes?))?", text)
    if power:
        return int(2 ** int(power.group(1)))
    found = _SIZE.fullmatch(text)
    if found is None or int(found.group(1)) <= 0:
        hint = "" if not text else ("; GB / MB: decimal or binary is not said" if re.search(r"[kmg]b\b", text)
                                    else "; in bytes: '8', '8 B', '1G', '1 GiB' or '2^30'")
        raise Unsupported(f"msg_bytes: the message size is not stated ({row.get('msg_bytes')!r}){hint}")
    return int(found.group(1)) * _BINARY.get(found.group(2) or "", 1)


# bytes/s of each bandwidth unit, case kept: "Gb/s", "Gbps", "Gbit/s" are bits (8x less than GB/s, e.g. a NIC's
# line rate); a lower-case "gb/s" says neither and is refused
_BANDWIDTH_UNITS = {"GB/s": 1e9, "GBps": 1e9, "GiB/s": 2**30, "MB/s": 1e6, "Gb/s": 1e9 / 8, "Gbps": 1e9 / 8,
                    "Gbit/s": 1e9 / 8, "GB/sec": 1e9, "GiB/sec": 2**30, "MB/sec": 1e6, "Gb/sec": 1e9 / 8,
                    "Gbit/sec": 1e9 / 8}
# µ as the micro sign (U+00B5) and as the Greek letter mu (U+03BC): both are written
_TIME_UNITS = {"us": 1e-6, "µs": 1e-6, "μs": 1e-6, "usec": 1e-6, "microseconds": 1e-6, "ms": 1e-3, "msec": 1e-3,
               "milliseconds": 1e-3, "s": 1.0, "sec": 1.0, "seconds": 1.0}


def row_unit(row: dict[str, str]) -> str:
    """The row's unit as written (case kept: Gb/s is not GB/s), else the one its metric names in parentheses or
    brackets at its end ("bus bandwidth (GB/s)", "time (us)": nccl-tests' column headers; "busbw [GB/s]")."""
    unit = (row.get("unit") or "").strip()
    # "GB/s (busbw)": the unit with the metric it belongs to, read where the metric is that bandwidth
    named = re.fullmatch(r"(\S+)\s*\(\s*(bus|alg)\s*-?\s*bw\s*\)", unit, re.I)
    if named and re.sub(r"[\s_-]", "", clean(row.get("metric"))).startswith(named.group(2).lower() + "bw"):
        return named.group(1)
    if unit:
        return unit
    found = re.search(r"[(\[]([^()\[\]]*)[)\]]\s*$", (row.get("metric") or "").strip())
    return found.group(1).strip() if found else ""


def bandwidth_scale(row: dict[str, str]) -> float:
    """Bytes/s per unit of a bandwidth row's value (Unsupported naming the unit where it is not one)."""
    unit = row_unit(row)
    if unit not in _BANDWIDTH_UNITS:
        raise Unsupported(f"unit {row.get('unit')!r}: a bandwidth in GB/s (or Gb/s, Gbps, GiB/s, MB/s, written "
                          f"with their case)")
    return _BANDWIDTH_UNITS[unit]


def time_scale(row: dict[str, str]) -> tuple[str, float]:
    """(the unit, seconds per unit) of a time row's value (Unsupported naming the unit where it is not one)."""
    unit = row_unit(row).lower()
    if unit not in _TIME_UNITS:
        raise Unsupported(f"unit {row.get('unit')!r}: a time in us, ms or s")
    return unit, _TIME_UNITS[unit]
