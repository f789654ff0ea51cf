"""Training spaCy components on ELMo: ScalarMix.v1, ElmoListener.v1, ElmoTok2Vec.v1, frozen/fine-tuned biLM."""
import copy
import pickle

import numpy as np
import pytest
import spacy
import torch
from spacy.training import Example
from thinc.api import Adam, NumpyOps

from spacy_elmo.layers import ElmoListener, ScalarMix_v1, learned_mixes, trainable_logits

from .conftest import ALLENNLP

EMBED = {"@architectures": "spacy.MultiHashEmbed.v2", "width": 16, "attrs": ["NORM", "SHAPE"], "rows": [500, 50], "include_static_vectors": False}
ENCODE = {"@architectures": "spacy.MaxoutWindowEncoder.v2", "width": 16, "window_size": 1, "maxout_pieces": 2, "depth": 1}


def listener(**extra):
    block = {"@architectures": "spacy-elmo.ElmoListener.v1", "width": 16, "mix": {"@architectures": "spacy-elmo.ScalarMix.v1", "init": "top"}}
    block.update(extra)
    return block


def tagger_config(tok2vec=None):
    return {"model": {"@architectures": "spacy.Tagger.v2", "tok2vec": tok2vec or listener(embed=EMBED, encode=ENCODE)}}


NER = {
    "model": {
        "@architectures": "spacy.TransitionBasedParser.v2", "state_type": "ner", "extra_state_tokens": False,
        "hidden_width": 16, "maxout_pieces": 2, "use_upper": True, "nO": None, "tok2vec": listener(),
    }
}

DATA = [
    ("The cat sat on the mat .", ["D", "N", "V", "P", "D", "N", "."]),
    ("A dog ran home .", ["D", "N", "V", "N", "."]),
    ("The bank lends money .", ["D", "N", "V", "N", "."]),
    ("We sat on the bank .", ["P", "V", "P", "D", "N", "."]),
]


def examples(nlp):
    return [Example.from_dict(nlp.make_doc(text), {"tags": tags}) for text, tags in DATA]


def elmo_tagger(elmo_config=None, tagger=None):
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(ALLENNLP), "set_hooks": False, **(elmo_config or {})})
    nlp.add_pipe("tagger", config=tagger or tagger_config())
    return nlp


def train(nlp, steps=15, exclude=(), annotates=()):
    spacy.util.fix_random_seed(0)
    egs = examples(nlp)
    optimizer = nlp.initialize(lambda: egs)
    losses = {}
    for _ in range(steps):
        losses = nlp.update(egs, sgd=optimizer, exclude=exclude, annotates=annotates)
    return optimizer, losses


def bilm_state(nlp):
    return {k: v.detach().clone() for k, v in nlp.get_pipe("elmo").bilm.state_dict().items()}


def tags(nlp, texts=("The cat ran home .", "We sat on the mat .")):
    return [[t.tag_ for t in doc] for doc in nlp.pipe(texts)]


def test_tagger_learns_on_elmo_and_exposes_its_mix():
    nlp = elmo_tagger()
    _, losses = train(nlp, steps=40)
    assert nlp.get_pipe("elmo").listening_components == ["tagger"]
    assert tags(nlp) == [["D", "N", "V", "N", "."], ["P", "V", "P", "D", "N", "."]]
    (mix,) = learned_mixes(nlp)["tagger"]
    assert mix["role"] == "mix" and len(mix["weights"]) == 3 and abs(sum(mix["weights"]) - 1) < 1e-3
    assert mix["weights"] != [0.005, 0.005, 0.99]  # "top" started at 99% and moved


def test_frozen_biLM_gets_no_update_and_no_optimizer_state():
    nlp = elmo_tagger()
    before = bilm_state(nlp)
    optimizer, _ = train(nlp, steps=5)
    after = bilm_state(nlp)
    assert all(torch.equal(before[k], after[k]) for k in before)  # not even weight decay
    assert not any(p.requires_grad for p in nlp.get_pipe("elmo").bilm.parameters())
    shim_id = nlp.get_pipe("elmo").model.shims[0].id
    assert not any(isinstance(key, tuple) and key[0] == shim_id for key in optimizer.mom1)
    assert nlp.get_pipe("elmo").bilm.token_cache is not None


