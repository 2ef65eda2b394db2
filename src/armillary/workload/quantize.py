"""The quantize kernels of a block-scaled recipe (mxfp8, nvfp4, mxfp4): HBM traffic per GEMM operand.

Every input of a GEMM run in a block-scaled format is quantized by a kernel of its own before the GEMM
(Transformer Engine's quantizers; docs/fp4.md): it reads the 16-bit tensor (twice for NVFP4, whose per-tensor
scale needs the tensor's amax first: `specs.formats`) and writes it in the format in both layouts the
training GEMMs read, rowwise (blocks along the forward GEMM's K) and columnwise (along the weight gradient's
K), scales included, in one pass (TE v2.9 transformer_engine/common/util/cast_kernels.cuh `mxfp8_quantize`:
with both usages set, one BIDIMENSIONAL launch of `cast_mxfp8_2D_kernel` that loads each tile once and stores
both layouts). Forward quantizes the GEMMs' inputs, backward their output gradients. Per-tensor fp8
(code 0) has no term here: its casts are inside the fp8 efficiency curves the presets were calibrated with.
Weights are quantized once per step and cached over the micro-batches (Transformer Engine's
is_first_microbatch), which is left out. All functions broadcast over arrays.

Re-quantization (`quantize_ops`): where Megatron-Core keeps a GEMM's 16-bit input instead of its quantized
copy, Transformer Engine casts it rowwise only in forward and casts the kept tensor again, columnwise only, in
backward (`save_original_input`: TE v2.9 pytorch/module/linear.py l.224-226 and l.617-633, grouped_linear.py
l.96-102 and l.392-406): one more read of the 16-bit tensor, each layout still written once. Megatron-Core
(core_v0.15.0) does so under an fp8-family recipe (`config.fp8`: MXFP8 of the block formats, `_REQUANTIZED`)
for the attention output projection, every recipe but delayed scaling, from TE 2.6 (transformer/attention.py
l.205-217, multi_latent_attention.py l.178-189) and for the experts' down projection when the experts'
activation is recomputed (transformer/moe/experts.py l.808-815, selective `moe_act`). MLA's up-projections
recomputed (selective `mla_up_proj`, multi_latent_attention.py l.783-785) run first under torch.no_grad
(tensor_parallel/random.py CheckpointWithoutOutputFunction.forward l.502: no input gradient is needed, so the
cast is rowwise only) and again in backward with gradients (l.576: both layouts).
The cast kernels' own rate: no text-readable measurement of TE 2.9's kernel exists (docs/fp4.md), so they
stream at the device's rate like every other element-wise kernel.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from armillary.numerics import Array, maximum, ratio_or_zero, where
from armillary.plan.codes import BLOCK_FORMAT
from armillary.specs.formats import FORMATS, MXFP8
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
# per code, the bytes one cast reads per element (SOURCE_BYTES per pass), computed once
_READ = _PASSES * SOURCE_BYTES
# per code, 1 where Megatron-Core's re-quantizing hooks apply: they test `config.fp8`, which its MXFP8 recipe
# sets (fp8_recipe 'mxfp8') and its NVFP4 recipe does not (`config.fp4`, transformer/transformer_config.py
# l.408-416 at core_v0.15.0); it has no MXFP4 training recipe
_REQUANTIZED = np.array([1.0 if f is MXFP8 else 0.0 for f in _FORMATS])
# as Python floats for one configuration (the same float64 values: no numpy scalar arithmetic per call)
_BYTES_OF, _READ_OF = [float(x) for x in _BYTES], [float(x) for x in _READ]
_REQUANTIZED_OF = [float(x) for x in _REQUANTIZED]


def format_bytes(block_format: Array) -> Array:
    """Bytes per element of the block format of each code (0 where none)."""
    return _BYTES[np.asarray(block_format, dtype=int)] if isinstance(block_format, np.ndarray) else (
        _BYTES_OF[int(block_format)])


def cast_bytes(elements: Array, block_format: Array, layouts: Array) -> Array:
    """HBM traffic of one quantize call over `elements` bf16 elements into the block format of each code:
    read SOURCE_BYTES per pass of the format, write `layouts` copies (1 rowwise or columnwise only, 2 both) at
    the format's bytes; 0 for code 0 (no block format)."""
    if isinstance(block_format, np.ndarray):
        codes = np.asarray(block_format, dtype=int)
        return elements * (_READ[codes] + layouts * _BYTES[codes])
    code = int(block_format)
    return elements * (_READ_OF[code] + layouts * _BYTES_OF[code])


