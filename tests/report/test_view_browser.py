"""Issue 60, the run viewer in a real browser: Debian's headless Chromium driven by selenium
(`make browser` installs both; .ci/run calls it). Where they are missing the tests skip, except
under CI=true, where they fail: CI must run them.

- A committed pair of runs (conv-26, SCG-Mem served and local): filter the list, open a question,
  check its evidence marks and its recall path against the records, the memory graph, and the
  two-run comparison's filters against counts computed here.
- A hostile pair (tests/report/view_runs.py: payloads in every text a run or data file carries)
  executes nothing: no dialog, no Content-Security-Policy violation, no request to the network
  listener or anywhere outside the site's folder, no element made from data, and the payloads are
  on the page as text. The same check fails on a page whose text helper parses HTML (SCGV.txt
  swapped for innerHTML), so the test can fail.
"""
from __future__ import annotations

import http.server
import json
import os
import shutil
import threading

import pytest

from scgmem.report.view import build_site
from tests.report.view_runs import (EMBEDDED_SCGMEM, LISTENER_PORT, PAYLOADS, SERVED_SCGMEM, hostile_data,
                                    hostile_runs)

# Recorded in every page before its own scripts (CDP), out of reach of the page's CSP.
HOOKS = """
window.__dialogs = []; window.__violations = []; window.__errors = [];
window.addEventListener('error', function (e) { window.__errors.push(String(e.message)); });
['alert', 'confirm', 'prompt', 'print'].forEach(function (n) { window[n] = function () { window.__dialogs.push(n); }; });
document.addEventListener('securitypolicyviolation', function (e) {
  window.__violations.push(e.violatedDirective + ' ' + e.blockedURI); });
"""
# Elements and attributes no page of the viewer makes: any of them came from data.
FROM_DATA = ("img, iframe, object, embed, frame, video, audio, form, base, meta:not([charset]):not([name])"
             ":not([http-equiv]), link:not([href='view.css']), script:not([src]), a[href^='javascript'], "
             "[onerror], [onload], [onmouseover], [onclick], [src^='http'], [href^='http'], [style]")
OWN_SCRIPTS = {"view.js", "view_question.js", "view_memory.js", "view_compare.js", "data/index.js"}
UNSAFE_TEXT = "SCGV.txt = function (s) { var span = document.createElement('span'); span.innerHTML = s; return span; };"


def _need_browser():
    chromium, driver = shutil.which("chromium"), shutil.which("chromedriver")
    try:
        import selenium  # noqa: F401
    except ImportError:
        chromium = None
    if not (chromium and driver):
        why = "needs Debian's chromium and chromium-driver (`make browser`) and selenium (the dev extra)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"{why}; CI=true: the browser tests must run, not skip")
        pytest.skip(why)
    return chromium, driver


@pytest.fixture(scope="module")
def browser():
    chromium, driver_path = _need_browser()
    from scripts.bench_view import start_browser

    driver = start_browser(chromium, driver_path)
    driver.execute_cdp_cmd("Page.addScriptToEvaluateOnNewDocument", {"source": HOOKS})
    yield driver
    driver.quit()