def biLM_steps(factor, steps=3):
    """The largest weight change of the biLM and of the tagger's mix after ``steps`` updates with grad_factor ``factor``
    (spaCy steps an upstream component before its listeners send gradients: the biLM moves from the second on)."""
    nlp = elmo_tagger({"frozen": False, "grad_factor": factor})
    nlp.get_pipe("elmo").initialize()  # loads the biLM (nlp.initialize below keeps it)
    before = bilm_state(nlp)
    spacy.util.fix_random_seed(0)
    egs = examples(nlp)
    nlp.initialize(lambda: egs)
    tagger_before = nlp.get_pipe("tagger").model.get_ref("tok2vec").get_ref("mix").get_param("s").copy()
    optimizer = Adam(0.001, L2=0.0, grad_clip=0.0)  # no weight decay: only the gradient moves the weights
    for _ in range(steps):
        nlp.update(egs, sgd=optimizer)
    after = bilm_state(nlp)
    assert nlp.get_pipe("elmo").bilm.token_cache is None  # the cache is off while weights move
    tagger_after = nlp.get_pipe("tagger").model.get_ref("tok2vec").get_ref("mix").get_param("s")
    return max(float((after[k] - before[k]).abs().max()) for k in before), float(np.abs(tagger_after - tagger_before).max())


def test_unfrozen_biLM_is_fine_tuned_at_grad_factor_times_the_learning_rate():
    # under Adam a gradient scale cancels out (before: 1.60e-3 with factor 1, 1.57e-3 with 0.01);
    # as a learning-rate factor it acts: Adam's steps are proportional to the learning rate
    changes = {factor: biLM_steps(factor) for factor in (1.0, 0.1, 0.0)}
    assert changes[1.0][0] > 1e-4
    assert changes[0.1][0] / changes[1.0][0] == pytest.approx(0.1, rel=0.1)
    assert changes[0.0][0] == 0.0
    assert changes[0.1][1] == pytest.approx(changes[1.0][1], rel=0.05)  # the task's own rate is unchanged
    with pytest.raises(ValueError, match="precision"):
        elmo_tagger({"frozen": False, "precision": "bfloat16"})


def count_bilm_calls(nlp):
    calls = []
    nlp.get_pipe("elmo").bilm.register_forward_hook(lambda module, args, output: calls.append(1))
    return calls


def test_one_biLM_pass_serves_every_listener_in_training_and_pipe():
    nlp = elmo_tagger()
    ner = nlp.add_pipe("ner", config=NER)
    ner.add_label("ANIMAL")
    egs = [Example.from_dict(nlp.make_doc(t), {"tags": tg, "entities": ["O", "U-ANIMAL"] + ["O"] * (len(tg) - 2)}) for t, tg in DATA]
    optimizer = nlp.initialize(lambda: egs)
    assert sorted(nlp.get_pipe("elmo").listening_components) == ["ner", "tagger"]
    calls = count_bilm_calls(nlp)
    nlp.update(egs, sgd=optimizer)
    assert len(calls) == 1  # the 4 short sentences fit one batch of the token budget
    calls.clear()
    docs = list(nlp.pipe([t for t, _ in DATA], batch_size=10))
    assert len(calls) == 1 and all(doc._.elmo_layers is not None for doc in docs)


def test_frozen_and_annotating_elmo_feeds_listeners_from_the_docs():
    nlp = elmo_tagger()
    before = bilm_state(nlp)
    train(nlp, steps=25, exclude=["elmo"], annotates=["elmo"])
    assert all(torch.equal(before[k], v) for k, v in bilm_state(nlp).items())
    assert tags(nlp)[0] == ["D", "N", "V", "N", "."]
    nlp2 = elmo_tagger()
    with pytest.raises(ValueError, match="frozen_components.*annotating_components"):
        train(nlp2, steps=1, exclude=["elmo"])


