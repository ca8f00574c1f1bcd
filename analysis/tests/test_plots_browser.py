"""The figures as a browser draws them (issue 20, item 5): no label is cut at the edge of its SVG.

The SVGs keep text as text, so the browser lays it out in its own font; matplotlib only placed it. Arm names in
capitals (a "W" is a full em) were cut on the left and bottom of the p-value heat map, whose margins were
estimated at 0.62 em per character. Headless Chromium renders each figure and every ``<text>`` must lie inside
its ``<svg>``; a screenshot is kept in ``artifacts/`` to look at.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from analysis import plots
from analysis.report import analyze
from analysis.synthetic import DEFAULT_METRICS, synthetic_ratings

pytestmark = pytest.mark.browser

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts"
NAMES = [
    ("MEMORYBANK WITH MMM", "No memory", "WWWWWWWWWWWWW"),
    ("A very long arm name indeed (GPT-4o)", "No memory"),
    ("LD-Agent", "MemGPT-style core memory", "Full history", "QC DEGRADED WWW"),
]
OUTSIDE = """() => {
  const svg = document.querySelector('svg').getBoundingClientRect();
  return [...document.querySelectorAll('svg text')].filter(t => {
    const r = t.getBoundingClientRect();
    return r.width > 0 && (r.left < svg.left - 0.5 || r.right > svg.right + 0.5 || r.top < svg.top - 0.5
                           || r.bottom > svg.bottom + 0.5);
  }).map(t => t.textContent);
}"""


@pytest.fixture(scope="module")
def page() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    from tests.live import launch_chromium

    with sync_playwright() as p:
        browser = launch_chromium(p)
        yield browser.new_page(device_scale_factor=2)
        browser.close()


@pytest.mark.parametrize("names", NAMES, ids=["capitals", "two-arms-long", "four-arms"])
def test_no_label_of_the_heat_map_or_the_arm_chart_is_cut(page: Any, names: tuple[str, ...]) -> None:
    df = synthetic_ratings(300, arms=names, effects=tuple(float(i) for i in range(len(names))), seed=3)
    res = analyze(df, worker="worker", unit="episode", arm="arm", session="session", metrics=list(DEFAULT_METRICS),
                  qc_arm="qc")  # fmt: skip
    ARTIFACTS.mkdir(exist_ok=True)
    for name, svg in [("pvalues", plots.pvalue_heatmap(res)), ("arms", plots.arm_scores(res))]:
        page.set_content(f"<html><body style='margin:0'>{svg[svg.find('<svg') :]}</body></html>")
        assert page.evaluate(OUTSIDE) == [], f"labels cut in the {name} figure"
        page.locator("svg").screenshot(path=str(ARTIFACTS / f"analysis-{name}-{len(names)}-arms.png"))
