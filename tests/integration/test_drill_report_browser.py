"""The drill's HTML report in a real browser (Debian's headless Chromium, which `make system-deps`
installs): the rendered page says the verdict, the ids and the times, and every chart text, measured
by the browser's own layout, lies inside its drawing (names left of the bars)."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from kbackup.app.drill_report import render_html
from tests.support.drill_reports import LONG_GROUP, sample_report

pytestmark = pytest.mark.integration

#: Appended to a copy of the page: the browser measures every chart text and writes the boxes out.
MEASURE = """<script>
const boxes = [];
for (const svg of document.querySelectorAll("svg")) {
  const width = svg.width.baseVal.value;
  const bars = Math.min(...[...svg.querySelectorAll("rect")].map((r) => r.x.baseVal.value));
  for (const text of svg.querySelectorAll("text")) {
    const box = text.getBBox();
    boxes.push({text: text.textContent, left: box.x, right: box.x + box.width, width, bars,
                name: text.getAttribute("x") === "0"});
  }
}
const out = document.createElement("pre");
out.id = "measure";
out.textContent = JSON.stringify(boxes);
document.body.appendChild(out);
</script>"""


def rendered_dom(page: Path, profile: Path) -> str:
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        pytest.fail("no chromium on PATH: `make system-deps` installs Debian's chromium package")
    flags = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-quic",
        "--no-first-run",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        f"--user-data-dir={profile}",
    ]
    done = subprocess.run(
        [chromium, *flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


def test_the_report_page_renders_its_facts_and_charts_that_fit(tmp_path: Path) -> None:
    page = tmp_path / "drill-report.html"
    page.write_text(render_html(sample_report()).replace("</body>", MEASURE + "</body>"))
    dom = rendered_dom(page, tmp_path / "profile")
    found = re.search(r'<pre id="measure">(.*?)</pre>', dom, re.S)
    assert found is not None, "the page's measuring script did not run"
    boxes: list[dict[str, Any]] = json.loads(html.unescape(found.group(1)))
    text = html.unescape(re.sub(r"<[^>]+>", " ", dom[: found.start()]))
    for fact in ("PASSED", "SRC-kafka-id-4f2a", "TGT-kafka-id-9c1b", "2026-11-24T03:00:00.000Z", "62.5 s"):
        assert fact in text, fact
    assert len(boxes) == 2 * (2 + 2 + 5)  # two group charts of 2 rows, the phase chart of 5
    assert any(box["text"] == LONG_GROUP for box in boxes)
    for box in boxes:
        assert box["left"] >= 0, box
        assert box["right"] <= box["width"], box
        if box["name"]:
            assert box["right"] <= box["bars"], box
