"""Context parallelism for a static inference batch (Yang et al. 2024, arXiv:2411.01783): each cp rank
prefills 1/cp of every prompt and passes its K/V blocks around the ring behind the attention (pass-KV);
the cache stays sharded; a decode step merges the ranks' partial attention outputs with an all-gather."""

import itertools

import numpy as np
import pytest

from armillary.api import estimate, simulate
from armillary.comm.collectives import all_gather, send_recv
from armillary.errors import SpecError
from armillary.estimate.inference import replica_model
from armillary.estimate.inference_phases import prefill_pass
from armillary.plan.arrays import ModelArrays
from armillary.serving.run import serve_trace
from armillary.serving.trace import Trace
from armillary.specs.loading import load_model, load_strategy, load_system
from armillary.specs.workload import Inference

FP8 = {"tp": 8, "precision": "fp8", "attention": "flash3"}


def _replica(cp: int, input_len: int = 8192, model: str = "llama3.1-405b"):
    w = Inference(batch=2, input_len=input_len, output_len=16)
    spec = load_model(model)
    r = replica_model(ModelArrays.of(spec), load_strategy({**FP8, "cp": cp}), w, load_system("dgx-h100", 8 * cp))
    return r, w


def test_each_rank_prefills_its_share_of_the_prompts_and_of_the_attention():
    one, w = _replica(1)
    four, _ = _replica(4)
    tokens = w.batch * w.input_len
    assert prefill_pass(four, w).layers == pytest.approx(float(one.tokens_time(tokens / 4).layers), rel=1e-12)
    full, share = one.attention(w.input_len, 0.0, w.batch, decode=False), four.attention(w.input_len, 0.0, w.batch,
                                                                                       decode=False)
    assert share.flop == pytest.approx(full.flop / 4, rel=1e-12)
    # its Q and O, all K/V blocks once: the three blocks the ring brings in are read on top of its share
    received = 3 / 4 * w.batch * w.input_len * 2 * 8 * 128 / 8 * 2  # K and V of 8 KV heads over tp 8, bf16
    assert share.bytes == pytest.approx(full.bytes / 4 + received, rel=1e-12)


def test_the_kv_ring_hides_behind_the_attention_or_shows_what_it_cannot_hide():
    r, _ = _replica(16)
    block = 2 * 8192 / 16 * 2 * 8 * 128 / 8 * 2  # one rank's K/V block: 2 sequences x 512 tokens, bf16
    hop = float(send_recv(block, r.cp_group, r.system).time)
    assert r.cp_group.outermost > 0  # 16 nodes: the ring crosses the scale-out network
    assert r.ring_kv_time(2, 8192, 0.0) == pytest.approx(126 * 15 * hop, rel=1e-12)  # nothing to hide behind
    assert r.ring_kv_time(2, 8192, 126 * 15 * hop) == pytest.approx(0.0, abs=1e-12 * hop)  # as long as the ring
    assert r.ring_kv_time(2, 8192, 126 * 10 * hop) == pytest.approx(126 * 5 * hop, rel=1e-12)


def test_decode_merges_partial_outputs_and_reads_a_shard_of_the_cache():
    one, _ = _replica(1)
    four, _ = _replica(4)
    assert four.cache_bytes_per_token == pytest.approx(one.cache_bytes_per_token / 4, rel=1e-12)
    part = 3 * 128 / 8 * (128 + 1) * 2  # 3 sequences: heads / tp x (d_v + log-sum-exp), bf16
    expected = 126 * float(all_gather(4 * part, four.cp_group, four.system).time)
    assert four.merge_time(3.0) == pytest.approx(expected, rel=1e-12)
    assert one.merge_time(3.0) == 0.0
    # a cached token's share: each rank reads a quarter of the cache per decode step
    a1, _ = one.attention_time(one.attention(1.0, 100_000.0, 3.0), 3 * 100_000.0)
    a4, _ = four.attention_time(four.attention(1.0, 100_000.0, 3.0), 3 * 100_000.0)
    assert a4 < a1 / 3


@pytest.mark.parametrize("input_len", [8192, 32768, 131072])
def test_more_context_parallel_ranks_never_slow_a_long_prefill(input_len):
    ttft = [float(estimate("llama3.1-405b", "dgx-h100", {**FP8, "cp": cp},
                           {"kind": "inference", "batch": 1, "input_len": input_len, "output_len": 2},
                           gpus=8 * cp).ttft_s) for cp in (1, 2, 4, 8, 16)]
    assert all(b < a for a, b in itertools.pairwise(ttft)), ttft


def test_the_cache_of_a_longer_context_fits_over_more_ranks():
    w = {"kind": "inference", "batch": 1, "input_len": 131072, "output_len": 2}
    contexts = [estimate("llama3.1-405b", "dgx-h100", {**FP8, "cp": cp}, w, gpus=8 * cp).max_context
                for cp in (1, 4)]
    assert contexts[1] > 3 * contexts[0]


def test_published_128k_prefill_on_16_nodes():
    """Yang et al. 2024 (arXiv:2411.01783) abstract: Llama 3 405B (fp8 weights; bf16 ones do not fit 8 H100s),
    TP8 in each H100 node and CP16 across 16 nodes, prefills a 128K prompt in 3.8 s."""
    r = estimate("llama3.1-405b", "dgx-h100", {**FP8, "cp": 16},
                 {"kind": "inference", "batch": 1, "input_len": 131072, "output_len": 2}, gpus=128)
    assert r.feasible
    assert abs(float(r.ttft_s) / 3.8 - 1) < 0.2


def test_the_simulated_batch_agrees_with_the_estimate():
    s = simulate("llama3.1-405b", "dgx-h100", {**FP8, "cp": 4},
                 {"kind": "inference", "batch": 2, "input_len": 8192, "output_len": 8}, gpus=32)
    assert s.ttft_s == pytest.approx(float(s.estimate.ttft_s), rel=1e-6)
    assert s.tpot_s == pytest.approx(float(s.estimate.tpot_s), rel=1e-6)


def test_serving_says_it_runs_without_context_parallelism():
    r_spec = load_model("llama2-7b")
    trace = Trace(np.zeros(2), np.full(2, 64), np.full(2, 8))
    with pytest.raises(SpecError, match=r"strategy\.cp"):
        serve_trace(ModelArrays.of(r_spec), load_strategy({"cp": 2}), Inference(input_len=64, output_len=8),
                    load_system("dgx-h100", 2), 1, trace)
