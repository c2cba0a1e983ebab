"""compare.html and report.html in a real browser (Debian's Chromium, headless, through Playwright):
a hover on a bar shows its value, a click (or a hover) on a headline cell its interval and level, three
setups with long labels fit a 1400 px window, and the page asks for nothing but itself."""

from __future__ import annotations

import pandas as pd
import pytest

from bench_tasks.formatting import brief
from analysis.report import write_compare, write_report
from tests.test_report import synthetic_run

LABELS = ["llama.cpp b4600 / SmolLM2-135M-Instruct Q4_1 / 4 slots / 2-core CPU",
          "vLLM 0.32 CPU / tiny random Llama / 8 seqs / prefix caching on",
          "simulated engine / 12 slots / 120 tok/s / 40k prefill tok/s"]


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    base = tmp_path_factory.mktemp("browser")
    dirs = [synthetic_run(base / f"run{i}", "", speed) for i, speed in enumerate((1.0, 2.0, 1.1))]
    write_compare(dirs, LABELS, base / "cmp")
    write_report(dirs[0])
    return {"compare": base / "cmp" / "compare.html", "report": dirs[0] / "report.html",
            "csv": base / "cmp" / "compare.csv"}


def opened(page, path) -> list[str]:
    """Load the file and wait for its charts; returns the list every request the page makes goes to."""
    asked = []
    page.on("request", lambda request: asked.append(request.url))
    page.goto(path.as_uri())
    page.wait_for_selector("figure.chart svg .mark-rect path")
    return asked


def test_hovering_a_bar_shows_its_value(browser_page, pages):
    asked = opened(browser_page, pages["compare"])
    long = pd.read_csv(pages["csv"])
    total = long[(long["setup"] == LABELS[1]) & (long["table"] == "burst") & (long["row"] == "burst-12")
                 & (long["metric"] == "total_tps")]["median"].iloc[0]
    bar = browser_page.locator('figure[data-name="compare.png"] .mark-rect path[aria-label*="key: B;"]'
                               '[aria-label*="group: 12 at once"][aria-label*="figure: total tok/s"]')
    assert bar.count() == 1
    bar.hover()
    tooltip = browser_page.locator("#vg-tooltip-element.visible")
    tooltip.wait_for()
    cells = [c.strip() for c in tooltip.inner_text().split("\n") if c.strip()]
    shown = dict(zip(cells[::2], cells[1::2]))
    assert shown["setup"] == "B" and shown["label"] == LABELS[1] and shown["burst"] == "12 at once"
    assert shown["median"] == brief(total, "total_tps") == "463"
    assert asked == [pages["compare"].as_uri()]  # self-contained: nothing else was fetched


def test_a_click_or_a_hover_on_a_headline_cell_shows_its_interval_and_its_level(browser_page, pages):
    opened(browser_page, pages["compare"])
    cell = browser_page.locator("table.headline").first.locator("tbody tr").first.locator("td").nth(3)
    assert cell.locator("summary").inner_text() == "44.0"  # C's chat decode tok/s
    assert not cell.locator("small").is_visible()
    shown = "50% CI 44.0–44.0 (order statistics: the min–max of 2); range 44.0–44.0, n=2"  # 2 runs: 50%
    assert cell.locator("details").get_attribute("title") == shown  # the browser's own tooltip on a hover
    cell.locator("summary").click()
    assert cell.locator("small").is_visible() and cell.locator("small").inner_text() == shown
    needles = browser_page.locator("table.headline").nth(2).locator("tbody tr").first.locator("td").nth(1)
    needles.locator("summary").click()
    assert needles.locator("small").inner_text() == ("found in 2 of 3 answered requests; the share found: 90% CI "
                                                     "14%–98% (Clopper-Pearson)")


@pytest.mark.parametrize("name", ["compare", "report"])
def test_the_tables_fit_a_1400_px_window(browser_page, pages, name):
    opened(browser_page, pages[name])
    width = browser_page.evaluate("window.innerWidth")
    assert width == 1400
    rights = browser_page.evaluate("[...document.querySelectorAll('table')].map(t => t.getBoundingClientRect().right)")
    assert len(rights) > 10 and max(rights) <= width
    assert browser_page.evaluate("document.documentElement.scrollWidth") <= width
    headline = browser_page.locator("table.headline").first.locator("thead th").all_inner_texts()
    assert headline == (["test", "A", "B", "C"] if name == "compare" else ["test", "A"])
