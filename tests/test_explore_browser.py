"""The explore page in a real headless Chromium (Selenium), with the network off.

Needs ``chromium`` and ``chromedriver`` on PATH (Debian: ``apt-get install chromium chromium-driver``;
``.ci/run`` installs them). Without them these tests skip, except under CI (``CI=true``), where a
missing browser fails the run.
"""

from __future__ import annotations

import os
import shutil
import time

import numpy as np
import pytest

from spacy_elmo.explore import page as explore
from spacy_elmo.explore.page import write_explore_page
from spacy_elmo.explore.projection import nearest_occurrences
from spacy_elmo.induction.induced import Occurrence

from .explore_data import HOSTILE, synthetic

pytestmark = pytest.mark.browser

BROWSERS = ("chromium", "chromium-browser", "google-chrome")


def _missing() -> str:
    """Why the browser tests cannot run here ('' when they can)."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return "selenium is not installed (pip install 'spacy-elmo[test]')"
    pytest.importorskip("plotly")
    if not any(shutil.which(name) for name in BROWSERS):
        return "no Chromium found (apt-get install chromium chromium-driver)"
    if not shutil.which("chromedriver"):
        return "no chromedriver found (apt-get install chromium-driver)"
    return ""


UNTHROTTLED = {"latency": 0, "downloadThroughput": -1, "uploadThroughput": -1}  # the emulation's other conditions: none


@pytest.fixture(scope="module")
def browser():
    reason = _missing()
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"the browser tests must run under CI: {reason}")
        pytest.skip(reason)
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = next(shutil.which(name) for name in BROWSERS if shutil.which(name))
    # software WebGL (no GPU here) for the large-page drawing: opt in, instead of the deprecated silent fallback
    arguments = ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1400,1000", "--enable-unsafe-swiftshader")
    for argument in arguments:
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL", "performance": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(shutil.which("chromedriver")))
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd("Network.emulateNetworkConditions", {"offline": True, **UNTHROTTLED})
    yield driver
    driver.quit()


def network_is_off(driver) -> bool:
    """Whether the browser's network emulation really blocks requests: a page served on loopback
    (which the emulation, not this machine, must refuse) fails to load with Chromium's own error."""
    import http.server
    import threading

    from selenium.common.exceptions import WebDriverException

    class Page(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"reachable")

        def log_message(self, *args) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Page)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        driver.get(f"http://127.0.0.1:{server.server_address[1]}/")
        return "reachable" not in driver.find_element("tag name", "body").text
    except WebDriverException as err:
        return "ERR_INTERNET_DISCONNECTED" in str(err)
    finally:
        server.shutdown()
        server.server_close()


def open_page(driver, path):
    """Load ``path`` from disk; wait until the page's script has wired the chart; return the browser log."""
    driver.get_log("browser")  # drop what came before
    driver.get_log("performance")
    driver.get(path.as_uri())
    deadline = time.monotonic() + 20
    while not driver.execute_script("return Boolean(window.spacyElmoExplorer)"):
        assert time.monotonic() < deadline, "the page never finished drawing its chart"
        time.sleep(0.05)
    return driver.get_log("browser")


def point_position(driver, occurrence):
    """Where occurrence ``occurrence`` is drawn, in viewport pixels (read from Plotly's own axes)."""
    return driver.execute_script(
        """
        const gd = document.getElementById('explore-map');
        const layout = gd._fullLayout, box = gd.getBoundingClientRect();
        for (const trace of gd._fullData) {
          const i = Array.from(trace.customdata).indexOf(arguments[0]);
          if (i >= 0) return [box.left + layout.xaxis._offset + layout.xaxis.d2p(trace.x[i]),
                              box.top + layout.yaxis._offset + layout.yaxis.d2p(trace.y[i])];
        }
        return null;""",
        occurrence,
    )


def mouse(driver, occurrence, click=False):
    from selenium.webdriver.common.action_chains import ActionChains

    x, y = point_position(driver, occurrence)
    actions = ActionChains(driver)
    actions.w3c_actions.pointer_action.move_to_location(int(round(x)), int(round(y)))
    if click:
        actions.w3c_actions.pointer_action.click()
    actions.perform()


