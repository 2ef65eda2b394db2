"""Rank equivalence classes (simulate/classes.py) against the every-rank graph they stand for, and the
every-rank size guard against the graph it counts."""

from __future__ import annotations

from pathlib import Path

import pytest

from armillary.errors import SpecError
from armillary.simulate import run as simulate_run
from armillary.simulate.classes import rank_classes
from armillary.simulate.routing import untapered
from armillary.simulate.run import every_rank_size, simulate_training
from armillary.specs.loading import load_model, load_strategy, load_system, load_workload

MODEL = load_model("llama2-7b")


def rails(leaf_size: int, gpus: int, oversubscription: float = 2.0):
    """DGX H100 nodes whose rails have leaves of `leaf_size` nodes, tapered at `oversubscription`."""
    base = load_system("dgx-h100")
    tier = {**base.network[1].model_dump(mode="json", exclude_none=True), "kind": "rail_optimized",
            "leaf_size": leaf_size, "oversubscription": oversubscription}
    return load_system({**base.model_dump(mode="json", exclude_none=True),
                        "network": [base.network[0].model_dump(mode="json", exclude_none=True), tier]}, gpus)


def case(leaf_size: int = 3, gpus: int = 64, **strategy):
    return (MODEL, rails(leaf_size, gpus),
            load_strategy({"tp": 4, "pp": 2, "attention": "flash", "zero": 1, **strategy}),
            load_workload({"seq_len": 4096, "global_batch": 32}))


def per_device(result, devices: int, rank_of) -> list[list[tuple[str, int, int]]]:
    """Each device's tasks in program order: name, start and end."""
    mine: list[list[tuple[str, int, int]]] = [[] for _ in range(result.graph.ranks)]
    for i, t in enumerate(result.graph.tasks):
        for r in set(t.ranks):
            mine[r].append((t.name, int(result.timeline.start_ns[i]), int(result.timeline.end_ns[i])))
    return [mine[rank_of(d)] for d in range(devices)]


def test_classes_give_every_rank_its_timeline_where_uplinks_set_ranks_apart():
    """Leaves of 3 nodes do not line up with the 2 pipeline stages of 4 nodes each: the sends and rings of
    some lanes share uplinks with other stages' and some do not. The class graph runs a fraction of the
    ranks, and every task of every device starts and ends when the every-rank graph says, to the nanosecond."""
    args = case()
    every = simulate_training(*args, symmetric=False)
    found = rank_classes(args[2], 8, args[1], simulate_training(*args).graph)
    by_class = simulate_training(*args, symmetric=False, classes=True)
    assert 2 < by_class.graph.ranks < every.graph.ranks == 64 and by_class.graph.devices == 64
    assert by_class.graph.routes is not None and every.graph.routes is not None
    assert by_class.timeline.makespan_ns == every.timeline.makespan_ns
    assert per_device(by_class, 64, found.rank_of) == per_device(every, 64, lambda d: d)
    # the uplinks matter here: the same ranks on untapered rails finish earlier
    flat = simulate_training(MODEL, untapered(args[1]), *args[2:], symmetric=False, classes=True)
    assert flat.timeline.makespan_ns < by_class.timeline.makespan_ns


@pytest.mark.parametrize(("model", "strategy"), [
    ("llama2-7b", {"tp": 2, "pp": 4, "vpp": 2}),  # interleaved: the last stage sends to the first
    ("llama2-7b", {"tp": 2, "cp": 2, "pp": 2, "zero": 3, "sequence_parallel": True}),  # ring CP, gathers per layer
    ("mixtral-8x7b", {"tp": 2, "pp": 2, "ep": 4}),  # all-to-alls across leaves
], ids=["interleaved", "cp-zero3", "moe"])
def test_classes_are_exact_for_other_schedules_and_exchanges(model, strategy):
    args = (load_model(model), rails(3, 64, 4.0), load_strategy({"attention": "flash", "zero": 1, **strategy}),
            load_workload({"seq_len": 4096, "global_batch": 32}))
    every = simulate_training(*args, symmetric=False)
    by_class = simulate_training(*args, symmetric=False, classes=True)
    found = rank_classes(args[2], 64 // (args[2].tp * args[2].cp * args[2].pp), args[1],
                         simulate_training(*args).graph)
    assert by_class.graph.ranks < 64
    assert per_device(by_class, 64, found.rank_of) == per_device(every, 64, lambda d: d)


