"""The explore page on real data, and a screenshot of it (docs/img/explore.png).

    python bench/explore.py screenshot --text BOOKS... --word bank --n 400 --out docs/img/explore.png
        Up to N sentences with WORD from the text files (round-robin over the files); senses
        induced from them with the default model (spacy_elmo.induction.induce, what `spacy elmo
        explore CORPUS --word WORD` runs; --representation as there). Writes the page and a
        screenshot of it with one point clicked and another hovered.

Text files: plain text or .gz, paragraphs separated by blank lines. Needs plotly, selenium and
Chromium (apt-get install chromium chromium-driver).
"""

from __future__ import annotations

import argparse
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Iterator, List, Sequence, Tuple

from bench_common import REPO

from spacy_elmo.assets import open_text
from spacy_elmo.explore.page import write_explore_page
from spacy_elmo.induction.induced import WordSenses, save_word_senses


def paragraphs(path: Path) -> Iterator[Tuple[str, str]]:
    """(source, paragraph) of a text file (or .gz), lines of a paragraph joined."""
    with open_text(path) as handle:
        for number, block in enumerate(re.split(r"\n\s*\n", handle.read())):
            if block.strip():
                yield f"{path.name}:{number}", " ".join(block.split())


def sentences_with(files: Sequence[Path], word: str, n: int, max_chars: int = 300) -> List[Tuple[str, str]]:
    """Up to ``n`` distinct (source, sentence) with ``word`` in them, taken round-robin over the files."""
    import spacy

    splitter = spacy.blank("en")
    splitter.add_pipe("sentencizer")
    pattern = re.compile(rf"\b{re.escape(word)}\b", re.IGNORECASE)
    per_file = []
    for path in files:
        found, seen = [], set()
        for source, block in paragraphs(path):
            if not pattern.search(block):
                continue
            for sent in splitter(block).sents:
                text = sent.text.strip()
                if pattern.search(text) and 20 <= len(text) <= max_chars and text not in seen:
                    seen.add(text)
                    found.append((source, text))
        per_file.append(found)
    out: List[Tuple[str, str]] = []
    for row in range(max((len(f) for f in per_file), default=0)):
        out.extend(f[row] for f in per_file if row < len(f))
    return out[:n]


def induced_senses(pairs: List[Tuple[str, str]], word: str, representation: str) -> WordSenses:
    """The senses ``induce`` finds for ``word`` in the sentences (default model), each occurrence's
    source the book and paragraph it came from."""
    import dataclasses

    from spacy_elmo.induction.induce import InductionSettings, induce

    with tempfile.TemporaryDirectory() as folder:
        corpus = Path(folder) / "sentences.txt"
        corpus.write_text("\n".join(text for _, text in pairs) + "\n", encoding="utf-8")
        (ws,) = induce(corpus, [word], settings=InductionSettings(representation=representation), log=print)
    ws.occurrences = [dataclasses.replace(o, source=pairs[int(o.source.rsplit(":", 1)[1]) - 1][0]) for o in ws.occurrences]
    return ws


def chromium(width: int = 1400, height: int = 1000):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or shutil.which("chromium-browser") or ""
    arguments = ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", f"--window-size={width},{height}", "--hide-scrollbars")
    for argument in arguments + ("--enable-unsafe-swiftshader",):  # software WebGL: there is no GPU
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=Service(shutil.which("chromedriver")))
    driver.execute_cdp_cmd("Network.enable", {})
    driver.execute_cdp_cmd(
        "Network.emulateNetworkConditions", {"offline": True, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1}
    )
    return driver


def load(driver, path: Path) -> None:
    """Open the page and wait until its chart is drawn and wired."""
    driver.get("about:blank")
    driver.get(path.resolve().as_uri())
    while not driver.execute_script("return Boolean(window.spacyElmoExplorer)"):
        time.sleep(0.01)


def cmd_screenshot(args) -> None:
    pairs = sentences_with(args.text, args.word, args.n, max_chars=220)
    ws = induced_senses(pairs, args.word, args.representation)
    print(f"{len(ws.occurrences)} occurrences; senses: " + "; ".join(f"{s.name} ({s.count})" for s in ws.senses))
    page = args.page or Path(tempfile.mkdtemp(prefix="explore-bench-")) / f"explore-{args.word}.html"
    write_explore_page(ws, page, neighbours=10)
    if args.save:
        save_word_senses(ws, args.save)
    driver = chromium(args.width, args.height)
    try:
        load(driver, page)
        from selenium.webdriver.common.action_chains import ActionChains

        def at(i):
            return driver.execute_script(
                "const gd = document.getElementById('explore-map'), L = gd._fullLayout, b = gd.getBoundingClientRect();"
                "for (const t of gd._fullData) { const j = Array.from(t.customdata).indexOf(arguments[0]);"
                " if (j >= 0) return [b.left + L.xaxis._offset + L.xaxis.d2p(t.x[j]), b.top + L.yaxis._offset + L.yaxis.d2p(t.y[j])]; }",
                i,
            )

        clicked, hovered = ws.senses[0].examples[0], ws.senses[-1].examples[0]
        for i, click in ((clicked, True), (hovered, False)):
            x, y = at(i)
            actions = ActionChains(driver)
            actions.w3c_actions.pointer_action.move_to_location(int(x), int(y))
            if click:
                actions.w3c_actions.pointer_action.click()
            actions.perform()
            time.sleep(0.5)
        driver.save_screenshot(str(args.out))
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        print(f"wrote {args.out} and {page}; console errors: {len(errors)}")
    finally:
        driver.quit()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    shot = sub.add_parser("screenshot", help="the page on real data, and a screenshot of it")
    shot.add_argument("--text", type=Path, nargs="+", required=True)
    shot.add_argument("--word", default="bank")
    shot.add_argument("--n", type=int, default=400)
    shot.add_argument("--representation", default="substitutes", help="what induction clusters: substitutes, vectors or both")
    shot.add_argument("--out", type=Path, default=REPO / "docs" / "img" / "explore.png")
    shot.add_argument("--page", type=Path, default=None, help="where the page goes (default: a temporary folder)")
    shot.add_argument("--save", type=Path, default=None, help="also save the WordSenses here (NAME.json + NAME.npz)")
    shot.add_argument("--width", type=int, default=1400)
    shot.add_argument("--height", type=int, default=900)
    args = parser.parse_args()
    cmd_screenshot(args)


if __name__ == "__main__":
    main()
