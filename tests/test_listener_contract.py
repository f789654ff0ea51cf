"""What a spaCy listener must do, asked of ElmoListener (the ideas of spaCy's Tok2Vec listener tests
and spacy-transformers' TransformerListener tests, in our own code): never train or predict on
made-up zeros, initialise without data, empty Docs, batch sizes, sourced components,
replace_listeners from code and from a config, two components on one upstream."""
import warnings

import numpy as np
import pytest
import spacy
import torch
from spacy.training import Example
from thinc.api import set_dropout_rate

from spacy_elmo.layers import ScalarMix_v1

from .conftest import ALLENNLP
from .test_listeners import DATA, EMBED, ENCODE, elmo_tagger, examples, listener, tagger_config, tags, train

TEXTCAT_DATA = {"The cat sat on the mat .": "ANIMAL", "A dog ran home .": "ANIMAL", "The bank lends money .": "MONEY", "We sat on the bank .": "MONEY"}


# ---------------------------------------------------------------- no zeros outside initialisation


def test_component_update_after_initialize_is_an_error_not_zeros():
    nlp = elmo_tagger()
    egs = examples(nlp)[:3]
    nlp.initialize(lambda: egs)  # the tagger's model is initialised on zeros of the right shape: fine
    tagger = nlp.get_pipe("tagger")
    for _ in range(2):  # the very Docs initialize saw: still an error, every time
        with pytest.raises(ValueError, match="sent none for this batch.*nlp.update"):
            tagger.update(egs)
    with pytest.raises(ValueError, match="has no ELMo layers.*Run the 'elmo' component"):
        tagger.predict([eg.predicted for eg in egs])
    with pytest.raises(ValueError, match="has no ELMo layers"):
        tagger(nlp.make_doc("A cat ."))


def test_frozen_not_annotating_fails_on_every_step_of_a_training_loop():
    # like spacy train with elmo in frozen_components only: Docs are created and freed per step,
    # so their ids are reused; no step may train on zeros
    nlp = elmo_tagger()
    egs = examples(nlp)
    optimizer = nlp.initialize(lambda: egs)
    tagger = nlp.get_pipe("tagger").model
    before = {(node.id, name): node.get_param(name).copy() for node in tagger.walk() for name in node.param_names if node.has_param(name)}
    errors = []
    for step in range(20):  # the Docs initialize saw, and fresh ones
        try:
            nlp.update(egs if step % 2 == 0 else examples(nlp), exclude=["elmo"], sgd=optimizer)
        except ValueError as error:
            errors.append(str(error))
    assert len(errors) == 20 and all("frozen_components" in e and "annotating_components" in e for e in errors)
    after = {(node.id, name): node.get_param(name) for node in tagger.walk() for name in node.param_names if node.has_param(name)}
    assert before.keys() == after.keys() and all(np.array_equal(before[k], after[k]) for k in before)  # no step trained


def test_zeros_only_while_the_listeners_model_is_initialised():
    nlp = elmo_tagger()
    nlp.initialize(lambda: examples(nlp))
    model = nlp.get_pipe("tagger").model
    raw = [nlp.make_doc(text) for text, _ in DATA]
    model.initialize(X=raw)  # a re-initialisation reads raw Docs too
    with pytest.raises(ValueError, match="has no ELMo layers"):
        model.predict(raw)  # right after it: not any more


def test_the_initialising_mark_comes_from_the_models_own_init():
    from spacy_elmo.layers.listener import find_listeners

    nlp = elmo_tagger()
    nlp.initialize(lambda: examples(nlp))
    model = nlp.get_pipe("tagger").model
    (node,) = find_listeners(model)
    seen = []
    forward = node._func
    node._func = lambda m, X, is_train: (seen.append(m.initialising), forward(m, X, is_train))[1]
    assert not node.initialising
    model.initialize(X=[nlp.make_doc("A cat sat .")])  # marked by the init that elmo wrapped when it linked the tagger
    assert seen and all(seen) and not node.initialising
    tok2vec = model.get_ref("tok2vec")
    seen.clear()
    tok2vec.initialize(X=[nlp.make_doc("A dog .")])  # the tok2vec's own init marks its listener too
    assert seen and all(seen) and not node.initialising