def test_without_contention_classes_are_the_stages_and_all_three_agree():
    """No tapered tier: nothing sets lanes apart, one class per stage, the symmetric graph's step."""
    args = case(leaf_size=3)
    flat = (args[0], untapered(args[1]), *args[2:])
    symmetric = simulate_training(*flat)
    by_class = simulate_training(*flat, symmetric=False, classes=True)
    every = simulate_training(*flat, symmetric=False)
    assert by_class.graph.ranks == 2 and by_class.graph.rank_weights == (32, 32) and by_class.graph.routes is None
    assert by_class.timeline.makespan_ns == every.timeline.makespan_ns == symmetric.timeline.makespan_ns


def test_a_straggler_device_gets_a_class_of_its_own():
    args = case()
    every = simulate_training(*args, symmetric=False, stragglers={5: 1.3})
    by_class = simulate_training(*args, symmetric=False, classes=True, stragglers={5: 1.3})
    plain = simulate_training(*args, symmetric=False, classes=True)
    assert by_class.timeline.makespan_ns == every.timeline.makespan_ns > plain.timeline.makespan_ns
    assert 1 in by_class.graph.rank_weights  # the straggler's lane alone
    with pytest.raises(SpecError, match="straggler rank"):
        simulate_training(*args, symmetric=False, classes=True, stragglers={64: 1.3})


def test_jitter_draws_per_task_so_classes_give_way_to_every_rank():
    args = case(leaf_size=4)
    jittered = simulate_training(*args, symmetric=False, classes=True, jitter=0.01, seed=1)
    assert jittered.graph.ranks == 64
    with pytest.raises(SpecError, match="classes: expected True or False"):
        simulate_training(*args, symmetric=False, classes="yes")
    with pytest.raises(SpecError, match=r"classes: .* set symmetric=False"):
        simulate_training(*args, classes=True)


def test_the_size_guard_counts_the_graph_it_would_build(monkeypatch):
    args = case(tp=2, pp=2, cp=2, zero=2)
    size = every_rank_size(simulate_training(*args).graph, args[2])
    every = simulate_training(*args, symmetric=False)
    assert size.tasks == len(every.graph.tasks)
    assert size.rank_entries == sum(len(t.ranks) for t in every.graph.tasks)
    # refused before it starts, saying what would fit; the class graph still runs
    monkeypatch.setattr(simulate_run, "MEMORY_LIMIT_BYTES", size.bytes // 3)
    with pytest.raises(SpecError, match=r"about [\d,]+ tasks and [\d.]+ GiB .*global batch of about 10 would fit"):
        simulate_training(*args, symmetric=False)
    assert simulate_training(*args, symmetric=False, classes=True).step_time_s == pytest.approx(every.step_time_s)


def test_the_api_and_the_cli_pass_rank_classes_through():
    """`armillary.simulate(..., symmetric=False, classes=True)` and `simulate --no-symmetric --rank-classes` give
    the every-rank step; a non-boolean or a symmetric run with classes is refused naming the option."""
    from typer.testing import CliRunner

    import armillary
    from armillary.cli import app

    args = ("llama3-8b", "dgx-h100", {"tp": 2, "pp": 2}, {"seq_len": 2048, "global_batch": 8})
    every = armillary.simulate(*args, gpus=16, symmetric=False)
    classed = armillary.simulate(*args, gpus=16, symmetric=False, classes=True)
    assert classed.step_time_s == pytest.approx(every.step_time_s, rel=1e-12)
    with pytest.raises(SpecError, match="classes: expected True or False"):
        armillary.simulate(*args, gpus=16, symmetric=False, classes="yes")
    example = str(Path(__file__).parent.parent / "examples" / "gpt3-175b-a100.yaml")
    out = CliRunner().invoke(app, ["simulate", example, "--rank-classes"])
    assert out.exit_code != 0 and "--rank-classes simulates every rank, one per class: add --no-symmetric" in out.output
