"""Timelines as Chrome trace-event JSON, which Perfetto (ui.perfetto.dev) and chrome://tracing open.

One process per simulated rank, one thread per stream; complete events ("ph": "X") with microsecond
timestamps (Trace Event Format, "Duration Events" / "Complete Events"); a collective or send appears on
each participant, labeled with its group and size in `args`. Sends, which run on no stream, get a
"p2p" track.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from armillary.simulate.engine import Timeline
from armillary.simulate.graph import Stream, TaskGraph, TaskKind

_P2P = len(Stream)  # thread id of the send track


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
        ranks = t.ranks if t.kind is not TaskKind.SEND else t.ranks[:1] + t.ranks[-1:]
        for r in dict.fromkeys(ranks):
            events.append({"ph": "X", "name": t.name, "cat": t.category.value, "pid": r,
                           "tid": int(t.stream) if t.stream is not None else _P2P,
                           "ts": start[i] / 1e3, "dur": (end[i] - start[i]) / 1e3, "args": args})
    return events


def write_trace(graph: TaskGraph, timeline: Timeline, path: Path) -> None:
    """Write the timeline as {"traceEvents": [...], "displayTimeUnit": "ms"}."""
    path.write_text(json.dumps({"traceEvents": trace_events(graph, timeline), "displayTimeUnit": "ms"}))
