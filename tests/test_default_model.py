"""The embedded default English biLM: works with no arguments, offline, and reads context."""
import numpy as np
import spacy

from spacy_elmo.models import default_model_path

RIVER = ["He sat down on the bank of the river .", "The boat drifted toward the muddy bank .", "Flowers grew along the bank of the stream ."]
MONEY = ["She put all her money in the bank .", "The bank refused to lend him money .", "The bank paid interest on every deposit ."]


def vectors(nlp, sentences, word):
    return np.stack([next(t for t in doc if t.text == word)._.elmo for doc in nlp.pipe(sentences)])


def cos(a, b):
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


def test_add_pipe_with_no_arguments():
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")
    doc = nlp("It works without any download.")
    import srsly

    dim = 2 * srsly.read_json(default_model_path() / "config.json")["options"]["lstm"]["projection_dim"]
    assert doc.tensor.shape == (len(doc), dim)
    assert doc._.elmo_layers.shape[0] == 3
    assert np.isfinite(doc.tensor).all()


def test_senses_of_bank_are_separated_by_context():
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"mix": "top"})
    river, money = vectors(nlp, RIVER, "bank"), vectors(nlp, MONEY, "bank")
    within = np.mean([cos(a, b) for group in (river, money) for i, a in enumerate(group) for b in group[i + 1 :]])
    across = np.mean([cos(a, b) for a in river for b in money])
    assert within > across + 0.02, (within, across)
    # a static vector cannot do this: layer 0 is identical in every sentence
    static = nlp.get_pipe("elmo").bilm.embed_sentences([s.split() for s in RIVER + MONEY])
    layer0 = [s[0][[i for i, w in enumerate(sent.split()) if w == "bank"][0]] for s, sent in zip(static, RIVER + MONEY)]
    assert all(np.allclose(v, layer0[0], atol=1e-5) for v in layer0)
