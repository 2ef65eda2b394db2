"""Timelines as Chrome trace-event JSON, which Perfetto (ui.perfetto.dev) and chrome://tracing open.

One process per simulated rank, one thread per stream; complete events ("ph": "X") with microsecond
timestamps (Trace Event Format, "Duration Events" / "Complete Events"); a collective or send appears on
each participant, labeled with its group and size in `args`. Sends, which run on no stream, get a
"p2p" track. For huge traces, `write_protobuf_trace` streams Perfetto's own protobuf format through the
`perfetto` package's StreamingTraceProtoBuilder (optional: pip install 'armillary[perfetto]'): track
descriptors per rank and stream, slice begin / end events in nanoseconds.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from armillary.simulate.graph import Stream, Task, TaskGraph, TaskKind
from armillary.simulate.timeline import Timeline
from armillary.writing import replaced

_P2P = len(Stream)  # thread id of the send track


def _tracks(task: Task) -> list[tuple[int, int]]:
    """(rank, track) pairs a task is shown on: its stream on every participant; a send on the p2p track of
    its source and destination."""
    ranks = task.ranks if task.kind is not TaskKind.SEND else task.ranks[:1] + task.ranks[-1:]
    track = int(task.stream) if task.stream is not None else _P2P
    return [(r, track) for r in dict.fromkeys(ranks)]


def trace_events(graph: TaskGraph, timeline: Timeline) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for r, label in enumerate(graph.rank_labels):
        events.append({"ph": "M", "name": "process_name", "pid": r, "args": {"name": label}})
        events.append({"ph": "M", "name": "process_sort_index", "pid": r, "args": {"sort_index": r}})
        for stream in Stream:
            events.append({"ph": "M", "name": "thread_name", "pid": r, "tid": int(stream),
                           "args": {"name": stream.name.lower()}})
        events.append({"ph": "M", "name": "thread_name", "pid": r, "tid": _P2P, "args": {"name": "p2p"}})
    start, end = timeline.start_ns.tolist(), timeline.end_ns.tolist()
    for i, t in enumerate(graph.tasks):
        args: dict[str, Any] = {"category": t.category.value}
        if t.kind is not TaskKind.COMPUTE:
            args.update(group=t.group, bytes=t.bytes, ranks=list(t.ranks), collective=t.collective)
        elif t.flop:
            args["flop"] = t.flop
        for r, tid in _tracks(t):
            events.append({"ph": "X", "name": t.name, "cat": t.category.value, "pid": r, "tid": tid,
                           "ts": start[i] / 1e3, "dur": (end[i] - start[i]) / 1e3, "args": args})
    return events


def write_trace(graph: TaskGraph, timeline: Timeline, path: Path) -> None:
    """Write the timeline as {"traceEvents": [...], "displayTimeUnit": "ms"}."""
    with replaced(path) as temporary:
        temporary.write_text(json.dumps({"traceEvents": trace_events(graph, timeline), "displayTimeUnit": "ms"}))


def write_protobuf_trace(graph: TaskGraph, timeline: Timeline, path: Path) -> None:
    """Write the timeline as a Perfetto protobuf trace (.pftrace), packet by packet."""
    try:
        from perfetto.protos.perfetto.trace.perfetto_trace_pb2 import TrackEvent
        from perfetto.trace_builder.proto_builder import StreamingTraceProtoBuilder
    except ImportError:  # pragma: no cover - depends on the installation
        from armillary.errors import MissingExtra

        raise MissingExtra("protobuf traces", "perfetto", "the perfetto package") from None
    sequence = 1
    tracks = len(Stream) + 1  # streams and the p2p track of each rank
    with replaced(path) as temporary, temporary.open("wb") as f:
        out = StreamingTraceProtoBuilder(f)

        def packet():
            p = out.create_packet()
            p.trusted_packet_sequence_id = sequence
            return p

        for r, label in enumerate(graph.rank_labels):
            p = packet()
            p.track_descriptor.uuid = 1 + r * (tracks + 1)
            p.track_descriptor.name = label
            out.write_packet(p)
            for k, name in [(int(st), st.name.lower()) for st in Stream] + [(_P2P, "p2p")]:
                p = packet()
                p.track_descriptor.uuid = 2 + r * (tracks + 1) + k
                p.track_descriptor.parent_uuid = 1 + r * (tracks + 1)
                p.track_descriptor.name = name
                out.write_packet(p)
        start, end = timeline.start_ns.tolist(), timeline.end_ns.tolist()
        for i, t in enumerate(graph.tasks):
            for r, tid in _tracks(t):
                track = 2 + r * (tracks + 1) + tid
                for ts, kind in ((start[i], TrackEvent.TYPE_SLICE_BEGIN), (end[i], TrackEvent.TYPE_SLICE_END)):
                    p = packet()
                    p.timestamp = ts
                    p.track_event.type = kind
                    p.track_event.track_uuid = track
                    if kind == TrackEvent.TYPE_SLICE_BEGIN:
                        p.track_event.name = t.name
                        p.track_event.categories.append(t.category.value)
                    out.write_packet(p)


def write_timeline(graph: TaskGraph, timeline: Timeline, path: Path) -> None:
    """Perfetto's protobuf format if the name ends in .pftrace, else Chrome trace JSON."""
    (write_protobuf_trace if path.suffix == ".pftrace" else write_trace)(graph, timeline, path)
