"""Sense inventory, the elmo_senses component and the similarity choice of the elmo component.

Unit tests use constructed vectors; the in-context ones use the embedded default model on a few
hand-written sentences (the model is small: each runs in well under a second)."""
from __future__ import annotations

import numpy as np
import pytest
import spacy
from spacy.tokens import Doc

from spacy_elmo.senses import ElmoSenses, NoElmoError, SenseInventory, token_vector

RIVER = ["He sat down on the bank of the river .", "The boat drifted toward the muddy bank .", "Flowers grew along the green bank of the stream .", "The river bank was steep and wet ."]
MONEY = ["She put all her money in the bank .", "The bank refused to lend him money .", "The bank paid interest on every deposit .", "He borrowed money from the bank ."]
# held out: "bank" inside the sentence, where both directions of the biLM read context. A
# sentence-final "bank" ("He deposited the money in the bank .") is a known miss of the small
# default model: the backward LM sees only "." there, and the shipped default puts most such money
# uses on the river side (of three such sentences, layer 2 gets two right, layer 1 one, layer 0 none).
HELD_OUT = [("They fished from the steep bank of the brook .", "river"), ("The bank lent money to the farmer .", "money")]
MORE_HELD_OUT = [
    ("We walked along the bank of the river .", "river"),
    ("Grass grew on the bank of the stream .", "river"),
    ("The bank charged him interest on the loan .", "money"),
]


@pytest.fixture(scope="module")
def elmo_nlp():
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")
    return nlp


def bank(doc: Doc):
    return next(t for t in doc if t.lower_ == "bank")


@pytest.fixture(scope="module")
def bank_inventory(elmo_nlp):
    examples = [(bank(d), "river") for d in elmo_nlp.pipe(RIVER)] + [(bank(d), "money") for d in elmo_nlp.pipe(MONEY)]
    inventory = SenseInventory.from_examples(examples, key="lower", layer="layer:1")
    inventory.add("bank", "money", count=1)  # one more, without a vector: money is the most frequent sense
    return inventory


# ---------------------------------------------------------------------------- constructed vectors


def toy() -> SenseInventory:
    inventory = SenseInventory()
    inventory.add_vectors(["a", "a", "a", "b"], ["x", "y", "x", "z"], np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 0.2], [3.0, 3.0]]))
    return inventory


def test_nearest_centroid_and_counts():
    inventory = toy()
    assert inventory.senses("a") == {"x": 2, "y": 1}
    np.testing.assert_allclose(inventory.centroid("a", "x"), [1.0, 0.1])
    first, second, unknown = inventory.predict(["a", "a", "c"], np.array([[0.9, 0.3], [0.1, 1.0], [1.0, 1.0]]))
    assert (first.sense, first.method) == ("x", "centroid")
    assert second.sense == "y" and second.score == pytest.approx(1.0 / np.sqrt(1.01), abs=1e-5)
    assert unknown is None
    assert inventory.most_frequent("a") == "x" and inventory.most_frequent("c") is None


def test_backoff_to_most_frequent_sense():
    inventory = toy()
    # a zero vector has no nearest centroid: the most frequent sense, without a score
    zero = inventory.disambiguate_vector("a", np.zeros(2))
    assert (zero.sense, zero.score, zero.method) == ("x", None, "most_frequent")
    low = inventory.disambiguate_vector("a", np.array([0.0, 1.0]), min_score=1.01)
    assert (low.sense, low.method) == ("x", "most_frequent") and low.score == pytest.approx(0.1 / np.sqrt(1.01), abs=1e-5)
    inventory.add("c", "w", count=3)  # frequency only: no centroid, the back-off answers
    assert inventory.disambiguate_vector("c", np.ones(2)).sense == "w"


def test_sense_prior_weight_trades_cosine_for_frequency():
    inventory = SenseInventory()
    # sense "x" seen 9 times, "y" once; the query is a little nearer to y's centroid
    inventory.add_vectors(["a"] * 10, ["x"] * 9 + ["y"], np.array([[1.0, 0.0]] * 9 + [[0.0, 1.0]]))
    query = np.array([0.6, 0.8])  # cos to x 0.6, to y 0.8: a gap of 0.2
    assert inventory.disambiguate_vector("a", query).sense == "y"
    np.testing.assert_allclose(inventory.log_prior("a", ["x", "y"]), np.log([0.9, 0.1]), rtol=1e-6)
    # log p(x) - log p(y) = log 9 = 2.197: the prior wins once lambda > 0.2 / 2.197 = 0.091
    assert inventory.disambiguate_vector("a", query, prior_weight=0.08).sense == "y"
    chosen = inventory.disambiguate_vector("a", query, prior_weight=0.1)
    assert (chosen.sense, chosen.method) == ("x", "centroid") and chosen.score == pytest.approx(0.6, abs=1e-6)
    assert inventory.disambiguate_vector("a", query, prior_weight=0.0).sense == "y"
    with pytest.raises(ValueError, match="prior_weight must be a finite number >= 0"):
        inventory.predict(["a"], query.reshape(1, -1), prior_weight=-1.0)


