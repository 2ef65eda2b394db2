"""How rows name their GPU: the system preset of a GPU text (cloud instances, SXM boards, racks), the parts of
the same name no preset is, and the HBM capacity the text states."""

from __future__ import annotations

import re

from armillary.validation.reading import about_the_run
from armillary.validation.vocabulary import clean, first_named

# GPU text -> system preset; the first pattern that matches wins (cloud instances before their GPU, GB200
# before B200)
_GPU_SYSTEMS = (
    (re.compile(r"a3[\s-]?mega", re.I), "gcp-a3-mega"),
    (re.compile(r"\ba4-highgpu|\bgcp a4\b", re.I), "gcp-a4"),
    (re.compile(r"\bp5e\b", re.I), "aws-p5e"),
    (re.compile(r"\bp5\b", re.I), "aws-p5"),
    (re.compile(r"\bp4dn?\b", re.I), "aws-p4d"),
    (re.compile(r"\bnd[\s-]?h100[\s-]?v5\b", re.I), "azure-nd-h100-v5"),
    (re.compile(r"a100.*\b40\s*gb|a100[_-]40", re.I), "dgx-a100-40gb"),
    (re.compile(r"a100", re.I), "dgx-a100"),
    (re.compile(r"h800", re.I), "dgx-h800"),
    (re.compile(r"h200", re.I), "hgx-h200"),
    (re.compile(r"h100", re.I), "dgx-h100"),
    (re.compile(r"\bh20\b", re.I), "hgx-h20"),
    (re.compile(r"gb300|nvl72.*b300|b300.*nvl72", re.I), "gb300-nvl72"),
    (re.compile(r"b300", re.I), "dgx-b300"),
    (re.compile(r"gb200", re.I), "gb200-nvl72"),
    (re.compile(r"b200", re.I), "dgx-b200"),
    (re.compile(r"mi300x", re.I), "mi300x-8"),
    (re.compile(r"mi325x", re.I), "mi325x-8"),
    (re.compile(r"mi355x", re.I), "mi355x-8"),
    (re.compile(r"gaudi\s*3", re.I), "hls-gaudi3"),
    # ("v5p", "v6e" alone: Google's names of the chips and their slices, "v5p-128", "v6e-256"; v4 alone is not)
    (re.compile(r"tpu\s*v5p|\bv5p\b", re.I), "tpu-v5p-slice"),
    (re.compile(r"tpu\s*v4", re.I), "tpu-v4-pod-slice"),
    (re.compile(r"tpu\s*v6e|\bv6e\b|trillium", re.I), "tpu-v6e-slice"),
    # "TPU v7": Google's seventh-generation TPU, Ironwood (Cloud TPU's "TPU7x"); no other v7 exists
    (re.compile(r"tpu\s*7x|ironwood|tpu\s*v7\b", re.I), "tpu7x-slice"),
    (re.compile(r"trn2|trainium\s*2", re.I), "trn2-16"),
)


# parts of the same name that no shipped system is: PCIe cards and the NVL PCIe boards (H100 NVL, H200 NVL: lower
# power and clocks, no NVSwitch; NVIDIA's H100 / H200 datasheets), Grace Hopper's GH200 superchip (its own HBM and
# the CPU over NVLink-C2C), GB200 NVL2 / NVL4 boards (not an NVL72 rack; NVIDIA GB200 NVL4 announcement, SC24), the
# NVL36 rack (36 GPUs to an NVLink domain, half the NVL72's; NVIDIA GB200 NVL72 page, "NVL36x2")
OTHER_PARTS = re.compile(r"pci-?e|\b[hg]\d{2,3}\s*nvl\b(?!-?\s?(?:36|72|144)\b)|\bgh200\b|"
                         r"\bnvl\s*(?:[24]|36(?:\s*x\s*2)?)\b", re.I)


def system_preset_for(gpu: str | None) -> str | None:
    """The system preset of a row's `gpu` text; None when no shipped system has that GPU, or the text names
    another part of its name (`OTHER_PARTS`: "H100 PCIe", "H200 NVL", "GH200"). A clause about something else
    ("llm-analysis README says 40GB") is not read."""
    text = "; ".join(about_the_run(gpu or ""))
    if OTHER_PARTS.search(text):
        return None
    return first_named(text, _GPU_SYSTEMS)


def memory_gb_of(gpu: str | None) -> float | None:
    """The HBM capacity a GPU text states ("H100 SXM 96GB HBM2e" -> 96): the size written next to HBM, else
    the largest size named (a second, smaller size is usually the other variant or host memory); never a size
    said to be the node's total or host memory ("8x H100 80GB (640GB total)" -> 80)."""
    text = clean("; ".join(about_the_run(gpu or "")))
    # a size of the node or the host is not one GPU's: "640GB total", "2 TB system memory", "480GB LPDDR5X"; nor
    # is a bandwidth: "900GB/s" (NVLink, MLPerf's accelerator_interconnect), "4.8 TB/s" (the HBM's)
    sizes = [(float(m.group(1)), m.end()) for m in re.finditer(r"(\d+(?:\.\d+)?)\s*gi?b\b(?!\s*(total|aggregate|"
                                                                r"per (node|server|host|system)|system|host|cpu|"
                                                                r"l?pddr\w*|ddr\w*|nvme|ssd|/\s*s|per s))", text)]
    if not sizes:
        return None
    beside_hbm = [s for s, end in sizes if re.match(r"\s*(of\s*)?hbm", text[end:])]
    return beside_hbm[0] if beside_hbm else max(s for s, _ in sizes)
