"""The screenshots of docs/serve.md and the README: `bertkit serve` in headless Chromium.

Starts the application in this process on 127.0.0.1 (a free port), drives each view as a
person would (types, clicks) and saves docs/img/serve_<view>.png. Needs Debian's chromium and
chromium-driver, and selenium.

    .venv/bin/python docs/serve_screenshots.py --model runs/mini/model --model MINILM_DIR \\
        --run runs/mini --corpus heldout.txt --senses wordnet_examples.train.jsonl \\
        --predict runs/ner [--word work] [--query "..."] [--out docs/img]
"""
from __future__ import annotations

import argparse
import shutil
import threading
import time
from pathlib import Path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, action="append", required=True)
    parser.add_argument("--predict", type=Path, action="append", default=[])
    parser.add_argument("--run", type=Path, action="append", default=[])
    parser.add_argument("--corpus", type=Path)
    parser.add_argument("--senses", type=Path)
    parser.add_argument("--word", default="work")
    parser.add_argument("--query", default="A man is playing music on an instrument.")
    parser.add_argument("--sentence", default="The [MASK] of Walden Pond is so beautifully blue.")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "img")
    args = parser.parse_args()

    import uvicorn
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select, WebDriverWait

    from bertkit.serve.app import listen, make_app
    from bertkit.serve.workbench import Workbench

    bench = Workbench.load([*args.model, *args.predict], args.run, corpus=args.corpus,
                           senses=args.senses)
    sock = listen("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(make_app(bench), log_level="warning"))
    threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    base = f"http://127.0.0.1:{sock.getsockname()[1]}"

    options = Options()
    options.binary_location = shutil.which("chromium")
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1400,1500",
                 "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)
    wait = WebDriverWait(driver, 300)
    args.out.mkdir(parents=True, exist_ok=True)

    def view(name):
        driver.get(f"{base}/#{name}")
        wait.until(lambda d: d.find_element(By.TAG_NAME, "body").get_attribute("data-ready"))

    def shot(name):
        time.sleep(0.5)
        driver.save_screenshot(str(args.out / f"serve_{name}.png"))
        print(args.out / f"serve_{name}.png")

    def type_into(element, text):
        box = driver.find_element(By.ID, element)
        box.clear()
        box.send_keys(text)

    view("fill")
    type_into("fm-text", args.sentence)
    driver.find_element(By.ID, "fm-go").click()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".fm-model"))
    shot("fill_mask")

    view("attention")
    type_into("at-text", "The cat sat on the mat because it was tired.")
    driver.find_element(By.ID, "at-go").click()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#at-maps canvas"))
    Select(driver.find_element(By.ID, "at-layer")).select_by_index(1)
    shot("attention")

    view("embeddings")
    driver.find_element(By.ID, "em-sim-go").click()
    wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#em-sim-chart polyline"))
    if args.corpus or args.senses:
        type_into("em-word", args.word)
        driver.find_element(By.ID, "em-senses-go").click()
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "svg.scatter"))
    shot("embeddings")

    if args.run:
        view("runs")
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#run-charts polyline"))
        shot("runs")

    if args.predict:
        view("predict")
        driver.find_element(By.ID, "pr-go").click()
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#pr-result > *"))
        shot("predict")

    if args.corpus:
        view("search")
        type_into("se-query", args.query)
        driver.find_element(By.ID, "se-go").click()
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, ".se-model .hit"))
        shot("search")
    driver.quit()
    server.should_exit = True


if __name__ == "__main__":
    main()