def quantize_bytes(elements: Array, block_format: Array) -> Array:
    """HBM traffic of quantizing `elements` bf16 elements into the block format of each code, both layouts in
    one call (`cast_bytes` with LAYOUTS)."""
    return cast_bytes(elements, block_format, LAYOUTS)


def bf16_share(fw: LayerForward, bf16_layers: Array) -> Array:
    """The share of the model's layers a quantized recipe runs wholly in bf16 (`Strategy.quantized_gemms`)."""
    return where(fw.layers > 0, bf16_layers / maximum(fw.layers, 1.0), 0.0)


def out_proj_inputs(fw: LayerForward) -> Array:
    """Elements of the attention output projection's input (tokens x heads x value width on this rank): the
    attention GEMMs' inputs (`LayerForward.gemm_inputs`: the QKV input, tokens x hidden, and this) less the
    QKV input, which is the output projection's output (its FLOPs / 2 / its K, `Op.depth`)."""
    return fw.gemm_inputs[0] - ratio_or_zero(fw.out_proj.flop, 2 * fw.out_proj.depth)


def quantize_ops(fw: LayerForward, experts: ExpertsForward | None, block_format: Array, projections: Array,
                 bf16_layers: Array, moe_act_recompute: Array = 0.0, mla_up_recompute: Array = 0.0,
                 latent_inputs: Array = 0.0) -> tuple[Op, Op]:
    """(forward, backward) quantize kernels of one layer under a block-scaled recipe: the inputs and output
    gradients of the GEMMs it runs in its format, outside the layers it keeps in bf16 (their share) and the
    attention projections where it keeps them in fp8 or bf16 (`projections` > 0, `plan.codes.PROJECTIONS`);
    no traffic without a block format. The re-quantizations of the module docstring: the output projection's
    input always; the experts' down-projection input where `moe_act_recompute` (0/1: selective recomputation
    of the experts' activation in effect); the `latent_inputs` elements of MLA's up-projection inputs (tokens x
    (query + KV latent width)), cast once like any GEMM input, or twice where `mla_up_recompute` (0/1)."""
    keep = 1 - bf16_share(fw, bf16_layers)
    requantized = (_REQUANTIZED[np.asarray(block_format, dtype=int)] if isinstance(block_format, np.ndarray) else
                   _REQUANTIZED_OF[int(block_format)])
    # the attention projections run in the format (not where the recipe or the checkpoint keeps them wider)
    quantized = 0.0 if fw.sixteen_bit_attention else where(projections == 0, 1.0, 0.0)
    (attention_in, mlp_in), (attention_out, mlp_out) = fw.gemm_inputs, fw.gemm_outputs
    expert_in = experts.gemm_inputs if experts is not None else 0.0
    expert_out = experts.gemm_outputs if experts is not None else 0.0
    # inputs kept in bf16 and cast again in backward (one layout each pass): the output projection's, the
    # experts' down projection's under moe_act recomputation
    kept = requantized * (quantized * out_proj_inputs(fw) + (
        moe_act_recompute * experts.received_tokens * experts.ffn_shard if experts is not None else 0.0))
    latent, recast = quantized * latent_inputs, requantized * mla_up_recompute
    both_in = quantized * attention_in + mlp_in + expert_in - kept + (1 - recast) * latent
    forward = keep * (quantize_bytes(both_in, block_format) + cast_bytes(kept + recast * latent, block_format, 1))
    outputs = quantized * attention_out + mlp_out + expert_out
    backward = keep * (quantize_bytes(outputs + recast * latent, block_format) + cast_bytes(kept, block_format, 1))
    return stream(forward), stream(backward)