# ---------------------------------------------------------------- initialisation


def _param_shapes(model):
    return {(node.name, name): node.get_param(name).shape for node in model.walk() for name in node.param_names if node.has_param(name)}


@pytest.mark.parametrize("with_extras", [False, True])
def test_initialize_without_a_sample_sets_every_width(with_extras):
    extras = {"embed": EMBED, "encode": ENCODE, "output_mix": {"@architectures": "spacy-elmo.ScalarMix.v1"}} if with_extras else {}
    block = {"@architectures": "spacy-elmo.ElmoTok2Vec.v1", "width": 16, "bilm": {"@architectures": "spacy-elmo.BiLM.v1", "weights": str(ALLENNLP)}, **extras}
    resolve = lambda: spacy.util.registry.resolve({"m": block})["m"]  # noqa: E731
    no_sample, with_sample = resolve(), resolve()
    no_sample.initialize()
    doc = spacy.blank("en").make_doc("The cat sat .")
    with_sample.initialize(X=[doc])
    assert _param_shapes(no_sample) == _param_shapes(with_sample)
    assert no_sample.predict([doc])[0].shape == (4, 16)
    # the listener: its widths come from the upstream component's biLM
    nlp = elmo_tagger(tagger=tagger_config(listener(**extras)))
    tok2vec = nlp.get_pipe("tagger").model.get_ref("tok2vec")
    tok2vec.initialize()  # before 'elmo' is loaded: the widths come from its weights' options (nothing loads)
    assert not nlp.get_pipe("elmo").loaded
    assert tok2vec.get_ref("mix").get_dim("nL") == 3 and tok2vec.get_ref("mix").get_dim("nO") == 32
    assert tok2vec.predict([nlp.get_pipe("elmo")(nlp.make_doc(doc.text))])[0].shape == (4, 16)


def test_initialize_without_a_sample_and_without_an_upstream_says_what_is_missing():
    model = spacy.util.registry.resolve({"m": listener()})["m"]
    with pytest.raises(ValueError, match="not connected to an 'elmo' component, so its widths are unknown"):
        model.initialize()


def test_spancat_initialises_on_the_listener():
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(ALLENNLP), "set_hooks": False})
    spancat = nlp.add_pipe("spancat", config={"model": {"@architectures": "spacy.SpanCategorizer.v1", "tok2vec": listener(),
        "reducer": {"@layers": "spacy.mean_max_reducer.v1", "hidden_size": 16}, "scorer": {"@layers": "spacy.LinearLogistic.v1"}}})
    spancat.add_label("THING")
    nlp.initialize()  # no examples at all
    doc = nlp("The cat sat on the mat .")
    assert "sc" in doc.spans


def test_no_false_warning_after_replace_listeners():
    nlp = elmo_tagger()
    train(nlp, steps=1)
    nlp.replace_listeners("elmo", "tagger", ["model.tok2vec"])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        nlp.initialize(lambda: examples(nlp))
    assert not [w for w in caught if "train without ELMo" in str(w.message)]
    plain = spacy.blank("en")  # a tagger that really reads no ELMo is still named
    plain.add_pipe("elmo", config={"weights": str(ALLENNLP)})
    plain.add_pipe("tagger")
    with pytest.warns(UserWarning, match="'tagger' train without ELMo"):
        plain.initialize(lambda: examples(plain))


# ---------------------------------------------------------------- Docs and batches


def test_empty_docs_train_and_predict():
    nlp = elmo_tagger()
    egs = examples(nlp) + [Example.from_dict(nlp.make_doc(""), {"tags": []})]
    optimizer = nlp.initialize(lambda: egs)
    for _ in range(3):
        losses = nlp.update(egs, sgd=optimizer)
    assert np.isfinite(losses["tagger"])
    docs = list(nlp.pipe(["", "The cat ran home .", ""]))
    assert [len(d) for d in docs] == [0, 5, 0] and docs[0]._.elmo_layers.shape == (3, 0, 32)


