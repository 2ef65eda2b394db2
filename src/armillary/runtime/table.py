"""The tuning table: which backend runs each call, keyed by (operation, dtype, size bucket, group size).

`armillary commbench --backends gloo,shm --tune table.yaml` measures every backend on every key and writes
the fastest with its margin over the runner-up (MCR-DL, Anthony et al., IPDPS'23, §IV-B: a per-operation,
per-size dispatch table). The file records the machine and the torch version it was measured on; a table
measured elsewhere still loads (it is only a preference), with `matches_here()` to tell.

Size buckets are powers of two: a message of n bytes falls in bucket ceil(log2 n), so the table row of
bucket k covers (2^(k-1), 2^k] bytes. A key the table lacks takes the nearest measured bucket of the same
operation and group size (any dtype); an operation the table lacks takes `default`.
"""

from __future__ import annotations

import hashlib
import json
import math
import platform
import socket
from enum import StrEnum
from pathlib import Path

from pydantic import Field, NonNegativeFloat, PositiveInt

from armillary.errors import SpecError
from armillary.specs.base import Spec
from armillary.specs.communication import Collective
from armillary.writing import replaced

TABLE_VERSION = 1


class RuntimeOp(StrEnum):
    """The calls the communicator dispatches (the collectives of the model plus the barrier)."""

    ALL_REDUCE = "all_reduce"
    ALL_GATHER = "all_gather"
    REDUCE_SCATTER = "reduce_scatter"
    ALL_TO_ALL = "all_to_all"
    BROADCAST = "broadcast"
    SEND_RECV = "send_recv"
    BARRIER = "barrier"

    @property
    def collective(self) -> Collective | None:
        """The model's collective of the same name (None for the barrier)."""
        return None if self is RuntimeOp.BARRIER else Collective(self.value)


def bucket_of(n_bytes: float) -> int:
    """Size bucket of an n-byte message: ceil(log2 n), 0 for messages of at most one byte."""
    return 0 if n_bytes <= 1 else math.ceil(math.log2(n_bytes))


class Machine(Spec):
    """Where a table was measured."""

    host: str
    processor: str
    cores: PositiveInt
    torch: str

    @classmethod
    def here(cls, torch_version: str) -> Machine:
        import os

        return cls(host=socket.gethostname(), processor=platform.processor() or platform.machine(),
                   cores=os.cpu_count() or 1, torch=torch_version)


class TableEntry(Spec):
    """The fastest backend for one key, the measured time of every backend, and the margin: how much
    slower the runner-up is (0.25: 25% slower), a measure of how sure the choice is."""

    op: RuntimeOp
    dtype: str = Field(description="torch dtype name without the 'torch.' prefix, e.g. float32")
    bucket: int = Field(ge=0, description="ceil(log2 bytes) of the messages this row covers")
    group_size: PositiveInt
    backend: str
    times_s: dict[str, NonNegativeFloat] = Field(default_factory=dict, description="measured median per backend")
    margin: float = Field(0.0, ge=0.0)


class TuningTable(Spec):
    """A dispatch table with the machine and torch version it was measured on."""

    version: int = TABLE_VERSION
    machine: Machine | None = None
    default: str = Field("gloo", description="backend for operations the table has no row for")
    entries: tuple[TableEntry, ...] = ()

    def choose(self, op: RuntimeOp, dtype: str, n_bytes: float, group_size: int) -> str:
        """The backend for one call: the row of its key, else the nearest measured bucket of the same
        operation and group size (same dtype first), else `default`."""
        bucket = bucket_of(n_bytes)
        rows = [e for e in self.entries if e.op is op and e.group_size == group_size]
        if not rows:
            return self.default
        same = [e for e in rows if e.dtype == dtype] or rows
        best = min(same, key=lambda e: (abs(e.bucket - bucket), e.bucket))
        return best.backend

    def backends(self) -> tuple[str, ...]:
        """Every backend the table names, the default first."""
        names = [self.default] + [e.backend for e in self.entries]
        return tuple(dict.fromkeys(names))

    def matches_here(self, torch_version: str) -> bool:
        """Whether this table was measured on this host with this torch."""
        here = Machine.here(torch_version)
        return self.machine is not None and (self.machine.host, self.machine.torch) == (here.host, here.torch)


def entry_from_times(op: RuntimeOp, dtype: str, bucket: int, group_size: int, times: dict[str, float]) -> TableEntry:
    """The row of one key from each backend's measured time: the fastest, and its margin over the next."""
    if not times:
        raise SpecError(f"no measurements for {op.value} {dtype} bucket {bucket}")
    ranked = sorted(times, key=times.__getitem__)
    margin = times[ranked[1]] / times[ranked[0]] - 1 if len(ranked) > 1 and times[ranked[0]] > 0 else 0.0
    return TableEntry(op=op, dtype=dtype, bucket=bucket, group_size=group_size, backend=ranked[0],
                      times_s=dict(times), margin=margin)


def fingerprint(table: TuningTable) -> str:
    """A short hash of the table's contents: ranks that must dispatch alike compare it (`communicator`)."""
    text = json.dumps(table.model_dump(mode="json"), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def load_table(path: Path) -> TuningTable:
    """A table from YAML or JSON, read as every spec file is (bounded size, aliases that expand beyond a
    million values refused: `presets.registry.read_data_file`), with a clear error naming the file that
    does not quote it."""
    from pydantic import ValidationError

    from armillary.presets.registry import read_data_file
    from armillary.specs.loading import format_validation_error, read_error

    if not path.is_file():
        raise SpecError(f"tuning table {path} does not exist")
    try:
        data = read_data_file(path)
    except Exception as exc:  # YAML / JSON syntax, a bomb, a file too large or nested too deeply
        raise SpecError(f"tuning table {path}: cannot read as YAML/JSON: {read_error(exc)}") from None
    try:
        table = TuningTable.model_validate(data)
    except ValidationError as err:
        raise SpecError(f"tuning table {path}: {format_validation_error(err, '')}") from None
    if table.version != TABLE_VERSION:
        raise SpecError(f"tuning table {path}: version {table.version}, this armillary reads {TABLE_VERSION}")
    return table


def save_table(table: TuningTable, path: Path) -> None:
    import yaml

    with replaced(path) as temporary:
        temporary.write_text(yaml.safe_dump(table.model_dump(mode="json"), sort_keys=False))
