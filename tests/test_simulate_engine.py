"""The event engine and the pipeline schedules on tiny graphs: known makespans, max-min fair link sharing,
the schedules' bubbles against their closed forms, and a SimPy model of the pipeline as a cross-check."""

import itertools

import numpy as np
import pytest
import simpy
from hypothesis import given, settings
from hypothesis import strategies as hs

from armillary.simulate.engine import run
from armillary.simulate.graph import Category, GraphBuilder, Stream, TaskKind, Tier
from armillary.simulate.pipeline import Send, build_pipeline
from armillary.simulate.schedules import Kind
from armillary.specs.strategy import Schedule

US = 1e-6


def compute(b, name, rank, seconds, deps=()):
    return b.add(name, TaskKind.COMPUTE, Category.COMPUTE, (rank,), Stream.COMPUTE, seconds, deps)


def test_a_stream_runs_in_program_order_and_streams_run_side_by_side():
    b = GraphBuilder()
    a = compute(b, "a", 0, 3 * US)
    compute(b, "b", 0, 2 * US)  # waits for a: same stream
    c = b.add("ar", TaskKind.COLLECTIVE, Category.DP, (0,), Stream.DP, 4 * US, (a,))  # overlaps b
    tl = run(b.graph(1))
    assert tl.start_ns.tolist() == [0, 3000, 3000] and tl.end_ns.tolist() == [3000, 5000, 7000]
    assert tl.makespan_ns == 7000 and tl.critical_path() == (a, c)


def test_flows_on_one_link_share_it_max_min_fairly():
    """Two sends out of rank 0 on its scale-out link take twice as long; a third flow on another link
    (rank 1's incoming only) is limited by the shared one: rates 1/2, 1/2 then full."""
    b = GraphBuilder()
    s1 = b.add("s1", TaskKind.SEND, Category.PP, (0, 1), None, 10 * US, (), Tier.SCALE_OUT)
    s2 = b.add("s2", TaskKind.SEND, Category.DP, (0, 2), None, 10 * US, (), Tier.SCALE_OUT)
    s3 = b.add("s3", TaskKind.SEND, Category.PP, (3, 4), None, 10 * US, (), Tier.SCALE_OUT)
    tl = run(b.graph(5))
    assert [tl.end_ns[i] for i in (s1, s2, s3)] == [20_000, 20_000, 10_000]
    # the second flow starts late: shares 5 us at half rate, then runs alone
    b = GraphBuilder()
    a = compute(b, "a", 2, 5 * US)
    s1 = b.add("s1", TaskKind.SEND, Category.PP, (0, 1), None, 10 * US, (), Tier.SCALE_OUT)
    s2 = b.add("s2", TaskKind.SEND, Category.DP, (0, 2), None, 10 * US, (a,), Tier.SCALE_OUT)
    tl = run(b.graph(3))
    # 0-5 us: s1 alone (5 us done); 5-15: both at 1/2 (s1 finishes its 5 us at 15); s2 has 5 left: 20
    assert (tl.end_ns[s1], tl.end_ns[s2]) == (15_000, 20_000)
    # scale-up traffic does not slow scale-out traffic; opposite directions of a link do not share
    b = GraphBuilder()
    b.add("up", TaskKind.SEND, Category.TP, (0, 1), None, 10 * US, (), Tier.SCALE_UP)
    b.add("out", TaskKind.SEND, Category.PP, (0, 1), None, 10 * US, (), Tier.SCALE_OUT)
    b.add("back", TaskKind.SEND, Category.PP, (1, 0), None, 10 * US, (), Tier.SCALE_OUT)
    assert run(b.graph(2)).makespan_ns == 10_000


@settings(max_examples=30, deadline=None)
@given(hs.lists(hs.integers(1, 10**6), min_size=1, max_size=12))
def test_flows_out_of_one_link_finish_as_under_processor_sharing(durations_ns):
    """n sends leave rank 0 at once: its link is shared equally, so with durations sorted d1 <= ... <= dn,
    flow k ends at d1 + ... + d(k-1) + (n - k + 1) dk (processor sharing, Kleinrock 1967); every rate
    change moves the ends of the flows still in flight."""
    b = GraphBuilder()
    for k, d in enumerate(durations_ns):
        b.add(f"s{k}", TaskKind.SEND, Category.DP, (0, k + 1), None, d * 1e-9, (), Tier.SCALE_OUT)
    tl = run(b.graph(len(durations_ns) + 1))
    n, done = len(durations_ns), 0
    for rank, k in enumerate(sorted(range(n), key=lambda k: (durations_ns[k], k))):
        expected = done + (n - rank) * durations_ns[k]
        assert abs(int(tl.end_ns[k]) - expected) <= n, (k, int(tl.end_ns[k]), expected)
        done += durations_ns[k]
    assert abs(tl.makespan_ns - sum(durations_ns)) <= n  # the link is never idle


