"""The WiC and WSD evaluation helpers on small constructed files (the real data is not needed)."""
from __future__ import annotations

import gzip

import numpy as np
import pytest

from spacy_elmo.senses.vectors import candidate_mixes, layer_weights
from spacy_elmo.evaluation.wic import best_threshold, cosines, read_split
from spacy_elmo.evaluation.wsd import score
from spacy_elmo.evaluation.wsd_data import instance_key, iter_instances, load_corpus, read_gold, read_sentences, to_docs

XML = """<?xml version="1.0" encoding="UTF-8" ?>
<corpus lang="en" source="toy">
<text id="toy.d000">
<sentence id="toy.d000.s000">
<wf lemma="the" pos="DET">The</wf>
<instance id="toy.d000.s000.t000" lemma="bank" pos="NOUN">banks</instance>
<instance id="toy.d000.s000.t001" lemma="take_place" pos="VERB">took_place</instance>
<wf lemma="." pos=".">.</wf>
</sentence>
</text>
</corpus>
"""


def test_wsd_reader(tmp_path):
    folder = tmp_path / "Evaluation_Datasets" / "toy"
    folder.mkdir(parents=True)
    with gzip.open(folder / "toy.data.xml.gz", "wt", encoding="utf-8") as fh:
        fh.write(XML)
    (folder / "toy.gold.key.txt").write_text("toy.d000.s000.t000 bank%1:14:00:: bank%1:06:00::\ntoy.d000.s000.t001 take_place%2:30:00::\n")
    sentences, gold = load_corpus(tmp_path, "toy")
    assert sentences[0].words == ["The", "banks", "took_place", "."]
    assert list(iter_instances(sentences)) == [(0, 1, "toy.d000.s000.t000", "bank|NOUN"), (0, 2, "toy.d000.s000.t001", "take_place|VERB")]
    assert gold["toy.d000.s000.t000"] == ["bank%1:14:00::", "bank%1:06:00::"]
    import spacy

    doc = to_docs(sentences, spacy.blank("en").vocab)[0]
    assert [t.lemma_ for t in doc] == ["the", "bank", "take_place", "."] and doc[1].pos_ == "NOUN" and doc[3].pos_ == "PUNCT"
    assert instance_key(doc[1].lemma_, doc[1].pos_) == "bank|NOUN"
    (tmp_path / "bad.xml").write_text("<corpus></corpus>")
    with pytest.raises(ValueError, match="no <sentence> elements"):
        read_sentences(tmp_path / "bad.xml")
    (tmp_path / "bad.key").write_text("only_an_id\n")
    with pytest.raises(ValueError, match="expected 'instance_id sense_key"):
        read_gold(tmp_path / "bad.key")
    with pytest.raises(FileNotFoundError, match="semcor.data.xml"):
        load_corpus(tmp_path, "semcor")


def test_wsd_score_is_the_framework_scorer():
    gold = [["a"], ["b", "c"], ["d"], ["e"]]
    result = score(["a", "c", "x", None], gold)  # 2 correct of 3 answered, of 4
    assert result["P"] == pytest.approx(100 * 2 / 3) and result["R"] == pytest.approx(50.0)
    assert result["F1"] == pytest.approx(100 * 2 * (2 / 3) * 0.5 / (2 / 3 + 0.5)) and result["coverage"] == pytest.approx(75.0)


def test_wic_reader_threshold_and_cosines(tmp_path):
    (tmp_path / "dev.data.txt").write_text("bank\tN\t1-2\tthe bank lends\tby the bank\nplay\tV\t0-0\tplay now\tplay ball\n")
    (tmp_path / "dev.gold.txt").write_text("F\nT\n")
    pairs, gold = read_split(tmp_path, "dev")
    assert pairs[0] == (["the", "bank", "lends"], 1, ["by", "the", "bank"], 2) and gold.tolist() == [False, True]
    (tmp_path / "test.data.txt").write_text("bank\tN\t1-2\tthe bank\n")
    (tmp_path / "test.gold.txt").write_text("F\n")
    with pytest.raises(ValueError, match="expected 5 tab-separated fields"):
        read_split(tmp_path, "test")
    threshold, accuracy = best_threshold(np.array([0.1, 0.4, 0.6, 0.9]), np.array([False, False, True, True]))
    assert accuracy == 1.0 and 0.4 < threshold < 0.6
    a = np.zeros((1, 3, 2)); b = np.zeros((1, 3, 2))
    a[0, 1] = [1, 0]; b[0, 1] = [0, 1]; a[0, 2] = [1, 1]; b[0, 2] = [1, 1]
    assert cosines(a, b, layer_weights("layer:1", 3))[0] == pytest.approx(0.0)
    assert cosines(a, b, layer_weights("layer:2", 3))[0] == pytest.approx(1.0)



def test_wic_cosines_mix_each_pair_with_the_given_weights():
    """The cosine of the weighted layer sums, against a direct computation (layer axis 1)."""
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(2, 5, 3, 4)).astype(np.float32)
    weights = layer_weights([1.0, 2.0, 3.0], 3)
    va, vb = (a * weights[:, None]).sum(1), (b * weights[:, None]).sum(1)
    expected = (va * vb).sum(1) / (np.linalg.norm(va, axis=1) * np.linalg.norm(vb, axis=1))
    np.testing.assert_allclose(cosines(a, b, weights), expected, rtol=1e-5, atol=1e-6)

