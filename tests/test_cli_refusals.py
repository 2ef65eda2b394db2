"""What serve, search, simulate and network-optimize refuse before any work: the option combinations that do not
make one run, each an `error:` line naming the option, exit code 2 (exit 1 only for an infeasible simulation)."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from armillary.cli import app

EXAMPLES = Path(__file__).parent.parent / "examples"
SERVING = str(EXAMPLES / "llama2-70b-serving-h100.yaml")
TRAINING = str(EXAMPLES / "llama3-70b-h100.yaml")
SEARCH = ["search", "--model", "llama3-70b", "--system", "dgx-h100", "--gpus", "64"]
runner = CliRunner()


@pytest.mark.parametrize(("args", "message"), [
    (["serve", SERVING, "--mode", "offline", "--max-rate"], "--mode runs one benchmark; --max-rate searches rates"),
    (["serve", SERVING], "give --rate (requests/s), --max-rate, --mode, or a trace file"),
    (["serve", TRAINING, "--rate", "1"], "serve needs an inference workload"),
    ([*SEARCH], "--global-batch is needed for a training search"),
    ([*SEARCH, "--global-batch", "128", "--lora-base", "fp8"], "--lora-targets / --lora-base need --lora-rank"),
    ([*SEARCH, "--global-batch", "128", "--objective", "speed"], "--objective 'speed': time or memory"),
    (["simulate", TRAINING, "--rank-classes"], "--rank-classes simulates every rank, one per class"),
    (["simulate", TRAINING, "--straggler", "3:1.2"], "--straggler '3:1.2': expected RANK=FACTOR"),
    (["simulate"], "give RUN.yaml, or --chakra-in DIR with --system"),
    (["network-optimize", SERVING], "network-optimize takes a training run"),
    (["network-optimize", TRAINING, "--objective", "speed"], "--objective 'speed': one of time, time_cost"),
])
def test_refused_with_the_option_named(args, message):
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert message in " ".join(result.output.split())


def test_infeasible_simulation_refused_unless_asked():
    """A run that does not fit (Llama 3 70B over two-way TP alone: 35B parameters a device) is refused with the
    estimate's reasons."""
    args = ["simulate", TRAINING, "--set", "strategy.tp=2", "--set", "strategy.pp=1", "--set", "strategy.vpp=1"]
    result = runner.invoke(app, args)
    assert result.exit_code == 1, result.output
    assert "infeasible:" in result.output and "--show-infeasible simulates it anyway" in result.output
