"""A runtime that mixes torch.distributed backends per call (needs torch: the `commbench` extra).

- `table`: the tuning table (no torch needed).
- `shm`, `shm_backend`: the project's shared-memory CPU backend, registered with torch.distributed as "shm".
- `communicator`: one process group per backend over the same ranks, each call dispatched per the table,
  with deadlock-free ordering across backends.
- `dist`: a torch.distributed-compatible function set and a DDP communication hook.
- `launch`: n local processes with torch.distributed initialized (tests, tuning, benchmarks).

Nothing here imports torch until a torch-backed module is imported.
"""