def wait_for(driver, script, *args, timeout=5.0):
    deadline = time.monotonic() + timeout
    while True:
        value = driver.execute_script(script, *args)
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def problems(log):
    """The browser log's errors, and warnings other than the graphics driver's own (software WebGL's performance notes)."""
    return [entry for entry in log if entry["level"] == "SEVERE" or (entry["level"] == "WARNING" and entry.get("source") != "rendering")]


@pytest.fixture(scope="module", params=["svg", "webgl"])
def page(request, tmp_path_factory):
    """The same small page drawn as SVG and, as large pages are, with WebGL."""
    ws = synthetic((12, 10, 8), dim=24, texts=HOSTILE)
    with pytest.MonkeyPatch.context() as patch:
        if request.param == "webgl":
            patch.setattr(explore, "WEBGL_FROM", 1)
        path = write_explore_page(ws, tmp_path_factory.mktemp("explore") / "bank.html", neighbours=6)
    kind = "scattergl" if request.param == "webgl" else "scatter"
    assert f'"type":"{kind}"' in path.read_text(encoding="utf-8")
    return ws, path


def test_page_loads_offline_without_errors(browser, page):
    ws, path = page
    log = open_page(browser, path)
    assert problems(log) == []
    requests = [entry["message"] for entry in browser.get_log("performance") if '"Network.requestWillBeSent"' in entry["message"]]
    assert requests and all('"url":"file://' in message or '"url":"data:' in message for message in requests)
    assert browser.execute_script("return typeof Plotly.newPlot") == "function"
    assert network_is_off(browser)  # the network really was off (navigator.onLine does not say so in every Chromium)


def test_one_point_per_occurrence_in_its_sense(browser, page):
    ws, path = page
    open_page(browser, path)
    traces = browser.execute_script(
        "return document.getElementById('explore-map')._fullData.map(t => [t.name, t.x.length, Array.from(t.customdata), t.marker.color])"
    )
    assert [name for name, *_ in traces] == [f"{sense.name} ({sense.count})" for sense in ws.senses]
    assert sum(n for _, n, *_ in traces) == len(ws.occurrences)
    assert sorted(i for _, _, members, _ in traces for i in members) == list(range(len(ws.occurrences)))
    for k, (_, _, members, _) in enumerate(traces):
        assert all(ws.labels[i] == k for i in members)
    assert len({colour for *_, colour in traces}) == len(ws.senses)
    legend = browser.execute_script("return Array.from(document.querySelectorAll('.legend .legendtext')).map(t => t.textContent)")
    assert legend == ["bank: sense0 (12)", "bank: sense1 (10)", "bank: sense2 (8)"]


def test_hover_shows_the_sentence(browser, page):
    ws, path = page
    open_page(browser, path)
    for target in (5, 17, 1):  # 1: a sentence with markup and quotes in it
        mouse(browser, target)
        hovered = wait_for(
            browser, "const el = document.getElementById('hovered'); return el.dataset.occurrence == arguments[0] && el", str(target)
        )
        assert hovered, f"hovering occurrence {target} did not show it"
        text = browser.execute_script("return document.getElementById('hovered').textContent")
        assert ws.occurrences[target].text in text and ws.senses[ws.labels[target]].name in text
        assert browser.execute_script("return document.querySelector('#hovered mark').textContent") == "bank"
        label = browser.execute_script("return document.querySelector('.hoverlayer .hovertext').textContent")
        assert "bank" in label and ws.senses[ws.labels[target]].name in label


