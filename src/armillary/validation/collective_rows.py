"""Collective rows of the validation CSV (nccl-tests sweeps): predicted vs measured bus bandwidth."""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from armillary.comm.algorithms import dimension_cost
from armillary.comm.channels import ChannelSettings, with_channels
from armillary.comm.collectives import collective, send_recv
from armillary.comm.fabrics import fabric, fabrics, nvlink_domain, rack_scale, with_fabric, with_fabric_nvls_off
from armillary.comm.sweep import bus_factor, group_of
from armillary.numerics import Array
from armillary.plan.placement import Placement
from armillary.specs.communication import Algorithm, Collective, Composition
from armillary.specs.loading import load_system
from armillary.specs.system import System
from armillary.units import MIB
from armillary.validation.rows import Unsupported, int_column
from armillary.validation.vocabulary import clean, system_preset_for

SMALL_MESSAGE_BYTES = MIB  # below this, collectives are latency-bound: reported as their own group

# Sweeps whose rows the shared data's own record flags as not the fabric's behaviour, with its words. Of a flagged
# sweep, the rows a larger message of the same sweep beats (`monotone_rows`) are left out, skipped naming the
# caveat; nothing else is excluded. An unflagged sweep's slow size is the fabric as measured (GCP A4's 2 MiB
# all-gather: 50 warm-up iterations stated, and the in-place run repeats the hump).
FLAGGED_SWEEPS = {"CO-B200-4N": "the shared data README flags it: 'small-message B200 points look like warm-up'"}


def sweep_of(row_id: str) -> str:
    """The measured sweep a row belongs to: its id without the running number."""
    return re.sub(r"-\d+$", "", row_id)


def monotone_rows(rows: Sequence[dict[str, str]]) -> list[dict[str, str]]:
    """The rows of one sweep whose time no larger message beats: a larger message is never faster, so a size
    measured slower than a larger one carries start-up or warm-up cost (nccl-tests' first size; a benchmark
    without warm-up iterations), not the fabric's latency."""
    def seconds(row: dict[str, str]) -> float:
        size, value = float(row["msg_bytes"]), best_of_runs(row, float(row["value"]))[0]
        if row["metric"].lower().startswith("time"):
            return value * {"us": 1e-6, "ms": 1e-3, "s": 1.0}[row["unit"].strip().lower()]
        return size / value  # busbw or algbw: time up to the sweep's constant bus factor
    timed = sorted(((float(r["msg_bytes"]), seconds(r), r) for r in rows
                    if r["metric"].lower().startswith(("time", "busbw", "algbw"))), key=lambda x: x[0])
    kept, fastest_above = [], float("inf")
    for _, t, row in reversed(timed):
        if t <= fastest_above * (1 + 1e-9):
            kept.append(row)
        fastest_above = min(fastest_above, t)
    return kept[::-1]


@functools.cache
def _flagged_rows() -> dict[str, str]:
    """Row id -> caveat, for the rows of FLAGGED_SWEEPS that a larger message of their sweep beats."""
    from armillary.validation.run import read_rows  # the harness reads this module: on first use

    out = {}
    rows = read_rows()
    for sweep, caveat in FLAGGED_SWEEPS.items():
        mine = [r for r in rows if r.get("kind") == "collective" and sweep_of(r["id"]) == sweep]
        kept = {r["id"] for r in monotone_rows(mine)}
        out.update({r["id"]: caveat for r in mine if r["id"] not in kept})
    return out

# nccl-tests' binaries and op names (all_reduce_perf, alltoall, reducescatter, sendrecv...) and the usual
# spellings, without separators
_OPS = {"allreduce": Collective.ALL_REDUCE, "reducescatter": Collective.REDUCE_SCATTER,
        "allgather": Collective.ALL_GATHER, "alltoall": Collective.ALL_TO_ALL, "broadcast": Collective.BROADCAST,
        "bcast": Collective.BROADCAST, "reduce": Collective.REDUCE, "sendrecv": Collective.SEND_RECV}


