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
from armillary.specs.loading import MAX_DEVICES

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


MAX_TRACE_BYTES = 2**31  # one rank's trace file: far above a profiled step (tens of MB)
MAX_TIME_US = 1e17  # timestamps and durations (microseconds): a Kineto clock from the epoch is about 1.8e15
MAX_ELEMENTS = 2.0**60  # elements of one tensor or message


def read_torch_traces(path: Path | str) -> TorchTraces:
    """One trace file, or a folder of one per rank (`*.json` with Kineto trace events)."""
    p = Path(path)
    files = sorted(f for f in p.glob("*.json") if _is_trace(f)) if p.is_dir() else [p]
    if not files:
        raise SpecError(f"--torch-trace {p}: no torch.profiler chrome traces (*.json with traceEvents) found")
    ranks = [_rank(f, i) for i, f in enumerate(files)]
    if len({r.rank for r in ranks}) != len(ranks):
        raise SpecError(f"--torch-trace {p}: several files give the same rank (distributedInfo.rank)")
    return TorchTraces(tuple(sorted(ranks, key=lambda r: r.rank)))


def _is_trace(f: Path) -> bool:
    try:
        with f.open("rb") as handle:
            return b'"traceEvents"' in handle.read(1 << 20)
    except OSError:
        return False


class _MalformedError(Exception):
    """A value of the trace that cannot be read; `_rank` adds the file."""


def _number(value: object, what: str, low: float = 0.0, high: float = MAX_TIME_US) -> float:
    """A finite real in low..high (bools and strings refused)."""
    if (type(value) is float or type(value) is int) and low <= value <= high:
        return float(value)  # the common case, checked first: a trace holds millions of numbers
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= float(value) <= high:
        raise _MalformedError(f"{what}: expected a number of {low:g} to {high:g}, got {_short(value)}")
    return float(value)


def _whole(value: object, what: str, low: int, high: int) -> int:
    if type(value) is int and low <= value <= high:
        return value
    if isinstance(value, bool) or not isinstance(value, int | float) or not (
            math.isfinite(value) and float(value).is_integer() and low <= value <= high):
        raise _MalformedError(f"{what}: expected a whole number of {low} to {high:,}, got {_short(value)}")
    return int(value)


def _short(value: object) -> str:
    """A value of the file as an error message shows it: its type, and itself if short."""
    text = repr(value)
    return text if len(text) <= 40 else f"a {type(value).__name__} of {len(text):,} characters"


def _events(data: object) -> list[dict[str, Any]]:
    """The complete ('X') events, each a dict with a finite ts and dur >= 0 (in microseconds) and dict args."""
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise _MalformedError("expected a JSON object with a traceEvents list (torch.profiler export_chrome_trace)")
    events = []
    for i, e in enumerate(data["traceEvents"]):
        if not isinstance(e, dict):
            raise _MalformedError(f"traceEvents[{i}]: expected an object, got {type(e).__name__}")
        if e.get("ph") != "X" or "dur" not in e:
            continue
        name = e.get("name", "")
        args = e.get("args")
        if not isinstance(args, dict | None):
            raise _MalformedError(f"traceEvents[{i}] ({_short(name)}): args must be an object, got "
                                  f"{type(args).__name__}")
        # in place: the events are this reader's own, just parsed
        e["ts"] = _number(e.get("ts"), f"traceEvents[{i}].ts", -MAX_TIME_US)
        e["dur"] = _number(e.get("dur"), f"traceEvents[{i}].dur")
        e["name"], e["args"] = str(name), args or {}
        events.append(e)
    return events


