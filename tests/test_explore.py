"""The explore page without a browser: saving word senses, the map, the neighbour lists, the page's
content and its escaping. tests/test_explore_browser.py drives the page in Chromium."""

from __future__ import annotations

import base64
import json
import re
from html.parser import HTMLParser

import numpy as np
import pytest

from spacy_elmo.explore import projection
from spacy_elmo.explore.page import explore_page, marked_html, write_explore_page
from spacy_elmo.explore.projection import nearest_occurrences, project_2d
from spacy_elmo.induction.induced import Occurrence, load_word_senses, save_word_senses, word_senses_files

from .explore_data import HOSTILE, bank_sentences, real_bank, synthetic

pytest.importorskip("plotly", reason="the explore page needs plotly (the test extra installs it)")


class PageParser(HTMLParser):
    """Collects the page's external resources, its scripts' text by id, and element counts."""

    def __init__(self):
        super().__init__()
        self.external, self.scripts, self.tags = [], {}, {}
        self._script = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags[tag] = self.tags.get(tag, 0) + 1
        for name in ("src", "href"):
            if attrs.get(name):
                self.external.append((tag, attrs[name]))
        if tag == "script":
            self._script = [attrs.get("id") or f"script{self.tags['script']}", []]

    def handle_data(self, data):
        if self._script is not None:
            self._script[1].append(data)

    def handle_endtag(self, tag):
        if tag == "script" and self._script is not None:
            self.scripts[self._script[0]] = "".join(self._script[1])
            self._script = None


def parse(page: str) -> PageParser:
    parser = PageParser()
    parser.feed(page)
    return parser


def page_json(page: str) -> dict:
    return json.loads(parse(page).scripts["explore-data"])


# saving and loading


def test_word_senses_round_trip(tmp_path):
    ws = synthetic()
    ws.note, ws.extra = "a note", {"k": [1, 2], "elmo_vectors": np.arange(6, dtype=np.float16).reshape(3, 2)}
    written = save_word_senses(ws, tmp_path / "bank")
    assert written == tmp_path / "bank.json" and (tmp_path / "bank.npz").is_file()
    for name in ("bank", "bank.json", "bank.npz"):
        back = load_word_senses(tmp_path / name)
        assert back.word == ws.word and back.forms == ws.forms and back.occurrences == ws.occurrences
        assert back.senses == ws.senses and back.note == "a note" and back.extra["k"] == [1, 2]
        assert back.extra["elmo_vectors"].dtype == np.float16 and back.extra["elmo_vectors"].tolist() == [[0, 1], [2, 3], [4, 5]]
        np.testing.assert_array_equal(back.weights, ws.weights)
        np.testing.assert_array_equal(back.vectors, ws.vectors)
        assert back.weights.dtype == np.float32


def test_saved_pair_is_checked(tmp_path):
    save_word_senses(synthetic(seed=1), tmp_path / "one")
    save_word_senses(synthetic(seed=2), tmp_path / "two")
    (tmp_path / "one.npz").write_bytes((tmp_path / "two.npz").read_bytes())
    with pytest.raises(ValueError, match="does not belong to"):
        load_word_senses(tmp_path / "one")
    (tmp_path / "two.npz").unlink()
    with pytest.raises(FileNotFoundError, match="two.npz is missing"):
        load_word_senses(tmp_path / "two.json")
    with pytest.raises(FileNotFoundError, match="saved word senses not found"):
        load_word_senses(tmp_path / "three")
    (tmp_path / "other.json").write_text('{"format": "something else"}')
    with pytest.raises(ValueError, match="not a saved WordSenses"):
        load_word_senses(tmp_path / "other.json")
    assert word_senses_files("x/bank.json") == word_senses_files("x/bank")


