"""The system a collective row ran on (its preset, compute fabric, NICs per GPU, NVLink SHARP, NVLink domain),
the fabric class its residuals are kept by, and that system sized to the row."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from armillary.comm.channels import ChannelSettings, with_channels
from armillary.comm.fabrics import fabric, fabrics, nvlink_domain, rack_scale, with_fabric, with_fabric_nvls_off
from armillary.specs.loading import load_system
from armillary.specs.system import System
from armillary.validation.collective_reading import nvls_enabled
from armillary.validation.fabric_words import compute_network_text, fabric_family, fabric_of, nic_bandwidth_per_gpu
from armillary.validation.gpu_words import system_preset_for
from armillary.validation.row_columns import Unsupported, int_column
from armillary.validation.vocabulary import clean


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
