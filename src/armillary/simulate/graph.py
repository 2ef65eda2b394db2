"""The task graph of a step: per rank, operations with dependencies and the stream each runs on.

An operation is compute (FLOPs, bytes), a collective over a group of ranks, a point-to-point send, or a
copy between memory tiers. Each takes `duration_ns` alone on idle links (from the estimator's cost
functions and the collectives layer: one source of truth); a transfer also names the network tier it
crosses, whose per-rank links it shares with the other transfers in flight (`engine.py`). Streams keep
program order: a rank's tasks on one stream start in the order they were added (CUDA streams, NCCL
communicators); sends have no stream, they wait only on their dependencies.
"""

from __future__ import annotations

import array
import itertools
import operator
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from enum import IntEnum, StrEnum
from typing import Any, NamedTuple, overload

import numpy as np

from armillary.specs.communication import Collective


class TaskKind(IntEnum):
    COMPUTE = 0
    COLLECTIVE = 1
    SEND = 2
    MEMORY = 3  # copy between memory tiers (offload)


class Stream(IntEnum):
    """The streams of one rank: compute, one per communicating parallel dimension, and the offload copy."""

    COMPUTE = 0
    TP = 1
    CP = 2
    EP = 3
    PP = 4
    DP = 5  # gradient reductions
    OFFLOAD = 6
    DP_GATHER = 7  # parameter gathers (ZeRO / FSDP run them on their own stream, ahead of use)

    @property
    def category(self) -> Category:
        """The kind of time a communication or copy on this stream is (a compute task says its own:
        compute, recompute or optimizer)."""
        return _STREAM_CATEGORY[self]


_STREAMS = len(Stream)


class Tier(IntEnum):
    """Links a transfer occupies: the scale-up or scale-out network, or the second memory tier's link."""

    NONE = -1
    SCALE_UP = 0
    SCALE_OUT = 1
    MEMORY = 2


class Category(StrEnum):
    """What a task's time is, for breakdowns."""

    COMPUTE = "compute"
    RECOMPUTE = "recompute"
    TP = "tp"
    CP = "cp"
    EP = "ep"
    PP = "pp"
    DP = "dp"
    OPTIMIZER = "optimizer"
    OFFLOAD = "offload"


_STREAM_CATEGORY = {Stream.COMPUTE: Category.COMPUTE, Stream.TP: Category.TP, Stream.CP: Category.CP,
                    Stream.EP: Category.EP, Stream.PP: Category.PP, Stream.DP: Category.DP,
                    Stream.OFFLOAD: Category.OFFLOAD, Stream.DP_GATHER: Category.DP}


class Task(NamedTuple):
    """One operation (a tuple: millions of them are built for an unsymmetric 1,000-GPU step)."""

    name: str
    kind: TaskKind
    category: Category
    ranks: tuple[int, ...]  # participants: one rank (compute), the group (collective), (source, destination)
    stream: Stream | None  # stream occupied on every participant; None: sends (dependencies only)
    duration_ns: int  # alone, on idle links
    deps: tuple[int, ...] = ()
    tier: Tier = Tier.NONE
    bytes: float = 0.0  # message size (collectives: the nccl-tests convention), or bytes moved
    flop: float = 0.0
    group: str = ""  # label of the process group, e.g. "dp" or "pp 3->4"
    collective: Collective | None = None  # the operation of a collective or send
    after: tuple[int, ...] = ()  # every task it waits for: `deps` and its stream predecessors (set by the builder)


@dataclass(frozen=True, eq=False)
class Routes:
    """Links inside the network that transfers cross besides their ranks' own (the uplinks of an
    oversubscribed switch tier, `routing.py`), as compressed rows per task: task i crosses
    `link[first[i]:first[i + 1]]`, loading each by `load` (in units of one rank's link bandwidth) when it runs
    at its full rate; `capacity` of each link in the same units."""

    first: np.ndarray  # int64, one more than there are tasks
    link: np.ndarray  # int64
    load: np.ndarray  # float
    capacity: np.ndarray  # float, per link


