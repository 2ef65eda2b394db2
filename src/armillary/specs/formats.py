"""Block-scaled number formats (microscaling): elements of a few bits, each block of them sharing a scale.

A block-scaled tensor stores `element_bits` per element plus one `scale_bits` scale per `block` elements
along the GEMM's reduction dimension, and NVFP4 one more FP32 scale per tensor (negligible per element).
Sources: OCP Microscaling Formats (MX) Specification v1.0 (2023) §5 (MXFP8 E4M3/E5M2 and MXFP4 E2M1
elements, blocks of 32, an E8M0 scale); NVIDIA, "Pretraining Large Language Models with NVFP4"
(arXiv:2509.25149) §2 (NVFP4: E2M1 elements, blocks of 16, an E4M3 scale, an FP32 scale per tensor).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class BlockScaling:
    """One block-scaled format: bits per element, elements per scale block, bits per scale."""

    element_bits: int
    block: int
    scale_bits: int
    quantize_passes: int  # reads of a 16-bit tensor to quantize it: 2 with a per-tensor amax first (NVFP4)

    @property
    def bits(self) -> float:
        """Stored bits per element, the block scales included: NVFP4 4 + 8/16 = 4.5, MXFP4 4 + 8/32 = 4.25,
        MXFP8 8 + 8/32 = 8.25."""
        return self.element_bits + self.scale_bits / self.block

    @property
    def bytes(self) -> float:
        return self.bits / 8


# NVFP4's per-tensor FP32 scale needs the tensor's amax before its blocks are cast: Transformer Engine's
# NVFP4Quantizer::quantize (transformer_engine/pytorch/csrc/quantizer.cpp) runs nvte_compute_amax_with_config
# (or nvte_hadamard_transform_amax) and then nvte_quantize_v2, two reads of the input; MXFP8Quantizer derives
# each block's E8M0 scale from that block in the one casting pass (OCP MX v1.0 §6.3)
MXFP8 = BlockScaling(element_bits=8, block=32, scale_bits=8, quantize_passes=1)
NVFP4 = BlockScaling(element_bits=4, block=16, scale_bits=8, quantize_passes=2)
MXFP4 = BlockScaling(element_bits=4, block=32, scale_bits=8, quantize_passes=1)
# AQT's dynamic int8 (google/aqt aqt/jax/v2/config.py config_v3 with fwd_bits = dlhs_bits = drhs_bits = 8, as
# MaxText layers/quantizations.py _get_int8_quant_config builds it for quantization=int8): int8 elements, one fp32
# scale per channel from the abs-max over the whole contraction (a block as long as the reduction: under 0.01 bit
# per element at K >= 4096, not counted), found in a pass of its own before the cast (2 reads, as NVFP4's amax)
INT8 = BlockScaling(element_bits=8, block=1, scale_bits=0, quantize_passes=2)
FORMATS = {"mxfp8": MXFP8, "nvfp4": NVFP4, "mxfp4": MXFP4, "int8": INT8}

# bytes per element of the plain formats (int4: two per byte, weight-only quantization)
_PLAIN_BYTES = {"fp32": 4.0, "tf32": 4.0, "bf16": 2.0, "fp16": 2.0, "fp8": 1.0, "int8": 1.0, "int4": 0.5}


def element_bytes(name: str) -> float:
    """Stored bytes per element of a precision, a block-scaled format's scales included (NVFP4: 4.5 bits)."""
    block = FORMATS.get(name)
    return block.bytes if block is not None else _PLAIN_BYTES[name]
