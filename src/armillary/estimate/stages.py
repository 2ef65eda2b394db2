"""Pipeline stages of a training step: which layers each stage kind holds (the first, a middle and the last
stage), the time one micro-batch spends on each by component, the slowest (critical) stage, and the
memory of the fullest one. Every function broadcasts over a sweep."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields

import numpy as np

from armillary.estimate.result import MemoryBreakdown
from armillary.estimate.step_figures import Deferral, Figure
from armillary.memo import quick_init
from armillary.numerics import Array, maximum, where
from armillary.plan.layout import stage_dense_layers, stage_layers


@quick_init
@dataclass(frozen=True)
class StageTime:
    """Time of one micro-batch through a set of layers or kernels, by component."""

    compute: Array
    recompute: Array
    tp: Array
    cp: Array = 0.0
    ep: Array = 0.0
    recomputed_exchange: Array = 0.0  # of `cp` and `ep`: the exposed exchanges of the recomputed forward
    deferrable: Array = 0.0  # of the total: what deferring the weight passes takes off (zero-bubble ZB-H1)

    def __add__(self, o: StageTime) -> StageTime:  # field by field, written out (fields() costs a microsecond)
        return StageTime(self.compute + o.compute, self.recompute + o.recompute, self.tp + o.tp, self.cp + o.cp,
                         self.ep + o.ep, self.recomputed_exchange + o.recomputed_exchange,
                         self.deferrable + o.deferrable)

    def __mul__(self, k: Array) -> StageTime:
        return StageTime(self.compute * k, self.recompute * k, self.tp * k, self.cp * k, self.ep * k,
                         self.recomputed_exchange * k, self.deferrable * k)

    @property
    def total(self) -> Array:
        return self.compute + self.recompute + self.tp + self.cp + self.ep


def weighted_sum(first: StageTime, k: Array, *terms: tuple[StageTime, Array | None]) -> StageTime:
    """`first * k + a * ka + b + ...` for terms (a, ka), (b, None) (None: added as it is), field by field in
    that order: what StageTime's * and + make, without a StageTime for each step."""
    compute, recompute, tp, cp = first.compute * k, first.recompute * k, first.tp * k, first.cp * k
    ep, exchange, deferrable = first.ep * k, first.recomputed_exchange * k, first.deferrable * k
    for t, kt in terms:
        if kt is None:
            compute, recompute, tp, cp = compute + t.compute, recompute + t.recompute, tp + t.tp, cp + t.cp
            ep, exchange, deferrable = ep + t.ep, exchange + t.recomputed_exchange, deferrable + t.deferrable
        else:
            compute, recompute, tp, cp = (compute + t.compute * kt, recompute + t.recompute * kt, tp + t.tp * kt,
                                          cp + t.cp * kt)
            ep, exchange = ep + t.ep * kt, exchange + t.recomputed_exchange * kt
            deferrable = deferrable + t.deferrable * kt
    return StageTime(compute, recompute, tp, cp, ep, exchange, deferrable)


@quick_init
@dataclass(frozen=True)
class StageLayers:
    """(dense, MoE) layer counts of the first, middle and last stage kinds, and the pipeline's shape:
    `single` is 1 for one stage (it holds both ends), `has_mid` 1 when middle stages exist."""

    first: tuple[Array, Array]
    middle: tuple[Array, Array]
    last: tuple[Array, Array]
    totals: tuple[Array, Array, Array]  # layers of the first, middle and last stage kinds
    single: Array
    has_mid: Array

    def busiest(self, which: int) -> Array:
        """The most dense (0) or MoE (1) layers any stage holds."""
        return maximum(maximum(self.first[which], self.last[which]), self.has_mid * self.middle[which])

    @property
    def most_layers(self) -> Array:
        """The most layers (at least 1) any stage holds."""
        n_first, n_mid, n_last = self.totals
        return maximum(maximum(maximum(n_first, n_last), self.has_mid * n_mid), 1)


def split_stages(layers: Array, dense_layers: Array, pp: Array, first: Array, last: Array) -> StageLayers:
    """The stage kinds of `plan.layout.stage_layers` with their leading dense layers
    (`plan.layout.stage_dense_layers`); MoE models' other layers are MoE layers."""
    n_first, n_mid, n_last = stage_layers(layers, pp, first, last)
    dense_first, dense_mid, dense_last = stage_dense_layers(dense_layers, pp, n_first, n_mid, n_last)
    return StageLayers((dense_first, n_first - dense_first), (dense_mid, n_mid - dense_mid),
                       (dense_last, n_last - dense_last), (n_first, n_mid, n_last), where(pp == 1, 1.0, 0.0),
                       where(pp > 2, 1.0, 0.0))


def critical_stage(*candidates: tuple[Array, StageTime]) -> StageTime:
    """The per-component times of whichever stage is slowest (elementwise over a sweep)."""
    best_time, best = candidates[0]
    for k, (time, parts) in enumerate(candidates[1:], 2):
        take = time > best_time
        if type(take) is bool or type(take) is np.bool_:  # one configuration: the whole stage or the best so far
            if take:
                best, best_time = parts, time
            continue
        if not take.any():  # no point takes it: the best so far, as the elementwise choice would give
            continue
        if take.all():  # every point takes it (the same values)
            best, best_time = parts, time
            continue
        best = StageTime(*(_chosen(take, getattr(parts, name), getattr(best, name)) for name in _STAGE_TIME))
        if k < len(candidates):  # (the last candidate's: read no more)
            best_time = where(take, time, best_time)
    return best


