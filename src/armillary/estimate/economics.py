"""Energy and money per token of a training step, a static inference batch or a served stream.

Energy: every device draws `power` watts for the whole run, and the facility `pue` times that (PUE = facility
energy / IT energy, The Green Grid White Paper 49, 2012), so

    J/token = devices x power x PUE / (tokens/s)
    $/million tokens = devices x ($/device-hour / 3600) / (tokens/s) x 1e6

Training counts every token trained on (global batch x sequence length per step); inference and serving count
output (generated) tokens, the unit inference prices are quoted in. Works on scalars and numpy arrays alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import numpy as np

from armillary.errors import SpecError
from armillary.specs.costs import Costs

if TYPE_CHECKING:
    from armillary.estimate.inference_result import InferenceEstimate
    from armillary.estimate.result import StepEstimate
    from armillary.specs.system import System

SECONDS_PER_HOUR = 3600.0
PER_MILLION = 1e6


class TokenKind(StrEnum):
    """Which tokens a per-token figure counts."""

    TRAINED = "trained"  # every token of the global batch (training)
    OUTPUT = "output"  # generated tokens (inference, serving)


@dataclass(frozen=True)
class Economics:
    """Energy and cost per token; `usd_per_million_tokens` is None without a price, `joules_per_token` None
    when the device lists no power and none was given."""

    tokens: TokenKind
    devices: int
    device_power_w: float | None
    pue: float
    usd_per_gpu_hour: float | None
    tokens_per_s: Any  # float or array: tokens/s of the `devices` together
    joules_per_token: Any
    usd_per_million_tokens: Any

    def to_dict(self) -> dict[str, Any]:
        def value(x: Any) -> Any:
            return None if x is None else (np.asarray(x).tolist() if np.ndim(x) else float(x))

        return {"tokens": self.tokens.value, "devices": self.devices, "device_power_w": self.device_power_w,
                "pue": self.pue, "usd_per_gpu_hour": self.usd_per_gpu_hour,
                "tokens_per_s": value(self.tokens_per_s), "joules_per_token": value(self.joules_per_token),
                "usd_per_million_tokens": value(self.usd_per_million_tokens)}


def economics(tokens_per_s: Any, devices: int, device_power_w: float | None, costs: Costs,
              tokens: TokenKind) -> Economics:
    """Energy and cost per token of `devices` devices producing `tokens_per_s` tokens per second together."""
    if devices < 1:
        raise SpecError(f"devices: {devices}; at least 1")
    rate = np.asarray(tokens_per_s, dtype=float)
    with np.errstate(divide="ignore"):
        seconds_per_token = np.where(rate > 0, 1.0 / np.where(rate > 0, rate, 1.0), np.inf)
    power = costs.device_power if costs.device_power is not None else device_power_w
    joules = None if power is None else _plain(devices * power * costs.pue * seconds_per_token)
    usd = (None if costs.usd_per_gpu_hour is None else
           _plain(devices * costs.usd_per_gpu_hour / SECONDS_PER_HOUR * seconds_per_token * PER_MILLION))
    return Economics(tokens, devices, power, costs.pue, costs.usd_per_gpu_hour, _plain(rate), joules, usd)


def _plain(x: np.ndarray) -> Any:
    return float(x) if x.ndim == 0 else x


def training_economics(r: StepEstimate, system: System, costs: Costs) -> Economics:
    """Per trained token of a training step on all of `system`'s devices."""
    return economics(r.tokens_per_s, system.devices, system.device.power, costs, TokenKind.TRAINED)


def inference_economics(r: InferenceEstimate, system: System, costs: Costs) -> Economics:
    """Per output token of a static batch on all its replicas' devices."""
    return economics(r.output_tokens_per_s, r.replicas * r.devices_per_replica, system.device.power, costs,
                     TokenKind.OUTPUT)


def serving_economics(output_tokens_per_s: float, devices: int, system: System, costs: Costs) -> Economics:
    """Per output token of a served stream (`ServingResult.output_tokens_per_s`) on all `devices` serving it."""
    return economics(output_tokens_per_s, devices, system.device.power, costs, TokenKind.OUTPUT)


def economics_of(r: StepEstimate | InferenceEstimate, system: System, costs: Costs) -> Economics:
    """`training_economics` or `inference_economics`, by the kind of estimate."""
    from armillary.estimate.inference_result import InferenceEstimate

    if isinstance(r, InferenceEstimate):
        return inference_economics(r, system, costs)
    return training_economics(r, system, costs)
