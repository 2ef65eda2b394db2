"""`armillary report`: one self-contained HTML file (plotly.js inlined once, gzipped) with a headline box, the
run's assumptions as formatted tables (no Python repr anywhere), the whole simulated timeline, and serving
fields on a serving page. In headless Chromium (skipped when /usr/bin/chromium is absent: `apt-get install -y
chromium`) the page's script draws every chart (plotly's SVG in the DOM, the body marked data-rendered="ok")
with no console message."""

from __future__ import annotations

import html
import json
import re
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from armillary.cli import app

EXAMPLES = Path(__file__).parent.parent / "examples"
CHROMIUM = Path("/usr/bin/chromium")
# Debian's chromium, headless, touching no network and no profile but a fresh one
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--enable-logging=stderr",
         "--v=0", "--virtual-time-budget=15000")
SERVING = ["--rate", "4", "--duration", "20"]


def _report(out: Path, run: str, *args: str) -> str:
    result = CliRunner().invoke(app, ["report", str(EXAMPLES / run), "-o", str(out), *args])
    assert result.exit_code == 0, result.output
    return out.read_text()


@pytest.fixture(scope="module")
def training(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report") / "training.html"
    _report(out, "llama3-70b-h100.yaml", "--search", "--usd-per-gpu-hour", "2")
    return out


@pytest.fixture(scope="module")
def serving(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("report") / "serving.html"
    _report(out, "llama2-70b-serving-h100.yaml", *SERVING)
    return out


def _visible(page: str) -> str:
    """The page's text outside its scripts and tags, unescaped: what a reader sees in the tables."""
    return html.unescape(re.sub(r"<[^>]+>", " ", re.sub(r"<(script|style).*?</(script|style)>", " ", page, flags=re.S)))


def _specs(page: str) -> list[dict]:
    return [json.loads(s) for s in re.findall(r'<script type="application/json" id="chart\d+-spec">(.*?)</script>',
                                              page, flags=re.S)]


def test_self_contained_once_and_light(training):
    text = training.read_text()
    assert not re.search(r"<(script|link)[^>]+(src|href)=[\"']https?:", text)  # nothing fetched to view it
    assert text.count('id="plotly-js"') == 1 and "Plotly.newPlot" in text  # plotly.js once per page
    assert 1_500_000 < len(text) < 2_600_000  # gzipped plotly.js (about 2 MB), not 4.8 MB raw
    titles = [s["layout"]["title"]["text"] for s in _specs(text)]
    assert len(titles) == 5 and [t.split(":")[0] for t in titles] == [
        "Where the time goes", "Memory per device", "Communication per step (busiest stage)", "Simulated step",
        "Top 10 strategies"]


def test_headline_and_tables_show_no_python_values(training):
    text = training.read_text()
    seen = _visible(text)
    head = text[text.index('id="headline"'):text.index("What the run assumed")]
    for label in ("tokens/s", "step time", "MFU", "memory per GPU", "simulated step"):
        assert f">{label}<" in head, label
    assert re.search(r"Error band:</b> \+-\d+% \(80% of \d+ measured rows", text)
    assert not re.search(r"<\w|\{", seen)  # no repr (<TpOverlap.USERBUFFERS: ...>, a dict) reached a cell
    for python in ("None", "True", "False", "TpOverlap", "np.float64", "e+0", "0000000"):
        assert python not in seen, python
    assert "dp grads, param gathers, tp userbuffers" in seen and "J per trained token" in seen


def test_the_whole_timeline_is_drawn(training):
    """The bars reach the end of the simulated step; the note says how many tasks each bar joins."""
    timeline = next(s for s in _specs(training.read_text()) if s["layout"]["title"]["text"].startswith("Simulated"))
    step_ms = float(re.search(r"Simulated step: ([\d.,]+) s", timeline["layout"]["title"]["text"])[1]) * 1e3
    ends = [b + x for trace in timeline["data"] for b, x in zip(trace["base"], trace["x"], strict=True)]
    assert max(ends) == pytest.approx(step_ms, rel=1e-3)
    assert "The whole step is drawn" in training.read_text()


def test_pareto_hover_labels_tell_every_strategy_apart(training):
    search = next(s for s in _specs(training.read_text()) if s["layout"]["title"]["text"].startswith("Top 10"))
    points = next(t for t in search["data"] if t["mode"] == "markers+text")
    assert len(set(points["customdata"])) == len(points["customdata"]) == 10
    assert all(re.search(r", mb \d+, ZeRO \d", label) for label in points["customdata"])


def test_log_axes_label_powers_of_ten():
    from armillary.report.html_figures import log_axis

    assert log_axis("GB", [1.2, 140.0]) | {"title": None} == {"title": None, "type": "log", "dtick": 1,
                                                              "tickformat": "~g"}
    assert log_axis("s", [0.02, 0.3])["dtick"] == "D2"  # 1, 2, 5 of each decade, not every minor tick
    assert log_axis("s", [2.0, 3.0])["type"] == "linear"


def test_serving_page_shows_serving_fields(serving):
    """The requested rate beside the rate the drawn arrivals offer (measured: requests - 1 over first to
    last arrival), the latency percentiles the served stream gives, and no training field."""
    seen = _visible(serving.read_text())
    served = json.loads(CliRunner().invoke(app, ["serve", str(EXAMPLES / "llama2-70b-serving-h100.yaml"), *SERVING,
                                                 "--json"]).output)
    assert re.search(r"requested rate\s+4 req/s\s+Poisson arrivals drawn for 20 s: \d+ arrivals in [\d.]+ s = "
                     rf"{served['offered_rate']:.3g} req/s offered", seen), seen[:600]
    assert f"{served['completed']} of {served['requests']}" in seen
    assert f"{served['ttft_s']['p90'] * 1e3:.4g} ms" in seen and "SLO attainment" in seen
    for training_field in ("micro-batch", "ZeRO", "recompute", "MFU", "1f1b", "trained token"):
        assert training_field not in seen, training_field
    assert "J per output token" in seen and "chunked prefill on" in seen
    titles = [s["layout"]["title"]["text"] for s in _specs(serving.read_text())]
    assert titles[0].startswith("Latency of the") and "static batch" in titles[1]


def test_static_inference_page(tmp_path):
    seen = _visible(_report(tmp_path / "static.html", "llama2-70b-serving-h100.yaml"))
    for label in ("output tokens/s", "time to first token", "time per output token", "memory per GPU",
                  "2 replicas of tp 4", "64 sequences per replica"):
        assert label in seen, label
    for other in ("SLO", "scheduler", "micro-batch", "MFU"):  # neither a served stream's nor training's
        assert other not in seen, other


def test_an_infeasible_run_says_so_at_the_top(tmp_path):
    text = _report(tmp_path / "oom.html", "llama3-70b-h100.yaml", "--set", "strategy.tp=1", "--set",
                   "strategy.sequence_parallel=false", "--no-simulate")
    head = text[text.index('id="headline"'):text.index("What the run assumed")]
    assert '<p class="verdict bad">INFEASIBLE: ' in head and "out of memory" in head
    memory = re.search(r'card( alert)?"><div class="label">memory per GPU</div><div class="value">([\d.]+) GiB', head)
    assert memory is not None and memory[1] == " alert" and float(memory[2]) > 80


@pytest.mark.skipif(not CHROMIUM.exists(), reason="no /usr/bin/chromium (apt-get install -y chromium)")
@pytest.mark.parametrize("which", ["training", "serving"])
def test_renders_in_headless_chromium(which, request, tmp_path):
    page: Path = request.getfixturevalue(which)
    charts = len(_specs(page.read_text()))
    dom = subprocess.run([str(CHROMIUM), *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom",
                          page.as_uri()], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    # Chromium logs every console message (console.error, an uncaught exception) as INFO:CONSOLE
    assert [line for line in dom.stderr.splitlines() if "CONSOLE" in line] == []
    assert 'data-rendered="ok"' in dom.stdout  # the page's script ran to its end
    assert 'id="headline"' in dom.stdout
    drawn = re.findall(r'<div class="chart[^"]*" id="chart(\d+)"', dom.stdout)
    assert len(drawn) == charts and dom.stdout.count('class="main-svg"') >= charts  # every chart has its SVG