_KINDS = tuple(TaskKind)
_CATEGORIES = tuple(Category)
_STREAMS_BY_CODE = tuple(Stream)
_TIERS = {t.value: t for t in Tier}
_COLLECTIVES = tuple(Collective)
_CATEGORY_CODE = {c: i for i, c in enumerate(_CATEGORIES)}
_COLLECTIVE_CODE = {c: i for i, c in enumerate(_COLLECTIVES)}
_STREAM_OR_NONE, _COLLECTIVE_OR_NONE = (None, *_STREAMS_BY_CODE), (None, *_COLLECTIVES)  # by code + 1 (-1: None)
# how a task is stored (`Columns`): one-byte codes, 8-byte numbers, 4-byte ids and rows of 4-byte entries
_COLUMNS = (("kind", "b"), ("category", "b"), ("stream", "b"), ("tier", "b"), ("collective", "b"),
            ("duration_ns", "q"), ("bytes", "d"), ("flop", "d"), ("name", "i"), ("group", "i"),
            ("ranks_end", "q"), ("ranks", "i"), ("deps_end", "q"), ("deps", "i"), ("after_end", "q"), ("after", "i"))
_DTYPES = {"b": np.int8, "q": np.int64, "d": np.float64, "i": np.int32}


class Columns(Sequence[Task]):
    """Tasks stored as a structure of arrays (about 90 bytes a task, where a `Task` tuple with its own tuples
    and numbers takes about 450): a one-byte code per enum field, numbers in 8 bytes, names and group labels
    as ids into tables, ranks / dependencies / predecessors as rows of one flat int32 array each, row i ending
    at `*_end[i]`. Reads as a sequence of `Task` (each made on access), so code that walks `graph.tasks`
    works unchanged; the engine reads the arrays (`array`)."""

    __slots__ = ("_c", "groups", "names")

    def __init__(self, columns: dict[str, array.array[Any]], names: Sequence[str], groups: Sequence[str]) -> None:
        self._c = {name: columns[name] for name, _ in _COLUMNS}  # in this order (`__getitem__` unpacks it)
        self.names, self.groups = names, groups

    @classmethod
    def of(cls, tasks: Sequence[Task]) -> Columns:
        """`tasks` as columns (the tasks themselves when they are)."""
        if isinstance(tasks, Columns):
            return tasks
        store = _Store()
        for t in tasks:
            store.append(t.name, t.kind, t.category, t.ranks, t.stream, t.duration_ns, t.deps, t.tier, t.bytes,
                         t.flop, t.group, t.collective, t.after)
        return store.frozen()

    def array(self, column: str) -> np.ndarray:
        """A column as a numpy array (no copy); `ranks_first` / `deps_first` / `after_first`: where each row
        starts, and the last ends (one more than there are tasks)."""
        if column.endswith("_first"):
            ends = self.array(column.replace("_first", "_end"))
            return np.concatenate([np.zeros(1, dtype=np.int64), ends])
        data = self._c[column]
        return np.frombuffer(data, dtype=_DTYPES[data.typecode]) if len(data) else np.zeros(0, _DTYPES[data.typecode])

    def of_category(self, *categories: Category) -> np.ndarray:
        """Whether each task is of one of `categories`."""
        return np.isin(self.array("category"), [_CATEGORY_CODE[c] for c in categories])

    def row(self, column: str, i: int) -> tuple[int, ...]:
        """Row i of `ranks`, `deps` or `after`."""
        end = self._c[column + "_end"]
        return tuple(self._c[column][end[i - 1] if i else 0:end[i]])

    def __len__(self) -> int:
        return len(self._c["kind"])

    @overload
    def __getitem__(self, i: int) -> Task: ...

    @overload
    def __getitem__(self, i: slice) -> tuple[Task, ...]: ...

    def __getitem__(self, i: int | slice) -> Task | tuple[Task, ...]:
        if isinstance(i, slice):
            return tuple(self[k] for k in range(*i.indices(len(self))))
        (kind, category, stream, tier, collective, duration, nbytes, flop, name, group, ranks_end, ranks, deps_end,
         deps, after_end, after) = self._c.values()  # in `_COLUMNS` order
        n = len(kind)
        i = operator.index(i)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"task {i} of {n}")
        j = i - 1  # rows start where the row before ends (row 0 at 0)
        return Task(self.names[name[i]], _KINDS[kind[i]], _CATEGORIES[category[i]],
                    tuple(ranks[ranks_end[j] if i else 0:ranks_end[i]]), _STREAM_OR_NONE[stream[i] + 1],
                    duration[i], tuple(deps[deps_end[j] if i else 0:deps_end[i]]), _TIERS[tier[i]], nbytes[i],
                    flop[i], self.groups[group[i]], _COLLECTIVE_OR_NONE[collective[i] + 1],
                    tuple(after[after_end[j] if i else 0:after_end[i]]))

    def __iter__(self) -> Iterator[Task]:
        """The tasks in order, made a block at a time from whole columns (a few times quicker than by index)."""
        c, n, block = self._c, len(self), 8192
        streams, collectives = _STREAM_OR_NONE, _COLLECTIVE_OR_NONE
        for lo in range(0, n, block):
            hi = min(lo + block, n)
            rows = []
            for column in ("ranks", "deps", "after"):
                ends = c[column + "_end"][lo:hi].tolist()
                start = c[column + "_end"][lo - 1] if lo else 0
                flat = iter(c[column][start:ends[-1]].tolist())
                rows.append([tuple(itertools.islice(flat, b - a)) for a, b in zip([start, *ends[:-1]], ends,
                                                                                   strict=True)])
            yield from map(Task._make, zip(
                map(self.names.__getitem__, c["name"][lo:hi].tolist()),
                map(_KINDS.__getitem__, c["kind"][lo:hi].tolist()),
                map(_CATEGORIES.__getitem__, c["category"][lo:hi].tolist()), rows[0],
                (streams[k + 1] for k in c["stream"][lo:hi].tolist()), c["duration_ns"][lo:hi].tolist(), rows[1],
                map(_TIERS.__getitem__, c["tier"][lo:hi].tolist()), c["bytes"][lo:hi].tolist(),
                c["flop"][lo:hi].tolist(), map(self.groups.__getitem__, c["group"][lo:hi].tolist()),
                (collectives[k + 1] for k in c["collective"][lo:hi].tolist()), rows[2], strict=True))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Sequence) or isinstance(other, str):
            return NotImplemented
        return len(self) == len(other) and all(a == b for a, b in zip(self, other, strict=True))

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Columns({len(self):,} tasks)"