def test_frozen_component_never_initialised_loads_on_first_use():
    # spacy train runs nlp.initialize with the [training] frozen_components disabled, so a frozen
    # 'elmo' is never initialised (before: its first update raised "not loaded yet: call nlp.initialize()")
    nlp = elmo_tagger()
    spacy.util.fix_random_seed(0)
    egs = examples(nlp)
    with nlp.select_pipes(disable=["elmo"]):
        optimizer = nlp.initialize(lambda: egs)  # the tagger's widths come from the weights' options
    assert not nlp.get_pipe("elmo").loaded
    for _ in range(25):
        nlp.update(egs, sgd=optimizer, exclude=["elmo"], annotates=["elmo"])
    assert nlp.get_pipe("elmo").loaded
    assert tags(nlp)[0] == ["D", "N", "V", "N", "."]


def test_annotating_and_updating_elmo_runs_the_biLM_once_per_batch():
    nlp = elmo_tagger()
    egs = examples(nlp)
    optimizer = nlp.initialize(lambda: egs)
    calls = count_bilm_calls(nlp)
    seen = []
    nlp.get_pipe("tagger").model.get_ref("tok2vec")  # the listener reads what update() sent
    original = nlp.get_pipe("elmo").set_annotations
    nlp.get_pipe("elmo").set_annotations = lambda docs, layers: (seen.append(len(docs)), original(docs, layers))
    nlp.update(egs, sgd=optimizer, annotates=["elmo"])
    assert len(calls) == 1 and seen == [len(egs)]  # annotated from the outputs update() computed


def test_predictions_survive_bytes_disk_and_replace_listeners(tmp_path):
    nlp = elmo_tagger(tagger=tagger_config(listener(embed=EMBED, encode=ENCODE, output_mix={"@architectures": "spacy-elmo.ScalarMix.v1"})))
    train(nlp)
    expected = tags(nlp)
    roles = [m["role"] for m in learned_mixes(nlp)["tagger"]]
    assert roles == ["mix", "output_mix"]
    scores = nlp.get_pipe("tagger").model.predict([nlp("The cat ran home .")])[0]
    restored = elmo_tagger(tagger=tagger_config(listener(embed=EMBED, encode=ENCODE, output_mix={"@architectures": "spacy-elmo.ScalarMix.v1"})))
    restored.from_bytes(nlp.to_bytes())
    assert tags(restored) == expected
    nlp.replace_listeners("elmo", "tagger", ["model.tok2vec"])
    assert nlp.get_pipe("elmo").listening_components == []
    assert nlp.get_pipe_config("tagger")["model"]["tok2vec"]["@architectures"] == "spacy-elmo.ElmoTok2Vec.v1"
    assert tags(nlp) == expected
    tagger_bytes = nlp.get_pipe("tagger").to_bytes()
    nlp.to_disk(tmp_path / "pipe")
    loaded = spacy.load(tmp_path / "pipe")
    assert tags(loaded) == expected
    loaded.get_pipe("tagger").from_bytes(tagger_bytes)
    again = loaded.get_pipe("tagger").model.predict([loaded("The cat ran home .")])[0]
    assert np.allclose(again, scores, atol=1e-5)
    # the standalone tagger runs without the elmo component
    loaded.remove_pipe("elmo")
    assert tags(loaded) == expected


def test_n_process_2_gives_the_same_predictions(tmp_path):
    nlp = elmo_tagger()
    train(nlp)
    texts = [t for t, _ in DATA] * 3
    one = [[t.tag_ for t in d] for d in nlp.pipe(texts)]
    two = [[t.tag_ for t in d] for d in nlp.pipe(texts, n_process=2, batch_size=2)]
    assert one == two


def test_doc_cleaner_drops_layers_after_the_listeners():
    nlp = elmo_tagger()
    train(nlp)
    nlp.add_pipe("doc_cleaner", config={"attrs": {"_.elmo_layers": None}})
    doc = nlp("The cat ran home .")
    assert doc._.elmo_layers is None and [t.tag_ for t in doc] == ["D", "N", "V", "N", "."]
    assert doc._.elmo_vectors.shape == (5, 32)


def test_listeners_need_layers_even_with_store_layers_off():
    nlp = elmo_tagger({"store_layers": False})
    train(nlp)
    assert nlp("The cat ran home .")._.elmo_layers is not None
    plain = spacy.blank("en")
    plain.add_pipe("elmo", config={"weights": str(ALLENNLP), "store_layers": False})
    assert plain("The cat .")._.elmo_layers is None