def _rank(f: Path, index: int) -> RankTrace:
    try:
        if f.stat().st_size > MAX_TRACE_BYTES:
            raise SpecError(f"--torch-trace {f}: larger than {MAX_TRACE_BYTES // 2**30} GiB")
        data = json.loads(f.read_bytes())
    except (OSError, ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        reason = exc.strerror if isinstance(exc, OSError) else (
            f"{exc.msg} at line {exc.lineno} column {exc.colno}" if isinstance(exc, json.JSONDecodeError)
            else type(exc).__name__)
        raise SpecError(f"--torch-trace {f}: not a chrome trace JSON ({reason})") from None
    try:
        return _parse_rank(data, index)
    except _MalformedError as err:
        raise SpecError(f"--torch-trace {f}: {err}") from None


def _parse_rank(data: object, index: int) -> RankTrace:
    events = _events(data)
    if not events:
        raise _MalformedError("no complete ('X') events")
    assert isinstance(data, dict)
    info = data.get("distributedInfo") or {}
    if not isinstance(info, dict):
        raise _MalformedError(f"distributedInfo: expected an object, got {type(info).__name__}")
    rank = _whole(info.get("rank", index), "distributedInfo.rank", 0, MAX_DEVICES - 1)
    world = _whole(info.get("world_size", 0), "distributedInfo.world_size", 0, MAX_DEVICES)
    main = _main_thread(events)
    steps = [e for e in events if e["name"].startswith("ProfilerStep#")]
    step_ids = {id(e) for e in steps}  # by identity: comparing event dicts by value costs per event
    on_main = sorted((e for e in events if e.get("tid") == main and id(e) not in step_ids), key=lambda e: e["ts"])
    if not steps and not on_main:
        raise _MalformedError("no ProfilerStep# event and no operators on the main thread")
    start = min(e["ts"] for e in steps) if steps else on_main[0]["ts"]
    end = max(e["ts"] + e["dur"] for e in steps) if steps else max(e["ts"] + e["dur"] for e in on_main)
    top: list[TraceOp] = []
    for e in on_main:
        if start <= e["ts"] < end and (not top or e["ts"] >= top[-1].end_us):
            top.append(TraceOp(e["name"], e["ts"], e["dur"]))
    issues = [TraceOp(e["name"], e["ts"], e["dur"]) for e in on_main
              if start <= e["ts"] < end and e["name"].startswith("c10d::") and _op(e["name"]) is not None]
    runs = sorted((e for e in events if _EXECUTION.match(e["name"]) or e["name"] == "record_param_comms"),
                  key=lambda e: e["ts"])
    runs = [e for e in runs if start <= e["ts"] < end]
    collectives = tuple(_collective(e, issues[i].end_us if i < len(issues) else e["ts"], world)
                        for i, e in enumerate(runs) if _op(_name_of(e)) is not None)
    gemms = tuple(g for g in (_gemm(e) for e in on_main if start <= e["ts"] < end) if g is not None)
    return RankTrace(rank, float(start), float(end), tuple(top), collectives, gemms)


def _dims(value: object, what: str) -> list[list[int]]:
    """Recorded input shapes: a list per input, each a list of whole sizes (an input without a shape: [])."""
    if not isinstance(value, list):
        raise _MalformedError(f"{what}: expected a list of shapes, got {_short(value)}")
    shapes: list[list[int]] = []
    for shape in value:
        if not isinstance(shape, list):
            shapes.append([])  # a scalar or a non-tensor argument
            continue
        shapes.append([_whole(d, what, 0, 2**62) for d in shape])
        if math.prod(shapes[-1]) > MAX_ELEMENTS:
            raise _MalformedError(f"{what}: a tensor of more than 2^60 elements")
    return shapes


# operand positions of the two matrices in each GEMM operator's inputs
_GEMMS = {"aten::mm": (0, 1), "aten::addmm": (1, 2), "aten::bmm": (0, 1), "aten::baddbmm": (1, 2)}


def _gemm(e: dict[str, Any]) -> TraceGemm | None:
    """FLOPs of a GEMM operator from its input shapes: (b x) M x K times K x N is 2 b M N K."""
    where = _GEMMS.get(e["name"])
    if where is None or not e["args"].get("Input Dims"):
        return None
    dims = _dims(e["args"]["Input Dims"], f"{e['name']} Input Dims")
    if len(dims) <= where[1]:
        return None
    a, b = dims[where[0]], dims[where[1]]
    if len(a) < 2 or len(b) < 2:
        return None
    batch = math.prod(a[:-2]) if len(a) > 2 else 1
    m, k, n = a[-2], a[-1], b[-1]
    types = e["args"].get("Input type") or ["float"]
    dtype = str(types[where[0]]) if isinstance(types, list) and len(types) > where[0] else "float"
    width = _ELEMENT_BYTES.get(dtype, 4)
    return TraceGemm(e["ts"], e["dur"], 2.0 * batch * m * n * k, float(batch * (m * k + k * n + m * n) * width),
                     dtype)


def _main_thread(events: list[dict[str, Any]]) -> object:
    """The thread that ran the profiled step (or the one with the most operators)."""
    for e in events:
        if e["name"].startswith("ProfilerStep#"):
            return e.get("tid")
    counts: dict[object, int] = {}
    for e in events:
        if e.get("cat") == "cpu_op" and isinstance(e.get("tid"), int | str):
            counts[e.get("tid")] = counts.get(e.get("tid"), 0) + 1
    if not counts:
        raise _MalformedError("no ProfilerStep# event and no cpu_op events: cannot tell which thread ran the step")
    return max(counts, key=lambda t: counts[t])


def _name_of(e: dict[str, Any]) -> str:
    return str(e["args"].get("Collective name") or e["name"])


def _op(name: str) -> Collective | None:
    lowered = name.lower()
    return next((op for key, op in _OPS if key in lowered), None)


def _collective(e: dict[str, Any], issued: float, world: int) -> TraceCollective:
    args = e["args"]
    op = _op(_name_of(e))
    assert op is not None
    what = f"{e['name']} at ts {e['ts']:g}"
    group = _whole(args.get("Group size") or world or 1, f"{what}: Group size", 1, MAX_DEVICES)
    if "In msg nelems" in args:  # record_param_comms
        width = _ELEMENT_BYTES.get(str(args.get("dtype", "Float")), 4)
        n_in = _number(args["In msg nelems"], f"{what}: In msg nelems", 0, MAX_ELEMENTS) * width
        n_out = _number(args.get("Out msg nelems", 0), f"{what}: Out msg nelems", 0, MAX_ELEMENTS) * width
    else:
        dims = _dims(args.get("Input Dims") or [[]], f"{what}: Input Dims")
        types = args.get("Input type") or ["float"]
        dtype = str(types[0]) if isinstance(types, list) and types else "float"
        n_in = float(math.prod(dims[0]) if dims and dims[0] else 0) * _ELEMENT_BYTES.get(dtype, 4)
        n_out = n_in * group if op is Collective.ALL_GATHER else n_in
    size = n_out if op is Collective.ALL_GATHER else n_in
    return TraceCollective(op, issued, e["ts"], e["ts"] + e["dur"], size, group)
