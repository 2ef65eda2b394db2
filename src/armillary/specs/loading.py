"""Turn what a user gives (a spec object, a preset name, a file path or a mapping) into a spec.

Errors name the field and what is allowed, never a traceback: every failure is a `SpecError`.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from armillary.arguments import whole
from armillary.errors import SHOWN_CHARACTERS, SpecError, shown_value
from armillary.presets.registry import did_you_mean, find_preset, preset_names, read_data_file
from armillary.specs.device import Device
from armillary.specs.huggingface import from_huggingface, huggingface_name, is_huggingface_config, snapshot_config
from armillary.specs.model import Model
from armillary.specs.stack import SoftwareStack
from armillary.specs.strategy import Strategy
from armillary.specs.system import System
from armillary.specs.workload import Inference, Training, Workload

S = TypeVar("S", bound=BaseModel)
MAX_DEVICES = 2**20  # a system resized with `gpus`: beyond today's largest clusters; bounds serving's replicas


SHOWN_ERRORS, QUOTED_AT_MOST = 5, 200  # of a user's file, in one error message


def format_validation_error(err: ValidationError, where: str) -> str:
    """One line per failed field (the first `SHOWN_ERRORS`), each naming the field and quoting a little of
    the value given (and of an unknown key): never more than `QUOTED_AT_MOST` characters of the file."""
    lines = []
    errors = err.errors()
    budget = QUOTED_AT_MOST
    for e in errors[:SHOWN_ERRORS]:
        keys = [str(x) for x in e["loc"]]
        if e["type"] == "extra_forbidden" and keys:  # the key is the file's, not the schema's
            keys[-1] = shown_value(keys[-1], min(SHOWN_CHARACTERS, budget)).strip("'\"")
            budget -= len(keys[-1])
        loc = ".".join(k for k in (where, *keys) if k != "")
        got = e.get("input")
        got_text = ""
        if got is not None and not isinstance(got, dict) and budget >= 10:
            shown = shown_value(got, min(SHOWN_CHARACTERS, budget))
            budget -= len(shown)
            got_text = f" (got {shown})"
        lines.append(f"{loc}: {e['msg'][:200]}{got_text}")
    if len(errors) > SHOWN_ERRORS:
        lines.append(f"... and {len(errors) - SHOWN_ERRORS} more")
    return "\n".join(lines)


def read_error(err: BaseException) -> str:
    """Why a YAML / JSON file could not be read, with where, not what: the parsers' own messages quote the
    offending line of the file."""
    if isinstance(err, yaml.MarkedYAMLError):
        mark = err.problem_mark or err.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        return f"{(err.problem or err.context or 'invalid YAML')[:100]}{where}"
    if isinstance(err, json.JSONDecodeError):
        return f"{err.msg} at line {err.lineno}, column {err.colno}"
    if isinstance(err, UnicodeDecodeError):
        return f"not UTF-8 text (byte {err.start})"
    if isinstance(err, RecursionError):
        return "nested too deeply"
    return str(err)[:200]


def validate_spec(cls: type[S], data: Any, where: str) -> S:
    try:
        return cls.model_validate(data)
    except ValidationError as err:
        raise SpecError(format_validation_error(err, where)) from None


def read_spec_file(path: Path, what: str) -> Any:
    """A YAML / JSON file's data; a missing file or bad syntax is a SpecError naming the file."""
    if not path.is_file():
        raise SpecError(f"{what} file {str(path)!r} does not exist")
    try:
        return read_data_file(path)
    except Exception as err:  # YAML / JSON syntax
        raise SpecError(f"{path}: cannot read as YAML/JSON: {read_error(err)}") from None


def _read(value: str, kind: str) -> tuple[Any, str]:
    """Data of a preset name or a file path."""
    preset = find_preset(kind, value)
    if preset is not None:
        return read_data_file(preset), preset.stem
    path = Path(value).expanduser()
    if path.is_file():
        return read_spec_file(path, kind[:-1]), path.stem
    raise SpecError(f"{kind[:-1]} {value!r} is neither a file nor a preset;{did_you_mean(kind, value)} presets: "
                    f"{', '.join(preset_names(kind))}")


@functools.lru_cache(maxsize=256)
def _preset(kind: str, name: str) -> Any:
    """A shipped preset, validated once (specs are frozen, so sharing them is safe)."""
    loader = {"models": load_model, "devices": load_device, "systems": load_system, "stacks": load_stack}[kind]
    return loader(read_data_file(find_preset(kind, name)))  # type: ignore[arg-type]


def load_spec(cls: type[S], value: Any, what: str) -> S:
    """A spec of class `cls` from an object of it, a YAML / JSON file path or a mapping; `what` names it in
    errors (e.g. "strategies")."""
    if isinstance(value, cls):
        return value
    data = read_spec_file(Path(value), what) if isinstance(value, str | Path) else value
    return validate_spec(cls, data, what)


