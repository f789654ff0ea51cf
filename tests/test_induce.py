"""Sense induction with the embedded default biLM: substitutes, clustering, graded senses, the inventory, the bad-input lines."""

import gzip

import numpy as np
import pytest
import spacy
import torch

from spacy_elmo.cli.main import main
from spacy_elmo.evaluation.wsi_data import find_target
from spacy_elmo.induction.clustering import cut_senses
from spacy_elmo.induction.induce import InductionSettings, build_inventory, induce, load_senses, save_senses
from spacy_elmo.induction.substitutes import HeadError, LMHead, fold_vocabulary, lm_states, native_head

RIVER = [
    "He sat down on the bank of the river .",
    "The boat drifted toward the muddy bank .",
    "Flowers grew along the bank of the stream .",
    "They fished from the grassy banks all afternoon .",
    "The river overflowed its bank after the storm .",
    "We walked along the bank of the lake .",
]
MONEY = [
    "She put all her money in the bank .",
    "The bank refused to lend him money .",
    "The bank paid interest on every deposit .",
    "He opened an account at the bank .",
    "The banks charged a fee for the loan .",
    "Thieves robbed the bank on Friday .",
]
SETTINGS = InductionSettings(min_occurrences=4, n_representatives=10)


@pytest.fixture(scope="module")
def bank(bilm, head):
    return induce(RIVER + MONEY, ["bank"], bilm=bilm, head=head, settings=SETTINGS, progress=False)[0]


def test_substitutes_are_read_at_the_neighbours(bilm, head):
    # the forward state before "the" in "... in the bank" must predict what follows "in": the state
    # of position t, not t + 1 (which has already read the target)
    sentence = "She put all her money in the bank .".split()
    states = lm_states(bilm, [sentence], [6])
    ids, _ = head.top_substitutes(states.forward, 50)
    assert "the" in [head.vocab[i] for i in ids[0]]  # what can follow "money in": the target "the" itself
    ids, _ = head.top_substitutes(states.backward, 50)
    assert "the" in [head.vocab[i] for i in ids[0]]  # and what can precede "bank ."
    assert states.vectors.shape == (1, 2 * bilm.config.projection_dim)


def test_induced_senses_are_complete_and_graded(bank):
    n = len(RIVER) + len(MONEY)
    assert bank.word == "bank" and len(bank.occurrences) == n and "banks" in bank.forms
    assert bank.note is None
    k = len(bank.senses)
    assert 1 <= k <= SETTINGS.max_senses
    assert bank.weights.shape == (n, k) and np.allclose(bank.weights.sum(1), 1.0, atol=1e-5)
    assert bank.vectors.shape[0] == n and np.isfinite(bank.vectors).all()
    assert sum(s.count for s in bank.senses) == n
    for sense in bank.senses:
        assert sense.name.startswith("bank: ") and "bank" not in sense.substitutes
        assert all(bank.labels[i] == sense.id for i in sense.examples)
    o = bank.occurrences[3]
    assert o.text[o.start : o.end] == "banks" and o.source == "text 3"


def test_fixed_number_of_senses_and_representations(bilm, head):
    for representation in ("substitutes", "vectors", "both"):
        settings = InductionSettings(representation=representation, n_senses=2, min_occurrences=4, n_representatives=5)
        result = induce(RIVER + MONEY, ["bank"], bilm=bilm, head=head, settings=settings, progress=False)[0]
        assert len(result.senses) == 2 and result.representation == representation
        assert set(result.labels) == {0, 1}


def test_cut_senses_is_free_of_the_distances_scale():
    # three tight groups far apart: three senses (0 the largest), whatever the scale of the distances
    rng = np.random.default_rng(0)
    a = np.array([[1.0, 0.0, 0.0]] * 30 + [[0.0, 1.0, 0.0]] * 20 + [[0.0, 0.0, 1.0]] * 15) + rng.normal(0, 0.05, (65, 3))
    unit = a / np.linalg.norm(a, axis=1, keepdims=True)
    distances = np.clip(1 - unit @ unit.T, 0, 2)
    np.fill_diagonal(distances, 0)
    for scale in (1.0, 0.1):
        labels = cut_senses(distances * scale)
        assert list(np.bincount(labels)) == [30, 20, 15] and len(set(labels[:30])) == 1
    assert len(set(cut_senses(distances, max_senses=2))) == 2
    assert set(cut_senses(np.zeros((8, 8)))) == {0}  # identical occurrences: one sense
    assert len(set(cut_senses(distances, n_senses=5))) == 5


