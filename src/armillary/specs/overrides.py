"""What-if overrides of a run file: `FIELD.PATH=VALUE` reaching every field, presets included.

A dotted path that goes inside the model, the system or the stack first resolves that part (a preset name,
a file or an inline mapping) to the data of its spec, so `system.network.1.bandwidth=800 Gb/s` or
`system.device.memory.0.bandwidth=+20%` work on a preset as on an inline mapping. Numbers in the path index
lists (`network.1`: the second network dimension); on a system, `scale_up` / `scale_out` name network
dimensions 0 / 1 and `devices_per_node` / `nodes` their sizes (the two-tier form of `specs/system.py`). A
value of `+N%` / `-N%` scales the value in place (the preset's, or the default the spec takes). Each step of
the path is checked against the spec's fields, so a typo is an error that lists the allowed ones.
"""

from __future__ import annotations

import copy
import re
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Annotated, Any, Union, get_args, get_origin

import yaml
from pydantic import BaseModel

from armillary.errors import SpecError
from armillary.specs.loading import load_model, load_stack, load_strategy, load_system, load_workload
from armillary.specs.model import Model
from armillary.specs.stack import SoftwareStack
from armillary.specs.strategy import Strategy
from armillary.specs.system import System
from armillary.specs.workload import Inference, Training

_RELATIVE = re.compile(r"^\s*([+-])\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*%\s*$")
_NUMBER_UNIT = re.compile(r"^\s*([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(.*?)\s*$")
# the two-tier names of a system (specs/system.py) as paths of its network form
_TWO_TIER = {"scale_up": ("network", "0"), "scale_out": ("network", "1"), "devices_per_node": ("network", "0", "size")}
_RESOLVED: dict[str, tuple[type[BaseModel], Callable[[Any], BaseModel]]] = {
    "model": (Model, load_model), "system": (System, load_system), "stack": (SoftwareStack, load_stack)}


@dataclass(frozen=True)
class Relative:
    """A value given as `+20%` / `-10%`: the current value times `factor`."""

    factor: float
    text: str


def parse_override(text: str) -> tuple[str, Any]:
    """'strategy.tp=4' -> ('strategy.tp', 4); values are read as YAML scalars, `+N%` / `-N%` as `Relative`."""
    if "=" not in text:
        raise SpecError(f"override {text!r}: expected FIELD=VALUE, e.g. strategy.tp=4")
    key, value = text.split("=", 1)
    relative = _RELATIVE.match(value)
    if relative:
        sign = 1.0 if relative.group(1) == "+" else -1.0
        return key.strip(), Relative(1.0 + sign * float(relative.group(2)) / 100.0, value.strip())
    try:
        return key.strip(), yaml.safe_load(value)
    except yaml.YAMLError as err:
        raise SpecError(f"override {text!r}: the value is not valid YAML ({err.__class__.__name__})") from None


def apply_overrides(data: dict[str, Any], overrides: Sequence[tuple[str, Any]], fields: type[BaseModel],
                    local: Callable[[Any], Any]) -> dict[str, Any]:
    """A copy of run-file `data` with the dotted `overrides` set. `fields`: the run file's spec (its fields
    are the allowed first keys); `local`: a file path of the run file as a path from here."""
    data = copy.deepcopy(data)
    resolved: dict[str, BaseModel] = {}
    for key, value in overrides:
        parts = key.split(".")
        if not all(parts):
            raise SpecError(f"override {key!r}: empty field name in the path")
        top = parts[0]
        if top not in fields.model_fields:
            raise SpecError(f"override {key!r}: the run file has no field {top!r}; fields: "
                            f"{', '.join(fields.model_fields)}")
        if len(parts) > 1 and top in _RESOLVED and top not in resolved:
            loader = _RESOLVED[top][1]
            if data.get(top) is None:
                raise SpecError(f"override {key!r}: the run file gives no {top} to change")
            try:
                spec = loader(local(data[top]) if not isinstance(data[top], dict) else data[top])
            except ValueError as err:
                raise SpecError(f"override {key!r}: {err}") from None
            resolved[top] = spec
            data[top] = spec.model_dump(mode="json", exclude_unset=True)
        if top == "system" and len(parts) > 1:
            parts = _network_path(parts, len(data["system"]["network"]), key)
        spec_type = _spec_type(top, data, fields)
        _check(spec_type, parts[1:], key, top)
        if isinstance(value, Relative):
            value = _scaled(_current(data, parts, top, resolved), value, key)
        _set(data, parts, value, key)
    return data


