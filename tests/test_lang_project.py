"""The project's scripts for a biLM of another language (the German workflow `de-model`): the text
input folder, the POS protocol on any CoNLL-U pair (data, the commands it runs, the summary), the
German training config and the learning-curve plot without sense reports. Fast: no training; the
whole workflow at a tiny scale is `tests/test_de_workflow.py`."""

from __future__ import annotations

import gzip
import json
import shutil
import sys
from pathlib import Path

import downstream
import pytest
from default_curve import plot
from downstream_data import conllu_sentence_docs, prepare_conllu_prefixes
from lang_text import write_input
from spacy.tokens import DocBin
from spacy.vocab import Vocab

REPO = Path(__file__).resolve().parent.parent
PROJECT = REPO / "project"
DE = REPO / "tests" / "data" / "de"


def gzipped(src: Path, dest: Path) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(dest, "wb") as fh:
        fh.write(src.read_bytes())
    return dest


def german_ud(tmp_path: Path):
    ud = tmp_path / "ud_gsd"
    return (gzipped(DE / "ud_gsd" / "de_gsd-ud-dev.conllu", ud / "de_gsd-ud-dev.conllu.gz"),
            gzipped(DE / "ud_gsd" / "de_gsd-ud-test.conllu", ud / "de_gsd-ud-test.conllu.gz"))


def test_the_text_input_links_the_three_splits_with_a_manifest(tmp_path):
    source = tmp_path / "text"
    for split in ("train", "valid", "test"):
        gzipped(DE / "text" / f"{split}.txt", source / f"{split}.txt.gz")
    out = tmp_path / "input"
    rows = write_input(source, out)
    assert [(name, split) for name, split, _ in rows] == [("train.txt.gz", "train"), ("valid.txt.gz", "valid"), ("test.txt.gz", "test")]
    assert (out / "manifest.tsv").read_text() == "file\tsplit\ntrain.txt.gz\ttrain\nvalid.txt.gz\tvalid\ntest.txt.gz\ttest\n"
    assert (out / "test.txt.gz").read_bytes() == (source / "test.txt.gz").read_bytes()
    write_input(source, out)  # a re-run replaces its own links
    from spacy_elmo.training.corpus import text_files

    assert {split: [p.name for p in paths] for split, paths in text_files([out]).items()} == {
        "train": ["train.txt.gz"], "valid": ["valid.txt.gz"], "test": ["test.txt.gz"]}


def test_the_text_input_names_what_is_missing_and_overwrites_nothing(tmp_path):
    source = tmp_path / "text"
    gzipped(DE / "text" / "train.txt", source / "train.txt.gz")
    with pytest.raises(SystemExit, match="missing valid.txt.gz, test.txt.gz"):
        write_input(source, tmp_path / "input")
    assert not (tmp_path / "input").exists()
    for split in ("valid", "test"):
        gzipped(DE / "text" / f"{split}.txt", source / f"{split}.txt.gz")
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit, match="holds other files"):
        write_input(source, tmp_path / "busy")
    assert (tmp_path / "busy" / "notes.txt").read_text() == "mine"


def test_gzipped_conllu_through_spacys_converter_gives_gold_words_and_xpos(tmp_path):
    dev, test = german_ud(tmp_path)
    docs = conllu_sentence_docs(dev)
    assert len(docs) == 20 and [t.text for t in docs[0]] == ["Manasse", "ist", "ein", "einzigartiger", "Parfümeur", "."]
    assert [t.tag_ for t in docs[0]] == ["NN", "VAFIN", "ART", "ADJA", "NN", "$."] and docs[0][0].pos_ == "PROPN"
    words = [t.text for doc in docs for t in doc]
    assert "im" not in words and words.count("dem") >= 1  # the contraction "im" is its two syntactic words
    stats = prepare_conllu_prefixes(dev, test, [5, 20], tmp_path / "out")
    assert stats["train-5"]["sentences"] == 5 and stats["train-20"]["sentences"] == 20 and stats["test"] == {"sentences": 10, "tokens": 125}
    five = list(DocBin().from_disk(tmp_path / "out" / "train-5.spacy").get_docs(Vocab()))
    assert [d.text for d in five] == [d.text for d in docs[:5]]  # the first sentences, in order
    with pytest.raises(ValueError, match="has 20 sentences: cannot train on 80"):
        prepare_conllu_prefixes(dev, test, [5, 80], tmp_path / "out")
    bad = tmp_path / "bad.conllu"
    bad.write_text("1\tonly\tthree\n\n")
    with pytest.raises(ValueError, match="not CoNLL-U"):
        conllu_sentence_docs(bad)