def test_the_split_test_reads_the_leading_axes():
    """Two groups apart on the first axis, hidden under 30 axes of noise that is flatter than a Gaussian's
    (uniform): on all axes the noise swamps the test, on the two leading ones the split shows. None = all
    axes; 0 or fewer axes is refused."""
    from spacy_elmo.induction.clustering import count_senses, split_score

    rng = np.random.default_rng(3)
    truth = np.repeat([0, 1], 30)
    x = np.hstack([(truth * 3.5 + rng.normal(0, 1, 60))[:, None], rng.uniform(-2.2, 2.2, (60, 30))])
    _, z_all = split_score(x, np.random.default_rng(0), axes=None)
    _, z_two = split_score(x, np.random.default_rng(0), axes=2)
    assert z_two < -0.8 < z_all
    assert len(set(count_senses(x, axes=2))) >= 2 and set(count_senses(x, axes=None, significance=1.0)) == {0}
    with pytest.raises(ValueError, match="test_axes"):
        InductionSettings(test_axes=0)
    assert InductionSettings().test_axes == 2 and InductionSettings(test_axes=None).test_axes is None


def test_inflections_fold_onto_their_lemmas():
    vocab = ["<S>", "</S>", "<UNK>", "bank", "banks", "cities", "city", "walked", "walk", "news", "is"]
    fold = fold_vocabulary(vocab)
    assert vocab[fold[4]] == "bank" and vocab[fold[5]] == "city" and vocab[fold[7]] == "walk"
    assert vocab[fold[10]] == "is"  # too short to fold
    assert find_target("They laid it down".split(), "lay") == 1 and find_target("two banks".split(), "bank") == 1
    assert find_target("nothing here".split(), "bank") is None


def test_bad_input_lines(bilm, head, tmp_path):
    absent, rare = induce(RIVER + MONEY, ["zebra", "river"], bilm=bilm, head=head, settings=SETTINGS, progress=False)
    assert absent.note == "'zebra': no occurrences in the corpus" and absent.senses == []
    assert rare.note == "'river': only 2 occurrences (fewer than 4): one sense" and len(rare.senses) == 1
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"The bank of the river .\n\xff\xfe broken\n")
    with pytest.raises(ValueError, match=r"bad.txt, line 2: not UTF-8 text"):
        induce(bad, ["bank"], bilm=bilm, head=head, settings=SETTINGS, progress=False)
    other = LMHead.from_arrays(["a", "b"], np.zeros((2, 64)), np.zeros(2), source="other head")
    with pytest.raises(HeadError, match="other head takes 64-dimensional states but the biLM's LSTM projection is 128"):
        induce(RIVER, ["bank"], bilm=bilm, head=other, settings=SETTINGS, progress=False)
    with pytest.raises(HeadError, match="the vocabulary has 3 words but the softmax has 2 rows"):
        LMHead.from_arrays(["a", "b", "c"], np.zeros((2, 128)), np.zeros(2))
    folder = tmp_path / "model"
    folder.mkdir()
    with pytest.raises(HeadError, match="has no softmax.pt"):
        native_head(folder)


def test_found_words_need_a_rereadable_corpus(bilm, head, tmp_path):
    with pytest.raises(ValueError, match="reads the corpus twice"):
        induce(iter(RIVER + MONEY), None, bilm=bilm, head=head, progress=False)
    corpus = tmp_path / "corpus.txt.gz"
    with gzip.open(corpus, "wt", encoding="utf-8") as fh:
        fh.write("\n".join(RIVER + MONEY) * 3)
    found = induce(corpus, None, n_words=2, bilm=bilm, head=head, settings=SETTINGS, progress=False)
    assert len(found) == 2 and "bank" in {r.word for r in found}


def test_induced_inventory_disambiguates_in_a_pipeline_and_round_trips(bank, bilm, tmp_path):
    from spacy_elmo.bilm.fingerprint import bilm_fingerprint

    inventory = build_inventory([bank], bilm_fingerprint(bilm))
    assert set(inventory.lemmas) == {"bank", "banks"}
    assert inventory.names["bank.1"] == bank.senses[0].name
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("elmo", config={"store_layers": True})
    nlp.add_pipe("elmo_senses").set_inventory(inventory)
    docs = list(nlp.pipe(RIVER + MONEY))
    got = [next(t for t in d if t.lower_ in ("bank", "banks")) for d in docs]
    assert all(t._.elmo_sense.startswith("bank.") and t._.elmo_sense_name == inventory.names[t._.elmo_sense] for t in got)
    # the centroid choice agrees with the induced labels on most of the occurrences it was built from
    agree = np.mean([t._.elmo_sense == f"bank.{c + 1}" for t, c in zip(got, bank.labels)])
    assert agree >= 0.5, agree
    nlp.to_disk(tmp_path / "pipeline")
    again = spacy.load(tmp_path / "pipeline")
    assert [next(t for t in again(s) if t.lower_ in ("bank", "banks"))._.elmo_sense for s in RIVER + MONEY] == [t._.elmo_sense for t in got]
    assert again.get_pipe("elmo_senses").inventory.names == inventory.names


