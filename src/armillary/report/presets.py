"""A shipped preset as the YAML it resolves to (`armillary presets show NAME`): every field, defaults
included, in SI units, with its sources and, for hardware, whether its efficiencies were calibrated."""

from __future__ import annotations

from typing import Any

import yaml
from pydantic import BaseModel

from armillary.errors import SpecError
from armillary.presets.registry import KINDS, did_you_mean, find_preset, preset_names
from armillary.specs.device import Device
from armillary.specs.system import System


def preset_kind(name: str, kind: str | None = None) -> str:
    """The kind of preset `name` is (`kind`: only look there); ambiguous or unknown names are errors."""
    if kind is not None and kind not in KINDS:
        raise SpecError(f"--kind {kind!r}: allowed values are {', '.join(KINDS)}")
    found = [k for k in ((kind,) if kind else KINDS) if find_preset(k, name) is not None]
    if not found:
        where = kind or "any kind"
        names = ", ".join(preset_names(kind)) if kind else "armillary presets lists them"
        hint = next((h for k in ((kind,) if kind else KINDS) if (h := did_you_mean(k, name))), "")
        raise SpecError(f"preset {name!r}: no such preset of {where}{';' + hint if hint else ''} ({names})")
    if len(found) > 1:
        raise SpecError(f"preset {name!r} is a preset of {', '.join(found)}: choose one with --kind")
    return found[0]


def load_preset(kind: str, name: str) -> BaseModel:
    from armillary.serving.engine import load_engine
    from armillary.specs.loading import load_device, load_model, load_stack, load_system

    loaders: dict[str, Any] = {"models": load_model, "devices": load_device, "systems": load_system,
                               "stacks": load_stack, "engines": load_engine}
    return loaders[kind](name)  # type: ignore[no-any-return]


def calibration_status(spec: BaseModel) -> str:
    """Calibrated (on which validation sources) or not, for a device or a system's device."""
    device = spec.device if isinstance(spec, System) else spec
    if not isinstance(device, Device):
        return "not applicable (no hardware efficiencies)"
    if device.calibrated_on:
        return f"calibrated on {', '.join(device.calibrated_on)}"
    copied = device.sources.get("matrix_efficiency")
    prior = f", prior from {device.prior} at equal kernel time (tools/device_prior.py)" if device.prior else ""
    return "NOT calibrated" + prior + (f" (matrix_efficiency: {copied})" if copied else "")


class _Dumper(yaml.SafeDumper):
    """Lists of numbers (efficiency curve points, torus shapes) on one line."""


def _list(dumper: yaml.SafeDumper, data: list[Any]) -> yaml.Node:
    def scalar(x: Any) -> bool:
        return not isinstance(x, dict | list)

    flat = all(scalar(x) or (isinstance(x, list) and all(map(scalar, x))) for x in data)
    return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=flat and bool(data))


_Dumper.add_representer(list, _list)


def preset_document(name: str, kind: str | None = None) -> str:
    """The resolved YAML of a preset, under comment lines naming its file and calibration status."""
    kind = preset_kind(name, kind)
    spec = load_preset(kind, name)
    path = find_preset(kind, name)
    body = yaml.dump(spec.model_dump(mode="json", exclude_none=True), Dumper=_Dumper, sort_keys=False, width=120,
                     allow_unicode=True)
    head = [f"# {kind}/{name} ({path})", f"# calibration: {calibration_status(spec)}",
            "# resolved: every field with its default, quantities in SI (bytes, s, FLOP/s, bytes/s)"]
    return "\n".join(head) + "\n" + body
