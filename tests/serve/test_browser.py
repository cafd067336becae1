"""`bertkit serve` used as a person uses it: a real headless Chromium (Debian's `chromium` and
`chromium-driver`, driven by Selenium) types a sentence, clicks a word, reads the guesses,
checks the pictures' data and pixels, watches a run's curves grow, and loads nothing from
outside the server (the browser's name resolution is cut off, and every URL it loaded is
checked). Skipped with a message where Chromium is not installed; `.ci/run` installs it."""
from __future__ import annotations

import contextlib
import json
import shutil
import threading
import time

import pytest

from bertkit.serve.app import listen, make_app
from bertkit.serve.workbench import Workbench

webdriver = pytest.importorskip("selenium.webdriver")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
pytestmark = [pytest.mark.slow, pytest.mark.skipif(
    not (CHROMIUM and DRIVER),
    reason="Chromium is not installed (apt-get install chromium chromium-driver)")]

from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


@contextlib.contextmanager
def running(workbench):
    """The application over `workbench`, answering on a free port of 127.0.0.1: its address."""
    import uvicorn

    sock = listen("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(make_app(workbench), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.time() + 30
    while not server.started and time.time() < deadline:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


@pytest.fixture(scope="module")
def server(workbench):
    with running(workbench) as address:
        yield address


@pytest.fixture(scope="module")
def browser():
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = CHROMIUM
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                 "--window-size=1400,1000", "--disable-extensions",
                 # no name resolves but this machine's: a page that fetched anything from
                 # the network would fail to
                 "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(DRIVER), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def open_view(browser, server, view):
    """A fresh load of the page at `view`."""
    browser.get("about:blank")
    browser.get(f"{server}/#{view}")
    wait(browser).until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready"))
    assert browser.find_element(By.ID, f"view-{view}").is_displayed()


def wait(browser, seconds=60):
    return WebDriverWait(browser, seconds)


def type_into(browser, element_id, text):
    box = browser.find_element(By.ID, element_id)
    box.clear()
    box.send_keys(text)


def no_error(browser):
    box = browser.find_element(By.ID, "error")
    assert not box.is_displayed(), box.text


def test_fill_mask_click_a_word_and_read_the_guesses(browser, server, workbench):
    open_view(browser, server, "fill")
    type_into(browser, "fm-text", "we sat on the river bank .")
    words = browser.find_elements(By.CSS_SELECTOR, "#fm-words .word")
    assert [w.text for w in words] == ["we", "sat", "on", "the", "river", "bank", "."]
    words[4].click()
    assert browser.find_element(By.ID, "fm-text").get_attribute("value") == \
        "we sat on the [MASK] bank ."
    wait(browser).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".fm-model")) == 2)
    no_error(browser)
    expected = workbench.fill_mask("we sat on the [MASK] bank .", 5)["models"]
    for panel, model in zip(browser.find_elements(By.CSS_SELECTOR, ".fm-model"), expected):
        assert panel.get_attribute("data-model") == model["name"]
        shown = [g.get_attribute("data-token")
                 for g in panel.find_elements(By.CSS_SELECTOR, ".guess")]
        assert shown == [g["token"] for g in model["masks"][0]]
        bar = panel.find_element(By.CSS_SELECTOR, ".bar").get_attribute("style")
        assert f"{100 * model['masks'][0][0]['score']:.1f}%" in bar


def test_attention_heat_maps_draw_the_weights(browser, server, workbench):
    open_view(browser, server, "attention")
    type_into(browser, "at-text", "the cat sat on the mat")
    browser.find_element(By.ID, "at-go").click()
    wait(browser).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#at-maps canvas"))
    no_error(browser)
    model = browser.find_element(By.ID, "at-model").get_attribute("value")
    expected = workbench.attention(model, "the cat sat on the mat")
    shown = browser.execute_script("return window.bertkit.state.attention")
    assert shown["weights"] == expected["weights"] and shown["tokens"] == expected["tokens"]
    canvases = browser.find_elements(By.CSS_SELECTOR, "#at-maps canvas")
    L, A, T = len(expected["weights"]), len(expected["weights"][0]), len(expected["tokens"])
    assert len(canvases) == A and canvases[0].get_attribute("data-layer") == str(L)
    # the pixels: the cell of query 1, key 2 of head 0 in the last layer has its weight's colour
    pixel = browser.execute_script("""
        const c = arguments[0], T = arguments[1], cell = c.width / T;
        return Array.from(c.getContext('2d').getImageData(2 * cell + 1, 1 * cell + 1, 1, 1).data);
    """, canvases[0], T)
    w = expected["weights"][L - 1][0][1][2]
    colour = [255 - 222 * w, 255 - 186 * w, 255 - 31 * w]
    assert all(abs(p - c) <= 1 for p, c in zip(pixel, colour)), (pixel, colour)
    rows = browser.find_elements(By.CSS_SELECTOR, "#at-summary tr")
    assert len(rows) == 1 + L * A
    browser.find_element(By.ID, "at-lines").click()  # the line view of every head
    lines = browser.find_elements(By.CSS_SELECTOR, "#at-lineview line")
    assert lines and browser.find_element(By.ID, "at-lineview").is_displayed()