@pytest.mark.parametrize(
    "break_it, message",
    [
        (lambda ws: setattr(ws, "weights", ws.weights[:-1]), "weights of 'bank' have shape"),
        (lambda ws: setattr(ws, "vectors", ws.vectors[:-1]), "vectors of 'bank' have shape"),
        (lambda ws: ws.weights.__setitem__((0, 0), 5.0), "rows that sum to 1"),
        (lambda ws: ws.vectors.__setitem__((0, 0), np.nan), "NaN"),
        (lambda ws: ws.senses[1].examples.append(999), "outside its 30 occurrences"),
        (lambda ws: setattr(ws.senses[0], "id", 7), "sense ids"),
        (lambda ws: setattr(ws, "extra", {"a": np.float32(1)}), "cannot be saved"),
        (lambda ws: setattr(ws, "extra", {"a": np.array([object()])}), "without pickles"),
    ],
)
def test_inconsistent_word_senses_are_refused(tmp_path, break_it, message):
    ws = synthetic()
    break_it(ws)
    with pytest.raises(ValueError, match=message):
        save_word_senses(ws, tmp_path / "bank")
    assert not (tmp_path / "bank.json").exists()


# the map and the neighbours


def test_projection_is_pca_of_unit_vectors_and_deterministic():
    vectors = np.random.default_rng(0).normal(size=(50, 8)).astype(np.float32) * np.arange(1, 9)
    coords, explained = project_2d(vectors)
    assert coords.shape == (50, 2) and coords.dtype == np.float32
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    centred = unit - unit.mean(axis=0)
    eigenvalues = np.sort(np.linalg.eigvalsh(np.cov(centred.T, bias=True)))[::-1]
    np.testing.assert_allclose(coords.var(axis=0), eigenvalues[:2], rtol=1e-4)  # the two largest variances
    np.testing.assert_allclose(explained, eigenvalues[:2] / eigenvalues.sum(), rtol=1e-4)
    again, _ = project_2d(vectors[::-1].copy())
    np.testing.assert_allclose(again[::-1], coords, atol=1e-5)  # same map whatever the order: signs are fixed
    np.testing.assert_allclose(project_2d(vectors * 3)[0], coords, atol=1e-5)  # scale does not matter: cosine geometry


def test_subspace_iteration_finds_the_leading_eigenvectors(monkeypatch):
    rng = np.random.default_rng(3)
    centres = rng.normal(size=(4, 300)) * 3
    vectors = (centres[rng.integers(0, 4, 400)] + rng.normal(size=(400, 300))).astype(np.float32)
    exact, explained = project_2d(vectors)  # 300 dims > EXACT_UP_TO: subspace iteration
    monkeypatch.setattr(projection, "EXACT_UP_TO", 10_000)  # a full eigendecomposition
    reference, reference_explained = project_2d(vectors)
    np.testing.assert_allclose(exact, reference, atol=1e-5)
    np.testing.assert_allclose(explained, reference_explained, rtol=1e-6)


def test_projection_of_degenerate_inputs():
    assert project_2d(np.ones((1, 4)))[0].tolist() == [[0.0, 0.0]]
    coords, explained = project_2d(np.array([[1.0, 0.0], [2.0, 0.0], [0.0, 1.0]]))  # two distinct directions: one axis
    assert coords[:, 1].tolist() == [0.0, 0.0, 0.0] and explained[1] == 0.0
    with pytest.raises(ValueError, match="matrix of occurrence vectors"):
        project_2d(np.ones(4))


@pytest.mark.parametrize("block", [3, 2048])
def test_nearest_occurrences_are_exact(monkeypatch, block):
    monkeypatch.setattr(projection, "BLOCK", block)
    vectors = np.random.default_rng(1).normal(size=(23, 6)).astype(np.float32)
    indices, cosines = nearest_occurrences(vectors, 5)
    unit = vectors / np.linalg.norm(vectors, axis=1, keepdims=True)
    sims = unit @ unit.T
    np.fill_diagonal(sims, -np.inf)
    np.testing.assert_array_equal(indices, np.argsort(-sims, axis=1, kind="stable")[:, :5])
    np.testing.assert_allclose(cosines, np.sort(sims, axis=1)[:, ::-1][:, :5], rtol=1e-5)
    assert (indices != np.arange(23)[:, None]).all()
    assert nearest_occurrences(vectors[:3], 10)[0].shape == (3, 2)  # at most n - 1
    assert nearest_occurrences(vectors[:1], 10)[0].shape == (1, 0)