def test_hover_labels(browser, tmp_path):
    """Plotly's label: the sense and weight, the sentence cut to 70 characters either side of the
    word and wrapped at about 60, the word in bold (across a line break too), quotes as quotes."""
    texts = [
        "word " * 40 + "bank" + " word" * 40,
        "x " * 28 + "New bank of York" + " y" * 30,  # the line breaks inside the word
        'He said "the bank" & <left> &lt;right&gt;',  # and entities in the corpus stay as written
    ]
    ws = synthetic((3, 2), texts=texts)
    ws.occurrences[1] = Occurrence(texts[1], 56, 72)  # a word with spaces: "New bank of York"
    path = write_explore_page(ws, tmp_path / "labels.html", neighbours=2)
    open_page(browser, path)
    lines = []
    for target in range(3):
        mouse(browser, target)
        assert wait_for(browser, "return document.getElementById('hovered').dataset.occurrence === arguments[0]", str(target))
        lines.append(
            browser.execute_script(
                "const label = document.querySelector('.hoverlayer .hovertext text');"
                "return Array.from(label.querySelectorAll('tspan.line')).map(line => [line.textContent,"
                " Array.from(line.querySelectorAll('tspan')).filter(t => t.style.fontWeight === 'bold').map(t => t.textContent).join('')])"
            )
        )
    long, spaced, quoted = lines
    assert long[0][0] == "bank: sense0 (0.90)" and long[1][0].startswith("…")
    assert long[-1][0].endswith("…") and all(len(text) <= 70 for text, _ in long)
    assert "".join(bold for _, bold in long) == "bank"
    assert [bold for _, bold in spaced if bold] == ["New", "bank of York"]  # bold on both lines of the break
    assert quoted[1][0] == 'He said "the bank" & <left> &lt;right&gt;' and quoted[1][1] == "bank"


def test_click_lists_the_nearest_occurrences(browser, page):
    ws, path = page
    open_page(browser, path)
    indices, cosines = nearest_occurrences(ws.vectors, 6)
    mouse(browser, 20, click=True)
    assert wait_for(browser, "return document.getElementById('selected').dataset.occurrence === '20'")
    items = browser.execute_script(
        "return Array.from(document.querySelectorAll('#neighbours li')).map(li => [Number(li.dataset.occurrence), li.textContent])"
    )
    assert [i for i, _ in items] == indices[20].tolist()
    for (i, text), cosine in zip(items, cosines[20]):
        assert text == f"{cosine:.3f}{ws.occurrences[i].text}"
    # a neighbour in the list is a link to its own neighbours
    browser.execute_script("document.querySelector('#neighbours li').click()")
    first = indices[20][0]
    assert wait_for(browser, "return document.getElementById('selected').dataset.occurrence === arguments[0]", str(first))
    listed = browser.execute_script(
        "return Array.from(document.querySelectorAll('#neighbours li')).map(li => Number(li.dataset.occurrence))"
    )
    assert listed == indices[first].tolist()


def test_markup_in_the_corpus_stays_text(browser, page):
    ws, path = page
    log = open_page(browser, path)
    for target in (0, 1):
        mouse(browser, target)
        assert wait_for(browser, "return document.getElementById('hovered').dataset.occurrence === arguments[0]", str(target))
        label = browser.execute_script("return document.querySelector('.hoverlayer .hovertext').textContent")
        assert "".join(ws.occurrences[target].text.split())[:40] in "".join(label.split())  # the markup shows as text
        mouse(browser, target, click=True)
        assert wait_for(browser, "return document.getElementById('selected').dataset.occurrence === arguments[0]", str(target))
        assert ws.occurrences[target].text in browser.execute_script("return document.getElementById('selected').textContent")
    browser.execute_script("spacyElmoExplorer.select(2)")  # lists occurrences 0 and 1 among its neighbours
    assert browser.execute_script("return window.__pwned") is None
    assert browser.execute_script("return document.querySelectorAll('.panel img, .panel script, .panel b').length") == 0
    assert browser.execute_script("return document.querySelectorAll('section.sense img, section.sense script').length") == 0
    assert problems(log) == [] and problems(browser.get_log("browser")) == []