_STAGE_TIME = tuple(f.name for f in fields(StageTime))


def _chosen(take: np.ndarray, new: Array, old: Array) -> Array:
    """np.where(take, new, old), without the pass over the points where both are one array, or two smaller arrays
    of the same values bit for bit (a dense layer's zero expert exchange on every stage kind): the same values where
    a point reads them (elementwise, the shape does not matter)."""
    if new is old or (type(new) is np.ndarray and type(old) is np.ndarray and new.shape == old.shape
                      and new.dtype == old.dtype == np.float64 and new.size < take.size
                      and np.array_equal(new.view(np.int64), old.view(np.int64))):
        return new
    return np.where(take, new, old)


StageMemory = tuple[MemoryBreakdown, MemoryBreakdown]  # (HBM, second tier) of one device of a stage


def fullest_stage(first: StageMemory, middle: StageMemory, last: StageMemory, has_mid: Array,
                  totals: tuple[Array, Array, Array] | None = None) -> StageMemory:
    """The (HBM, tier 2) memory of the stage whose HBM is fullest (elementwise over a sweep). `totals`: the stages'
    HBM totals where the caller has them (each `MemoryBreakdown.total`'s values, its additions in its order), else
    summed here. Given them, a sweep's fields chosen point by point are chosen when first read (`ChosenMemory`: a
    search reads the totals alone), the totals chosen alike now."""
    best_total, (best_hbm, best_t2) = first[0].total if totals is None else totals[0], first
    steps: list[tuple[np.ndarray, MemoryBreakdown, MemoryBreakdown]] = []  # the choices point by point since
    for k, ((hbm, t2), present) in enumerate(((middle, has_mid), (last, 1.0)), 1):  # `best_hbm` and `best_t2`
        total = hbm.total if totals is None else totals[k]  # once a stage
        take = (present > 0) & (total > best_total)
        if not isinstance(take, np.ndarray):  # one configuration: take the whole stage or keep the best
            if take:
                best_hbm, best_t2, best_total = hbm, t2, total
            continue
        # a sweep: the stage where no point takes it (a middle stage holds less than the first under 1F1B) or
        # every point does, as the elementwise choice would give; else field by field
        if not take.any():
            continue
        if take.all():
            best_hbm, best_t2, best_total, steps = hbm, t2, total, []
            continue
        if totals is None:
            best_hbm = MemoryBreakdown(*(_chosen(take, getattr(hbm, name), getattr(best_hbm, name))
                                         for name in _MEMORY))
            best_t2 = MemoryBreakdown(*(_chosen(take, getattr(t2, name), getattr(best_t2, name))
                                        for name in _MEMORY))
        else:
            steps.append((take, hbm, t2))
        if k < 2 or steps:  # (the last stage's: read no more, but for a `ChosenMemory`'s total)
            best_total = where(take, total, best_total)
    if steps:
        tier2_total = best_t2.total
        for take, _, t2 in steps:
            tier2_total = where(take, t2.total, tier2_total)
        best_hbm = ChosenMemory.of(best_hbm, tuple((take, hbm) for take, hbm, _ in steps), best_total)
        best_t2 = ChosenMemory.of(best_t2, tuple((take, t2) for take, _, t2 in steps), tier2_total)
    return best_hbm, best_t2


def _chosen_fields(best: MemoryBreakdown, steps: tuple[tuple[np.ndarray, MemoryBreakdown], ...]) -> tuple[Array, ...]:
    """The fields of `best` with each step's stage taken where its points take it (`fullest_stage`'s choice, field
    by field in its order)."""
    for take, hbm in steps:
        best = MemoryBreakdown(*(_chosen(take, getattr(hbm, name), getattr(best, name)) for name in _MEMORY))
    return tuple(getattr(best, name) for name in _MEMORY)


class ChosenMemory(MemoryBreakdown):
    """A sweep's fullest stage's memory on one tier, whose fields are chosen point by point from the stages'
    (`_chosen_fields`, np.where field by field) when one is first read (`step_figures.Deferral`; issue 47: a search
    reads the total alone). Its total is the stages' totals chosen alike (`fullest_stage`): at every point the chosen
    stage's total, the sum of the chosen fields (MemoryBreakdown.total's additions of the same values), and of their
    shape, the points' choices' (each chosen field has it, none more: the second tier's fields vary along no axis
    that the HBM's do not); a copy with a field replaced sums its fields."""

    @classmethod
    def of(cls, best: MemoryBreakdown, steps: tuple[tuple[np.ndarray, MemoryBreakdown], ...],
           total: Array) -> ChosenMemory:
        deferral = Deferral(_chosen_fields, best, steps)
        held = deferral.deferred(len(_MEMORY))
        chosen = cls(*held)
        chosen.__dict__["_chosen"] = (deferral, held, total)
        return chosen

    @property
    def total(self) -> Array:
        held = self.__dict__.get("_chosen")
        if held is not None:
            deferral, deferred, total = held
            values = deferral.made()
            if all(self.__dict__[name] is deferred[i] or (values is not None and self.__dict__[name] is values[i])
                   for i, name in enumerate(_MEMORY)):  # (the fields chosen, none replaced)
                return total
        return super().total


_MEMORY = tuple(f.name for f in fields(MemoryBreakdown))
for _name in _MEMORY:  # (set on the class made: descriptors that resolve a Deferred field when first read)
    setattr(ChosenMemory, _name, Figure(_name, getattr(MemoryBreakdown, _name, dataclasses.MISSING)))