def test_embeddings_similarity_per_layer_and_sense_projection(browser, server, workbench):
    open_view(browser, server, "embeddings")
    browser.find_element(By.ID, "em-sim-go").click()
    wait(browser).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#em-sim-chart polyline"))
    no_error(browser)
    data = browser.execute_script("return window.bertkit.state.similarity")
    assert len(data["raw"]) == len(data["layers"]) and data["standardized"]
    browser.find_element(By.ID, "em-senses-go").click()  # the first sense word: bank
    wait(browser).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "svg.scatter")) == 2)
    no_error(browser)
    for svg in browser.find_elements(By.CSS_SELECTOR, "svg.scatter"):
        assert len(svg.find_elements(By.CSS_SELECTOR, "circle")) == 24
    colours = {c.get_attribute("fill") for c in browser.find_elements(
        By.CSS_SELECTOR, "svg.scatter[data-kind=raw] circle")}
    assert len(colours) == 2  # one per sense
    assert "bank.n.01" in browser.find_element(By.ID, "em-legend").text


def test_run_curves_update_while_the_run_trains(browser, server, served):
    open_view(browser, server, "runs")
    wait(browser).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#run-charts polyline"))
    titles = [p.get_attribute("data-chart") for p in
              browser.find_elements(By.CSS_SELECTOR, "#run-charts svg")]
    assert titles == ["loss", "accuracy", "learning rate"]
    before = browser.execute_script("return window.bertkit.state.run.records.length")
    with open(served.run / "metrics.jsonl", "a") as f:
        f.write(json.dumps({"step": 1000, "split": "train", "loss": 1.5}) + "\n")
    wait(browser, 20).until(lambda d: "step 1000" in d.find_element(By.ID, "run-status").text)
    after = browser.execute_script("return window.bertkit.state.run.records.length")
    assert after == before + 1


def test_predictions_of_a_classifier_a_tagger_and_a_reader(browser, server, workbench):
    open_view(browser, server, "predict")
    select = browser.find_element(By.ID, "pr-model")
    from selenium.webdriver.support.ui import Select

    Select(select).select_by_value("classifier")
    type_into(browser, "pr-text", "the cat sat on the mat")
    browser.find_element(By.ID, "pr-go").click()
    wait(browser).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#pr-result .guess"))
    no_error(browser)
    labels = [g.get_attribute("data-label") for g in
              browser.find_elements(By.CSS_SELECTOR, "#pr-result .guess")]
    assert sorted(labels) == ["negative", "positive"]
    Select(select).select_by_value("tagger")
    type_into(browser, "pr-text", "john went to paris")
    browser.find_element(By.ID, "pr-go").click()
    wait(browser).until(lambda d: d.find_elements(By.CSS_SELECTOR, "#pr-result .text"))
    marks = [m.get_attribute("data-label") for m in
             browser.find_elements(By.CSS_SELECTOR, "#pr-result mark")]
    assert marks == [e["label"] for e in workbench.predict("tagger", "john went to paris")
                     ["entities"]]
    Select(select).select_by_value("qa")
    assert browser.find_element(By.ID, "pr-question").is_displayed()
    browser.find_element(By.ID, "pr-go").click()
    wait(browser).until(lambda d: d.execute_script("return window.bertkit.state.predict.task")
                        == "qa")
    no_error(browser)


def test_a_bad_request_shows_its_sentence(browser, server):
    open_view(browser, server, "fill")
    type_into(browser, "fm-text", "no mask in this one")
    browser.find_element(By.ID, "fm-go").click()
    wait(browser).until(lambda d: d.find_element(By.ID, "error").is_displayed())
    assert "no [MASK]" in browser.find_element(By.ID, "error").text


def test_nothing_is_loaded_from_outside_the_server(browser, server):
    for view in ("fill", "attention", "embeddings", "runs", "predict", "search"):
        open_view(browser, server, view)
        urls = browser.execute_script(
            "return performance.getEntriesByType('resource').map(e => e.name)")
        assert urls and all(u.startswith(server) for u in urls), (view, urls)
        assert browser.current_url.startswith(server)


SEARCHED = ["The stock market fell sharply this morning.", "",
            "A man is playing a guitar on the stage.",
            "The chef is cooking pasta in the kitchen.",
            "Children are playing football in the park.",
            "Heavy rain is expected over the weekend."]