def _network_path(parts: list[str], dims: int, key: str) -> list[str]:
    """`system.scale_out.x` -> `system.network.1.x` (and the other two-tier names)."""
    name = parts[1]
    if name == "nodes":
        if dims < 2:
            raise SpecError(f"override {key!r}: the system has one network dimension, no nodes beyond it")
        return ["system", "network", str(dims - 1), "size", *parts[2:]]
    if name not in _TWO_TIER:
        return parts
    mapped = [*_TWO_TIER[name], *parts[2:]]
    if int(mapped[1]) >= dims:
        raise SpecError(f"override {key!r}: the system has {dims} network dimension(s); scale_out is dimension 1")
    return ["system", *mapped]


def _spec_type(top: str, data: dict[str, Any], fields: type[BaseModel]) -> Any:
    if top == "strategy":
        return Strategy
    if top == "workload":
        workload = data.get("workload")
        return Inference if isinstance(workload, dict) and workload.get("kind") == "inference" else Training
    if top in _RESOLVED:
        return _RESOLVED[top][0]
    return fields.model_fields[top].annotation


def _unwrap(tp: Any) -> Any:
    """The type a field holds: Annotated stripped, None left out of an optional; a union of several: Any."""
    while get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    if get_origin(tp) in (Union, types.UnionType):
        members = [a for a in get_args(tp) if a is not type(None)]
        return _unwrap(members[0]) if len(members) == 1 else Any
    return tp


def _check(tp: Any, path: list[str], key: str, where: str) -> None:
    """Every step of `path` exists in the spec type `tp`, else a SpecError naming the allowed ones."""
    for step in path:
        tp = _unwrap(tp)
        origin = get_origin(tp)
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            if step not in tp.model_fields:
                raise SpecError(f"override {key!r}: {where} ({tp.__name__}) has no field {step!r}; fields: "
                                f"{', '.join(tp.model_fields)}")
            tp = tp.model_fields[step].annotation
        elif origin in (tuple, list):
            if not step.isdigit():
                raise SpecError(f"override {key!r}: {where} is a list; give a position 0, 1, ... not {step!r}")
            tp = get_args(tp)[0]
        elif origin is dict:
            keys, tp = get_args(tp)
            if isinstance(keys, type) and issubclass(keys, Enum) and step not in {k.value for k in keys}:
                raise SpecError(f"override {key!r}: {where} has no key {step!r}; keys: "
                                f"{', '.join(k.value for k in keys)}")
        elif tp is not Any:
            raise SpecError(f"override {key!r}: {where} is a value ({getattr(tp, '__name__', tp)}), not a mapping")
        else:
            return
        where = f"{where}.{step}"


def _lookup(node: Any, parts: list[str]) -> Any:
    for p in parts:
        if isinstance(node, dict) and p in node:
            node = node[p]
        elif isinstance(node, list) and p.isdigit() and int(p) < len(node):
            node = node[int(p)]
        else:
            return None
    return node


def _current(data: dict[str, Any], parts: list[str], top: str, resolved: dict[str, BaseModel]) -> Any:
    """The value at `parts`: as given, else the default the spec takes."""
    value = _lookup(data, parts)
    if value is not None:
        return value
    full: BaseModel | None = resolved.get(top)
    try:
        if top == "strategy":
            full = load_strategy(data.get("strategy") or {})
        elif top == "workload" and isinstance(data.get("workload"), dict):
            full = load_workload(data["workload"])
    except SpecError:
        return None
    return _lookup(full.model_dump(mode="json"), parts[1:]) if full is not None else None


def _scaled(current: Any, relative: Relative, key: str) -> Any:
    """`current` (a number, or a number with a unit) times the factor; the unit kept."""
    if isinstance(current, bool) or current is None:
        raise SpecError(f"override {key!r}: {relative.text} needs a number to scale; the field has "
                        f"{'none' if current is None else repr(current)}: give the value itself")
    if isinstance(current, int | float):
        return current * relative.factor
    match = _NUMBER_UNIT.match(str(current))
    if not match:
        raise SpecError(f"override {key!r}: cannot scale {current!r} by {relative.text}: give the value itself")
    number, unit = float(match.group(1)) * relative.factor, match.group(2)
    return f"{number:.6g} {unit}".strip()


def _set(data: dict[str, Any], parts: list[str], value: Any, key: str) -> None:
    node: Any = data
    for i, p in enumerate(parts[:-1]):
        if isinstance(node, list):
            index = int(p)
            if index >= len(node):
                raise SpecError(f"override {key!r}: {'.'.join(parts[:i])} has {len(node)} entries (0 to "
                                f"{len(node) - 1})")
            node = node[index]
            continue
        if not isinstance(node.get(p), dict | list):
            node[p] = {}
        node = node[p]
    last = parts[-1]
    if isinstance(node, list):
        if int(last) >= len(node):
            raise SpecError(f"override {key!r}: {'.'.join(parts[:-1])} has {len(node)} entries")
        node[int(last)] = value
    else:
        node[last] = value
