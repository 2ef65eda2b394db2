"""Read torch.profiler (Kineto) chrome traces: per rank, the profiled step's operators on the main thread
and its collectives, with their sizes.

A collective appears twice: where the program issues it (`c10d::allreduce_` ... on the main thread) and
where the backend runs it (`gloo:all_reduce` on a gloo thread, `nccl:all_reduce` or a
`record_param_comms` record with the message sizes in its args). Issues and executions pair up in order.
Format: the Kineto trace events written by `torch.profiler.profile.export_chrome_trace`.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from armillary.errors import SpecError
from armillary.specs.communication import Collective

_OPS = (("reduce_scatter", Collective.REDUCE_SCATTER), ("all_gather", Collective.ALL_GATHER),
        ("allgather", Collective.ALL_GATHER), ("all_reduce", Collective.ALL_REDUCE),
        ("allreduce", Collective.ALL_REDUCE), ("all_to_all", Collective.ALL_TO_ALL),
        ("alltoall", Collective.ALL_TO_ALL), ("broadcast", Collective.BROADCAST), ("send", Collective.SEND_RECV),
        ("recv", Collective.SEND_RECV))
_EXECUTION = re.compile(r"^(gloo|nccl|mpi|ucc):")
_ELEMENT_BYTES = {"float": 4, "double": 8, "c10::Half": 2, "c10::BFloat16": 2, "long int": 8, "int": 4,
                  "Float": 4, "Double": 8, "Half": 2, "BFloat16": 2, "Long": 8, "Int": 4}


@dataclass(frozen=True)
class TraceOp:
    name: str
    start_us: float
    dur_us: float

    @property
    def end_us(self) -> float:
        return self.start_us + self.dur_us


@dataclass(frozen=True)
class TraceGemm:
    """A matrix multiply the rank ran (aten::mm / addmm / bmm / baddbmm), with its measured time."""

    start_us: float
    dur_us: float
    flop: float  # 2 M N K per problem (x batch)
    bytes: float  # operands read and result written
    dtype: str


@dataclass(frozen=True)
class TraceCollective:
    op: Collective
    issued_us: float  # end of the issuing call on the main thread (the execution's start if none)
    start_us: float  # the backend's execution
    end_us: float
    bytes: float  # nccl-tests convention: all-reduce buffer, all-gather result, reduce-scatter input
    group_size: int


@dataclass(frozen=True)
class RankTrace:
    rank: int
    step_start_us: float
    step_end_us: float
    ops: tuple[TraceOp, ...]  # top-level operators of the main thread inside the step, in time order
    collectives: tuple[TraceCollective, ...]
    gemms: tuple[TraceGemm, ...] = ()  # from the recorded input shapes (record_shapes=True)

    @property
    def step_s(self) -> float:
        return (self.step_end_us - self.step_start_us) / 1e6


@dataclass(frozen=True)
class TorchTraces:
    ranks: tuple[RankTrace, ...]

    @property
    def measured_step_s(self) -> float:
        """From the first rank's step start to the last rank's step end."""
        return (max(r.step_end_us for r in self.ranks) - min(r.step_start_us for r in self.ranks)) / 1e6


def read_torch_traces(path: Path | str) -> TorchTraces:
    """One trace file, or a folder of one per rank (`*.json` with Kineto trace events)."""
    p = Path(path)
    files = sorted(f for f in p.glob("*.json") if _is_trace(f)) if p.is_dir() else [p]
    if not files:
        raise SpecError(f"--torch-trace {p}: no torch.profiler chrome traces (*.json with traceEvents) found")
    ranks = [_rank(f, i) for i, f in enumerate(files)]
    return TorchTraces(tuple(sorted(ranks, key=lambda r: r.rank)))


def _is_trace(f: Path) -> bool:
    with f.open() as handle:
        return '"traceEvents"' in handle.read(4096) or "traceEvents" in f.read_text()[:100000]


def _rank(f: Path, index: int) -> RankTrace:
    try:
        data = json.loads(f.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise SpecError(f"--torch-trace {f}: not a chrome trace JSON ({exc})") from None
    events = [e for e in data.get("traceEvents", []) if e.get("ph") == "X" and "dur" in e]
    if not events:
        raise SpecError(f"--torch-trace {f}: no complete ('X') events")
    rank = int((data.get("distributedInfo") or {}).get("rank", index))
    world = int((data.get("distributedInfo") or {}).get("world_size", 0))
    main = _main_thread(events)
    steps = [e for e in events if str(e.get("name", "")).startswith("ProfilerStep#")]
    on_main = sorted((e for e in events if e.get("tid") == main and e not in steps), key=lambda e: e["ts"])
    start = min(e["ts"] for e in steps) if steps else on_main[0]["ts"]
    end = max(e["ts"] + e["dur"] for e in steps) if steps else max(e["ts"] + e["dur"] for e in on_main)
    top: list[TraceOp] = []
    for e in on_main:
        if start <= e["ts"] < end and (not top or e["ts"] >= top[-1].end_us):
            top.append(TraceOp(str(e["name"]), float(e["ts"]), float(e["dur"])))
    issues = [TraceOp(str(e["name"]), float(e["ts"]), float(e["dur"])) for e in on_main
              if start <= e["ts"] < end and str(e["name"]).startswith("c10d::") and _op(str(e["name"])) is not None]
    runs = sorted((e for e in events if _EXECUTION.match(str(e.get("name", ""))) or e.get("name") ==
                   "record_param_comms"), key=lambda e: e["ts"])
    runs = [e for e in runs if start <= e["ts"] < end]
    collectives = tuple(_collective(e, issues[i].end_us if i < len(issues) else float(e["ts"]), world)
                        for i, e in enumerate(runs) if _op(_name_of(e)) is not None)
    gemms = tuple(g for g in (_gemm(e) for e in on_main if start <= e["ts"] < end) if g is not None)
    return RankTrace(rank, float(start), float(end), tuple(top), collectives, gemms)


# operand positions of the two matrices in each GEMM operator's inputs
_GEMMS = {"aten::mm": (0, 1), "aten::addmm": (1, 2), "aten::bmm": (0, 1), "aten::baddbmm": (1, 2)}


def _gemm(e: dict[str, Any]) -> TraceGemm | None:
    """FLOPs of a GEMM operator from its input shapes: (b x) M x K times K x N is 2 b M N K."""
    where = _GEMMS.get(str(e.get("name")))
    dims = (e.get("args") or {}).get("Input Dims")
    if where is None or not dims or len(dims) <= where[1]:
        return None
    a, b = dims[where[0]], dims[where[1]]
    if len(a) < 2 or len(b) < 2:
        return None
    batch = math.prod(a[:-2]) if len(a) > 2 else 1
    m, k, n = a[-2], a[-1], b[-1]
    types = (e.get("args") or {}).get("Input type") or ["float"]
    width = _ELEMENT_BYTES.get(str(types[where[0]]), 4)
    return TraceGemm(float(e["ts"]), float(e["dur"]), 2.0 * batch * m * n * k,
                     float(batch * (m * k + k * n + m * n) * width), str(types[where[0]]))


def _main_thread(events: list[dict[str, Any]]) -> object:
    """The thread that ran the profiled step (or the one with the most operators)."""
    for e in events:
        if str(e.get("name", "")).startswith("ProfilerStep#"):
            return e.get("tid")
    counts: dict[object, int] = {}
    for e in events:
        if e.get("cat") == "cpu_op":
            counts[e.get("tid")] = counts.get(e.get("tid"), 0) + 1
    return max(counts, key=lambda t: counts[t])


def _name_of(e: dict[str, Any]) -> str:
    args = e.get("args") or {}
    return str(args.get("Collective name") or e.get("name", ""))


def _op(name: str) -> Collective | None:
    lowered = name.lower()
    return next((op for key, op in _OPS if key in lowered), None)


def _collective(e: dict[str, Any], issued: float, world: int) -> TraceCollective:
    args = e.get("args") or {}
    op = _op(_name_of(e))
    assert op is not None
    group = int(args.get("Group size") or world or 1)
    if "In msg nelems" in args:  # record_param_comms
        width = _ELEMENT_BYTES.get(str(args.get("dtype", "Float")), 4)
        n_in, n_out = float(args["In msg nelems"]) * width, float(args.get("Out msg nelems", 0)) * width
    else:
        dims = args.get("Input Dims") or [[]]
        types = args.get("Input type") or ["float"]
        n_in = float(math.prod(dims[0]) if dims and isinstance(dims[0], list) else 0) * \
            _ELEMENT_BYTES.get(str(types[0]), 4)
        n_out = n_in * group if op is Collective.ALL_GATHER else n_in
    size = n_out if op is Collective.ALL_GATHER else n_in
    return TraceCollective(op, issued, float(e["ts"]), float(e["ts"] + e["dur"]), size, group)
