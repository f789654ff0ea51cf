"""A saved pipeline carries its biLM: it loads once `weights` names nothing, decided from the saved
folder's own files, whatever its config says (no `bilm_carried`: saved by an earlier release;
`bilm_carried = false`: saved before anything loaded the biLM)."""
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import spacy
from spacy.lang.en import English

from spacy_elmo import WeightsError

from .conftest import ALLENNLP

PREVIOUS = Path(__file__).parent / "data" / "pipeline-previous-release"  # saved by the release before bilm_carried
TEXT = "The bank raised its rates. We sat on the bank of the river."


def refuse_loads(monkeypatch):
    """Make any load of a biLM from a ``weights`` setting fail the test: the saved one must be used."""
    import spacy_elmo.layers.bilm_model as bilm_model

    def refuse(weights):
        raise AssertionError(f"the biLM was loaded from its weights setting {weights!r}")

    monkeypatch.setattr(bilm_model, "load_configured_bilm", refuse)


def test_a_pipeline_saved_by_the_previous_release_loads_without_its_weights(tmp_path, monkeypatch):
    # before: WeightsError "elmo: config weights: ELMo weights not found: 'weights-removed-after-save' does not exist"
    config = (PREVIOUS / "pipeline" / "config.cfg").read_text()
    assert "bilm_carried" not in config and 'weights = "weights-removed-after-save"' in config
    monkeypatch.chdir(tmp_path)  # the relative weights folder names nothing here
    refuse_loads(monkeypatch)
    nlp = spacy.load(PREVIOUS / "pipeline")
    expected = json.loads((PREVIOUS / "expected.json").read_text())
    doc = nlp(expected["text"])
    assert [t.text for t in doc] == expected["tokens"]
    assert np.allclose(doc._.elmo_vectors, np.asarray(expected["elmo_vectors"], dtype=np.float32), atol=1e-6, rtol=0)
    assert np.allclose(doc._.elmo_layers, np.asarray(expected["elmo_layers"], dtype=np.float32), atol=1e-6, rtol=0)
    assert nlp.config["components"]["elmo"]["bilm_carried"] is True  # saved again, its config says so
    nlp.initialize()  # keeps the restored biLM
    assert np.array_equal(nlp(expected["text"])._.elmo_vectors, doc._.elmo_vectors)


def saved_before_use(tmp_path):
    """``add_pipe`` + ``to_disk`` with nothing loaded before: the config file says ``bilm_carried = false``.
    Returns ``(pipeline folder, vectors of TEXT)``; the weights folder is gone afterwards."""
    weights = tmp_path / "weights"
    shutil.copytree(ALLENNLP, weights)
    nlp = spacy.blank("en")
    elmo = nlp.add_pipe("elmo", config={"weights": str(weights), "mix": [1, 2, 3]})
    assert not elmo.loaded
    nlp.to_disk(tmp_path / "pipeline")
    assert "bilm_carried = false" in (tmp_path / "pipeline" / "config.cfg").read_text()
    expected = np.asarray(nlp(TEXT)._.elmo_vectors)
    shutil.rmtree(weights)
    return tmp_path / "pipeline", expected


@pytest.mark.parametrize("how", ["spacy.load", "from_config with the saved meta"])
def test_a_pipeline_saved_without_initialize_loads_without_its_weights(tmp_path, monkeypatch, how):
    # before: WeightsError "elmo: config weights: ELMo weights not found" (the config was written before the biLM)
    path, expected = saved_before_use(tmp_path)
    refuse_loads(monkeypatch)
    if how == "spacy.load":
        nlp = spacy.load(path)
    else:  # as docs/configuration.md shows
        meta = json.loads((path / "meta.json").read_text())
        nlp = English.from_config(spacy.util.load_config(path / "config.cfg"), meta=meta).from_disk(path)
    assert nlp.get_pipe("elmo").loaded
    assert np.array_equal(np.asarray(nlp(TEXT)._.elmo_vectors), expected)


@pytest.mark.parametrize("damage", ["weights removed", "weights changed", "model folder removed"])
def test_a_saved_folder_that_does_not_carry_its_biLM_is_one_error_naming_it_and_the_weights(tmp_path, damage):
    path, _ = saved_before_use(tmp_path)
    model = path / "elmo" / "model"
    if damage == "weights removed":
        (model / "weights.pt").unlink()
    elif damage == "weights changed":
        with open(model / "weights.pt", "ab") as handle:  # no longer the size its record holds
            handle.write(b"\0" * 16)
    else:
        shutil.rmtree(model)
    with pytest.raises(WeightsError) as caught:
        spacy.load(path)
    message = str(caught.value)
    assert message.startswith("elmo: the saved pipeline does not carry its biLM (") and "\n" not in message
    assert str(model) in message and f"config weights: ELMo weights not found: '{tmp_path / 'weights'}' does not exist" in message


def test_components_added_to_a_loaded_pipeline_still_check_their_weights_at_creation(tmp_path):
    path, _ = saved_before_use(tmp_path)
    nlp = spacy.load(path)
    with pytest.raises(WeightsError, match="^elmo: config weights: .*does not exist"):
        nlp.add_pipe("elmo", name="other", config={"weights": str(tmp_path / "missing")})
    nlp.remove_pipe("elmo")  # the saved meta still names "elmo": the pipeline is restored already
    with pytest.raises(WeightsError, match="^elmo: config weights: .*does not exist"):
        nlp.add_pipe("elmo", config={"weights": str(tmp_path / "missing")})


def test_a_pipeline_built_from_a_saved_meta_but_never_restored_names_the_weights_at_first_use(tmp_path):
    # built as spacy.load builds it (the saved meta), without the from_disk that follows: the
    # check at creation is deferred, and the first use loads from `weights`, with the same error
    path, _ = saved_before_use(tmp_path)
    config = spacy.util.load_config(path / "config.cfg")
    meta = json.loads((path / "meta.json").read_text())
    nlp = spacy.util.load_model_from_config(config, meta=meta)
    with pytest.raises(WeightsError, match="^elmo: config weights: ELMo weights not found: .* does not exist"):
        nlp(TEXT)