def read_op(text: str) -> Collective:
    """The collective of the op column: its first word, as nccl-tests / rccl-tests or NCCL spell it
    ("all_reduce", "allreduce", "all-reduce", "all_reduce_perf", "AllReduce", "alltoall", "send/recv")."""
    first = re.split(r"[\s(,;]", clean(text).strip(), maxsplit=1)[0]
    key = re.sub(r"[_\-/.]", "", first).removesuffix("perf")
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


# --- the system a row ran on: compute fabric, NICs per GPU, NVLink domain --------------------------------

# a clause about another network than the compute fabric: storage, management, front-end, a DPU
_OTHER_NETWORK = re.compile(r"storage|management|\bmgmt\b|bluefield|\bdpus?\b|front-?end|gvnic|out-of-band|in-band|"
                            r"\bboot\b|\bethernet for (?:the )?(?:host|cpu)")
# the fabric families a row's words name, in the order they are tried (EFA and TCPXO rows may also say RDMA or
# Ethernet; a Pollara NIC runs RoCE over Ethernet)
_FAMILY_WORDS = (
    ("efa", re.compile(r"\befa\b|elastic fabric adapter")),
    ("tcpxo", re.compile(r"\btcpxo?\b|gpudirect-tcpx")),
    ("pollara", re.compile(r"pollara|\bainic\b")),
    ("omni-path", re.compile(r"omni-?path|\bopa\b")),
    ("roce", re.compile(r"\broce(?:v2)?\b|rdma over converged|spectrum-x|rdma cluster network|\bgib\b")),
    ("infiniband", re.compile(r"infiniband|\bib\b|\b[nhex]dr\b|quantum-?2")),
    ("ethernet", re.compile(r"ethernet|\bgbe\b|\btcp\b")),
)
_IB_GENERATIONS = {"edr": 100e9, "hdr": 200e9, "ndr": 400e9, "xdr": 800e9}  # Gb/s per port (IBTA)
_RATE = r"(\d+(?:\.\d+)?)\s*([tg])(?:b(?:it)?(?:/s|ps)|bps)"
_COUNT_RATE = re.compile(r"(\d+)\s*[x\u00d7]\s*(?:(\d+)\s*[x\u00d7]\s*)?(?:[a-z][\w\-./]*\s+){0,4}?" + _RATE)
_TOTAL = re.compile(r"=\s*" + _RATE + r"\s*(?:per|/)\s*(node|host|instance|server|tray)")
_COUNT_ONLY = re.compile(r"(\d+)\s*[x\u00d7]\s*(?:[a-z][\w\-./]*\s+){0,3}?\b([nhex]dr)\b")
_NICS_PER_GPU = re.compile(r"(\d+)\s*(?:nics?|hcas?|ports?|cards?)?\s*per\s+gpu\b")
_PER_UNIT = re.compile(r"per\s+(?:(\d+)-gpu\s+)?(gpu|node|host|instance|server|tray)\b")


@dataclass(frozen=True)
class SystemReading:
    """What a row says about its system: the preset, the compute fabric (a fabric preset name, or None for one
    node), the compute NICs' bytes/s per GPU where stated, NVLink SHARP on/off/unstated, the GPUs of one NVLink
    domain the group fills, and each assumption made on the way."""

    preset: str
    fabric: str | None
    gpu_bandwidth: float | None
    nvls: bool | None
    assumptions: tuple[str, ...]


def compute_network_text(text: str) -> str:
    """The parts of a network description about the compute fabric: clauses (split at ; , ( ) + and "plus")
    about storage, management, front-end networks or a DPU are left out, and NCCL_* settings are removed (a
    RoCE row's NCCL_IB_HCA names the verbs API, not InfiniBand)."""
    text = re.sub(r"nccl_\w+\s*=\s*\S+", " ", clean(text))
    clauses = re.split(r"[;,()+]|\bplus\b|\band\b(?=\s*\d)", text)
    return " ; ".join(c.strip() for c in clauses if c.strip() and not _OTHER_NETWORK.search(c))