def load_model(value: Model | str | dict[str, Any]) -> Model:
    """A model from a preset name ("llama3-8b"), a YAML / JSON file, a Hugging Face `config.json` or snapshot
    folder, or a mapping."""
    if isinstance(value, Model):
        return value
    if isinstance(value, str) and find_preset("models", value) is not None:
        return _preset("models", value.lower())
    path = Path(value).expanduser() if isinstance(value, str) else None
    if path is not None and path.is_dir():  # a model folder or a Hugging Face cache folder
        config = snapshot_config(path)
        if config is None:
            raise SpecError(f"model {value!r}: a folder without a config.json (nor snapshots/*/config.json)")
        path = config
        value = str(config)
    data = _read(value, "models")[0] if isinstance(value, str) else value
    if not isinstance(data, dict):
        raise SpecError(f"model: expected a mapping, got {type(data).__name__}")
    if is_huggingface_config(data):
        try:
            return from_huggingface(data, huggingface_name(data, path))
        except (ValueError, ValidationError, TypeError, KeyError, AttributeError, OverflowError) as err:
            raise SpecError(f"model (Hugging Face config): {err}") from None
    return validate_spec(Model, data, "model")


def _load_plain(cls: type[S], kind: str, value: S | str | dict[str, Any]) -> S:
    """A spec that is only data: an object of `cls`, a shipped preset of `kind`, a file path or a mapping."""
    if isinstance(value, cls):
        return value
    if isinstance(value, str) and find_preset(kind, value) is not None:
        return _preset(kind, value.lower())  # type: ignore[no-any-return]
    data = _read(value, kind)[0] if isinstance(value, str) else value
    return validate_spec(cls, data, kind[:-1])


def load_device(value: Device | str | dict[str, Any]) -> Device:
    """A device (accelerator) from a preset name ("h100-sxm"), a YAML / JSON file or a mapping."""
    return _load_plain(Device, "devices", value)


def load_system(value: System | str | dict[str, Any], gpus: int | None = None) -> System:
    """A system from a preset/file/mapping; `gpus` resizes it to that many devices."""
    if gpus is not None:
        whole("gpus", gpus, 1, MAX_DEVICES)
    if not isinstance(value, System | str | dict):
        raise SpecError(f"system: expected a preset name, a file path, a mapping or a System, got {value!r}")
    if isinstance(value, System):
        system = value
    elif isinstance(value, str) and find_preset("systems", value) is not None:
        system = _preset("systems", value.lower())
    else:
        data = _read(value, "systems")[0] if isinstance(value, str) else dict(value)
        if not isinstance(data, dict):
            raise SpecError(f"system: expected a mapping, got {type(data).__name__}")
        device = data.get("device")
        if isinstance(device, str) and isinstance(value, str) and find_preset("devices", device) is None:
            beside = Path(value).expanduser().parent / device  # a device file named relative to the system file
            if beside.is_file():
                device = str(beside)
        if isinstance(device, str | dict):
            data = {**data, "device": load_device(device)}
        system = validate_spec(System, data, "system")
    if gpus is not None:
        try:
            if isinstance(value, str) and find_preset("systems", value) is not None:
                return _sized_preset(value.lower(), gpus)
            system = system.with_devices(gpus)
        except ValueError as err:
            raise SpecError(f"gpus: {err}") from None
    return system


@functools.lru_cache(maxsize=256)
def _sized_preset(name: str, gpus: int) -> System:
    """A shipped system resized to `gpus` devices, built once (specs are frozen)."""
    return _preset("systems", name).with_devices(gpus)


def load_stack(value: SoftwareStack | str | dict[str, Any]) -> SoftwareStack:
    """A software stack profile from a preset name, a file path or a mapping."""
    return _load_plain(SoftwareStack, "stacks", value)


def stack_for(framework: str, year: int | None = None) -> SoftwareStack | None:
    """The shipped stack whose patterns match the most of a framework description (None: no stack); with
    the run's `year`, a matching stack of that year comes first."""
    def of_year(stack: SoftwareStack) -> bool:
        return year is not None and stack.years is not None and stack.years[0] <= year <= stack.years[1]

    # ties go to the most recent profile: a bare "Megatron-LM" of unknown year is today's Megatron-Core
    scored = [(stack.match_length(framework) > 0, of_year(stack), stack.match_length(framework),
               stack.years[1] if stack.years else 0, name, stack)
              for name in preset_names("stacks") for stack in (load_stack(name),)]
    matched, *_, best = max(scored, key=lambda t: t[:5])
    return best if matched else None


def load_strategy(value: Strategy | dict[str, Any] | str) -> Strategy:
    """A parallel strategy from a mapping ({"tp": 8, "pp": 4}) or a YAML / JSON file; unset fields take the
    Strategy spec's defaults (`armillary.defaults` says which)."""
    if isinstance(value, Strategy):
        return value
    data = read_spec_file(Path(value), "strategy") if isinstance(value, str) else value
    return validate_spec(Strategy, data, "strategy")


def load_workload(value: Workload | dict[str, Any]) -> Workload:
    """A training or inference workload, told apart by `kind` (training when absent)."""
    if isinstance(value, Training | Inference):
        return value
    kind = value.get("kind", "training") if isinstance(value, dict) else None
    if kind not in ("training", "inference"):
        raise SpecError(f"workload.kind: {kind!r} is not one of training, inference")
    if kind == "inference":
        return validate_spec(Inference, value, "workload")
    return validate_spec(Training, value, "workload")