def test_candidate_mixes():
    mixes = candidate_mixes(3)
    assert list(mixes) == ["layer 0", "layer 1", "layer 2", "average (all layers)", "average of layers 1-2"]
    np.testing.assert_allclose(layer_weights(mixes["average of layers 1-2"], 3), [0, 0.5, 0.5], atol=1e-6)
    np.testing.assert_allclose(layer_weights(mixes["layer 1"], 3), [0, 1, 0], atol=1e-6)


def _corpus(path, prefix, sentences):
    """A Raganato-format corpus: each sentence ``(words, target index, sense)``."""
    import xml.sax.saxutils as su

    xml, gold = ['<?xml version="1.0" encoding="UTF-8" ?>', '<corpus lang="en" source="toy">', f'<text id="{prefix}.d000">'], []
    for s, (words, target, sense) in enumerate(sentences):
        xml.append(f'<sentence id="{prefix}.d000.s{s:03d}">')
        for i, word in enumerate(words):
            if i == target:
                iid = f"{prefix}.d000.s{s:03d}.t000"
                xml.append(f'<instance id="{iid}" lemma="bank" pos="NOUN">{su.escape(word)}</instance>')
                gold.append(f"{iid} {sense}")
            else:
                xml.append(f'<wf lemma="{su.escape(word.lower())}" pos="X">{su.escape(word)}</wf>')
        xml.append("</sentence>")
    xml += ["</text>", "</corpus>"]
    path.mkdir(parents=True, exist_ok=True)
    (path / f"{prefix}.data.xml").write_text("\n".join(xml), encoding="utf-8")
    (path / f"{prefix}.gold.key.txt").write_text("\n".join(gold) + "\n", encoding="utf-8")


def test_wsd_evaluation_chooses_the_prior_weight_on_dev(tmp_path):
    """The sense prior (cosine + lambda * log p) on a toy corpus where the frequent sense is right:
    lambda is chosen on the dev set (semeval2007) and lifts every layer/mix to the baseline."""
    from spacy_elmo.evaluation.wsd import PRIOR_WEIGHTS, evaluate, table

    from .conftest import ALLENNLP

    money = [("She took her money to the bank .".split(), 5, "bank%money"), ("The bank lent them money .".split(), 1, "bank%money"),
             ("He works at a bank downtown .".split(), 4, "bank%money")]
    river = [("They sat on the bank of the river .".split(), 4, "bank%river")]
    _corpus(tmp_path / "Training_Corpora" / "SemCor", "semcor", money * 3 + river)
    test = [("We walked to the bank today .".split(), 4, "bank%money"), ("The river bank was green .".split(), 2, "bank%money"),
            ("A bank of fog rolled in .".split(), 1, "bank%money")]
    _corpus(tmp_path / "Evaluation_Datasets" / "ALL", "ALL", test)
    # ALL's instances must carry their dataset's name: rename them to the dev set's
    for name in ("ALL.data.xml", "ALL.gold.key.txt"):
        path = tmp_path / "Evaluation_Datasets" / "ALL" / name
        path.write_text(path.read_text().replace('ALL.d000', 'semeval2007.d000'))
    report = evaluate(str(ALLENNLP), tmp_path, cache_dir=None, log=lambda m: None)
    prior = report["with_prior"]
    assert prior["weights_tried"] == list(PRIOR_WEIGHTS)
    assert report["most_frequent_sense"]["ALL"]["F1"] == 100.0
    assert all(row["ALL"]["F1"] < 100.0 for row in report["rows"].values())  # the random fixture's centroids alone miss
    for name, row in prior["rows"].items():
        assert row["scores"]["ALL"]["F1"] == 100.0, name
        assert row["scores"]["ALL"]["F1"] >= report["rows"][name]["ALL"]["F1"]
    assert "log p(sense)" in table(report)


def test_wsd_centroids_are_means_of_the_mixed_training_vectors(tmp_path):
    """The saved inventory's centroids, against a direct computation of the chosen mix."""
    from spacy_elmo.hub import load_bilm
    from spacy_elmo.bilm.scalar_mix import spec_weights
    from spacy_elmo.senses.inventory import SenseInventory
    from spacy_elmo.evaluation.wsd import embed_instances, evaluate

    from .conftest import ALLENNLP

    train = [("She took her money to the bank .".split(), 5, "bank%money"), ("They sat on the bank of the river .".split(), 4, "bank%river"),
             ("The bank lent them money .".split(), 1, "bank%money")]
    _corpus(tmp_path / "Training_Corpora" / "SemCor", "semcor", train)
    _corpus(tmp_path / "Evaluation_Datasets" / "ALL", "ALL", [("We walked to the bank today .".split(), 4, "bank%money")])
    for name in ("ALL.data.xml", "ALL.gold.key.txt"):
        path = tmp_path / "Evaluation_Datasets" / "ALL" / name
        path.write_text(path.read_text().replace('ALL.d000', 'semeval2007.d000'))
    evaluate(str(ALLENNLP), tmp_path, cache_dir=None, log=lambda m: None, save_inventory=tmp_path / "inventory")
    inventory = SenseInventory.from_disk(tmp_path / "inventory")
    sentences, gold = load_corpus(tmp_path, "semcor")
    layers = embed_instances(load_bilm(str(ALLENNLP)), sentences)  # [n, L+1, dim]
    weights = spec_weights(inventory.layer, layers.shape[1])
    mixed = (layers * weights[:, None]).sum(1)
    instances = list(iter_instances(sentences))
    for sense in ("bank%money", "bank%river"):
        rows = [n for n, (_s, _i, iid, _key) in enumerate(instances) if sense in gold[iid]]
        np.testing.assert_allclose(inventory.centroid(instances[rows[0]][3], sense), mixed[rows].mean(0), rtol=1e-5, atol=1e-6)