def test_saved_senses_round_trip(bank, tmp_path):
    (path,) = save_senses(tmp_path / "senses", [bank])
    assert path.name == "bank.json" and (tmp_path / "senses" / "bank.npz").is_file()
    (loaded,) = load_senses(tmp_path / "senses")
    assert loaded.word == bank.word and loaded.senses == bank.senses and loaded.occurrences == bank.occurrences
    assert np.array_equal(loaded.weights, bank.weights) and np.array_equal(loaded.labels, bank.labels)
    assert np.array_equal(loaded.extra["elmo_vectors"], bank.extra["elmo_vectors"])


def test_what_was_almost_found_is_kept_beside_one_sense(bilm, head, tmp_path, capsys):
    """Where the rule keeps one sense, the best two-way split is still reported (its z against the
    null, the z it needed, each side's size and name), saved with the senses and printed, never used
    as senses; where the rule splits, there is none."""
    from dataclasses import replace

    from spacy_elmo.induction.induced import best_split_line

    strict = replace(SETTINGS, significance=1e6)  # nothing passes: one sense
    (one,) = induce(RIVER + MONEY, ["bank"], bilm=bilm, head=head, settings=strict, progress=False)
    assert len(one.senses) == 1
    split = one.extra["best_split"]
    assert sum(split["sizes"]) == len(RIVER + MONEY) and len(split["names"]) == 2 and split["needed"] == -1e6
    assert split["z"] > split["needed"] and all(name.startswith("bank") for name in split["names"])
    line = best_split_line(one)
    assert line is not None and line.startswith("not kept (one sense)") and f"z = {split['z']:.2f}" in line
    (path,) = save_senses(tmp_path / "s", [one])
    assert load_senses(tmp_path / "s")[0].extra["best_split"] == split
    fixed = induce(RIVER + MONEY, ["bank"], bilm=bilm, head=head, settings=replace(SETTINGS, n_senses=2), progress=False)[0]
    assert "best_split" not in fixed.extra and best_split_line(fixed) is None


def test_induce_command(tmp_path, capsys):
    corpus = tmp_path / "texts"
    corpus.mkdir()
    (corpus / "a.txt").write_text("\n".join(RIVER + MONEY), encoding="utf-8")
    torch.set_num_threads(1)
    assert main(["induce", str(corpus), "--words", "bank,zebra", "--out", str(tmp_path / "out"), "--min-occurrences", "4"]) == 0
    out, err = capsys.readouterr()
    assert "bank: " in out and "'zebra': no occurrences in the corpus" in err
    assert (tmp_path / "out" / "inventory.bin").is_file() and (tmp_path / "out" / "bank.json").is_file()
    assert main(["induce", str(tmp_path / "missing.txt"), "--words", "bank", "--out", str(tmp_path / "o2")]) == 2
    assert "corpus file not found" in capsys.readouterr().err
    assert main(["wsi-eval", "--data", str(tmp_path)]) == 2
    assert "keys/gold.all.key not found" in capsys.readouterr().err


def test_corpus_forms_docbin_docs_and_text_agree(tmp_path):
    from spacy.tokens import DocBin

    from spacy_elmo.induction.corpus import read_sentences

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    docs = list(nlp.pipe(["He sat on the bank. The bank lends money.", "Banks fail."]))
    DocBin(docs=docs).to_disk(tmp_path / "corpus.spacy")
    (tmp_path / "corpus.txt").write_text("He sat on the bank. The bank lends money.\n\nBanks fail.\n", encoding="utf-8")
    expected = [["He", "sat", "on", "the", "bank", "."], ["The", "bank", "lends", "money", "."], ["Banks", "fail", "."]]
    for corpus in (tmp_path / "corpus.spacy", tmp_path / "corpus.txt", docs, [d.text for d in docs]):
        sentences = list(read_sentences(corpus))
        assert [s.tokens for s in sentences] == expected, corpus
        assert all(s.text[a:b] == t for s in sentences for t, (a, b) in zip(s.tokens, s.spans))
    assert [s.source for s in read_sentences(tmp_path / "corpus.txt")] == ["corpus.txt:1", "corpus.txt:1", "corpus.txt:3"]
