"""What energy and money cost: facility overhead (PUE), the price of a device-hour and, optionally, the power a
device draws. User data, not a property of the hardware: the `costs:` block of a run file, or `--pue`,
`--usd-per-gpu-hour` on the command line."""

from __future__ import annotations

from pydantic import Field

from armillary.specs.base import Spec

# Uptime Institute Global Data Center Survey 2024: operators reported an average annual PUE of 1.56 at their
# largest data center (1.55-1.59 every year since about 2020; Uptime Intelligence Update 221, 2023).
DEFAULT_PUE = 1.56


class Costs(Spec):
    """Energy and price assumptions of a run; no price is assumed when none is given (prices depend on the
    provider, the commitment and the year, so the dollar figures are left out rather than guessed)."""

    pue: float = Field(DEFAULT_PUE, ge=1.0, description="power usage effectiveness: facility power / IT power "
                       "(default 1.56: Uptime Institute Global Data Center Survey 2024 average)")
    usd_per_gpu_hour: float | None = Field(
        None, gt=0, description="price of one device for one hour in US dollars; None: no dollar figures")
    device_power: float | None = Field(
        None, gt=0, description="watts one device draws, averaged over the run; default: the device preset's "
        "board power (TDP), an upper bound, as devices rarely run at TDP throughout")
