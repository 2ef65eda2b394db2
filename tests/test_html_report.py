"""`armillary report`: one self-contained HTML file holding the charts' data; in headless Chromium (skipped
when no browser is installed: `apt-get install chromium`) it loads with no console error, every chart renders
(plotly's SVG in the DOM) and a screenshot is taken."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from armillary.cli import app

pytest.importorskip("plotly")
EXAMPLES = Path(__file__).parent.parent / "examples"
BROWSER = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)


@pytest.fixture(scope="module")
def page(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report") / "report.html"
    result = CliRunner().invoke(app, ["report", str(EXAMPLES / "llama3-70b-h100.yaml"), "-o", str(out), "--search",
                                      "--usd-per-gpu-hour", "2"])
    assert result.exit_code == 0, result.output
    return out


def test_self_contained_with_the_charts_data(page):
    text = page.read_text()
    assert not re.search(r"<(script|link)[^>]+(src|href)=[\"']https?:", text)  # nothing fetched to view it
    assert "Plotly.newPlot" in text and len(text) > 1_000_000  # plotly.js inlined (about 4.6 MB)
    assert text.count("Plotly.newPlot") == 5  # breakdown, memory, communication, timeline, search front
    for shown in ("Where the time goes", "Memory per device", "Communication per step", "Simulated timeline",
                  "Pareto front", "tp 8 · pp 4", "J per trained token", "Top strategies", "dp_exposed"):
        assert shown.replace("_", " ") in text or shown in text, shown


def test_inference_report(tmp_path):
    out = tmp_path / "serving.html"
    result = CliRunner().invoke(app, ["report", str(EXAMPLES / "llama2-70b-serving-h100.yaml"), "-o", str(out)])
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert text.count("Plotly.newPlot") == 2 and "decode (all steps)" in text and "kv cache" in text


@pytest.mark.skipif(BROWSER is None, reason="no Chromium installed")
def test_loads_in_headless_chromium(page, tmp_path):
    assert BROWSER is not None
    flags = [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
             "--virtual-time-budget=3000", "--window-size=1280,3000"]
    dom = subprocess.run([*flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    # Chromium logs every console message, errors and uncaught exceptions included, as INFO:CONSOLE (a
    # console.error or an undefined function in a page shows there); plotly logs nothing when all is well
    assert [line for line in dom.stderr.splitlines() if "CONSOLE" in line] == []
    assert dom.stdout.count('class="main-svg"') >= 5  # each chart drawn (plotly's SVG layers)
    shot = tmp_path / "report.png"
    subprocess.run([*flags, f"--screenshot={shot}", page.as_uri()], capture_output=True, timeout=120, check=True)
    assert shot.stat().st_size > 20_000  # a rendered page, not a blank one


def test_inference_report_serves_at_a_rate(tmp_path):
    """With --rate, the served stream's latency CDFs join the page: the same points as `serve --json`."""
    import json

    out = tmp_path / "served.html"
    args = [str(EXAMPLES / "llama2-70b-serving-h100.yaml"), "--rate", "3", "--duration", "20"]
    result = CliRunner().invoke(app, ["report", args[0], "-o", str(out), *args[1:]])
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert text.count("Plotly.newPlot") == 3 and "Served requests" in text and "TTFT SLO 2 s" in text
    served = json.loads(CliRunner().invoke(app, ["serve", *args, "--json"]).output)
    assert f"P90 TTFT {served['ttft_s']['p90'] * 1e3:.4g} ms" in text
    assert f"{served['completed']} of {served['requests']} served" in text
    if BROWSER is not None:  # the served page renders its three charts with no console message
        flags = [BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--enable-logging=stderr", "--v=0",
                 "--virtual-time-budget=3000", "--dump-dom", out.as_uri()]
        dom = subprocess.run(flags, capture_output=True, text=True, timeout=120)
        assert dom.returncode == 0 and [line for line in dom.stderr.splitlines() if "CONSOLE" in line] == []
        assert dom.stdout.count('class="main-svg"') >= 3
