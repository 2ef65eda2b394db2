"""The HTML report's page template, style and script. plotly.js travels once per page, gzipped and base64
encoded (about 2 MB instead of 4.8); the script inflates it with the browser's DecompressionStream (Chromium 80,
Firefox 113, Safari 16.4), draws every chart from its JSON specification, and marks the body
`data-rendered="ok"` (or "error", with the message on the page) so that a test can tell."""

from __future__ import annotations

import base64
import gzip
import importlib.resources
import json
from functools import lru_cache
from string import Template
from typing import Any

from armillary.writing import finite_for_json

PAGE = Template("""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="armillary $version"><title>$title</title><style>$style</style></head>
<body data-rendered="pending" data-charts="$charts">
<header><h1>$title</h1><p class="subtitle">$subtitle</p></header>
$body
<footer>armillary $version: an analytical estimate, not a measurement (the error band says how far to trust
it). Charts: plotly.js $plotly_version, inlined.</footer>
<script type="application/gzip-base64" id="plotly-js">$plotly</script>
<script>$script</script>
</body></html>
""")

STYLE = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;max-width:1180px;margin:1.5em auto;padding:0 1em;
color:#222;line-height:1.4}
h1{font-size:1.6em;margin:0}h2{font-size:1.15em;margin:1.4em 0 .4em}.subtitle{color:#555;margin:.2em 0 1em}
.headline{display:flex;flex-wrap:wrap;gap:.6em;margin:.5em 0}
.card{border:1px solid #d0d7de;border-radius:6px;padding:.5em .9em;min-width:9em;background:#f6f8fa}
.card .label{font-size:.8em;color:#555;text-transform:uppercase;letter-spacing:.03em}
.card .value{font-size:1.45em;font-weight:600;white-space:nowrap}.card.alert{background:#fde8e8;border-color:#e5a0a0}
.card.alert .value{color:#a11}.card .detail{font-size:.82em;color:#555}
.band{margin:.3em 0}.verdict{padding:.35em .7em;border-radius:4px;margin:.4em 0;display:inline-block}
.ok{background:#e6f4ea;color:#1e6b34}.bad{background:#fde8e8;color:#a11}.note{color:#555;font-size:.9em}
.error{background:#fde8e8;color:#a11;padding:.5em}
.table-box{overflow-x:auto;max-width:100%;margin:.3em 0 1em}
table{border-collapse:collapse;font-size:13px}caption{text-align:left;font-weight:600;padding:.2em 0}
td,th{border:1px solid #d0d7de;padding:3px 7px;white-space:nowrap}th{background:#f6f8fa}
td.wrap{white-space:normal;min-width:9em}
.left{text-align:left}.right{text-align:right;font-variant-numeric:tabular-nums}
figure{margin:1em 0}figcaption{color:#555;font-size:.88em;margin:.2em 0 0 .5em}
footer{margin-top:2em;color:#777;font-size:.8em;border-top:1px solid #ddd;padding-top:.5em}
"""

SCRIPT = """
(async function () {
  const body = document.body;
  try {
    if (!window.Plotly) {
      const text = document.getElementById("plotly-js").textContent.trim();
      const bytes = Uint8Array.from(atob(text), c => c.charCodeAt(0));
      const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
      const code = document.createElement("script");
      code.textContent = await new Response(stream).text();
      document.head.appendChild(code);
    }
    for (const div of document.querySelectorAll("div.chart")) {
      const spec = JSON.parse(document.getElementById(div.id + "-spec").textContent);
      await Plotly.newPlot(div, spec.data, spec.layout, {displaylogo: false, responsive: true});
    }
    body.dataset.rendered = "ok";
  } catch (e) {
    body.dataset.rendered = "error";
    const p = document.createElement("p");
    p.className = "error";
    p.textContent = "The charts could not be drawn: " + e;
    body.prepend(p);
  }
})();
"""


@lru_cache(maxsize=1)
def plotly_js() -> tuple[str, str]:
    """plotly.js of the installed plotly package, gzipped and base64 encoded, and its version."""
    import plotly

    source = (importlib.resources.files("plotly") / "package_data" / "plotly.min.js").read_bytes()
    head = source[:400].decode("utf-8", "replace")
    version = head.split("plotly.js v", 1)[1].split()[0] if "plotly.js v" in head else f"(plotly {plotly.__version__})"
    return base64.b64encode(gzip.compress(source, 6, mtime=0)).decode("ascii"), version


def chart(index: int, spec: dict[str, Any], note: str = "") -> str:
    """A chart's div, its specification as JSON (every "<" escaped, so no text in it can end the script)
    and the note under it."""
    data = json.dumps(finite_for_json(spec), separators=(",", ":"), allow_nan=False).replace("<", "\\u003c")
    caption = f"<figcaption>{note}</figcaption>" if note else ""
    return (f'<figure><div class="chart" id="chart{index}"></div>{caption}<script type="application/json" '
            f'id="chart{index}-spec">{data}</script></figure>')


