"""The report as a reader sees it: Debian's headless Chromium opens index.html, and the page
itself says whether every image loaded (naturalWidth > 0) and the tables are there."""

from __future__ import annotations

import os
import shutil

import pytest
from accelstudy.report.build import build_report
from selenium import webdriver
from selenium.webdriver.common.by import By

from tests.test_report import synthetic_study

IMAGES = "return [...document.images].map(i => [i.getAttribute('src'), i.naturalWidth])"
TABLE_ROWS = "return [...document.querySelectorAll('table')].map(t => t.rows.length)"
# what sticks out of the page body at 1400 px, but inside a scroll container or a folded table
TOO_WIDE = """const right = document.body.getBoundingClientRect().right;
return [...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right
    > right + 1 && !e.closest('.wide') && !e.closest('details:not([open])')).map(e => e.tagName)"""
CONTENTS = """return [...document.querySelectorAll('nav a')].map(a => [a.getAttribute('href'),
    (document.getElementById(a.getAttribute('href').slice(1)) || {}).textContent])"""


@pytest.fixture(scope="module")
def browser():
    missing = [name for name in ("chromium", "chromedriver") if shutil.which(name) is None]
    if missing:
        reason = (f"Chromium is not installed ({', '.join(missing)} missing): apt-get install "
                  "chromium chromium-driver (`make test` does, as root)")  # fmt: skip
        if os.environ.get("CI"):
            pytest.fail(reason)
        pytest.skip(reason)
    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1400,1000"):  # fmt: skip
        options.add_argument(argument)  # no sandbox: CI runs as root
    service = webdriver.ChromeService(executable_path=shutil.which("chromedriver"))
    driver = webdriver.Chrome(options=options, service=service)
    yield driver
    driver.quit()


def test_every_image_loads_and_the_tables_are_there(browser, tmp_path):
    inputs = synthetic_study(tmp_path, with_finetune=True)
    index = build_report("t", **inputs)
    browser.get(index.as_uri())
    images = dict(browser.execute_script(IMAGES))
    names = ("baseline", "sensitivity", "tradeoff", "finetune_scaling", "finetune_strategies")
    assert set(images) == {f"figures/{n}.png" for n in names}
    assert all(width > 0 for width in images.values()), images
    # baseline (6 rows), Table 1 ours (11: each metric with its ±95% and p rows), each
    # quantized number against the baseline (18), Table 1 published (8), the fine-tuning points
    # (8), findings (5), the strategies' agreement (6 beside DDP's first repeat: its 2 other
    # repeats and 1 sharded strategy per card count), what to run where (3 choices) and the
    # sharding rule (2 card counts), each with its header row
    assert browser.execute_script(TABLE_ROWS) == [7, 12, 19, 9, 9, 6, 7, 4, 3]
    headings = [h.text for h in browser.find_elements(By.TAG_NAME, "h2")]
    assert headings[1:4] == [
        "Table 1, ours (m; stand-in data): mixed-precision PTQ",
        "Quantized against the baseline, item by item",
        "Table 1, published: TinyLlama-1.1B on WikiText-2, HellaSwag, BoolQ (Gaudi2 / A100)",
    ]
    assert headings[6:] == [
        "Fig. 2a: fine-tuning throughput and time for fixed work against cards",
        "Fig. 2b: DDP vs ZeRO-3 vs FSDP for one model",
        "Fine-tuning points: speed-up, scaling efficiency, planned and measured memory",
        "Fine-tuning findings: the paper's beside ours",
        "Strategies train the same model: each one's losses beside DDP's",
        "What to run where: the fastest, cheapest and least-energy point",
        "Shard only when the model does not fit: the paper's rule, checked",
    ]
    # the contents list every heading, each link lands on it; nothing is cut off at 1400 px
    assert [text for _, text in browser.execute_script(CONTENTS)] == headings
    assert browser.execute_script(TOO_WIDE) == []
    browser.execute_script("const box = document.querySelector('.wide'); box.className = '';"
                           "box.firstChild.style.minWidth = '2000px'")  # fmt: skip
    assert browser.execute_script(TOO_WIDE)  # a wide table outside its scroll container: seen
    # and the check sees a missing image
    (inputs["results_dir"] / "report" / "figures" / "tradeoff.png").unlink()
    browser.get(index.as_uri())
    assert dict(browser.execute_script(IMAGES))["figures/tradeoff.png"] == 0