# the page


def test_page_is_self_contained_and_complete(tmp_path):
    ws = synthetic()
    path = write_explore_page(ws, tmp_path / "out" / "bank.html", neighbours=4)
    page = path.read_text(encoding="utf-8")
    parsed = parse(page)
    assert page.startswith("<!DOCTYPE html>") and parsed.tags["html"] == 1
    assert parsed.external == [], "the page loads nothing from outside itself"
    assert not re.search(r"<(script|link|img|iframe)[^>]+(src|href)\s*=\s*[\"']?(https?:)?//", page)
    assert any("Plotly.newPlot" in text for text in parsed.scripts.values())
    assert max(len(text) for text in parsed.scripts.values()) > 1_000_000  # plotly.js itself is inlined
    data = page_json(page)
    assert [o[0] for o in data["occurrences"]] == [o.text for o in ws.occurrences]
    assert data["sense"] == ws.labels.tolist()
    indices, cosines = nearest_occurrences(ws.vectors, 4)
    assert data["neighbours"] == indices.tolist()
    np.testing.assert_allclose(data["cosines"], cosines, atol=5e-4)
    assert [s["name"] for s in data["senses"]] == ["bank: sense0", "bank: sense1", "bank: sense2"]
    assert len({s["colour"] for s in data["senses"]}) == 3
    for name, size in (("bank: sense0", 12), ("bank: sense1", 10), ("bank: sense2", 8)):
        assert f'"name":"{name} ({size})"' in page  # the legend entry
    assert page.count('<section class="sense"') == 3
    assert "Sentence 0 of sense 1: the <mark>bank</mark> was here." in page  # the sense tables
    assert "Senses of “bank”" in page and "30 occurrences" in page
    assert "4 nearest occurrences" in page


def test_every_point_is_its_occurrence():
    ws = synthetic((3, 2))
    page = explore_page(ws)
    traces = _figure_json(page)["data"]
    assert [trace["name"] for trace in traces] == ["bank: sense0 (3)", "bank: sense1 (2)"]
    data = page_json(page)
    for k, trace in enumerate(traces):  # the page's script labels trace k's points from its data in this order
        members = _array(trace["customdata"]).tolist()
        assert members == [i for i, sense in enumerate(data["sense"]) if sense == k]
        assert len(_array(trace["x"])) == len(_array(trace["y"])) == len(members)
        assert "hovertext" not in trace  # each sentence is in the page once, in its data
    assert data["hover"] == {"context": 70, "line": 60}


def _array(value) -> np.ndarray:
    """A trace's array as the page holds it: a list, or Plotly's {dtype, bdata} (base64) encoding."""
    if isinstance(value, dict):
        return np.frombuffer(base64.b64decode(value["bdata"]), dtype=value["dtype"])
    return np.asarray(value)


def _figure_json(page: str) -> dict:
    """The figure Plotly.newPlot draws, read back from the page."""
    script = next(text for text in parse(page).scripts.values() if "Plotly.newPlot(" in text and len(text) < 1_000_000)
    start = script.index('"explore-map",') + len('"explore-map",')
    decoder = json.JSONDecoder()
    data, end = decoder.raw_decode(script[start:].lstrip())
    rest = script[start:].lstrip()[end:].lstrip().lstrip(",").lstrip()
    layout, _ = decoder.raw_decode(rest)
    return {"data": data, "layout": layout}


def test_large_maps_are_drawn_with_webgl(monkeypatch):
    from spacy_elmo.explore import page as explore

    assert '"type":"scatter"' in explore_page(synthetic((3, 2)))
    monkeypatch.setattr(explore, "WEBGL_FROM", 5)
    assert '"type":"scattergl"' in explore_page(synthetic((3, 2)))