def test_component_prior_weight(bank_inventory):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")
    nlp.add_pipe("elmo_senses", config={"prior_weight": 100.0}).set_inventory(bank_inventory)
    # an overwhelming prior: every bank gets the most frequent sense, still chosen among centroids
    token = bank(nlp(HELD_OUT[0][0]))
    assert (token._.elmo_sense, token._.elmo_sense_method) == ("money", "centroid")
    with pytest.raises(ValueError, match="prior_weight must be a number >= 0"):
        spacy.blank("en").add_pipe("elmo_senses", config={"prior_weight": -0.5})


def test_dimension_and_input_errors():
    inventory = toy()
    with pytest.raises(ValueError, match="dimension 3 for an inventory of dimension 2"):
        inventory.add("a", "x", np.ones(3))
    with pytest.raises(ValueError, match="dimension 3"):
        inventory.predict(["a"], np.ones((1, 3)))
    with pytest.raises(ValueError, match="non-empty"):
        inventory.add("", "x", np.ones(2))
    with pytest.raises(ValueError, match="key must be one of"):
        SenseInventory(key="stem")
    with pytest.raises(ValueError, match="mix"):
        SenseInventory(layer="layer:x")


def test_inventory_round_trip(tmp_path):
    inventory = toy()
    inventory.add("c", "w", count=3)
    for loaded in (SenseInventory.from_bytes(inventory.to_bytes()), (inventory.to_disk(tmp_path / "inv.bin"), SenseInventory.from_disk(tmp_path / "inv.bin"))[1]):
        assert loaded.lemmas == inventory.lemmas and loaded.senses("a") == inventory.senses("a") and loaded.senses("c") == {"w": 3}
        np.testing.assert_allclose(loaded.centroid("a", "x"), inventory.centroid("a", "x"))
        queries = np.array([[0.9, 0.3], [0.1, 1.0]])
        assert loaded.predict(["a", "a"], queries) == inventory.predict(["a", "a"], queries)
    (tmp_path / "bad.bin").write_bytes(b"not an inventory")
    with pytest.raises(ValueError, match="bad.bin: not a serialised sense inventory"):
        SenseInventory.from_disk(tmp_path / "bad.bin")
    with pytest.raises(FileNotFoundError, match="missing.bin"):
        SenseInventory.from_disk(tmp_path / "missing.bin")


# ---------------------------------------------------------------------------- tokens in context


def test_disambiguate_bank_in_context(elmo_nlp, bank_inventory):
    for text, sense in HELD_OUT + MORE_HELD_OUT:
        prediction = bank_inventory.disambiguate(bank(elmo_nlp(text)))
        assert (prediction.sense, prediction.method) == (sense, "centroid")
        assert 0.0 < prediction.score <= 1.0
    assert bank_inventory.most_frequent("bank") == "money"
    assert bank_inventory.disambiguate(elmo_nlp("The river ran fast .")[1]) is None  # unknown lemma


def test_layer_choice_uses_raw_layers(elmo_nlp):
    doc = elmo_nlp("The bank lends money .")
    np.testing.assert_allclose(token_vector(doc[1], "layer:2"), doc._.elmo_layers[2, 1])
    np.testing.assert_allclose(token_vector(doc[1], None), doc._.elmo_vectors[1])
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"store_layers": False})
    with pytest.raises(NoElmoError, match="needs the raw biLM layers"):
        token_vector(nlp("The bank lends money .")[1], "layer:1")
    with pytest.raises(NoElmoError, match="run the 'elmo' component"):
        SenseInventory().add_token(spacy.blank("en")("a bank")[1], "money", lemma="bank")


def test_component_sets_senses_and_round_trips(elmo_nlp, bank_inventory, tmp_path):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")
    senses = nlp.add_pipe("elmo_senses")
    assert isinstance(senses, ElmoSenses)
    with pytest.raises(ValueError, match="no sense inventory"):
        nlp("a bank")
    senses.set_inventory(bank_inventory)
    doc = nlp(HELD_OUT[0][0] + " " + HELD_OUT[1][0])
    banks = [t for t in doc if t.lower_ == "bank"]
    assert [t._.elmo_sense for t in banks] == ["river", "money"]
    assert all(t._.elmo_sense_method == "centroid" and 0 < t._.elmo_sense_score <= 1 for t in banks)
    assert doc[0]._.elmo_sense is None and doc[0]._.elmo_sense_score is None
    nlp.to_disk(tmp_path / "pipeline")
    loaded = spacy.load(tmp_path / "pipeline")
    assert [t._.elmo_sense for t in loaded(doc.text) if t.lower_ == "bank"] == ["river", "money"]
    copy = spacy.blank("en")
    copy.add_pipe("elmo")
    copy.add_pipe("elmo_senses").from_bytes(senses.to_bytes())
    assert copy.get_pipe("elmo_senses").inventory.senses("bank") == bank_inventory.senses("bank")
    # min_score above any cosine: the most frequent sense, marked as the back-off; backoff=False: none
    strict = spacy.blank("en")
    strict.add_pipe("elmo")
    strict.add_pipe("elmo_senses", config={"min_score": 1.5}).set_inventory(bank_inventory)
    token = bank(strict(HELD_OUT[0][0]))
    assert (token._.elmo_sense, token._.elmo_sense_method) == ("money", "most_frequent")
    strict.get_pipe("elmo_senses").backoff = False
    assert bank(strict(HELD_OUT[0][0]))._.elmo_sense is None


