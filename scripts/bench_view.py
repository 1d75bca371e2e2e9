"""The run viewer in headless Chromium: how long it takes to open, how big it is, and its screenshots.

    .venv/bin/python -m scripts.bench_view --runs results/embedded/locomo_full
    .venv/bin/python -m scripts.bench_view --runs results/served/conv26_vllm/runs/table1/scgmem \\
        results/embedded/conv26_full/runs/table1/scgmem --screenshots docs/viewer

Builds the site (`scgmem-report view`) into a temporary folder, then opens it `--repeat` times in a
fresh page of Debian's headless Chromium (`make browser`; selenium from the dev extra) and prints,
per opening, the milliseconds from navigation start to the question list drawn (the page's
`scgv-painted` mark: the first frame after the list is built), then to one question of the last
conversation opened (its data file loaded, recall path drawn), to its memory graph and to the
two-run comparison; with the medians, the site's size, the load average and the CPU. Timings are
printed, never asserted. `--screenshots DIR` also writes list.png, question.png, memory.png and
compare.png (the README links them).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from scgmem.report.view import build_site

# Waits inside the page until a route has rendered (the selector exists), then one frame more.
WAIT_ROUTE = """
var done = arguments[arguments.length - 1], sel = arguments[1], t0 = performance.now();
location.hash = arguments[0];
(function poll() {
  if (document.querySelector(sel) && !document.querySelector('p.loading'))
    requestAnimationFrame(function () { setTimeout(function () { done(performance.now() - t0); }, 0); });
  else setTimeout(poll, 2);
})();
"""


def start_browser(chromium: str | None = None, driver: str | None = None, size: str = "1300,1000"):
    """A selenium driver of the system's headless Chromium (--no-sandbox: CI runs as root)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = chromium or shutil.which("chromium")
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", f"--window-size={size}"):
        options.add_argument(arg)
    browser = webdriver.Chrome(options=options, service=Service(driver or shutil.which("chromedriver")))
    browser.set_page_load_timeout(60)
    browser.set_script_timeout(60)
    return browser


def open_ms(browser, page: Path) -> tuple[float, float]:
    """Navigation start to the list built and to its first frame, in ms (a fresh load of index.html)."""
    browser.get("about:blank")
    browser.get(page.as_uri() + "#list/0")
    for _ in range(600):
        marks = browser.execute_script("return ['scgv-ready', 'scgv-painted'].map(n => "
                                       "(performance.getEntriesByName(n)[0] || {}).startTime)")
        if marks[1] is not None:
            return float(marks[0]), float(marks[1])
        time.sleep(0.01)
    raise RuntimeError(f"{page}: the list never rendered")


def route_ms(browser, hash_: str, selector: str) -> float:
    return float(browser.execute_async_script(WAIT_ROUTE, hash_, selector))


def site_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()}, {os.cpu_count()} logical CPUs"
    except OSError:
        pass
    return platform.processor() or "unknown"


def screenshots(browser, page: Path, out: Path, question: int, concept: str) -> list[Path]:
    """list.png (filtered to temporal questions), question.png (scrolled to its recall path),
    memory.png (the graph around `concept`) and compare.png."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    out.mkdir(parents=True, exist_ok=True)
    browser.get(page.as_uri() + "#list/0")
    route_ms(browser, "#list/0", "#questions")
    Select(browser.find_element(By.CSS_SELECTOR, "select[aria-label=category]")).select_by_value("2")
    shots = [out / "list.png"]
    browser.save_screenshot(str(shots[-1]))
    route_ms(browser, f"#q/0/{question}", "body[data-view=q] #recall-path")
    browser.execute_script("document.querySelector('#missing').previousElementSibling.scrollIntoView(); "
                           "window.scrollBy(0, -40);")  # the sticky header covers 40 px
    shots.append(out / "question.png")
    browser.save_screenshot(str(shots[-1]))
    route_ms(browser, "#memory/0/0", "body[data-view=memory] svg.ego")
    for item in browser.find_elements(By.CSS_SELECTOR, ".conceptlist li"):
        if item.text.split(" ")[0] == concept:
            browser.execute_script("arguments[0].click()", item)  # the list scrolls: a real click may miss
            break
    browser.execute_script("window.scrollTo(0, 0)")
    shots.append(out / "memory.png")
    browser.save_screenshot(str(shots[-1]))
    route_ms(browser, "#compare/0/1", "body[data-view=compare] #compare-categories")
    browser.execute_script("window.scrollTo(0, 0)")
    Select(browser.find_element(By.CSS_SELECTOR, "select[aria-label=answers]")).select_by_value("differ")
    shots.append(out / "compare.png")
    browser.save_screenshot(str(shots[-1]))
    for shot in shots:  # 128 colours: a screenshot of text and lines loses nothing visible, a third of the bytes
        from PIL import Image

        Image.open(shot).convert("RGB").quantize(colors=128).save(shot, optimize=True)
    return shots


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--runs", nargs="+", required=True, help="run directories (as scgmem-report view --runs)")
    p.add_argument("--repeat", type=int, default=5, help="fresh openings timed (default: %(default)s)")
    p.add_argument("--screenshots", default=None, help="write the four screenshots into this folder")
    p.add_argument("--question", type=int, default=0, help="row of the question shown (default: %(default)s)")
    p.add_argument("--concept", default="lgbtq", help="concept the memory screenshot centres (default: %(default)s)")
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        started = time.perf_counter()
        page = build_site(args.runs, Path(tmp) / "site")
        build_s = time.perf_counter() - started
        browser = start_browser()
        try:
            rows = []
            for _ in range(args.repeat):
                ready, painted = open_ms(browser, page)
                last = browser.execute_script("return SCGV.index.rows[0].length - 1")  # the last conversation's
                row = {"list_built_ms": ready, "open_ms": painted,
                       "question_ms": route_ms(browser, f"#q/0/{last}", "body[data-view=q] #retrieved"),
                       "memory_ms": route_ms(browser, "#memory/0/0", "body[data-view=memory] #main h2")}
                if len(args.runs) > 1:
                    row["compare_ms"] = route_ms(browser, "#compare/0/1", "body[data-view=compare] #compare-categories")
                rows.append(row)
                print(json.dumps({k: round(v, 1) for k, v in row.items()}))
            shots = screenshots(browser, page, Path(args.screenshots), args.question, args.concept) if args.screenshots else []
        finally:
            browser.quit()
        medians = {k: round(statistics.median(r[k] for r in rows), 1) for k in rows[0]}
        print(json.dumps({"runs": args.runs, "median_ms": medians, "site_bytes": site_bytes(page.parent),
                          "files": sum(1 for _ in page.parent.rglob("*.js")), "build_s": round(build_s, 1),
                          "load_average": os.getloadavg(), "cpu": cpu(), "chromium": browser.capabilities.get("browserVersion")}))
        for shot in shots:
            print(shot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