def test_corpus_text_is_escaped():
    ws = synthetic(texts=HOSTILE)
    ws.senses[0].name = "bank: <i>money</i>"
    ws.note = "<b>note</b>"
    page = explore_page(ws, title="<script>alert(1)</script>")
    parsed = parse(page)
    assert parsed.tags["script"] == parse(explore_page(synthetic())).tags["script"]  # no script element of the corpus's
    assert not any("window.__pwned = 1</script>" in text for text in parsed.scripts.values())
    assert "<script>window.__pwned" not in page and "<img src=x" not in page and "<i>money</i>" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "&lt;b&gt;note&lt;/b&gt;" in page
    assert "</script><b>bold" not in page  # the JSON cannot close its script element
    data = page_json(page)
    assert data["occurrences"][0][0] == HOSTILE[0] and data["occurrences"][1][0] == HOSTILE[1]  # exact text, as data
    assert parsed.tags.get("img", 0) == 0
    assert "The &lt;script&gt;window.__pwned = 1&lt;/script&gt; <mark>bank</mark> was robbed." in page


def test_marked_sentences():
    assert marked_html(Occurrence("a <bank> b", 2, 8)) == "a <mark>&lt;bank&gt;</mark> b"
    assert marked_html(Occurrence("x" * 300 + " bank " + "y" * 300, 301, 305), 10) == "…xxxxxxxxx <mark>bank</mark> yyyyyyyyy…"


def test_bad_input_is_one_line_error():
    ws = synthetic()
    with pytest.raises(ValueError, match="neighbours must be 1 or more"):
        explore_page(ws, neighbours=0)
    ws.weights = ws.weights[:, :2]
    with pytest.raises(ValueError, match=r"weights of 'bank' have shape \(30, 2\); expected \(30, 3\)"):
        explore_page(ws)
    empty = synthetic((0,))
    with pytest.raises(ValueError, match="no occurrences of 'bank' to explore"):
        explore_page(empty)


def test_real_vectors_of_bank():
    """The default model's vectors (``token._.elmo``) of "bank": the neighbour lists share the sense
    of their occurrence well above chance (0.5; measured 0.70 at k = 5)."""
    ws = real_bank()
    assert ws.vectors.shape == (36, 256)
    data = page_json(explore_page(ws, neighbours=5))
    labels = np.array(data["sense"])
    same = np.mean([labels[row] == labels[i] for i, row in enumerate(data["neighbours"])])
    assert same > 0.6, f"only {same:.0%} of the nearest occurrences share the sense"
    assert all(o[0][o[1] : o[2]] == "bank" for o in data["occurrences"])


# the command


