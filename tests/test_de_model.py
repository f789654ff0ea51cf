"""The project's German biLM, kept in git outside the wheel: it loads from its folder, reads German,
carries its licence, and the project packages it without training."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
import yaml

from spacy_elmo.hub.load import load_bilm

REPO = Path(__file__).resolve().parent.parent
FOLDER = REPO / "project" / "models" / "de_germaparl"


def test_the_german_biLM_loads_and_reads_german():
    torch.set_num_threads(1)
    bilm = load_bilm(str(FOLDER))
    words = [line.split("\t")[0] for line in FOLDER.joinpath("vocab.txt").read_text(encoding="utf-8").splitlines()[:2000]]
    assert {"und", "der", "die", "Bundestag"} <= set(words)
    sentences = [["Die", "Bank", "am", "Fluss", "."], ["Der", "Leiter", "sprach", "."]]
    first, again = bilm.embed_sentences(sentences), bilm.embed_sentences(sentences[::-1])[::-1]
    assert first[0].shape == (3, 5, 256) and all(np.array_equal(a, b) for a, b in zip(first, again))


def test_the_german_biLM_carries_its_licence_and_is_never_in_the_wheel():
    readme = FOLDER.joinpath("README.md").read_text(encoding="utf-8")
    assert "non-commercial" in readme and "GermaParl" in readme
    meta = json.loads((REPO / "project" / "configs" / "de-meta.json").read_text(encoding="utf-8"))
    assert "NC" in meta["license"] or "non-commercial" in meta["license"].lower()
    assert not str(FOLDER.relative_to(REPO)).startswith("spacy_elmo")


def test_de_package_packages_the_folder_in_git():
    project = yaml.safe_load((REPO / "project" / "project.yml").read_text(encoding="utf-8"))
    assert project["vars"]["de_model"] == "models/de_germaparl"
    step = next(c for c in project["commands"] if c["name"] == "de-package")
    assert "${vars.de_model}" in step["script"][0] and "${vars.de_model}/weights.pt" in step["deps"]
