"""Where a search's blocks run: in this process (`serial`), over local processes (`process_pool`) or over a Dask
cluster (`dask_cluster`). An executor takes the block function and the waves of (start, stop) blocks and yields
each block's result; the search merges them in any order."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from typing import Any, TypeVar

from armillary.errors import MissingExtra, SpecError

R = TypeVar("R")

CONNECT_TIMEOUT_S = 10  # a Dask scheduler that does not answer by then is reported, not waited for

Waves = Iterable[list[tuple[int, int]]]
Executor = Callable[[Callable[[int, int], Any], Waves], Iterator[Any]]


def serial(fn: Callable[[int, int], R], waves: Waves) -> Iterator[R]:
    return (fn(a, b) for wave in waves for a, b in wave)


def process_pool(workers: int | None = None) -> Executor:
    """Blocks over local processes (results in submission order); one pool serves every wave."""

    def run(fn: Callable[[int, int], R], waves: Waves) -> Iterator[R]:
        with ProcessPoolExecutor(workers) as pool:
            for wave in waves:
                yield from pool.map(fn, *zip(*wave, strict=True))

    return run


def dask_cluster(address: str = "local", workers: int = 2) -> Executor:
    """Blocks over a Dask cluster: a scheduler address (tcp://host:8786), or "local" for a LocalCluster of
    `workers` processes started for the search and closed after it. Needs the optional `dask` extra."""
    try:
        from distributed import Client, LocalCluster, as_completed
    except ImportError:  # pragma: no cover - depends on the installation
        raise MissingExtra("the Dask executor", "dask", "dask[distributed]") from None

    def run(fn: Callable[[int, int], R], waves: Waves) -> Iterator[R]:
        cluster = LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                               dashboard_address=None) if address == "local" else None
        try:
            client = Client(cluster if cluster is not None else address, timeout=CONNECT_TIMEOUT_S)
        except (OSError, TimeoutError) as err:
            raise SpecError(f"--dask {address}: no Dask scheduler answered within {CONNECT_TIMEOUT_S} s "
                            f"({err})") from None
        try:
            for wave in waves:
                futures = client.map(fn, *zip(*wave, strict=True), pure=False)
                for future in as_completed(futures):  # any order: the top-k merge does not depend on it
                    yield future.result()
        finally:
            client.close()
            if cluster is not None:
                cluster.close()

    return run
