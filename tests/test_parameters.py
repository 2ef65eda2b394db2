"""Parameter counts against the papers' formulas and published model sizes."""

import pytest
from conftest import gpt

from armillary import Model, parameters


@pytest.mark.parametrize(("layers", "hidden", "heads"), [(24, 2304, 24), (96, 12288, 96), (128, 25600, 160)])
def test_gpt_matches_sc21_eq2(layers, hidden, heads):
    """SC'21 Eq. 2: P = 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)); Eq. 2 omits the final LayerNorm (2h)
    and counts one (tied) embedding matrix."""
    V, s = 51200, 2048
    eq2 = 12 * layers * hidden**2 * (1 + 13 / (12 * hidden) + (V + s) / (12 * layers * hidden))
    assert parameters(gpt(layers, hidden, heads)) == pytest.approx(eq2 + 2 * hidden, rel=1e-12)


def test_llama2_7b_exact():
    """Llama 2 7B has 6,738,415,616 parameters (Hugging Face checkpoint)."""
    m = Model(layers=32, hidden=4096, heads=32, ffn=11008, vocab=32000, mlp="swiglu", norm="rmsnorm",
                   position="rotary", max_seq_len=4096)
    assert parameters(m) == 6_738_415_616


def test_gqa_reduces_kv_projection():
    """Llama 3 8B: 8 KV heads of 128 -> K and V projections are 4096 x 1024 each; 8,030,261,248 total."""
    m = Model(layers=32, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=128256, mlp="swiglu",
                   norm="rmsnorm", position="rotary", max_seq_len=8192)
    assert parameters(m) == 8_030_261_248