def test_component_initialize_from_file(bank_inventory, tmp_path):
    bank_inventory.to_disk(tmp_path / "senses.bin")
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")
    nlp.add_pipe("elmo_senses")
    nlp.get_pipe("elmo_senses").initialize(inventory=tmp_path / "senses.bin")
    assert bank(nlp(HELD_OUT[1][0]))._.elmo_sense == "money"


def test_component_errors(bank_inventory):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")
    by_lemma = SenseInventory(key="lemma")
    by_lemma.add("bank", "money", np.ones(bank_inventory.dim))
    nlp.add_pipe("elmo_senses").set_inventory(by_lemma)
    with pytest.raises(ValueError, match="the Doc has no lemmas"):
        nlp("The bank lends money .")
    # gold lemmas given: works
    doc = Doc(nlp.vocab, words=["The", "banks", "lend"], lemmas=["the", "bank", "lend"])
    assert nlp(doc)[1]._.elmo_sense == "money"
    alone = spacy.blank("en")
    alone.add_pipe("elmo_senses").set_inventory(bank_inventory)
    with pytest.raises(ValueError, match="no ELMo vectors; put it after the 'elmo' component"):
        alone("a bank")
    with pytest.raises(TypeError, match="SenseInventory"):
        alone.get_pipe("elmo_senses").set_inventory({"bank": 1})


# ---------------------------------------------------------------------------- similarity choice


def test_similarity_mix_of_its_own():
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"similarity": "layer:1"})
    doc = nlp("He sat on the bank of the river . The bank lends money .")
    a, b = doc._.elmo_layers[1, 4], doc._.elmo_layers[1, 10]
    assert doc[4].similarity(doc[10]) == pytest.approx(float(a @ b / np.linalg.norm(a) / np.linalg.norm(b)), abs=1e-5)
    x, y = doc._.elmo_layers[1, 0:9].mean(0), doc._.elmo_layers[1, 9:].mean(0)
    assert doc[0:9].similarity(doc[9:]) == pytest.approx(float(x @ y / np.linalg.norm(x) / np.linalg.norm(y)), abs=1e-5)
    np.testing.assert_allclose(doc[4].vector, doc.tensor[4])  # .vector stays the doc.tensor mix
    plain = spacy.blank("en")
    plain.add_pipe("elmo")
    doc2 = plain(doc.text)
    assert doc2[4].similarity(doc2[10]) != pytest.approx(doc[4].similarity(doc[10]), abs=1e-4)
    with pytest.raises(ValueError, match="mix"):
        spacy.blank("en").add_pipe("elmo", config={"similarity": "middle"})


def test_similarity_ignores_static_vectors():
    nlp = spacy.blank("en")
    for word in ("bank", "river"):
        nlp.vocab.set_vector(word, np.ones(5, dtype=np.float32))
    nlp.add_pipe("elmo")
    doc = nlp("The bank of the river .")
    assert doc[1].similarity(doc[4]) == pytest.approx(
        float(doc.tensor[1] @ doc.tensor[4] / np.linalg.norm(doc.tensor[1]) / np.linalg.norm(doc.tensor[4])), abs=1e-5
    )
    assert doc[1].similarity(doc[4]) < 0.99  # the static vectors are identical


def test_similarity_mix_survives_docbin():
    from spacy.tokens import DocBin

    import spacy_elmo

    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"similarity": [0.0, 1.0, 1.0]})
    doc = nlp("The bank of the river . The bank lends money .")
    expected = doc[1].similarity(doc[7])
    restored = next(spacy_elmo.restore_all(DocBin(store_user_data=True, docs=[doc]).get_docs(nlp.vocab)))
    assert restored._.elmo_similarity_vectors is not None
    assert restored[1].similarity(restored[7]) == pytest.approx(expected, abs=1e-6)


def test_inventory_from_the_initialize_config(bank_inventory, tmp_path):
    bank_inventory.to_disk(tmp_path / "senses.bin")
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")
    nlp.add_pipe("elmo_senses", config={"min_score": 0.1})
    config = nlp.config.copy()
    config["initialize"]["components"] = {"elmo_senses": {"inventory": str(tmp_path / "senses.bin")}}
    loaded = spacy.util.load_model_from_config(config, auto_fill=True)
    loaded.initialize()
    assert loaded.get_pipe("elmo_senses").min_score == 0.1
    assert bank(loaded(HELD_OUT[1][0]))._.elmo_sense == "money"
    bare = spacy.util.load_model_from_config(nlp.config, auto_fill=True)
    with pytest.raises(ValueError, match="needs a sense inventory"):
        bare.initialize()