def test_two_corpora_coloured_by_corpus_with_shares_per_sense(browser, tmp_path):
    """Senses induced over two corpora (as `spacy elmo change` saves them): one trace per corpus in its
    colour, a marker shape per sense, hover labels for every point, the corpus in the panel, and
    each sense's share of either corpus in a table."""
    ws = synthetic((12, 10, 8), dim=24, texts=HOSTILE)
    corpus = np.array([0] * 12 + [0] * 2 + [1] * 8 + [1] * 8, dtype=np.int8)  # sense 0 only in A, sense 2 only in B
    ws.extra.update({"corpus": corpus, "corpus_names": ["1850s <i>", "2000s"]})
    path = write_explore_page(ws, tmp_path / "change.html", neighbours=4)
    log = open_page(browser, path)
    assert problems(log) == []
    traces = browser.execute_script(
        "return document.getElementById('explore-map')._fullData.map(t => [t.name, Array.from(t.customdata), t.marker.color,"
        " Array.from(t.marker.symbol), t.hovertext.length])"
    )
    assert [name for name, *_ in traces] == ["1850s &lt;i&gt; (14)", "2000s (16)"]  # escaped: Plotly renders tags in names
    legend = browser.execute_script("return Array.from(document.querySelectorAll('.legend .legendtext')).map(t => t.textContent)")
    assert legend == ["1850s <i> (14)", "2000s (16)"]  # shown as plain text
    assert [sorted(members) for _, members, *_ in traces] == [list(range(14)), list(range(14, 30))]
    assert [colour for _, _, colour, *_ in traces] == list(explore.CORPUS_COLOURS)
    for _, members, _, symbols, hovers in traces:
        assert symbols == [explore.SENSE_SYMBOLS[ws.labels[i]] for i in members] and hovers == len(members)
    rows = browser.execute_script(
        "return Array.from(document.querySelectorAll('#shares tbody tr')).map(r => Array.from(r.cells).map(c => c.textContent))"
    )
    weights = np.asarray(ws.weights, dtype=np.float64)
    for sense, (shape, *row) in zip(ws.senses, rows):
        share_a, share_b = weights[:14, sense.id].mean(), weights[14:, sense.id].mean()
        assert shape == explore.SENSE_GLYPHS[sense.id] and row[0] == sense.name
        assert row[1] == f"{share_a:.0%}" and row[2] == f"{share_b:.0%}" and row[3] == f"{share_b - share_a:+.0%}"
    assert rows[0][5] == "12 / 0" and rows[2][5] == "0 / 8"
    assert (
        browser.execute_script("return document.querySelector('#shares thead').textContent").count("1850s <i>") == 2
    )  # escaped, shown as text
    mouse(browser, 20)
    assert wait_for(browser, "return document.getElementById('hovered').dataset.occurrence === '20'")
    assert browser.execute_script("return document.querySelector('#hovered .source').textContent").startswith("2000s · ")
    assert browser.execute_script("return window.__pwned") is None


def test_pages_sharing_one_plotly_script_load_offline(browser, tmp_path):
    """Many pages in one folder (as `spacy elmo change` writes them) load Plotly from one plotly.min.js
    beside them: each page works offline from the folder and is a small fraction of a self-contained one."""
    ws = synthetic((12, 10, 8), dim=24, texts=HOSTILE)
    single = write_explore_page(ws, tmp_path / "single" / "bank.html", neighbours=4)
    pages = [write_explore_page(ws, tmp_path / "pages" / f"{name}.html", neighbours=4, shared_plotly=True) for name in ("bank", "cell")]
    script = tmp_path / "pages" / explore.PLOTLY_FILE
    assert script.is_file() and sorted(p.name for p in (tmp_path / "pages").iterdir()) == ["bank.html", "cell.html", explore.PLOTLY_FILE]
    assert all(p.stat().st_size < single.stat().st_size / 5 for p in pages)
    for path in pages:
        log = open_page(browser, path)
        assert problems(log) == []
        assert browser.execute_script("return typeof Plotly.newPlot") == "function"
        assert browser.execute_script("return document.getElementById('explore-map')._fullData.length") >= 1


def test_a_tampered_shared_script_is_replaced(tmp_path):
    """The folder's plotly.min.js is rewritten with the installed Plotly's script unless it is exactly that."""
    ws = synthetic((6, 6), dim=8)
    script = tmp_path / explore.PLOTLY_FILE
    script.write_text("window.__pwned = 1;")
    write_explore_page(ws, tmp_path / "bank.html", neighbours=2, shared_plotly=True)
    from plotly.offline import get_plotlyjs

    assert script.read_text(encoding="utf-8") == get_plotlyjs()