def test_predictions_do_not_depend_on_the_batch_size():
    nlp = elmo_tagger()
    train(nlp, steps=5)
    texts = [t for t, _ in DATA] + ["", "The dog sat on the bank ."]
    scores = {}
    for batch_size in (1, 2, 100):
        docs = list(nlp.pipe(texts, batch_size=batch_size))
        scores[batch_size] = nlp.get_pipe("tagger").model.predict(docs)
    for batch_size in (2, 100):
        assert all(np.allclose(a, b, atol=1e-5) for a, b in zip(scores[1], scores[batch_size]))


def test_frozen_and_annotating_overfits_with_training_dropout():
    nlp = elmo_tagger()
    spacy.util.fix_random_seed(0)
    egs = examples(nlp)
    optimizer = nlp.initialize(lambda: egs)
    history = []
    for _ in range(40):
        losses = nlp.update(egs, sgd=optimizer, drop=0.1, exclude=["elmo"], annotates=["elmo"])
        history.append(losses["tagger"])
    assert "elmo" not in losses and history[-1] < 0.7 * history[0], history
    assert [[t.tag_ for t in doc] for doc in nlp.pipe([t for t, _ in DATA])] == [tg for _, tg in DATA]


# ---------------------------------------------------------------- two components, one upstream


def test_textcat_and_tagger_share_one_upstream():
    nlp = elmo_tagger()
    textcat = nlp.add_pipe("textcat", config={"model": {"@architectures": "spacy.TextCatReduce.v1", "exclusive_classes": True,
        "use_reduce_first": False, "use_reduce_last": False, "use_reduce_max": False, "use_reduce_mean": True, "nO": None, "tok2vec": listener()}})
    for label in ("ANIMAL", "MONEY"):
        textcat.add_label(label)
    egs = [Example.from_dict(nlp.make_doc(t), {"tags": tg, "cats": {c: float(c == TEXTCAT_DATA[t]) for c in ("ANIMAL", "MONEY")}}) for t, tg in DATA]
    spacy.util.fix_random_seed(0)
    optimizer = nlp.initialize(lambda: egs)
    assert sorted(nlp.get_pipe("elmo").listening_components) == ["tagger", "textcat"]
    for _ in range(40):
        nlp.update(egs, sgd=optimizer)
    docs = list(nlp.pipe(TEXTCAT_DATA))
    assert [max(d.cats, key=d.cats.get) for d in docs] == list(TEXTCAT_DATA.values())
    assert [[t.tag_ for t in d] for d in docs] == [tg for _, tg in DATA]


# ---------------------------------------------------------------- sourcing and replace_listeners


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    nlp = elmo_tagger(tagger=tagger_config(listener(embed=EMBED, encode=ENCODE)))
    train(nlp, steps=20)
    path = tmp_path_factory.mktemp("trained") / "pipeline"
    nlp.to_disk(path)
    return path, tags(nlp)


def test_sourced_components_link_to_the_new_pipeline(trained):
    path, expected = trained
    source = spacy.load(path)
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", source=source)
    nlp.add_pipe("tagger", source=source)
    assert nlp.get_pipe("elmo").listening_components == ["tagger"]
    assert tags(nlp) == expected


def test_replace_listeners_from_a_config(trained):
    path, expected = trained
    config = spacy.util.load_config_from_str(
        f"""
[nlp]
lang = "en"
pipeline = ["elmo","tagger"]

[components]

[components.elmo]
source = "{path}"

[components.tagger]
source = "{path}"
replace_listeners = ["model.tok2vec"]
"""
    )
    nlp = spacy.util.load_model_from_config(config, auto_fill=True)
    assert nlp.get_pipe("elmo").listening_components == []
    assert nlp.get_pipe_config("tagger")["model"]["tok2vec"]["@architectures"] == "spacy-elmo.ElmoTok2Vec.v1"
    assert tags(nlp) == expected
    nlp.remove_pipe("elmo")  # the tagger now carries its own biLM
    assert tags(nlp) == expected