class _Store:
    """Growing columns (`array.array`: appends at C speed, 4- and 8-byte entries, no object per value)."""

    def __init__(self) -> None:
        self.c: dict[str, array.array[Any]] = {name: array.array(code) for name, code in _COLUMNS}
        self.names: list[str] = []
        self.groups: list[str] = []
        self._name_id: dict[str, int] = {}
        self._group_id: dict[str, int] = {}

    def append(self, name: str, kind: TaskKind, category: Category, ranks: Sequence[int], stream: Stream | None,
               duration_ns: int, deps: Sequence[int], tier: Tier, nbytes: float, flop: float, group: str,
               collective: Collective | None, after: Iterable[int]) -> None:
        c = self.c
        name_id = self._name_id.get(name)
        if name_id is None:
            name_id = self._name_id[name] = len(self.names)
            self.names.append(name)
        group_id = self._group_id.get(group)
        if group_id is None:
            group_id = self._group_id[group] = len(self.groups)
            self.groups.append(group)
        c["kind"].append(kind)
        c["category"].append(_CATEGORY_CODE[category])
        c["stream"].append(-1 if stream is None else stream)
        c["tier"].append(tier)
        c["collective"].append(-1 if collective is None else _COLLECTIVE_CODE[collective])
        c["duration_ns"].append(duration_ns)
        c["bytes"].append(nbytes)
        c["flop"].append(flop)
        c["name"].append(name_id)
        c["group"].append(group_id)
        c["ranks"].extend(ranks)
        c["ranks_end"].append(len(c["ranks"]))
        c["deps"].extend(deps)
        c["deps_end"].append(len(c["deps"]))
        c["after"].extend(after)
        c["after_end"].append(len(c["after"]))

    def live(self) -> Columns:
        """The tasks so far, as they grow."""
        return Columns(self.c, self.names, self.groups)

    def frozen(self) -> Columns:
        """A copy of the tasks so far."""
        return Columns({k: array.array(v.typecode, v) for k, v in self.c.items()}, tuple(self.names),
                       tuple(self.groups))


