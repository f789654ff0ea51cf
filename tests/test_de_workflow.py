"""``spacy project run de-model``: the German biLM's recipe (the text linked in with its splits,
`prepare` with spaCy's German tokenizer, `pretrain`, test perplexity beside the unigram baseline,
UD German GSD POS with and without ELMo, the packaged pipeline and its installable package, the
learning curve), end to end at a tiny scale: a few steps of a tiny biLM on a few German paragraphs
(tests/data/de/text) and 30 sentences of UD German GSD (tests/data/de/ud_gsd), one seed."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import spacy

REPO = Path(__file__).resolve().parent.parent
PROJECT = REPO / "project"
DE = REPO / "tests" / "data" / "de"
TINY_ARCH = {"lstm_dim": 32, "projection_dim": 16, "char_dim": 8, "filters": [[1, 16], [2, 16], [3, 32]], "n_highway": 1}


def data_root(tmp_path: Path) -> Path:
    """The layout the workflow reads under ${vars.data_root}: de/text/*.txt.gz and de/ud_gsd/*.conllu.gz."""
    root = tmp_path / "data"
    pairs = [(DE / "text" / f"{split}.txt", root / "de" / "text" / f"{split}.txt.gz") for split in ("train", "valid", "test")]
    pairs += [(DE / "ud_gsd" / f"de_gsd-ud-{split}.conllu", root / "de" / "ud_gsd" / f"de_gsd-ud-{split}.conllu.gz") for split in ("dev", "test")]
    for src, dest in pairs:
        dest.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(dest, "wb") as fh:
            fh.write(src.read_bytes())
    return root


@pytest.mark.slow
def test_the_german_workflow_runs_at_a_tiny_scale(tmp_path):
    root = tmp_path / "project"
    root.mkdir()
    shutil.copy(PROJECT / "project.yml", root)
    for folder in ("configs", "scripts"):
        shutil.copytree(PROJECT / folder, root / folder)
    # the real German config, shrunk: same fields, a few steps of a tiny model (fp32: the same on any CPU)
    tiny = {**json.loads((PROJECT / "configs" / "de.json").read_text()), **TINY_ARCH,
            "max_steps": 4, "warmup_steps": 1, "n_samples": 64, "max_tokens": 512, "eval_every": 2, "checkpoint_every": 2,
            "eval_sentences": 20, "log_every": 1, "precision": "fp32"}
    (root / "configs" / "tiny-de.json").write_text(json.dumps(tiny))
    data = data_root(tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "spacy", "project", "run", "de-model", str(root), "--vars.data_root", str(data),
           "--vars.de_config", "configs/tiny-de.json", "--vars.de_pos_sizes", "5 20", "--vars.de_pos_steps", "3 3",
           "--vars.de_pos_seeds", "0", "--vars.de_version", "0.0.1", "--vars.de_model", "training/de/model"]
    run = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=2400)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]

    # the text's own splits, tokenized by spaCy's German tokenizer, with the real config's vocabulary settings
    assert (root / "corpus" / "de-text-input" / "manifest.tsv").read_text().splitlines()[1:] == [
        "train.txt.gz\ttrain", "valid.txt.gz\tvalid", "test.txt.gz\ttest"]
    stats = json.loads((root / "corpus" / "de-text" / "stats.json").read_text())
    assert (stats["train"]["lines"], stats["valid"]["lines"], stats["test"]["lines"]) == (30, 6, 6) and stats["held_out"] == 0
    vocab = (root / "corpus" / "de-text" / "vocab.txt").read_text(encoding="utf-8").split()
    assert {"Bank", "Schloss", "Leiter", "."} <= set(vocab) and "Sonne" not in vocab  # --min-count 3: a word seen once is out
    saved = json.loads((root / "training" / "de" / "train_config.json").read_text())
    assert saved["lstm_dim"] == 32 and saved["data_dir"] == "corpus/de-text"
    assert max(json.loads(line)["step"] for line in (root / "training" / "de" / "metrics.jsonl").read_text().splitlines()) == 4

    # perplexity on the test split beside the unigram baseline
    ppl = json.loads((root / "metrics" / "de-text-test.json").read_text())
    assert ppl["split"] == "test" and ppl["ppl_avg"] > 0 and ppl["unigram_ppl"] > 0 and ppl["tokens"] > 70

    # POS: both sizes, CNN and ELMo, one seed, scored on the 10 test sentences' 125 gold words
    pos = json.loads((root / "metrics" / "de-pos.json").read_text())
    assert [(e["size"], e["features"], e["seeds"]) for e in pos["results"]] == [
        (5, "cnn", [0]), (5, "elmo", [0]), (20, "cnn", [0]), (20, "elmo", [0])]
    assert all(0 <= e["mean"] <= 100 for e in pos["results"]) and pos["data"]["test"] == {"sentences": 10, "tokens": 125}
    assert pos["lang"] == "de" and pos["weights"] == "training/de/model" and pos["machine"]["cpu"]
    assert pos["command"].startswith("python scripts/downstream.py pos --lang de") and "--sizes 5 20" in pos["command"]
    tagger = spacy.load(root / "training" / "downstream" / "de-gsd-pos-5-elmo-seed0" / "model-last")
    assert tagger.lang == "de" and tagger.pipe_names == ["elmo", "tagger"]
    report = (root / "metrics" / "de-report.md").read_text()
    assert "average / unigram" in report and "| 20 | elmo |" in report

    # the pipeline: spacy.blank("de") + elmo with the German biLM inside, and its installable package
    nlp = spacy.load(root / "packages" / "de-elmo")
    doc = nlp("Wir saßen im Park auf der Bank.")
    assert nlp.lang == "de" and nlp.pipe_names == ["elmo"] and doc.tensor.shape == (len(doc), 32)
    package = root / "packages" / "de_elmo_germaparl-0.0.1"
    meta = json.loads((package / "meta.json").read_text())
    assert "NC" in meta["license"] and "GermaParl" in meta["sources"][0]["name"]
    assert any(r.startswith("spacy-elmo") for r in meta["requirements"])
    assert list((package / "dist").glob("de_elmo_germaparl-0.0.1.tar.gz"))
    assert (root / "metrics" / "de-curve.png").stat().st_size > 0