@pytest.fixture(scope="module")
def search_server(minilm_dir, served, tmp_path_factory):
    """all-MiniLM-L6-v2 (a sentence model) beside the tiny pretrained BERT, over a few lines."""
    path = tmp_path_factory.mktemp("search") / "lines.txt"
    path.write_text("\n".join(SEARCHED) + "\n", encoding="utf-8")
    bench = Workbench.load([minilm_dir, served.bert], corpus=path)
    with running(bench) as address:
        yield address, bench


def test_search_shows_the_nearest_line_with_its_cosine(browser, search_server):
    server, bench = search_server
    open_view(browser, server, "search")
    boxes = {b.get_attribute("value"): b for b in
             browser.find_elements(By.CSS_SELECTOR, "#se-models input[type=checkbox]")}
    assert boxes["model"].is_selected() and not boxes["bert2018"].is_selected()
    assert "5 lines of lines.txt" in browser.find_element(By.ID, "se-note").text
    type_into(browser, "se-query", "Someone performs music with an instrument.\n")  # Enter
    wait(browser).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".se-model .hit"))
    no_error(browser)
    hits = browser.find_elements(By.CSS_SELECTOR, ".se-model[data-model=model] .hit")
    assert len(hits) == 5 and "guitar" in hits[0].text and "line 3" in hits[0].text
    expected = bench.search("Someone performs music with an instrument.", 10, ["model"])
    best = expected["models"][0]["results"][0]
    assert hits[0].get_attribute("data-line") == "3" and best["line"] == 3
    assert f"{best['cosine']:.3f}" in hits[0].text
    assert "own pooling" in browser.find_element(By.CSS_SELECTOR, ".se-model .note").text
    boxes["bert2018"].click()  # side by side with a model that is not a sentence model
    type_into(browser, "se-k", "2")
    browser.find_element(By.ID, "se-go").click()
    wait(browser).until(lambda d: len(d.find_elements(By.CSS_SELECTOR, ".se-model")) == 2)
    no_error(browser)
    panels = browser.find_elements(By.CSS_SELECTOR, ".se-model")
    assert [p.get_attribute("data-model") for p in panels] == ["model", "bert2018"]
    assert all(len(p.find_elements(By.CSS_SELECTOR, ".hit")) == 2 for p in panels)
    assert "not a sentence model" in panels[1].text
    assert browser.find_element(By.ID, "se-status").text == ""  # the encoding note is gone
    assert browser.execute_script("return window.bertkit.state.search.encoded") == \
        ["model", "bert2018"]
    panels[0].find_elements(By.CSS_SELECTOR, ".hit .text")[1].click()  # more like this line
    wait(browser).until(lambda d: d.find_element(By.ID, "se-query").get_attribute("value")
                        == d.execute_script("return window.bertkit.state.search.query"))
    no_error(browser)
    top = browser.find_element(By.CSS_SELECTOR, ".se-model[data-model=model] .hit")
    assert top.find_element(By.CSS_SELECTOR, ".text").text == \
        browser.find_element(By.ID, "se-query").get_attribute("value")
    assert float(top.get_attribute("data-cosine")) == pytest.approx(1, abs=1e-5)
    type_into(browser, "se-query", " ")
    browser.find_element(By.ID, "se-go").click()
    wait(browser).until(lambda d: d.find_element(By.ID, "error").is_displayed())
    assert "query is empty" in browser.find_element(By.ID, "error").text


@pytest.fixture(scope="module")
def index_server(minilm_dir, served, tmp_path_factory):
    """An index of the lines above by all-MiniLM-L6-v2 and BM25, fused by RRF."""
    from bertkit.retrieval.beir import Passages
    from bertkit.retrieval.corpus_index import Index, Searcher, build_index
    from bertkit.retrieval.fusion import ReciprocalRank

    passages = Passages([f"s{i}" for i in range(len(SEARCHED))], list(SEARCHED), [])
    out = tmp_path_factory.mktemp("index") / "index"
    build_index(out, passages, [minilm_dir], bm25=True, progress=False)
    bench = Workbench.load([served.bert])
    bench.searcher = Searcher(Index.load(out), ReciprocalRank())
    with running(bench) as address:
        yield address, bench


def test_the_index_view_shows_the_fused_passages(browser, index_server):
    server, bench = index_server
    open_view(browser, server, "index")
    assert "6 passages by dense (" in browser.find_element(By.ID, "ix-note").text
    type_into(browser, "ix-query", "Someone performs music with an instrument.\n")  # Enter
    wait(browser).until(lambda d: d.find_elements(By.CSS_SELECTOR, ".ix-hit"))
    no_error(browser)
    hits = browser.find_elements(By.CSS_SELECTOR, ".ix-hit")
    expected = bench.index_search("Someone performs music with an instrument.", 10)["results"]
    assert [h.get_attribute("data-id") for h in hits] == [r["id"] for r in expected]
    assert "guitar" in hits[0].text