def _fake_spacy(calls):
    """Stands in for subprocess.run: records the command, writes what spacy evaluate would."""

    def run(cmd, **kwargs):
        calls.append([str(c) for c in cmd])
        if cmd[3] == "evaluate":
            scores = Path(cmd[cmd.index("--output") + 1])
            scores.parent.mkdir(parents=True, exist_ok=True)  # spacy train made the run's folder
            scores.write_text(json.dumps({"tag_acc": 0.5 + 0.01 * len(calls), "speed": 100.0}))

    return run


def test_the_english_runs_keep_their_commands(tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(downstream.subprocess, "run", _fake_spacy(calls))
    monkeypatch.setattr(downstream, "RUNS", tmp_path)
    monkeypatch.setattr(downstream, "_mixes", lambda path: {"checked": str(path)})
    plan = next(p for p in downstream.PLANS["full"] if p["subset"] == "1%")
    row = downstream._run_one(plan, "elmo", 1, "run-a", "full", weights="M")
    data, cfg = downstream.DATA, downstream.HERE / "configs" / "downstream"
    assert calls == [
        [sys.executable, "-m", "spacy", "train", str(cfg / "tagger-elmo.cfg"), "--output", str(tmp_path / "run-a"),
         "--paths.train", str(data / "ud/train-1pct.spacy"), "--paths.dev", str(data / "ud" / "dev.spacy"),
         "--system.seed", "1", "--training.max_steps", "100", "--training.eval_frequency", "25", "--corpora.dev.limit", "1000",
         "--components.elmo.model.weights", "M"],
        [sys.executable, "-m", "spacy", "evaluate", str(tmp_path / "run-a" / "model-best"), str(data / "ud" / "test.spacy"),
         "--output", str(tmp_path / "run-a" / "test-scores.json")],
    ]
    assert row["score"] == 0.52 and row["mixes"] == {"checked": str(tmp_path / "run-a" / "model-best")}


def test_the_pos_protocol_trains_fixed_steps_in_the_language_and_scores_the_last_model_on_gold_words(tmp_path, monkeypatch):
    project = tmp_path / "project"
    (project / "scripts").mkdir(parents=True)
    shutil.copytree(PROJECT / "configs", project / "configs")
    dev, test = german_ud(tmp_path)
    weights = tmp_path / "de-bilm"
    weights.mkdir()
    (weights / "weights.pt").write_bytes(b"a biLM")
    calls: list = []
    monkeypatch.setattr(downstream.subprocess, "run", _fake_spacy(calls))
    monkeypatch.setattr(downstream, "_mixes", lambda path: {"tagger": []})
    for name, value in (("HERE", project), ("DATA", project / "corpus" / "downstream"), ("RUNS", project / "training" / "downstream")):
        monkeypatch.setattr(downstream, name, value)
    argv = ["pos", "--lang", "de", "--train-conllu", str(dev), "--test-conllu", str(test), "--sizes", "5", "20", "--steps", "7", "9",
            "--seeds", "0", "1", "--weights", str(weights), "--name", "de-x", "--output", str(project / "metrics" / "de-pos.json")]
    downstream.main(argv)
    trains = [c for c in calls if c[3] == "train"]
    evaluates = [c for c in calls if c[3] == "evaluate"]
    assert len(trains) == len(evaluates) == 8  # 2 sizes x 2 features x 2 seeds
    first = trains[0]
    train_file = str(project / "corpus" / "downstream" / "de-x" / "train-5.spacy")
    assert first[first.index("--paths.train") + 1] == first[first.index("--paths.dev") + 1] == train_file
    assert first[first.index("--nlp.lang") + 1] == "de" and first[first.index("--training.max_steps") + 1] == "7"
    assert first[first.index("--training.eval_frequency") + 1] == "7"
    elmo = [c for c in trains if "--components.elmo.model.weights" in c]
    assert len(elmo) == 4 and all(c[4].endswith("tagger-elmo.cfg") for c in elmo)
    assert all(c[4].endswith("tagger-cnn.cfg") for c in trains if c not in elmo)
    assert all(c[4].endswith("model-last") and c[-1] == "--gold-preproc" for c in evaluates)
    assert "test.spacy" in evaluates[0][5]

    report = json.loads((project / "metrics" / "de-pos.json").read_text())
    assert report["lang"] == "de" and report["protocol"]["steps"] == {"5": 7, "20": 9} and report["data"]["test"]["tokens"] == 125
    assert [(e["size"], e["features"], e["n"]) for e in report["results"]] == [(5, "cnn", 2), (5, "elmo", 2), (20, "cnn", 2), (20, "elmo", 2)]
    assert report["command"].startswith("python scripts/downstream.py pos --lang de") and report["machine"]["cpu"]
    assert set(report["elmo_gain"]) == {"5", "20"}
    assert "| 5 | cnn |" in (project / "metrics" / "de-pos.md").read_text()

    calls.clear()  # a re-run with the same biLM, data and steps trains nothing
    downstream.main(argv)
    assert calls == []
    (weights / "weights.pt").write_bytes(b"another biLM")  # another biLM: the elmo runs again, the CNN's stand
    downstream.main(argv)
    assert len(calls) == 8 and all("--components.elmo.model.weights" in c for c in calls if c[3] == "train")


def test_the_pos_protocol_refuses_bad_arguments_in_one_line(tmp_path):
    dev, test = german_ud(tmp_path)
    base = ["pos", "--lang", "de", "--train-conllu", str(dev), "--test-conllu", str(test), "--name", "x", "--output", str(tmp_path / "o.json")]
    with pytest.raises(SystemExit, match="--steps gives 1 budgets for 2 --sizes"):
        downstream.main(base + ["--sizes", "5", "20", "--steps", "3", "--weights", str(tmp_path)])
    with pytest.raises(SystemExit, match="give the biLM folder"):
        downstream.main(base + ["--sizes", "5", "--steps", "3", "--weights", str(tmp_path / "none")])
    with pytest.raises(SystemExit, match="not found: .*nowhere.conllu.gz"):
        downstream.main(base[:4] + [str(tmp_path / "nowhere.conllu.gz")] + base[5:] + ["--sizes", "5", "--steps", "3", "--features", "cnn"])


def test_pos_summary_means_and_sample_sd_per_size_and_features():
    rows = [{"size": 80, "features": f, "seed": s, "score": v, "train_seconds": 10.0}
            for f, values in (("cnn", (0.70, 0.72, 0.74)), ("elmo", (0.80, 0.80, 0.83))) for s, v in enumerate(values)]
    summary = downstream.pos_summary(rows, [80, 799], ["cnn", "elmo"])
    cnn, elmo = summary["results"]
    assert (cnn["mean"], cnn["sd"], cnn["scores"]) == (72.0, 2.0, [70.0, 72.0, 74.0])
    assert (elmo["mean"], elmo["sd"]) == (81.0, pytest.approx(1.73, abs=0.01))
    assert summary["elmo_gain"] == {"80": 9.0}  # no 799 runs yet: no gain claimed there


def test_the_german_config_is_the_english_defaults_shape():
    german = json.loads((PROJECT / "configs" / "de.json").read_text())
    english = json.loads((PROJECT / "configs" / "full.json").read_text())
    shape = ("lstm_dim", "projection_dim", "n_layers", "cell_clip", "proj_clip", "use_skip_connections", "char_dim", "filters", "n_highway", "n_samples")
    assert {k: german[k] for k in shape} == {k: english[k] for k in shape}
    assert {k: german[k] for k in ("precision", "lr", "warmup_steps", "max_steps", "max_tokens", "max_length", "checkpoint_every",
                                   "eval_every", "threads", "seed")} == {
        "precision": "auto", "lr": 0.002, "warmup_steps": 200, "max_steps": 4000, "max_tokens": 4096, "max_length": 50,
        "checkpoint_every": 50, "eval_every": 500, "threads": 1, "seed": 0}
    from spacy_elmo.training.trainer import TrainConfig

    TrainConfig(data_dir="d", out_dir="o", **german)  # every field is one the trainer knows


def test_the_curve_without_sense_reports_is_the_perplexity_panel_alone(tmp_path):
    from matplotlib.image import imread

    valid = [(1e6, 300.0), (2e6, 250.0)]
    alone = imread(plot(valid, [], tmp_path / "alone.png", None, title="German"))
    both = imread(plot(valid, [(1e6, 0.2, 500)], tmp_path / "both.png", None))
    assert alone.shape[0] < 0.7 * both.shape[0]  # one panel, not an empty second one
