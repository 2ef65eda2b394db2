"""`collective --json` says which protocols were not offered (comm/explain.py, patch_S_1)."""

import numpy as np

from armillary.comm.explain import explain_sweep
from armillary.comm.sweep import group_of
from armillary.specs.communication import Collective
from armillary.specs.loading import load_system


def test_explain_names_the_protocols_not_offered():
    """A3 Mega (Google's TCPXO profile: NCCL_PROTO=Simple,LL128): LL128 at 64 KiB, LL named as not offered;
    DGX H100 on InfiniBand states no restriction and says nothing of it."""
    a3 = load_system("gcp-a3-mega", 16)
    why = explain_sweep(Collective.ALL_REDUCE, np.array([65536.0]), group_of(a3, 16), a3)[0]
    assert why["protocol"] == "LL128" and why["protocols"] == ["LL128", "Simple"]
    assert "LL not offered here" in why["why"]
    dgx = load_system("dgx-h100", 16)
    why = explain_sweep(Collective.ALL_REDUCE, np.array([65536.0]), group_of(dgx, 16), dgx)[0]
    assert why["protocols"] == ["LL", "LL128", "Simple"] and "not offered" not in why["why"]