def test_errors_name_the_fix():
    nlp = spacy.blank("en")
    nlp.add_pipe("tagger", config=tagger_config())
    with pytest.raises(ValueError, match="not connected to an 'elmo' component.*add_pipe\\('elmo', first=True\\)"):
        nlp.initialize(lambda: examples(nlp))
    nlp = elmo_tagger(tagger=tagger_config(listener(upstream="elmo_other")))
    with pytest.raises(ValueError, match="upstream='elmo_other'.*not connected"):
        nlp.initialize(lambda: examples(nlp))
    with pytest.raises(ValueError, match="encode block reads vectors of width 32.*width 16"):
        elmo_tagger(tagger=tagger_config(listener(encode={**ENCODE, "width": 32})))
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(ALLENNLP)})
    nlp.add_pipe("elmo", name="elmo2", config={"weights": str(ALLENNLP)})
    with pytest.raises(ValueError, match="matches two 'elmo' components, 'elmo' and 'elmo2'"):
        nlp.add_pipe("tagger", config=tagger_config())
    with pytest.raises(ValueError, match="ScalarMix"):
        ScalarMix_v1(init="bottom")
    nlp = elmo_tagger(tagger=tagger_config(listener(mix={"@architectures": "spacy-elmo.ScalarMix.v1", "init": [1, 1]})))
    with pytest.raises(ValueError, match="one entry per biLM layer"):
        nlp.initialize(lambda: examples(nlp))
    trained = elmo_tagger()
    train(trained, steps=1)
    doc = trained.make_doc("No elmo ran on this .")
    with pytest.raises(ValueError, match="has no ELMo layers.*Run the 'elmo' component"):
        trained.get_pipe("tagger")(doc)


def test_component_pickles_with_its_listeners_settings():
    nlp = elmo_tagger()
    train(nlp, steps=2)
    elmo = nlp.get_pipe("elmo")
    clone = pickle.loads(pickle.dumps(elmo))
    doc = nlp.make_doc("The cat .")
    assert np.allclose(clone.predict([doc])[0], elmo.predict([doc])[0])


# ---------------------------------------------------------------- ScalarMix.v1 itself


def mix_model(**kwargs):
    model = ScalarMix_v1(**kwargs)
    model.initialize(X=[np.zeros((3, 2, 4), dtype=np.float32)])
    return model


def test_scalar_mix_forward_matches_the_formula():
    rng = np.random.default_rng(0)
    layers = [rng.normal(size=(3, n, 4)).astype(np.float32) for n in (2, 0, 5)]
    model = mix_model(init=[1, 2, 3], gamma=0.5)
    out = model.predict(layers)
    weights = np.array([1, 2, 3]) / 6
    assert [o.shape for o in out] == [(2, 4), (0, 4), (5, 4)]
    assert np.allclose(out[2], 0.5 * np.tensordot(weights, layers[2], axes=1), atol=1e-6)


@pytest.mark.parametrize("layer_norm", [False, True])
def test_scalar_mix_gradients_match_finite_differences(layer_norm):
    rng = np.random.default_rng(1)
    layers = [rng.normal(size=(3, 3, 5)).astype(np.float64)]
    model = mix_model(init=[1, 2, 3], gamma=1.3, layer_norm=layer_norm, l2=0.1)
    model.set_param("s", model.get_param("s").astype(np.float64))
    model.set_param("gamma", model.get_param("gamma").astype(np.float64))
    d_out = rng.normal(size=(3, 5))

    def loss():
        s = model.get_param("s")
        return float((model.predict(layers)[0] * d_out).sum() + 0.1 * ((s - s.mean()) ** 2).sum())

    _, backprop = model.begin_update(layers)
    model.set_grad("s", np.zeros(3))
    model.set_grad("gamma", np.zeros(1))
    d_layers = backprop([d_out])[0]
    eps = 1e-6
    for name in ("s", "gamma"):
        param = model.get_param(name)
        for i in range(param.size):
            param[i] += eps
            up = loss()
            param[i] -= 2 * eps
            down = loss()
            param[i] += eps
            assert model.get_grad(name)[i] == pytest.approx((up - down) / (2 * eps), rel=1e-4, abs=1e-6)
    for index in [(0, 0, 0), (1, 2, 3), (2, 1, 4)]:
        layers[0][index] += eps
        l2_free = float((model.predict(layers)[0] * d_out).sum())
        layers[0][index] -= 2 * eps
        l2_free_down = float((model.predict(layers)[0] * d_out).sum())
        layers[0][index] += eps
        assert d_layers[index] == pytest.approx((l2_free - l2_free_down) / (2 * eps), rel=1e-4, abs=1e-6)


