"""End to end with spaCy's own CLI: train -> evaluate -> package -> pip install -> spacy.load.

Uses the project's downstream config (project/configs/downstream/tagger-elmo.cfg) on a handful of
sentences with the tiny fixture biLM, so it runs in about a minute.
"""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import spacy
from spacy.tokens import Doc, DocBin

from .conftest import ALLENNLP, REPO

CONFIG = REPO / "project" / "configs" / "downstream" / "tagger-elmo.cfg"
SENTENCES = [
    ("The cat sat on the mat .", ["D", "N", "V", "P", "D", "N", "."]),
    ("A dog ran home .", ["D", "N", "V", "N", "."]),
    ("The bank lends money .", ["D", "N", "V", "N", "."]),
    ("We sat on the bank .", ["P", "V", "P", "D", "N", "."]),
]
TEXTS = ["The cat ran home .", "We sat on the mat .", "A bank sat ."]


def run(*args, **kwargs):
    result = subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True, **kwargs)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    return result.stdout


@pytest.mark.slow
def test_train_evaluate_package_install_load(tmp_path):
    weights = tmp_path / "elmo-weights"
    shutil.copytree(ALLENNLP, weights)
    nlp = spacy.blank("en")
    docs = [Doc(nlp.vocab, words=text.split(), tags=tags, sent_starts=[True] + [False] * (len(tags) - 1)) for text, tags in SENTENCES]
    DocBin(docs=docs * 3).to_disk(tmp_path / "train.spacy")
    DocBin(docs=docs).to_disk(tmp_path / "dev.spacy")
    log = run(
        "-m", "spacy", "train", CONFIG, "--output", tmp_path / "out",
        "--paths.train", tmp_path / "train.spacy", "--paths.dev", tmp_path / "dev.spacy",
        "--components.elmo.model.weights", weights, "--training.max_steps", 40, "--training.eval_frequency", 20,
    )
    assert "LOSS TAGGER" in log.upper() and "LOSS ELMO" not in log.upper()  # a frozen biLM has no loss to show
    best = tmp_path / "out" / "model-best"
    run("-m", "spacy", "evaluate", best, tmp_path / "dev.spacy", "--output", tmp_path / "scores.json")
    assert json.loads((tmp_path / "scores.json").read_text())["tag_acc"] > 0.8
    expected = [[t.tag_ for t in doc] for doc in spacy.load(best).pipe(TEXTS)]

    (tmp_path / "dist").mkdir()
    run("-m", "spacy", "package", best, tmp_path / "dist", "--name", "elmo_test_tagger", "--version", "0.0.1")
    (sdist,) = (tmp_path / "dist").glob("*/dist/*.tar.gz")
    run("-m", "pip", "install", "--quiet", "--no-deps", "--no-index", "--no-build-isolation", "--target", tmp_path / "site", sdist)
    shutil.rmtree(weights)  # the packaged pipeline carries its own biLM weights
    shutil.rmtree(tmp_path / "out")
    # spacy.load of the installed package, and the package's data folder built from its config and
    # restored with from_disk (before: that raised "ELMo weights not found", the folder being gone)
    code = (
        "import json, spacy; from pathlib import Path; from spacy.lang.en import English; import en_elmo_test_tagger as pkg\n"
        "nlp = spacy.load('en_elmo_test_tagger')\n"
        "data = next(p for p in Path(pkg.__file__).parent.iterdir() if (p / 'config.cfg').is_file())\n"
        "restored = English.from_config(spacy.util.load_config(data / 'config.cfg')).from_disk(data)\n"
        f"print(json.dumps([[[t.tag_ for t in d] for d in n.pipe({TEXTS!r})] for n in (nlp, restored)]))"
    )
    # the installed package first, then this checkout's spacy_elmo (the code under test)
    env = {"PYTHONPATH": f"{tmp_path / 'site'}{os.pathsep}{REPO}", "PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1"}
    out = run("-c", code, env={**os.environ, **env}, cwd=tmp_path)
    assert json.loads(out.strip().splitlines()[-1]) == [expected, expected]


GERMAN_TAGGED = REPO / "tests" / "data" / "german" / "tagged.spacy"  # tagged.conllu through `spacy convert` (its SOURCE.md)
GERMAN_TEXTS = ["Die Bank erhöht die Zinsen .", "Wir sitzen auf der Leiter .", "Das Schloss steht im Park ."]


@pytest.mark.slow
def test_a_german_tagger_trains_with_the_listener_and_packages(tmp_path):
    """The English test's recipe in German: `spacy train --nlp.lang de` on the hand-tagged CoNLL-U
    sample (STTS tags) with the ElmoListener, then `spacy package` names a de_ package."""
    weights = tmp_path / "elmo-weights"
    shutil.copytree(ALLENNLP, weights)
    docs = list(DocBin().from_disk(GERMAN_TAGGED).get_docs(spacy.blank("de").vocab))
    DocBin(docs=docs * 3).to_disk(tmp_path / "train.spacy")
    log = run(
        "-m", "spacy", "train", CONFIG, "--output", tmp_path / "out", "--nlp.lang", "de",
        "--paths.train", tmp_path / "train.spacy", "--paths.dev", GERMAN_TAGGED,
        "--components.elmo.model.weights", weights, "--training.max_steps", 40, "--training.eval_frequency", 20,
    )  # fmt: skip
    assert "LOSS TAGGER" in log.upper()
    best = tmp_path / "out" / "model-best"
    run("-m", "spacy", "evaluate", best, GERMAN_TAGGED, "--output", tmp_path / "scores.json")
    assert json.loads((tmp_path / "scores.json").read_text())["tag_acc"] > 0.8
    nlp = spacy.load(best)
    assert nlp.lang == "de" and nlp.pipe_names == ["elmo", "tagger"]
    tagged = [[t.tag_ for t in doc] for doc in nlp.pipe(GERMAN_TEXTS)]
    assert all(tags[-1] == "$." for tags in tagged) and "ART" in tagged[0]

    (tmp_path / "dist").mkdir()
    run("-m", "spacy", "package", best, tmp_path / "dist", "--name", "elmo_test_tagger", "--version", "0.0.1", "--build", "none")
    package = tmp_path / "dist" / "de_elmo_test_tagger-0.0.1"
    assert json.loads((package / "meta.json").read_text())["lang"] == "de"
    shutil.rmtree(weights)  # the package carries its own biLM weights
    shutil.rmtree(tmp_path / "out")
    data = next(p for p in (package / "de_elmo_test_tagger").iterdir() if (p / "config.cfg").is_file())
    assert [[t.tag_ for t in doc] for doc in spacy.load(data).pipe(GERMAN_TEXTS)] == tagged