@dataclass(frozen=True)
class TaskGraph:
    """Tasks in program order (a stream runs its tasks in index order) and what each rank stands for. The
    builder stores them as `Columns`; a tuple of `Task` works the same (the engine turns it into columns)."""

    tasks: Sequence[Task]
    ranks: int
    rank_labels: tuple[str, ...]  # e.g. "stage 3" or "pp3 dp0 tp1"
    rank_weights: tuple[int, ...]  # identical ranks each simulated rank stands for (symmetry)
    routes: Routes | None = None  # links shared inside the network; None: only the ranks' own links

    @property
    def devices(self) -> int:
        return sum(self.rank_weights)

    @property
    def columns(self) -> Columns:
        return Columns.of(self.tasks)


@dataclass
class GraphBuilder:
    """Appends tasks and returns their indices; `graph()` freezes the result."""

    _store: _Store = field(default_factory=_Store)
    _last: dict[int, int] = field(default_factory=dict)  # (rank, stream) key -> its last task

    @property
    def tasks(self) -> Columns:
        """The tasks added so far."""
        return self._store.live()

    def add(self, name: str, kind: TaskKind, category: Category, ranks: tuple[int, ...], stream: Stream | None,
            seconds: float, deps: tuple[int, ...] | list[int] = (), tier: Tier = Tier.NONE, bytes: float = 0.0,
            flop: float = 0.0, group: str = "", collective: Collective | None = None) -> int:
        if not seconds >= 0:
            raise ValueError(f"task {name!r}: duration must be a non-negative number of seconds, not {seconds}")
        index = len(self._store.c["kind"])
        if deps and (max(deps) >= index or min(deps) < 0):
            raise ValueError(f"task {name!r}: dependencies must be tasks added before it")
        after = set(deps)
        if stream is not None:  # a stream runs one task at a time, in program order
            last = self._last
            for r in ranks:
                key = r * _STREAMS + stream
                if key in last:
                    after.add(last[key])
                last[key] = index
        self._store.append(name, kind, category, ranks, stream, round(seconds * 1e9), deps, tier, bytes, flop, group,
                           collective, sorted(after))
        return index

    def on_lanes(self, name: str, category: Category, stream: Stream, seconds: float, lanes: list[int],
                 deps: list[list[int]], groups: list[list[int]], tier: Tier = Tier.NONE, nbytes: float = 0.0,
                 flop: float = 0.0, collective: Collective | None = None) -> list[list[int]]:
        """A compute task per lane (ranks), or a collective per group of lanes (indices into `lanes`), after
        each lane's `deps`; returns each lane's dependencies for what follows."""
        if stream is Stream.COMPUTE:
            return [[self.add(name, TaskKind.COMPUTE, category, (r,), Stream.COMPUTE, seconds, deps[i], flop=flop)]
                    for i, r in enumerate(lanes)]
        out: list[list[int]] = [[] for _ in lanes]
        for members in groups:
            t = self.add(name, TaskKind.COLLECTIVE, category, tuple(lanes[i] for i in members), stream, seconds,
                         sorted({d for i in members for d in deps[i]}), tier, nbytes, group=category.value,
                         collective=collective)
            for i in members:
                out[i] = [t]
        return out

    def graph(self, ranks: int, labels: tuple[str, ...] | None = None,
              weights: tuple[int, ...] | None = None) -> TaskGraph:
        return TaskGraph(self._store.frozen(), ranks, labels or tuple(f"rank {r}" for r in range(ranks)),
                         weights or (1,) * ranks)