def test_a_missing_browser_fails_under_ci_and_skips_elsewhere(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI=true"):
        _need_browser()
    monkeypatch.delenv("CI")
    with pytest.raises(pytest.skip.Exception):
        _need_browser()


class Listener(http.server.BaseHTTPRequestHandler):
    hits: list[str] = []

    def do_GET(self):  # noqa: N802 - the base class's name
        Listener.hits.append(self.path)
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def listener():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", LISTENER_PORT), Listener)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield Listener.hits
    server.shutdown()
    server.server_close()


def open_view(driver, page, hash_):
    """Load page#hash_ afresh and wait until the view has rendered (data-ready) and its data arrived."""
    from selenium.webdriver.support.ui import WebDriverWait

    driver.get(f"{page.as_uri()}{hash_}")
    WebDriverWait(driver, 20).until(lambda d: d.execute_script(
        "return document.body.getAttribute('data-ready') === '1' && !document.querySelector('p.loading')"))


def goto(driver, hash_):
    """Change the route inside the loaded page and wait for it to render."""
    from selenium.webdriver.support.ui import WebDriverWait

    driver.execute_script("location.hash = arguments[0];", hash_)
    WebDriverWait(driver, 20).until(lambda d: d.execute_script("return !document.querySelector('p.loading')"))


def problems(driver, page, hits) -> list[str]:
    """Everything the hostile run must not have caused on the current page."""
    found = [f"dialog {d}" for d in driver.execute_script("return window.__dialogs")]
    found += [f"CSP violation {v}" for v in driver.execute_script("return window.__violations")]
    found += [f"script error {e}" for e in driver.execute_script("return window.__errors")]
    site = page.parent.as_uri() + "/"
    for name in driver.execute_script("return performance.getEntriesByType('resource').map(e => e.name)"):
        own = name.startswith(site) and (name[len(site):] in OWN_SCRIPTS | {"view.css"} or
                                         name[len(site):].startswith("data/"))
        if not own:
            found.append(f"request {name}")
    found += [f"listener hit {h}" for h in hits]
    tags = driver.execute_script("return Array.from(document.querySelectorAll(arguments[0])).map(e => e.outerHTML.slice(0, 80))",
                                 FROM_DATA)
    found += [f"element from data {t}" for t in tags]
    scripts = driver.execute_script("return Array.from(document.scripts).map(s => s.getAttribute('src'))")
    found += [f"script {s}" for s in scripts if s not in OWN_SCRIPTS and not (s or "").startswith("data/")]
    return found


def _records(run_dir):
    return [json.loads(line) for line in (run_dir / "predictions.jsonl").read_text().splitlines() if line]


@pytest.fixture(scope="module")
def committed(tmp_path_factory):
    return build_site([SERVED_SCGMEM, EMBEDDED_SCGMEM], tmp_path_factory.mktemp("view") / "site", n_resamples=200)


def test_list_question_recall_path_memory_and_comparison_of_committed_runs(browser, committed):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    records, other = _records(SERVED_SCGMEM), _records(EMBEDDED_SCGMEM)
    open_view(browser, committed, "#list/0")
    count = browser.find_element(By.ID, "count")
    assert count.text == f"{len(records)} of {len(records)} questions"
    Select(browser.find_element(By.CSS_SELECTOR, "select[aria-label=category]")).select_by_value("2")
    temporal = [r for r in records if r["category"] == 2]
    assert browser.find_element(By.ID, "count").text == f"{len(temporal)} of {len(records)} questions"
    assert len(browser.find_elements(By.CSS_SELECTOR, "#questions tbody tr")) == len(temporal)

    # A question with evidence both retrieved and missing, opened from the list by a click on its row.
    k, r = next((k, r) for k, r in enumerate(sorted(records, key=lambda r: r["qa_index"]))
                if set(r["evidence"]) & set(r["retrieved"]) and set(r["evidence"]) - set(r["retrieved"]))
    goto(browser, "#list/0")
    Select(browser.find_element(By.CSS_SELECTOR, "select[aria-label=category]")).select_by_value(str(r["category"]))
    row = next(tr for tr in browser.find_elements(By.CSS_SELECTOR, "#questions tbody tr")
               if tr.find_elements(By.TAG_NAME, "td")[3].text == r["question"])
    row.click()
    goto(browser, f"#q/0/{k}")  # waits for the question the click opened
    assert browser.current_url.endswith(f"#q/0/{k}")
    assert browser.find_element(By.TAG_NAME, "h2").text.startswith(f"conv-26 · qa {r['qa_index']}")
    marked = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#retrieved li.ev .dia")]
    assert marked == [d for d in r["retrieved"] if d in r["evidence"]]
    assert [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#missing li.missing .dia")] == \
        [d for d in r["evidence"] if d not in r["retrieved"]]
    seeds = [e.text for e in browser.find_elements(By.CSS_SELECTOR, "#recall-path text.seed")]
    active_seeds = [c for c in r["context_keys"] if c in r["seed_keys"]]
    assert seeds == [c if len(c) <= 34 else c[:33] + "…" for c in active_seeds]
    assert len(browser.find_elements(By.CSS_SELECTOR, "#path-table tr")) == 1 + len(r["seed_keys"]) + \
        len(r["context_keys"]) - len(active_seeds)
    missing_marks = browser.find_elements(By.CSS_SELECTOR, "#recall-path text.missing")
    assert len(missing_marks) == len(set(r["evidence"]) - set(r["retrieved"]))

    # The memory graph: a click on a neighbour centres it.
    goto(browser, "#memory/0/0")
    first = browser.find_element(By.CSS_SELECTOR, ".graph h3").text
    neighbour = browser.find_elements(By.CSS_SELECTOR, "svg.ego g.nbr")[0]
    name = neighbour.find_element(By.TAG_NAME, "text").text
    neighbour.click()
    assert browser.find_element(By.CSS_SELECTOR, ".graph h3").text != first
    assert name.rstrip("…") in browser.find_element(By.CSS_SELECTOR, ".graph h3").text

    # Two runs: the category table, and "A right, B wrong" against the records.
    goto(browser, "#compare/0/1")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#compare-categories tr")) == 1 + 4 + 1
    Select(browser.find_element(By.CSS_SELECTOR, "select[aria-label=answers]")).select_by_value("ab")
    b = {(x["sample_id"], x["qa_index"]): x for x in other}
    expected = sum(1 for x in records if x["f1"] >= 0.5 and b[(x["sample_id"], x["qa_index"])]["f1"] < 0.5)
    assert browser.find_element(By.ID, "count").text == f"{expected} of {len(records)} shared questions"
    assert problems(browser, committed, []) == []


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile")
    return build_site(hostile_runs(root / "runs"), root / "site", hostile_data(root / "locomo.json"), n_resamples=20)


def _hostile_routes():
    return (["#list/0", "#list/1", "#compare/0/1", "#compare/1/0", "#memory/0/0", "#memory/1/0", "#memory/0/1"] +
            [f"#q/{run}/{k}" for run in (0, 1) for k in range(6)])


def test_a_hostile_run_executes_nothing_and_shows_its_payloads_as_text(browser, hostile, listener):
    from selenium.webdriver.common.by import By

    open_view(browser, hostile, "#list/0")
    found, shown = [], ""
    for route in _hostile_routes():
        goto(browser, route)
        found += [f"{route}: {p}" for p in problems(browser, hostile, listener)]
        shown += browser.find_element(By.ID, "main").text
    assert found == []
    for payload in PAYLOADS:
        assert payload in shown
    goto(browser, "#memory/0/1")  # conv-1 (after the payload-named sample): keys a plain JS object would mistake
    names = [li.text.split(" ")[0] for li in browser.find_elements(By.CSS_SELECTOR, ".conceptlist li")]
    assert "__proto__" in names and "constructor" in names


def test_the_hostile_check_fails_on_a_view_that_does_not_escape(browser, hostile, listener):
    """The same checks on the same pages, with SCGV.txt parsing its text as HTML: they must fire."""
    from selenium.webdriver.common.by import By

    open_view(browser, hostile, "#list/0")
    browser.execute_script(UNSAFE_TEXT)
    found, shown = [], ""
    for route in ("#q/0/0", "#q/1/1", "#memory/1/0"):
        goto(browser, route)
        found += problems(browser, hostile, listener)
        shown += browser.find_element(By.ID, "main").text
    assert any(p.startswith("element from data") for p in found), found
    assert not all(payload in shown for payload in PAYLOADS)
    listener.clear()  # what the unescaped page requested (the CSP stops most) is no concern of the other tests
