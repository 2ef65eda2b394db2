"""The compute fabric a network description names: its clauses about the compute network, the fabric family
its words name, the NICs' bytes/s per GPU it states, and the fabric preset they make."""

from __future__ import annotations

import re

from armillary.validation.vocabulary import clean

# a clause about another network than the compute fabric: storage, management, front-end, a DPU
_OTHER_NETWORK = re.compile(r"storage|management|\bmgmt\b|bluefield|\bdpus?\b|front-?end|gvnic|out-of-band|in-band|"
                            r"\bboot\b|\bethernet for (?:the )?(?:host|cpu)")
# the fabric families a row's words name, in the order they are tried (EFA and TCPXO rows may also say RDMA or
# Ethernet; a Pollara NIC runs RoCE over Ethernet)
_FAMILY_WORDS = (
    ("efa", re.compile(r"\befa(?:v\d)?\b|elastic fabric adapter")),  # "EFAv3" (AWS p5en / p6 pages)
    ("tcpxo", re.compile(r"\btcpxo?\b|gpudirect-tcpx")),
    ("pollara", re.compile(r"pollara|\bainic\b")),
    ("omni-path", re.compile(r"omni-?path|\bopa\b")),
    ("roce", re.compile(r"\broce(?:v2)?\b|rdma over converged|spectrum-x|rdma cluster network|\bgib\b")),
    ("infiniband", re.compile(r"infiniband|\bib\b|\b[nhex]dr\b|quantum-?2")),
    ("ethernet", re.compile(r"ethernet|\bgbe\b|\btcp\b")),
)
_IB_GENERATIONS = {"edr": 100e9, "hdr": 200e9, "ndr": 400e9, "xdr": 800e9}  # Gb/s per port (IBTA)
# "400 Gb/s", "400Gbps", "400GbE", and a bare "400G" only at a port speed (IEEE 802.3 / IBTA: 100, 200, 400,
# 800): "8x H100 80G" names the GPUs' memory, not their NICs
_RATE = r"(\d+(?:\.\d+)?)\s*([tg])(?:b(?:it)?(?:/s|ps)|bps|be\b|(?<=\b(?:100|200|400|800)g)\b)"
_COUNT_RATE = re.compile(r"(\d+)\s*[x\u00d7]\s*(?:(\d+)\s*[x\u00d7]\s*)?(?:[a-z][\w\-./]*\s+){0,4}?" + _RATE)
_TOTAL = re.compile(r"=\s*" + _RATE + r"\s*(?:per|/)\s*(node|host|instance|server|tray)")
_COUNT_ONLY = re.compile(r"(\d+)\s*[x\u00d7]\s*(?:[a-z][\w\-./]*\s+){0,3}?\b([nhex]dr)\b")
_NICS_PER_GPU = re.compile(r"(\d+)\s*(?:nics?|hcas?|ports?|cards?)?\s*per\s+gpu\b")
_PER_UNIT = re.compile(r"per\s+(?:(\d+)-gpu\s+)?(gpu|node|host|instance|server|tray)\b")

# InfiniBand ports split to half their generation's rate: NDR200 (200 Gb/s: two NDR lanes of a 400 Gb/s port),
# HDR100 (100 Gb/s); NVIDIA's ConnectX-7 and Quantum-2 product briefs name them so
_SPLIT_PORT = re.compile(r"\b(ndr\s?200|hdr\s?100)\b")


def split_port_named(text: str) -> str | None:
    """The split InfiniBand port a compute-network text names ("NDR200", "HDR100"); None when it names none."""
    found = _SPLIT_PORT.search(text)
    return found.group(1) if found else None


def compute_network_text(text: str) -> str:
    """The parts of a network description about the compute fabric: clauses (split at ; , ( ) + and "plus")
    about storage, management, front-end networks or a DPU are left out, NCCL_* settings are removed (a
    RoCE row's NCCL_IB_HCA names the verbs API, not InfiniBand), and a port's speed glued to its generation is
    written as a rate ("NDR200" -> "ndr 200 gb/s")."""
    text = re.sub(r"nccl_\w+\s*=\s*\S+", " ", clean(text))
    # a port named with its speed glued on ("NDR400", "NDR200", "HDR100"): the generation and the port's rate
    text = re.sub(r"\b([nhx]dr)(100|200|400|800)\b", r"\1 \2 gb/s", text)
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