def test_single_layer_presets_can_still_move():
    logits = trainable_logits("top", 3)
    weights = np.exp(logits) / np.exp(logits).sum()
    assert weights[2] == pytest.approx(0.99) and weights[0] == pytest.approx(0.005)
    model = mix_model(init="layer:0")
    layers = [np.random.default_rng(2).normal(size=(3, 4, 4)).astype(np.float32)]
    _, backprop = model.begin_update(layers)
    backprop([np.ones((4, 4), dtype=np.float32)])
    assert np.abs(model.get_grad("s")).max() > 1e-4


def test_scalar_mix_dropout_uses_its_own_rate():
    model = mix_model(dropout=0.5)
    layers = [np.ones((3, 200, 4), dtype=np.float32)]
    out, _ = model.begin_update(layers)
    zeros = float((out[0] == 0).mean())
    assert 0.4 < zeros < 0.6
    assert np.allclose(model.predict(layers)[0], 1.0)  # no dropout at prediction
    # spaCy's global training dropout does not override it: test_listener_contract


def test_elmo_tok2vec_alone_trains_and_round_trips():
    tok2vec = {
        "@architectures": "spacy-elmo.ElmoTok2Vec.v1", "width": 16, "frozen": True,
        "bilm": {"@architectures": "spacy-elmo.BiLM.v1", "weights": str(ALLENNLP)},
        "mix": {"@architectures": "spacy-elmo.ScalarMix.v1", "init": "top"},
    }
    config = {"model": {"@architectures": "spacy.TextCatCNN.v2", "exclusive_classes": True, "nO": None, "tok2vec": tok2vec}}
    nlp = spacy.blank("en")
    nlp.add_pipe("textcat", config=config)
    data = [("The cat sat on the mat .", "ANIMAL"), ("The bank lends money .", "MONEY"), ("A dog ran home .", "ANIMAL"), ("We paid the bank .", "MONEY")]
    egs = [Example.from_dict(nlp.make_doc(t), {"cats": {"ANIMAL": c == "ANIMAL", "MONEY": c == "MONEY"}}) for t, c in data]
    optimizer = nlp.initialize(lambda: egs)
    before = {k: v.clone() for k, v in nlp.get_pipe("textcat").model.get_ref("tok2vec").get_ref("source").shims[0].bilm.state_dict().items()}
    for _ in range(60):
        nlp.update(egs, sgd=optimizer)
    cats = [max(d.cats, key=d.cats.get) for d in nlp.pipe([t for t, _ in data])]
    assert cats == [c for _, c in data]
    after = nlp.get_pipe("textcat").model.get_ref("tok2vec").get_ref("source").shims[0].bilm.state_dict()
    assert all(torch.equal(before[k], after[k]) for k in before)  # frozen inside a component too
    restored = spacy.blank("en")
    restored.add_pipe("textcat", config=config)
    restored.from_bytes(nlp.to_bytes())
    assert [d.cats for d in restored.pipe([t for t, _ in data])] == [d.cats for d in nlp.pipe([t for t, _ in data])]


def test_mixes_command_prints_the_learned_weights(tmp_path, capsys):
    from spacy_elmo.cli import main

    nlp = elmo_tagger()
    train(nlp, steps=3)
    nlp.to_disk(tmp_path / "pipe")
    assert main(["mixes", str(tmp_path / "pipe"), "--output", str(tmp_path / "mixes.json")]) == 0
    out = capsys.readouterr().out
    assert "tagger (mix): layer 0:" in out and "gamma" in out
    import json

    assert json.loads((tmp_path / "mixes.json").read_text()) == learned_mixes(nlp)
    assert main(["mixes", str(tmp_path)]) == 2  # not a pipeline: one line, exit 2
