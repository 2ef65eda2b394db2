"""The task graph's compact storage (simulate/graph.py `Columns`): it reads back as the tasks added, a
graph of `Task` tuples runs the same, and it takes a fraction of the memory."""

from __future__ import annotations

import tracemalloc

import pytest

from armillary.simulate.engine import run
from armillary.simulate.graph import Category, Columns, GraphBuilder, Stream, Task, TaskGraph, TaskKind, Tier
from armillary.specs.communication import Collective


def small() -> GraphBuilder:
    b = GraphBuilder()
    a = b.add("a", TaskKind.COMPUTE, Category.COMPUTE, (0,), Stream.COMPUTE, 3e-6, flop=1e9)
    c = b.add("ar", TaskKind.COLLECTIVE, Category.DP, (0, 1), Stream.DP, 4e-6, (a,), Tier.SCALE_OUT, 1e6, group="dp",
              collective=Collective.ALL_REDUCE)
    b.add("s", TaskKind.SEND, Category.PP, (1, 0), None, 2e-6, (c, a), Tier.SCALE_OUT, 5e5,
          collective=Collective.SEND_RECV)
    b.add("b", TaskKind.COMPUTE, Category.RECOMPUTE, (0,), Stream.COMPUTE, 1e-6)
    return b


def test_columns_read_back_the_tasks_added():
    b = small()
    tasks = b.graph(2).tasks
    assert isinstance(tasks, Columns) and len(tasks) == len(b.tasks) == 4
    assert tasks[1] == Task("ar", TaskKind.COLLECTIVE, Category.DP, (0, 1), Stream.DP, 4000, (0,), Tier.SCALE_OUT,
                            1e6, 0.0, "dp", Collective.ALL_REDUCE, (0,))
    assert tasks[2].stream is None and tasks[2].deps == (1, 0) and tasks[2].after == (0, 1)
    assert tasks[-1].after == (0,) and tasks[-1].category is Category.RECOMPUTE  # its stream's previous task
    assert tasks[1:3] == (tasks[1], tasks[2]) and list(tasks) == [tasks[i] for i in range(4)]
    as_tuple = tuple(tasks)
    assert tasks == as_tuple and as_tuple == tasks and Columns.of(as_tuple) == tasks
    with pytest.raises(IndexError):
        tasks[4]


def test_a_graph_of_task_tuples_runs_as_its_columns():
    graph = small().graph(2)
    plain = TaskGraph(tuple(graph.tasks), graph.ranks, graph.rank_labels, graph.rank_weights)
    a, b = run(graph), run(plain)
    assert a.end_ns.tolist() == b.end_ns.tolist() and a.makespan_ns == 9000


def test_a_task_takes_about_a_hundred_bytes():
    tracemalloc.start()
    b = GraphBuilder()
    for i in range(10_000):  # 400 names, each shared by 25 tasks (as lanes share their pass's names)
        b.add(f"layer {i % 50} F{i // 50 % 8}", TaskKind.COMPUTE, Category.COMPUTE, (i % 8,), Stream.COMPUTE, 1e-6,
              (i - 1,) if i else ())
    graph = b.graph(8)
    del b
    held = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert held / len(graph.tasks) < 100  # 85 B; a Task tuple and its parts took about 450