def fabric_family(text: str) -> tuple[str | None, tuple[str, ...]]:
    """The fabric family the compute-network text names (the first of `_FAMILY_WORDS`), and the others it
    also names (two competing readings)."""
    named = [family for family, words in _FAMILY_WORDS if words.search(text)]
    if "roce" in named and "ethernet" in named:
        named.remove("ethernet")  # RoCE runs over Ethernet: one reading
    if "pollara" in named:
        named = ["pollara"]  # the Pollara NIC runs RoCE v2 over Ethernet
    if named[:1] in (["efa"], ["tcpxo"]):
        named = named[:1]  # EFA / TCPXO rows also say RDMA, Ethernet or the IB verbs plugin
    return (named[0] if named else None), tuple(named[1:])


def nic_bandwidth_per_gpu(text: str, gpus_per_host: int) -> tuple[float | None, str]:
    """Bytes/s of compute NICs per GPU from "8 x 400 Gb/s per node", "8 x 2 x 400 Gb/s = 6.4 Tb/s per node",
    "4 x 400 Gb/s RDMA per 4-GPU host", "8x HDR IB per node", "1 NIC per GPU": the count times the rate, over
    the GPUs of the unit named (a node / host / instance has `gpus_per_host` GPUs: a GB200 tray's 4, never the
    72 of its NVLink domain). Returns (None, "") where no rate is stated, else the value and how it was read."""
    total = _TOTAL.search(text)
    count_rate = _COUNT_RATE.search(text)
    if total:
        bits = float(total.group(1)) * (1e12 if total.group(2) == "t" else 1e9)
        return bits / 8 / gpus_per_host, f"{total.group(0).lstrip('= ')} over {gpus_per_host} GPUs"
    if count_rate:
        count = int(count_rate.group(1)) * int(count_rate.group(2) or 1)
        bits = count * float(count_rate.group(3)) * (1e12 if count_rate.group(4) == "t" else 1e9)
        read = count_rate.group(0)
    elif (only := _COUNT_ONLY.search(text)) is not None:
        count, bits = int(only.group(1)), int(only.group(1)) * _IB_GENERATIONS[only.group(2)]
        read = only.group(0)
    else:
        return None, ""
    after = text[text.find(read):].split(";", 1)[0]  # the unit belongs to the same clause
    unit = _PER_UNIT.search(after)
    if unit and unit.group(2) == "gpu" and not unit.group(1):
        return bits / 8, f"{read} per GPU"
    if unit is None and (ratio := _NICS_PER_GPU.search(text)) is not None:  # "(1 NIC per GPU)", "(2 per GPU)"
        return bits / count * int(ratio.group(1)) / 8, f"{read}, {ratio.group(0)}"
    gpus = int(unit.group(1)) if unit and unit.group(1) else gpus_per_host
    said = "" if unit else " (per node assumed: no unit stated)"
    return bits / 8 / gpus, f"{read} over {gpus} GPUs{said}"


def fabric_of(family: str, text: str, rate: float | None, preset: str, infiniband_reduces: bool) -> str:
    """The fabric preset for a family and what else the row says."""
    if family == "infiniband":
        generation = re.search(r"\b([hnx]dr)\b", text)  # else by the rate per GPU (one NIC each), else NDR
        name = generation.group(1) if generation else {25e9: "hdr", 50e9: "ndr", 100e9: "xdr"}.get(rate or 0.0, "ndr")
        return "infiniband-ndr-sharp" if infiniband_reduces and name == "ndr" else f"infiniband-{name}"
    if family == "roce":
        return "gcp-rdma" if re.search(r"\bgib\b|google|gcp|gpu\d*rdma", text) or preset == "gcp-a4" else "roce-oci"
    if family == "efa":  # the generation by its card: 100 Gb/s, 1 per 2 GPUs (p4d) or 4 per GPU (p5); 400 (p6)
        card = re.search(r"(\d+)\s*g(?:b(?:it)?(?:/s|ps)|bps)", text)
        by_instance = {"aws-p4d": "efa-v1", "aws-p5": "efa-v2", "aws-p5e": "efa-v2"}.get(preset)
        if card is None:
            return by_instance or "efa-v4"  # no card stated: the instance's, else the B200 generation's (p6)
        if float(card.group(1)) >= 400:
            return "efa-v4"
        return "efa-v2" if (rate is not None and rate >= 50e9) or by_instance == "efa-v2" else "efa-v1"
    return {"tcpxo": "gcp-tcpxo", "pollara": "pollara", "omni-path": "omni-path"}[family]