# ---------------------------------------------------------------- dropout


def test_listener_mix_dropout_is_its_own_rate_not_spacys():
    layers = [np.ones((3, 400, 4), dtype=np.float32)]
    for rate, global_rate, expected_zeros in ((0.0, 0.9, 0.0), (0.5, 0.0, 0.5)):
        model = ScalarMix_v1(dropout=rate)
        model.initialize(X=layers)
        set_dropout_rate(model, global_rate)  # what nlp.update(drop=...) does to every node
        out, _ = model.begin_update(layers)
        assert float((out[0] == 0).mean()) == pytest.approx(expected_zeros, abs=0.06)
    nlp = elmo_tagger(tagger=tagger_config(listener(mix={"@architectures": "spacy-elmo.ScalarMix.v1", "dropout": 0.0})))
    train(nlp, steps=1)
    tok2vec = nlp.get_pipe("tagger").model.get_ref("tok2vec")
    mixed = []
    original = tok2vec.get_ref("mix")._func
    tok2vec.get_ref("mix")._func = lambda m, X, is_train: (lambda r: (mixed.append(r[0]), r)[1])(original(m, X, is_train))
    nlp.update(examples(nlp), drop=0.9)  # spaCy's global dropout leaves the mix alone
    assert mixed and all(float((m == 0).mean()) == 0.0 for m in mixed[0])


# ---------------------------------------------------------------- the biLM's bytes and loss


def test_bilm_shim_bytes_carry_their_settings():
    import srsly

    from spacy_elmo.layers.bilm_model import BiLMShim, build_bilm_model, configure_bilm_model, get_shim

    model = build_bilm_model(weights=str(ALLENNLP), token_cache_size=7)
    configure_bilm_model(model, frozen=False, grad_factor=0.25)
    data = get_shim(model).to_bytes()
    fresh = BiLMShim().from_bytes(data)  # a shim with every default: frozen, cache 0, factor 1
    assert (fresh.weights, fresh.frozen, fresh.precision, fresh.token_cache_size, fresh.grad_factor) == (str(ALLENNLP), False, "float32", 7, 0.25)
    assert all(p.requires_grad for p in fresh.bilm.parameters()) and fresh.bilm.token_cache is None
    configure_bilm_model(model, frozen=True, precision="bfloat16")
    fresh = BiLMShim().from_bytes(get_shim(model).to_bytes())
    assert fresh.frozen and fresh.precision == "bfloat16" and fresh.bilm.inference_precision == "bfloat16"
    assert next(fresh.bilm.parameters()).dtype == torch.float32  # bf16 products on cached copies; weights stay float32
    assert fresh.bilm.token_cache is not None
    msg = srsly.msgpack_loads(data)
    del msg["settings"]["precision"], msg["settings"]["frozen"]
    with pytest.raises(ValueError, match="lack settings.frozen, settings.precision"):
        BiLMShim().from_bytes(srsly.msgpack_dumps(msg))
    with pytest.raises(ValueError, match="lack bilm"):
        BiLMShim().from_bytes(srsly.msgpack_dumps({"settings": msg["settings"]}))
    with pytest.raises(ValueError, match="cannot be read|hold no 'settings'"):
        BiLMShim().from_bytes(b"not msgpack at all")


def test_a_frozen_biLM_has_no_loss_column(capsys):
    nlp = elmo_tagger()
    assert not nlp.get_pipe("elmo").is_trainable
    _, losses = train(nlp, steps=1)
    assert set(losses) == {"tagger"}
    setup = spacy.util.registry.loggers.get("spacy.ConsoleLogger.v3")()
    setup(nlp)  # prints the table header spacy train shows
    header = capsys.readouterr().out.upper()
    assert "LOSS TAGGER" in header and "LOSS ELMO" not in header
    tuned = elmo_tagger({"frozen": False})
    assert tuned.get_pipe("elmo").is_trainable
    _, losses = train(tuned, steps=2)
    assert losses["elmo"] > 0.0
    setup(tuned)
    assert "LOSS ELMO" in capsys.readouterr().out.upper()
