"""The quantize kernels of a block-scaled recipe (mxfp8, nvfp4, mxfp4): HBM traffic per GEMM operand.

Every input of a GEMM run in a block-scaled format is quantized by a kernel of its own before the GEMM
(Transformer Engine's quantizers; docs/fp4.md): it reads the 16-bit tensor (twice for NVFP4, whose per-tensor
scale needs the tensor's amax first: `specs.formats`) and writes it in the format in both layouts the
training GEMMs read, rowwise (blocks along the forward GEMM's K) and columnwise (along the weight gradient's
K), scales included. Forward quantizes the GEMMs' inputs, backward their output gradients. Per-tensor fp8
(code 0) has no term here: its casts are inside the fp8 efficiency curves the presets were calibrated with.
Weights are quantized once per step and cached over the micro-batches (Transformer Engine's
is_first_microbatch), which is left out. All functions broadcast over arrays.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from armillary.numerics import Array, maximum, where
from armillary.plan.codes import BLOCK_FORMAT
from armillary.specs.formats import FORMATS
from armillary.workload.ops import Op, stream

if TYPE_CHECKING:
    from armillary.workload.experts import ExpertsForward
    from armillary.workload.transformer import LayerForward

# the block-scaled recipe keeps bf16 activations and gradients (Transformer Engine; arXiv:2509.25149 §4)
SOURCE_BYTES = 2.0
LAYOUTS = 2  # rowwise and columnwise copies (TE's quantizers with rowwise=True, columnwise=True for training)
# per plan.codes.BLOCK_FORMAT code: bytes per element (scales included) and reads of the source
_FORMATS = [FORMATS.get(p.value) for p in BLOCK_FORMAT.members]
_BYTES = np.array([0.0 if f is None else f.bytes for f in _FORMATS])
_PASSES = np.array([0.0 if f is None else float(f.quantize_passes) for f in _FORMATS])
# per code, quantize_bytes' bytes per element (read SOURCE_BYTES per pass, write LAYOUTS copies), computed once
_PER_ELEMENT = _PASSES * SOURCE_BYTES + LAYOUTS * _BYTES
# as Python floats for one configuration (the same float64 values: no numpy scalar arithmetic per call)
_BYTES_OF, _PER_ELEMENT_OF = [float(x) for x in _BYTES], [float(x) for x in _PER_ELEMENT]


def format_bytes(block_format: Array) -> Array:
    """Bytes per element of the block format of each code (0 where none)."""
    return _BYTES[np.asarray(block_format, dtype=int)] if isinstance(block_format, np.ndarray) else (
        _BYTES_OF[int(block_format)])


def quantize_bytes(elements: Array, block_format: Array) -> Array:
    """HBM traffic of quantizing `elements` bf16 elements into the block format of each code, both layouts:
    read SOURCE_BYTES per pass, write LAYOUTS copies at the format's bytes (0 for code 0: no block format)."""
    if isinstance(block_format, np.ndarray):
        return elements * _PER_ELEMENT[np.asarray(block_format, dtype=int)]
    return elements * _PER_ELEMENT_OF[int(block_format)]


def bf16_share(fw: LayerForward, bf16_layers: Array) -> Array:
    """The share of the model's layers a quantized recipe runs wholly in bf16 (`Strategy.quantized_gemms`)."""
    return where(fw.layers > 0, bf16_layers / maximum(fw.layers, 1.0), 0.0)


def quantize_ops(fw: LayerForward, experts: ExpertsForward | None, block_format: Array, projections: Array,
                 bf16_layers: Array) -> tuple[Op, Op]:
    """(forward, backward) quantize kernels of one layer under a block-scaled recipe: the inputs and output
    gradients of the GEMMs it runs in its format, outside the layers it keeps in bf16 (their share) and the
    attention projections where it keeps them in fp8 or bf16 (`projections` > 0, `plan.codes.PROJECTIONS`);
    no traffic without a block format."""
    keep = 1 - bf16_share(fw, bf16_layers)
    # the attention projections run in the format (not where the recipe or the checkpoint keeps them wider)
    quantized = 0.0 if fw.sixteen_bit_attention else where(projections == 0, 1.0, 0.0)
    (attention_in, mlp_in), (attention_out, mlp_out) = fw.gemm_inputs, fw.gemm_outputs
    inputs = keep * (quantized * attention_in + mlp_in + (experts.gemm_inputs if experts is not None else 0.0))
    outputs = keep * (quantized * attention_out + mlp_out + (experts.gemm_outputs if experts is not None else 0.0))
    return stream(quantize_bytes(inputs, block_format)), stream(quantize_bytes(outputs, block_format))