def longest_path(b):
    finish = []
    for t in b.tasks:
        finish.append(max((finish[d] for d in t.after), default=0) + t.duration_ns)
    return max(finish)


@settings(max_examples=40, deadline=None)
@given(hs.integers(0, 10**6), hs.integers(2, 60), hs.booleans())
def test_makespan_is_the_longest_path_without_shared_links_and_never_below_it(seed, n, links):
    rng = np.random.default_rng(seed)
    b = GraphBuilder()
    for i in range(n):
        deps = tuple(sorted({int(d) for d in rng.integers(0, i, size=rng.integers(0, 3))})) if i else ()
        if links and rng.random() < 0.4:
            b.add(f"t{i}", TaskKind.SEND, Category.PP, (int(rng.integers(0, 3)), 3), None, float(rng.random()) * US,
                  deps, Tier.SCALE_OUT)
        else:
            compute(b, f"t{i}", int(rng.integers(0, 3)), float(rng.random()) * US, deps)
    tl = run(b.graph(4))
    bound = longest_path(b)
    assert tl.makespan_ns >= bound
    if not links:  # no contention: exactly the longest path through dependencies and stream order
        assert tl.makespan_ns == bound
    path = tl.critical_path()
    assert tl.end_ns[path[-1]] == tl.makespan_ns
    assert all(tl.start_ns[j] == tl.end_ns[i] for i, j in itertools.pairwise(path))


def pipeline_makespan(schedule, p, m, v=1, tf=1.0, tb=2.0, tw=0.0, send=0.0):
    b = GraphBuilder()

    def emit(s, ps, deps):
        seconds = {Kind.F: tf, Kind.B: tb, Kind.W: tw}[ps.kind] / v
        return [b.add(str(ps), TaskKind.COMPUTE, Category.COMPUTE, (s,), Stream.COMPUTE, seconds, deps[0])]

    build_pipeline(b, schedule, p, m, v, [[s] for s in range(p)], emit, Send(send, 0.0, Tier.SCALE_OUT))
    return run(b.graph(p)).makespan_ns / 1e9


@pytest.mark.parametrize(("p", "m"), [(2, 2), (4, 8), (8, 16), (4, 12)])
def test_schedule_bubbles_match_their_closed_forms(p, m):
    """Equal stages, t_F = 1, t_B = 2: GPipe and 1F1B take (m + p - 1)(t_F + t_B); interleaving v chunks
    shrinks the bubble to (p - 1)/v (SC'21 §2.2); ZB-H1's is (p - 1)(t_F + t_B - t_W) (Qi et al. §3.1)."""
    assert pipeline_makespan(Schedule.GPIPE, p, m) == pytest.approx((m + p - 1) * 3)
    assert pipeline_makespan(Schedule.ONE_F_ONE_B, p, m) == pytest.approx((m + p - 1) * 3)
    for v in (2, 3):
        assert pipeline_makespan(Schedule.INTERLEAVED, p, m, v) == pytest.approx((m + (p - 1) / v) * 3)
    zb = pipeline_makespan(Schedule.ZB_H1, p, m, tf=1, tb=1, tw=1)
    assert zb == pytest.approx(3 * m + (p - 1) * (1 + 1 - 1))


def simpy_pipeline(p, m, tf, tb, send):
    """The same 1F1B pipeline written as SimPy processes: stores carry activations and gradients; a stage
    waits for its own sends (blocking point-to-point)."""
    env = simpy.Environment()
    forward = [simpy.Store(env) for _ in range(p + 1)]
    backward = [simpy.Store(env) for _ in range(p + 1)]
    finish = []

    def deliver(store, item):
        yield env.timeout(send)
        yield store.put(item)

    def stage(s):
        warmup = min(p - s - 1, m)
        order = [("F", i) for i in range(warmup)]
        for i in range(m - warmup):
            order += [("F", warmup + i), ("B", i)]
        order += [("B", i) for i in range(m - warmup, m)]
        for kind, i in order:
            if kind == "F":
                if s > 0:
                    yield forward[s].get()
                yield env.timeout(tf)
                if s < p - 1:
                    yield env.process(deliver(forward[s + 1], i))
            else:
                if s < p - 1:
                    yield backward[s].get()
                yield env.timeout(tb)
                if s > 0:
                    yield env.process(deliver(backward[s - 1], i))
        finish.append(env.now)

    for s in range(p):
        env.process(stage(s))
    env.run()
    return max(finish)


@pytest.mark.parametrize(("p", "m", "send"), [(4, 8, 0.1), (3, 5, 0.25), (6, 6, 0.0)])
def test_a_simpy_model_of_the_pipeline_gives_the_same_makespan(p, m, send):
    ours = pipeline_makespan(Schedule.ONE_F_ONE_B, p, m, send=send)
    assert ours == pytest.approx(simpy_pipeline(p, m, 1.0, 2.0, send), abs=1e-6)
