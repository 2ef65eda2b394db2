"""trtllm-bench throughput rows (TensorRT-LLM 1.x, PyTorch backend): the runtime limits trtllm-bench's
heuristic sets when a run states neither --max_batch_size nor --max_num_tokens."""

import pytest

from armillary.validation.serving_rows import trtllm_bench_limits


def test_limits_by_hand() -> None:
    """Llama 3.1 8B fp8 on 141 GiB, 16-bit KV (2 x 32 layers x 8 heads x 128 x 2 bytes), 128 / 2048 at 0.9:
    (141 - 8.03e9 / 2^30) x 0.9 / (131072 / 2^30 x 2176) = 452.4 requests -> 512 (a multiple of 128 below
    1024); 452.4 x (1 + 128 / 2048) = 480.7 tokens -> 2048 (the floor), above the 128 + 512 a prompt needs."""
    assert trtllm_bench_limits(8030261248, 1.0, 131072, 141.0, 1, 1, 128, 2048, 0.9) == (512, 2048)
    # fp8 KV: 904.8 requests -> 1024 (a multiple of 128); 961 tokens -> 2048
    assert trtllm_bench_limits(8030261248, 1.0, 65536, 141.0, 1, 1, 128, 2048, 0.9) == (1024, 2048)


@pytest.mark.parametrize("isl, osl, expected", [
    (128, 128, (4096, 8192)),  # 3845 requests -> 4096 (a multiple of 256); 7690 tokens -> 8192 (of 512)
    (20000, 2000, (64, 20064)),  # 43.7 requests -> the floor of 64; the tokens at least a prompt plus the batch
    (2048, 128, (512, 8192)),  # 452.4 requests -> 512; 452.4 x 17 = 7690 tokens -> 8192 (a multiple of 512)
])
def test_limits_rounding(isl: int, osl: int, expected: tuple[int, int]) -> None:
    assert trtllm_bench_limits(8030261248, 1.0, 131072, 141.0, 1, 1, isl, osl, 0.9) == expected


def test_chunked_prefill_keeps_the_heuristic_tokens() -> None:
    assert trtllm_bench_limits(8030261248, 1.0, 131072, 141.0, 1, 1, 20000, 2000, 0.9, chunked=True) == (64, 2048)

