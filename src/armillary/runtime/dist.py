"""torch.distributed with its collectives dispatched by a mixing communicator: a training script changes
`import torch.distributed as dist` into `import armillary.runtime.dist as dist` and keeps the rest.

`init_process_group(..., table=..., backends=...)` initializes torch.distributed as usual, then builds one
`Communicator` over the world (like torch's default group, the one piece of process-wide state here).
Calls on the default group go through it; calls on an explicit group, and every other name, are
torch.distributed's own. `ddp_comm_hook` is the DistributedDataParallel communication hook.
"""

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as _dist

from armillary.errors import SpecError
from armillary.runtime.communicator import SUM, Communicator, same_table
from armillary.runtime.table import TuningTable, load_table

_WORLD: list[Communicator] = []  # the default communicator, as torch keeps its default group


def init_process_group(backend: str = "gloo", *args: Any, table: TuningTable | Path | str | None = None,
                       backends: Sequence[str] = ("gloo", "shm"), **kwargs: Any) -> None:
    """torch.distributed.init_process_group, then the world's mixing communicator."""
    _dist.init_process_group(backend, *args, **kwargs)
    init_mixer(table, backends)


def init_mixer(table: TuningTable | Path | str | None = None, backends: Sequence[str] = ("gloo", "shm")) -> None:
    """The world's mixing communicator, where torch.distributed is already initialized (by a launcher)."""
    try:
        loaded = load_table(Path(table)) if isinstance(table, str | Path) else table
    except SpecError as err:  # the other ranks are about to compare tables: tell them, then fail here too
        same_table(None, range(_dist.get_world_size()), str(err))
        raise
    _WORLD[:] = [Communicator(backends, loaded)]


def communicator() -> Communicator:
    if not _WORLD:
        raise RuntimeError("call armillary.runtime.dist.init_process_group first")
    return _WORLD[0]


def destroy_process_group(group: Any = None) -> None:
    if group is None:
        _WORLD.clear()
    _dist.destroy_process_group(group)


def _mixed(group: Any) -> bool:
    return bool(_WORLD) and (group is None or group is _dist.group.WORLD)


def all_reduce(tensor: torch.Tensor, op: Any = SUM, group: Any = None, async_op: bool = False) -> Any:
    if _mixed(group):
        return communicator().all_reduce(tensor, op, async_op)
    return _dist.all_reduce(tensor, op, group, async_op)


def all_gather_into_tensor(output: torch.Tensor, tensor: torch.Tensor, group: Any = None,
                           async_op: bool = False) -> Any:
    if _mixed(group):
        return communicator().all_gather_into_tensor(output, tensor, async_op)
    return _dist.all_gather_into_tensor(output, tensor, group, async_op)


def reduce_scatter_tensor(output: torch.Tensor, tensor: torch.Tensor, op: Any = SUM, group: Any = None,
                          async_op: bool = False) -> Any:
    if _mixed(group):
        return communicator().reduce_scatter_tensor(output, tensor, op, async_op)
    return _dist.reduce_scatter_tensor(output, tensor, op, group, async_op)


def all_to_all_single(output: torch.Tensor, tensor: torch.Tensor, output_split_sizes: Sequence[int] | None = None,
                      input_split_sizes: Sequence[int] | None = None, group: Any = None,
                      async_op: bool = False) -> Any:
    if _mixed(group):
        return communicator().all_to_all_single(output, tensor, output_split_sizes, input_split_sizes, async_op)
    return _dist.all_to_all_single(output, tensor, output_split_sizes, input_split_sizes, group, async_op)


def broadcast(tensor: torch.Tensor, src: int, group: Any = None, async_op: bool = False) -> Any:
    if _mixed(group):
        return communicator().broadcast(tensor, src, async_op)
    return _dist.broadcast(tensor, src, group, async_op)


def barrier(group: Any = None, async_op: bool = False) -> Any:
    if _mixed(group):
        return communicator().barrier(async_op)
    return _dist.barrier(group, async_op)


def send(tensor: torch.Tensor, dst: int, group: Any = None, tag: int = 0) -> None:
    if _mixed(group):
        communicator().send(tensor, dst)
    else:
        _dist.send(tensor, dst, group, tag)


def recv(tensor: torch.Tensor, src: int, group: Any = None, tag: int = 0) -> Any:
    if _mixed(group):
        communicator().recv(tensor, src)
        return src
    return _dist.recv(tensor, src, group, tag)


def isend(tensor: torch.Tensor, dst: int, group: Any = None, tag: int = 0) -> Any:
    return communicator().isend(tensor, dst) if _mixed(group) else _dist.isend(tensor, dst, group, tag)


def irecv(tensor: torch.Tensor, src: int, group: Any = None, tag: int = 0) -> Any:
    return communicator().irecv(tensor, src) if _mixed(group) else _dist.irecv(tensor, src, group, tag)


def ddp_comm_hook(comm: Communicator, bucket: _dist.GradBucket) -> torch.futures.Future[torch.Tensor]:
    """DistributedDataParallel hook: the bucket's mean over the ranks through the mixer
    (`model.register_comm_hook(comm, ddp_comm_hook)`). DDP checks these annotations at run time, so this
    module does not postpone them."""
    tensor = bucket.buffer()
    tensor.div_(comm.size)
    work = comm.all_reduce(tensor, async_op=True)
    assert work is not None
    return work.get_future().then(lambda _: tensor)


def __getattr__(name: str) -> Any:
    """Everything else is torch.distributed's."""
    return getattr(_dist, name)