def run_cli(capsys, *argv):
    from spacy_elmo.cli import main

    code = main(["explore", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def test_explore_command_writes_the_page(capsys, tmp_path):
    ws = synthetic()
    save_word_senses(ws, tmp_path / "bank")
    code, out, err = run_cli(capsys, tmp_path / "bank.json", "--neighbours", "3", "--title", "Bank <test>")
    assert code == 0, err
    page = (tmp_path / "bank.html").read_text(encoding="utf-8")
    assert "wrote" in out and "30 occurrences of 'bank', 3 senses" in out
    assert "<title>Bank &lt;test&gt;</title>" in page
    assert page_json(page)["neighbours"] == nearest_occurrences(ws.vectors, 3)[0].tolist()
    code, _, err = run_cli(capsys, tmp_path / "bank", tmp_path / "sub" / "page.html")
    assert code == 0 and (tmp_path / "sub" / "page.html").is_file(), err


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["no/such/senses.json"], "saved word senses not found: no/such/senses.json"),
        (["{saved}", "--neighbours", "0"], "--neighbours 0: must be 1 or more"),
        (["{saved}", "{tmp}/page.png"], "the page is HTML"),
        (["{tmp}/other.json"], "not a saved WordSenses"),
        (["{tmp}"], "is a folder of saved senses: pick a word with --word (word=); it has bank"),
        (["{tmp}", "--word", "cell"], "holds no saved senses of 'cell'; it has bank"),
        (["{saved}", "--word", "cell"], "holds the senses of 'bank', not 'cell'"),
        (["{saved}", "--representation", "vectors"], "holds senses induced already: --weights, --representation and --n-senses"),
        (["{saved}", "{tmp}/page.html", "{tmp}/more.html"], "give it alone, not with"),
        (["{tmp}/texts"], "is a corpus, not saved senses: name the word to induce with --word"),
        (["{tmp}/texts", "--word", "bank", "-r", "words"], "--representation 'words': use one of substitutes, vectors, context, or several joined by '+'"),
        (["{tmp}/texts", "{tmp}/missing.txt", "--word", "bank"], "corpus file not found"),
        (["{tmp}/texts", "--word", "zebra", "--threads", "1"], "'zebra': no occurrences in the corpus"),
    ],
)
def test_explore_command_errors_are_one_line(capsys, tmp_path, argv, expected):
    save_word_senses(synthetic(), tmp_path / "bank")
    (tmp_path / "other.json").write_text("{}")
    (tmp_path / "texts").mkdir()
    (tmp_path / "texts" / "a.txt").write_text("The bank of the river.\nThe bank lent money.\n", encoding="utf-8")
    argv = [a.format(saved=tmp_path / "bank.json", tmp=tmp_path) for a in argv]
    code, out, err = run_cli(capsys, *argv)
    lines = [line for line in err.strip().splitlines() if not line.startswith("induce: ")]  # the progress bar, when it induces
    assert code == 2 and len(lines) == 1 and expected in lines[0], err


def test_explore_command_induces_from_a_corpus(capsys, tmp_path, monkeypatch):
    """A corpus and a word: the senses are induced (default model) and shown; text files and folders as induce reads them."""
    corpus = tmp_path / "texts"
    corpus.mkdir()
    sentences = [text for _, text in bank_sentences()]
    (corpus / "bank.txt").write_text("\n".join(sentences) + "\n", encoding="utf-8")
    page = tmp_path / "out" / "bank-page.html"
    code, out, err = run_cli(capsys, corpus, "--word", "bank", page, "-k", "3", "--threads", "1", "--title", "Induced")
    assert code == 0, err
    data = page_json(page.read_text(encoding="utf-8"))
    assert f"{len(sentences)} occurrences of 'bank'" in out
    assert [o[0] for o in data["occurrences"]] == sentences  # every sentence, in corpus order
    assert all(o[0][o[1] : o[2]].lower() == "bank" for o in data["occurrences"])
    assert data["senses"] and all(s["name"].startswith("bank: ") for s in data["senses"])
    assert len(data["neighbours"][0]) == 3
    # the options reach induction: a fixed number of senses from the vectors; default page name WORD.html here
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(capsys, corpus / "bank.txt", "--word", "bank", "-r", "vectors", "--n-senses", "2", "--threads", "1")
    assert code == 0, err
    text = (tmp_path / "bank.html").read_text(encoding="utf-8")
    assert "2 senses" in out and len(page_json(text)["senses"]) == 2 and "clustered by vectors" in text


def test_explore_command_reads_an_induce_folder(capsys, tmp_path):
    """An induce --out folder and --word: that word's saved senses; the page goes into the folder by default."""
    from spacy_elmo.induction.induce import save_senses

    bank, cell = synthetic(), synthetic((5, 5), seed=1)
    cell.word = "cell"
    save_senses(tmp_path / "senses", [bank, cell])
    code, out, err = run_cli(capsys, tmp_path / "senses", "--word", "cell", "-k", "2")
    assert code == 0, err
    data = page_json((tmp_path / "senses" / "cell.html").read_text(encoding="utf-8"))
    assert "10 occurrences of 'cell', 2 senses" in out and len(data["occurrences"]) == 10