def _native_fabric(preset: str) -> str | None:
    """The fabric whose calibrated dimension is this preset's own outermost tier."""
    return next((name for name, f in fabrics().items() if f.dimension_of == preset and f.dimension == {}), None)


def read_system(row: dict[str, str]) -> SystemReading:
    """The system a collective row ran on, from its gpu, intra_net, inter_net, framework and op columns."""
    preset = system_preset_for(row.get("gpu"))
    if preset is None:
        raise Unsupported(f"gpu: no system preset for {row.get('gpu')!r}")
    n_gpus = int_column(row, "n_gpus") or 0
    system = load_system(preset)
    nvl = nvlink_domain()
    racks = rack_scale(system)
    gpus_per_host = nvl.tray_gpus if racks else system.network[0].size
    settings = clean(f"{row.get('framework')} {row.get('op')} {row.get('metric')} {row.get('inter_net')}")
    nvls = nvls_enabled(settings)
    notes: list[str] = []
    if nvls is False:
        notes.append("NVLS off (NCCL_NVLS_ENABLE=0 / NVLS disabled): the NVLink switch does not reduce")
    domain = system.network[0].size
    multi_node = n_gpus > domain
    if racks:
        hosts = -(-n_gpus // gpus_per_host)
        notes.append(f"NVLink domain of {nvl.domain_gpus} GPUs (racks of {nvl.domain_gpus // gpus_per_host} trays "
                     f"of {gpus_per_host}); {hosts} host(s) of {gpus_per_host} GPUs"
                     + ("" if multi_node else ", inside one rack"))
    inter = clean(row.get("inter_net"))
    if not multi_node:
        return SystemReading(preset, None, None, nvls, tuple(notes))
    text = compute_network_text(inter)
    family, others = fabric_family(text)
    if family is None and fabric_family(compute_network_text(row.get("gpu") or ""))[0] is not None:
        text = compute_network_text(row.get("gpu") or "")  # "A100, 3 nodes x 8, 4x HDR IB per node"
        family, others = fabric_family(text)
        notes.append(f"inter_net names no fabric; read from the gpu column ({row.get('gpu')!r})")
    rate, how = nic_bandwidth_per_gpu(text, gpus_per_host)
    native = _native_fabric(preset)
    if family is None:
        if native is None:
            name = system.network[-1].name
            notes.append(f"inter_net: no compute fabric named ({row.get('inter_net')!r}); the preset's own "
                         f"scale-out tier assumed ({name})")
            return SystemReading(preset, None, rate, nvls, tuple(notes))
        notes.append(f"inter_net: no compute fabric named; the preset's fabric {native} assumed")
        return SystemReading(preset, native, rate, nvls, tuple(notes))
    if family == "ethernet":
        raise Unsupported(f"inter_net: plain Ethernet without RDMA ({row.get('inter_net')!r}) has no fabric preset; "
                          f"known fabrics: {', '.join(sorted(fabrics()))}")
    if others:
        notes.append(f"inter_net names {family} and also {', '.join(others)}: {family} taken (named first)")
    reduces = re.search(r"nccl_collnet_enable\s*=\s*1", settings) is not None
    name = fabric_of(family, text, rate, preset, reduces)
    if reduces and family != "infiniband":
        notes.append(f"NCCL_COLLNET_ENABLE=1 has no effect on {family}: no in-network reduction")
    notes.append(f"fabric {name} (inter_net: {family})")
    if rate is not None:
        notes.append(f"NICs {rate * 8 / 1e9:g} Gb/s per GPU ({how})")
    else:  # the NICs this GPU's shipped system has (the fabric's own NIC rate could be another generation's)
        outer = system.network[-1]
        rate = outer.bandwidth / outer.shared_by if len(system.network) > 1 else fabric(name).gpu_bandwidth
        notes.append(f"NICs not stated: {rate * 8 / 1e9:g} Gb/s per GPU assumed (the {preset} preset's)")
    return SystemReading(preset, name, rate, nvls, tuple(notes))


# the fabric classes residuals and error bands are kept by (a fabric family, or the NVLink domain alone)
FABRIC_CLASSES = {"infiniband": "InfiniBand", "efa": "EFA", "roce": "RoCE", "tcpxo": "Ethernet/GCP",
                  "pollara": "Pollara", "omni-path": "Omni-Path"}
ONE_DOMAIN = "one NVLink domain"
NVL72_RACKS = "NVL72 multi-rack"


def fabric_class(reading: SystemReading) -> str:
    """The class of fabric a row's collective crosses: its scale-out fabric family (GCP's RDMA and TCPXO
    together as Ethernet/GCP), NVL72 racks over any fabric as their own class, or one NVLink domain."""
    if reading.fabric is None:
        return ONE_DOMAIN
    if rack_scale(load_system(reading.preset)):
        return NVL72_RACKS
    return class_of_fabric(reading.fabric)


def class_of_fabric(name: str) -> str:
    return FABRIC_CLASSES["tcpxo"] if name.startswith("gcp-") else FABRIC_CLASSES[fabric(name).family]


def system_of(reading: SystemReading, n_gpus: int, settings: ChannelSettings,
              trial: Mapping[str, object] | None = None, domain: Mapping[str, object] | None = None) -> System:
    """The system sized to the row's GPUs, its scale-out tier on the row's fabric, NVLS as the row sets it,
    with the row's channel settings. Across rack-scale NVLink domains the library runs what the domain
    preset says (`nvlink_domains.<name>`: its algorithms, its ring's NVLink hops). `trial` replaces fields of
    the fabric's dimension (tools/calibrate_fabric.py --fabric fits them), `domain` fields of the NVLink
    dimension of a ring across racks (--nvlink-domain)."""
    system = load_system(reading.preset, n_gpus)
    last = len(system.network) - 1
    if reading.fabric is not None:
        racks = rack_scale(load_system(reading.preset))
        system = with_fabric(system, reading.fabric, reading.gpu_bandwidth, reading.nvls is not False, racks)
        if trial:  # across racks the domain's algorithms stay (fitted on their own)
            system = system.with_dimension(last, **{k: v for k, v in trial.items() if not racks or k != "algorithms"})
        if domain and racks:
            system = system.with_dimension(0, **domain)
    elif reading.nvls is False:
        system = with_fabric_nvls_off(system)
    return with_channels(system, settings)


@dataclass(frozen=True)
class _Modelled:
    """A collective row as the model runs it: the op, its bytes, the system sized to the row and its group."""

    op: Collective
    size: float
    system: System
    group: Placement
    algorithm: Algorithm
    notes: tuple[str, ...]


def _modelled(row: dict[str, str], trial: Mapping[str, object] | None = None,
              domain: Mapping[str, object] | None = None) -> _Modelled:
    """What `predict_collective` and `row_latency_share` run for a row (Unsupported where it cannot run)."""
    if (caveat := _flagged_rows().get(row.get("id", ""))) is not None:
        raise Unsupported(f"value left out: slower than a larger message of its sweep, and {caveat}")
    op_text = clean(row.get("op"))
    op = read_op(op_text)
    n_gpus = int_column(row, "n_gpus")
    if n_gpus is None:
        raise Unsupported(f"n_gpus: not stated ({row.get('n_gpus')!r})")
    try:
        size = float(row.get("msg_bytes") or "")
    except ValueError:
        raise Unsupported(f"msg_bytes: the message size is not stated ({row.get('msg_bytes')!r})") from None
    reading = read_system(row)
    settings = channel_settings(f"{op_text} {clean(row.get('framework'))}")
    system = system_of(reading, n_gpus, settings, trial, domain)
    algorithm = pinned_algorithm(op_text, clean(row.get("metric")))
    notes = (f"system {reading.preset}", *reading.assumptions, f"algorithm {algorithm.value}") + (
        (f"ring channels {max(d.channels or 0 for d in system.network)} (NCCL settings)",) if settings.any else ())
    return _Modelled(op, size, system, group_of(system, n_gpus), algorithm, notes)


def latency_share(op: Collective, n_bytes: Array, group: Placement, system: System,
                  algorithm: Algorithm = Algorithm.AUTO, composition: Composition = Composition.AUTO) -> Array:
    """The share of the modelled time of `op` that is latency: the fixed part of each dimension's phase (its
    protocol's base cost and per-step latencies, `DimensionCost.fixed`) summed, over the collective's time
    (at most 1: a pipelined composition overlaps transfers, not fixed costs). Near 1 the collective is
    latency-bound (LL's regime), near 0 bandwidth-bound (Simple's): the size regime the model itself is in,
    which NCCL's tuner also picks its protocol by (tuning.cc: time = latency + bytes / bandwidth)."""
    if op is Collective.SEND_RECV:  # one phase on the outermost dimension the group spans (`send_recv`)
        net = system.network[int(np.max(group.outermost))]
        cost = dimension_cost(op, n_bytes, 2.0, net, system.device.hbm.rate)
        fixed, time = np.asarray(cost.fixed, float), np.asarray(cost.time, float)
    else:
        result = collective(op, n_bytes, group, system, algorithm, composition=composition)
        fixed = np.asarray(sum(np.asarray(d.fixed, float) for d in result.dimensions), float)
        time = np.asarray(result.cost.time, float)
    share = np.clip(np.divide(fixed, time, out=np.ones_like(time), where=time > 0), 0.0, 1.0)
    return float(share) if share.ndim == 0 else share


def row_latency_share(row: dict[str, str]) -> float:
    """`latency_share` of the collective a row measured, as the harness models it (Unsupported where the row
    does not run): the regime its error band is drawn from (`validation/collective_bands.py`)."""
    m = _modelled(row)
    return float(latency_share(m.op, m.size, m.group, m.system, m.algorithm))


def predict_collective(row: dict[str, str], trial: Mapping[str, object] | None = None,
                       domain: Mapping[str, object] | None = None) -> tuple[str, float, tuple[str, ...]]:
    """(what is compared, the predicted value in the row's unit, what was assumed) for a collective row:
    nccl-tests bus bandwidth in GB/s, or its time (us, ms, s)."""
    m = _modelled(row, trial, domain)
    metric, unit = clean(row.get("metric")), clean(row.get("unit"))
    size, group = m.size, m.group
    if m.op is Collective.SEND_RECV:
        time = float(send_recv(size, group, m.system).time)
    else:
        time = float(collective(m.op, size, group, m.system, m.algorithm).cost.time)
    notes = m.notes
    if metric.startswith("busbw") or "bus bandwidth" in metric:
        return "busbw [GB/s]", size / time * float(bus_factor(m.op, group.size)) / 1e9, notes
    if metric.startswith("algbw"):
        return "algbw [GB/s]", size / time / 1e9, notes
    if metric.startswith("time") or "latency" in metric:
        scale = {"us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0}.get(unit)
        if scale is None:
            raise Unsupported(f"unit {row.get('unit')!r}: a time in us, ms or s")
        return f"time [{unit}]", time / scale, notes
    raise Unsupported(f"metric {row.get('metric')!r}: not predicted (busbw, algbw or time of one collective)")
