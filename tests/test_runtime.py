"""The mixing runtime on 4 local processes (one spawn for all checks: starting torch is the slow part).

Every operation, dtype and size, including non-power-of-two sizes, pieces larger than a shm slot and
uneven all-to-all, must give the closed-form result through gloo, through shm and through a mixer that
alternates the two by size bucket; 1,000 random interleaved sync / async calls over both backends and two
communicators must finish (no deadlock: the launch has a timeout, the shm waits too) with every result
right; a DDP step through the mixer's hook must give the same gradients as plain gloo.
"""

from __future__ import annotations

import pytest

from armillary.runtime.table import RuntimeOp, TableEntry, TuningTable, bucket_of, entry_from_times

torch = pytest.importorskip("torch")

COUNTS = (1, 3, 17, 1000, 300_001)  # 300,001 float32 > the 1 MiB slot: several pieces


def _all_checks(rank: int, size: int) -> tuple[list[str], dict[str, int], float]:
    from armillary.runtime import checks
    from armillary.runtime.communicator import Communicator
    from armillary.runtime.dist import ddp_comm_hook

    failures = checks.correctness(rank, size, COUNTS)
    totals = checks.interleaved(rank, size, 1000, seed=20)
    # DDP: gradients through the mixer's hook equal those through gloo alone
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    x = torch.randn(5, 8) + rank
    grads = []
    for hooked in (False, True):
        ddp = torch.nn.parallel.DistributedDataParallel(
            torch.nn.Sequential(*[m for m in model]), bucket_cap_mb=0.0001)  # several buckets: both backends
        if hooked:
            ddp.register_comm_hook(Communicator(("gloo", "shm"), checks.alternating_table(size)), ddp_comm_hook)
        ddp.zero_grad()
        ddp(x).square().sum().backward()
        grads.append(torch.cat([p.grad.reshape(-1) for p in ddp.parameters()]))
    # the drop-in module: default-group calls through the mixer, other names are torch.distributed's
    import armillary.runtime.dist as rdist

    rdist.init_mixer(checks.alternating_table(size))
    t = torch.full((3,), float(rdist.get_rank()))
    rdist.all_reduce(t)
    work = rdist.broadcast(torch.zeros(2), 0, async_op=True)
    work.wait()
    if t.tolist() != [6.0] * 3 or sum(rdist.communicator().calls.values()) != 2:
        failures.append(f"rank {rank}: armillary.runtime.dist gave {t.tolist()}")
    return failures, totals, float((grads[0] - grads[1]).abs().max())


def test_mixer_is_correct_and_deadlock_free_on_four_processes():
    from armillary.runtime.launch import launch

    results = launch(_all_checks, 4, timeout_s=150, start_method="fork")
    failures = [f for r in results for f in r[0]]
    assert failures == []
    for _, totals, _ in results:  # both backends really ran, interleaved
        assert totals["gloo"] > 300 and totals["shm"] > 300 and totals["switches"] > 300
    assert max(r[2] for r in results) < 1e-5


def test_table_picks_the_row_of_the_bucket_else_the_nearest():
    rows = (TableEntry(op=RuntimeOp.ALL_REDUCE, dtype="float32", bucket=10, group_size=4, backend="shm"),
            TableEntry(op=RuntimeOp.ALL_REDUCE, dtype="float32", bucket=20, group_size=4, backend="gloo"))
    table = TuningTable(default="nccl", entries=rows)
    assert bucket_of(1024) == 10 and bucket_of(1025) == 11 and bucket_of(1) == 0
    assert table.choose(RuntimeOp.ALL_REDUCE, "float32", 1000, 4) == "shm"
    assert table.choose(RuntimeOp.ALL_REDUCE, "float32", 2**19, 4) == "gloo"  # bucket 19: nearest is 20
    assert table.choose(RuntimeOp.ALL_REDUCE, "bfloat16", 100, 4) == "shm"  # no bfloat16 rows: any dtype
    assert table.choose(RuntimeOp.ALL_REDUCE, "float32", 100, 8) == "nccl"  # no rows for 8 ranks
    assert table.choose(RuntimeOp.BROADCAST, "float32", 100, 4) == "nccl"


def test_entry_margin_is_the_runner_up_slowdown():
    entry = entry_from_times(RuntimeOp.ALL_GATHER, "float32", 12, 4, {"gloo": 3e-4, "shm": 1e-4})
    assert entry.backend == "shm" and entry.margin == pytest.approx(2.0)