def test_the_change_page_shows_rank_measures_call_and_statuses(browser, tmp_path):
    """A page `change` writes: the word's rank, each measure with its interval and the binary call
    above the map, each sense's status and the counts the call compared in the shares table, and
    sense colours that cannot be taken for the two corpus colours of the map."""
    import json

    from spacy_elmo.change.report import write_report
    from spacy_elmo.explore.page import AVOID_DISTANCE, lab

    from .test_change_outputs import report_of, word_change

    out = tmp_path / "out"
    write_report(report_of(word_change("bank", in_a=(10, 8, 0), in_b=(10, 0, 12)), word_change("play", seed=1)), out)
    record = next(w for w in json.loads((out / "report.json").read_text())["words"] if w["word"] == "bank")
    log = open_page(browser, out / "pages" / "bank.html")
    assert problems(log) == []
    summary = browser.execute_script("return document.querySelector('#change p').textContent")
    assert f"rank {record['rank']} of 2 by MAHAL" in summary
    assert f"binary call: {'changed' if record['changed'] else 'no change'}" in summary and "in samples of 18" in summary
    tested = "the energy distance between the occurrences as their senses were induced from them"  # the default --test energy
    assert (
        record["p_value"] is None
        or f"a permutation test of {tested}, in samples of 18 from old and from new: p = {record['p_value']:.3g}" in summary
    )
    rows = browser.execute_script(
        "return Array.from(document.querySelectorAll('#measures tbody tr')).map(r => Array.from(r.cells).map(c => c.textContent))"
    )
    names = {"apd": "APD", "apd_c": "APD-c", "prt": "PRT", "jsd": "JSD", "mahal": "MAHAL"}
    assert [row[0] for row in rows] == list(names.values())
    for key, (name, estimate, interval) in zip(names, rows):
        low, high = record["intervals"][key]
        assert estimate == f"{record['measures'][key]:.3f}" and interval == f"[{low:.3f}, {high:.3f}]"
    assert browser.execute_script("return document.querySelector('#measures tr.ranked td').textContent") == "MAHAL"
    shares = browser.execute_script(
        "return Array.from(document.querySelectorAll('#shares tbody tr')).map(r => [Number(r.dataset.sense), r.cells[6].textContent,"
        " r.cells[7].textContent])"
    )
    by_id = {s["id"]: s for s in record["senses"]}
    assert shares and all(status == by_id[k]["status"] for k, status, _ in shares)
    assert all(counts == f"{by_id[k]['binary_count_a']} → {by_id[k]['binary_count_b']}" for k, _, counts in shares)
    swatches = browser.execute_script(
        "return Array.from(document.querySelectorAll('#shares .swatch')).map(s => getComputedStyle(s).backgroundColor)"
    )
    corpus_colours = browser.execute_script("return document.getElementById('explore-map')._fullData.map(t => t.marker.color)")
    as_hex = ["#%02x%02x%02x" % tuple(int(v) for v in c[c.index("(") + 1 : -1].split(",")[:3]) for c in swatches]
    assert len(set(as_hex)) == len(as_hex) == len(shares)
    assert all(np.linalg.norm(lab(s) - lab(c)) >= AVOID_DISTANCE for s in as_hex for c in corpus_colours), (as_hex, corpus_colours)
    browser.save_screenshot(str(tmp_path / "change-page.png"))
    assert (tmp_path / "change-page.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_network_check_sees_a_network_that_is_on(browser):
    """``network_is_off`` can say no: with the emulation lifted the loopback page loads."""
    browser.execute_cdp_cmd("Network.emulateNetworkConditions", {"offline": False, **UNTHROTTLED})
    try:
        assert not network_is_off(browser)
    finally:
        browser.execute_cdp_cmd("Network.emulateNetworkConditions", {"offline": True, **UNTHROTTLED})
    assert network_is_off(browser)
