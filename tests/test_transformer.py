"""AllenNLP's transformer ELMo: read exactly from its archive, and accepted everywhere weights are.

The reference outputs (tests/data/trf/reference.npz) were computed by allennlp-models 2.10.1's own
``BidirectionalLanguageModelTokenEmbedder`` (and its ``load_archive``, ``ELMoTokenCharactersIndexer``)
on the random archives that ``spacy_elmo.hub.trf_random`` writes, seeded: tests/data/trf/
make_reference.py, run once in a private environment with allennlp installed; the package is not
needed here. Two shapes, the two config shapes (2.x ``language_model``, 2019's
``bidirectional-language-model``) and the two torch weight formats (zip, pre-1.6)."""

from __future__ import annotations

import importlib.util
import io
import json
import pickle
import tarfile
from collections import OrderedDict
from pathlib import Path

import numpy as np
import pytest
import spacy
import torch

from spacy_elmo import WeightsError, load_bilm
from spacy_elmo.bilm.scalar_mix import ScalarMix
from spacy_elmo.bilm.transformer import Rows, TransformerBiLM, TransformerContext, attention_groups
from spacy_elmo.bilm.trf_folder import load_trf, trf_options
from spacy_elmo.cli import main
from spacy_elmo.hub import download, first_seen, published, trf_archive
from spacy_elmo.hub.load import read_config
from spacy_elmo.hub.trf_random import archive_settings, random_archive_state, write_random_trf
from spacy_elmo.training.lm import BiLMLanguageModel

from .conftest import REPO
from .loopback_http import LoopbackServer

REFERENCE = REPO / "tests" / "data" / "trf" / "reference.npz"

def _cases():
    spec = importlib.util.spec_from_file_location("trf_cases", REPO / "tests" / "data" / "trf" / "cases.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.SENTENCES, module.CASES


SENTENCES, CASES = _cases()  # as make_reference.py wrote them
MODEL = published.PUBLISHED["elmo-transformer"]


@pytest.fixture(scope="module")
def reference():
    return np.load(REFERENCE)


def layers_of(model: TransformerBiLM, sentences=SENTENCES) -> np.ndarray:
    with torch.no_grad():
        return model.forward(model.token_batch(sentences), boundaries=False).numpy()


@pytest.mark.parametrize("shape,config_shape,legacy,seed", CASES)
def test_every_layer_and_the_default_mix_match_allennlp_models(tmp_path, reference, shape, config_shape, legacy, seed):
    folder = write_random_trf(tmp_path / shape, shape, config_shape, seed=seed, legacy=legacy)
    model = load_trf(folder)
    key = f"{shape}_{config_shape}"
    for dtype, tolerance in (("float64", 1e-6), ("float32", 1e-4)):
        ours = layers_of(model.double() if dtype == "float64" else model.float())
        theirs, mix = reference[f"{key}/{dtype}/layers"], reference[f"{key}/{dtype}/mix"]
        assert ours.shape[0] == theirs.shape[0] == model.n_output_layers
        mixer = ScalarMix(model.n_output_layers).to(torch.float64 if dtype == "float64" else torch.float32)
        with torch.no_grad():
            ours_mix = mixer(torch.from_numpy(ours)).numpy()  # the default mix: softmax of zeros, gamma 1
        for row, length in enumerate(reference["lengths"]):
            for layer in range(len(theirs)):
                np.testing.assert_allclose(ours[layer, row, :length], theirs[layer, row, :length], rtol=0, atol=tolerance)
            np.testing.assert_allclose(ours_mix[row, :length], mix[row, :length], rtol=0, atol=tolerance)
            assert not ours[:, row, length:].any()  # padding and </S> are zeros


def test_the_archive_and_its_folder_read_alike_and_convert_once(tmp_path, monkeypatch):
    monkeypatch.setenv(published.CACHE_ENV, str(tmp_path / "cache"))
    archive = write_random_trf(tmp_path / "m.tar.gz", "tiny", seed=3)
    folder = write_random_trf(tmp_path / "m", "tiny", seed=3)
    a, b = load_bilm(str(archive)), load_bilm(str(folder))
    assert isinstance(a, TransformerBiLM) and not a.training
    np.testing.assert_array_equal(layers_of(a), layers_of(b))
    assert read_config(str(archive)).n_layers == read_config(str(folder)).n_layers == 2
    monkeypatch.setattr(trf_archive, "convert_trf", lambda *a, **k: pytest.fail("converted twice"))
    np.testing.assert_array_equal(layers_of(load_bilm(str(archive))), layers_of(a))


def test_batch_independence_and_determinism(tmp_path):
    model = load_trf(write_random_trf(tmp_path / "m", "small", seed=5))
    together = model.embed_sentences(SENTENCES, batch_size=4)
    for sentence, batched in zip(SENTENCES, together):
        alone = model.embed_batch([sentence])[0]
        np.testing.assert_allclose(alone, batched, rtol=0, atol=1e-5)
    again = model.embed_sentences(SENTENCES, batch_size=4)
    assert all(np.array_equal(x, y) for x, y in zip(together, again))
    model.set_inference_precision("bfloat16")  # the products in bfloat16: close to float32, batch-independent alike
    low = model.embed_sentences(SENTENCES, batch_size=4)
    for sentence, batched, exact in zip(SENTENCES, low, together):
        np.testing.assert_allclose(model.embed_batch([sentence])[0], batched, rtol=0, atol=1e-5)
        cos = (batched * exact).sum(-1) / np.linalg.norm(batched, axis=-1) / np.linalg.norm(exact, axis=-1)
        assert cos.min() > 0.99 and not np.array_equal(batched[1:], exact[1:])
        assert cos[0].min() > 0.999 and not np.array_equal(batched[0], exact[0])  # the token encoder's products in bfloat16 too
    model.set_inference_precision("float32")
    assert all(np.array_equal(x, y) for x, y in zip(model.embed_sentences(SENTENCES, batch_size=4), together))
    with pytest.raises(ValueError, match="carries no state"):
        TransformerBiLM(model.config, stateful=True)
    lm = BiLMLanguageModel(model, 10)  # trainable (tests/test_transformer_training.py); its state holds each tensor once
    assert set(lm.state_dict()) == {f"bilm.{k}" for k in model.state_dict()} | {"softmax.weight", "softmax.bias"}


def test_blocks_run_over_the_real_positions_only():
    """The blocks' products read the real positions packed; padding comes back as zeros, finite
    (a padded query sees every key, so no attention row is empty), and never moves a real position."""
    real = torch.tensor([[True, True, False], [True, False, False]])
    rows = Rows([2, 1], 3, torch.device("cpu"))
    x = torch.arange(18.0).view(2, 3, 3)
    assert rows.pack(x).shape == (3, 3)
    assert torch.equal(rows.unpack(rows.pack(x)), x * real.unsqueeze(-1))
    lengths = [3, 9, 1, 4, 9, 2, 7, 5, 6, 8, 2, 3]  # two attention groups, each as wide as its longest sentence
    rows = Rows(lengths, 9, torch.device("cpu"))
    packed = torch.randn(sum(lengths), 5)
    groups = rows.gather(packed)
    assert [g.shape[:2] for g in groups] == [(8, 9), (4, 3)]  # 9 9 8 7 6 5 4 3, then 3 2 2 1
    assert torch.equal(rows.scatter(groups), packed)
    for group, mask in zip(groups, rows.masks(backward=True)):
        assert mask.shape == (group.shape[0], 1, group.shape[1], group.shape[1]) and mask.any(-1).all()
    # similar lengths (training's buckets) stay one group; a group closes only once it holds 8
    assert attention_groups(sorted(range(20, 27), reverse=True) * 20) == [range(0, 140)]
    assert attention_groups([50] * 8 + [10] * 9) == [range(0, 8), range(8, 17)]
    assert attention_groups([50] * 7 + [10] * 9) == [range(0, 8), range(8, 16)]  # the eighth joins the long ones
    context = TransformerContext(2, 16, 32, 4, 10)
    context.init_for_training()
    tokens = torch.randn(3, 6, 16)
    with torch.no_grad():
        layers = context(tokens, torch.tensor([6, 2, 4]))
        alone = context(tokens[1:2, :2], torch.tensor([2]))
    for layer, single in zip(layers, alone):
        assert torch.isfinite(layer).all() and not layer[1, 2:].any() and not layer[2, 4:].any()
        torch.testing.assert_close(layer[1:2, :2], single, rtol=0, atol=1e-6)


def test_bfloat16_blocks_read_weight_copies_made_once(tmp_path):
    """bfloat16 inference multiplies bfloat16 copies of the blocks' weights, made once and remade
    only when a weight changes (not a cast per product, as autocast would)."""
    model = load_trf(write_random_trf(tmp_path / "m", "tiny", seed=5))
    model.set_inference_precision("bfloat16")
    first = model.embed_sentences(SENTENCES, batch_size=2)
    copies = model._bf16.linears
    assert copies.conversions == 1 and len(SENTENCES) > 2  # several batches, one conversion
    with torch.no_grad():
        model.transformer.forward_stack.blocks[0].ff_in.weight.mul_(2.0)
    second = model.embed_sentences(SENTENCES, batch_size=2)
    assert copies.conversions == 2
    assert not all(np.array_equal(x, y) for x, y in zip(first, second))


def test_int8_runs_every_linear_in_int8_batch_independent_and_close_to_float32(tmp_path, monkeypatch):
    """int8: the blocks' linears on the integer units (each activation row quantized on its own), the
    rest float32; as close to float32 as the LSTM's int8, batch-independent, deterministic, and gone
    when float32 is asked for again or when autograd runs (training never sees it)."""
    from spacy_elmo.kernels import cpu, int8

    if cpu.int8_path() is None or not hasattr(torch.ops.onednn, "qlinear_pointwise"):
        pytest.skip("this CPU or torch has no int8 path")
    model = load_trf(write_random_trf(tmp_path / "m", "small", seed=5))
    exact = model.embed_sentences(SENTENCES, batch_size=4)
    calls = []
    real_linear = int8.linear
    monkeypatch.setattr(int8, "linear", lambda x, w, levels=None: calls.append(tuple(x.shape)) or real_linear(x, w, levels))
    model.set_inference_precision("int8")
    with pytest.raises(ValueError, match="TransformerBiLM"):  # its int8 copies are remade from the float32 weights
        model.release_float_products()
    low = model.embed_sentences(SENTENCES, batch_size=4)
    n_linears = sum(isinstance(m, torch.nn.Linear) for m in model.transformer.modules())
    # one batch: every linear in int8, the query, key and value as one product (4 products a block, 6 linears)
    assert n_linears == 2 * 6 * model.config.n_layers and len(calls) == 2 * 4 * model.config.n_layers
    for sentence, batched, reference in zip(SENTENCES, low, exact):
        np.testing.assert_allclose(model.embed_batch([sentence])[0], batched, rtol=0, atol=1e-5)
        np.testing.assert_array_equal(batched[0], reference[0])  # the token encoder stays float32
        cos = (batched * reference).sum(-1) / np.linalg.norm(batched, axis=-1) / np.linalg.norm(reference, axis=-1)
        assert cos.min() > 0.99 and not np.array_equal(batched[1:], reference[1:])
    assert all(np.array_equal(x, y) for x, y in zip(model.embed_sentences(SENTENCES, batch_size=4), low))
    calls.clear()
    with torch.enable_grad():  # autograd (training) runs float32 whatever the inference precision
        model(model.token_batch(SENTENCES[:2]))
    assert calls == []
    linears = int8.QuantizedLinears(model.transformer, int8.Int8LinearCache(), int8.activation_levels())
    with torch.enable_grad(), pytest.raises(ValueError, match="for inference"):
        model.transformer(torch.zeros(1, 3, model.config.projection_dim), torch.tensor([3]), linears)
    model.set_inference_precision("float32")
    assert all(np.array_equal(x, y) for x, y in zip(model.embed_sentences(SENTENCES, batch_size=4), exact))


def test_transformer_state_and_statefulness(tmp_path):
    model = load_trf(write_random_trf(tmp_path / "m", "tiny", seed=5))
    with pytest.raises(ValueError, match="carries no state"):
        TransformerBiLM(model.config, stateful=True)
    lm = BiLMLanguageModel(model, 10)  # trainable (tests/test_transformer_training.py); its state holds each tensor once
    assert set(lm.state_dict()) == {f"bilm.{k}" for k in model.state_dict()} | {"softmax.weight", "softmax.bias"}


def settings_with(change) -> dict:
    settings = archive_settings("tiny")
    change(settings)
    return settings


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda s: s["model"].update(trainable_softmax=True), "model holds 'trainable_softmax'.*does not know"),
        (lambda s: s["model"]["contextualizer"].update(num_heads=4), "contextualizer holds 'num_heads'"),
        (lambda s: s["model"].update(bidirectional=False), "model.bidirectional is False"),
        (lambda s: s["model"].update(type="masked_language_model"), "not a transformer ELMo"),
        (lambda s: s["model"]["text_field_embedder"]["token_embedders"]["token_characters"]["encoder"].update(projection_location="after_cnn"), "after_highway"),
        (lambda s: s["dataset_reader"]["token_indexers"]["token_characters"].update(type="characters"), "elmo_characters"),
        (lambda s: s.update(command="rm -rf /"), "the configuration holds 'command'"),
    ],
)
def test_the_configuration_is_read_as_data_and_what_it_does_not_know_is_refused(change, message):
    with pytest.raises(WeightsError, match=message) as info:
        trf_options(settings_with(change))
    assert "\n" not in str(info.value)


class Payload:
    def __reduce__(self):
        return (print, ("this must never run",))


def write_folder(tmp_path: Path, state) -> Path:
    folder = write_random_trf(tmp_path / "m", "tiny")
    torch.save(state, folder / "weights.th")
    return folder


def test_only_tensors_are_loaded_from_weights_th(tmp_path):
    state = random_archive_state("tiny")
    bad = OrderedDict(state, extra=Payload())
    folder = write_folder(tmp_path, bad)
    with pytest.raises(WeightsError, match="refused") as info:
        load_trf(folder)
    assert "\n" not in str(info.value)
    (folder / "weights.th").write_bytes(pickle.dumps({"a": Payload()}))
    with pytest.raises(WeightsError):
        load_trf(folder)
    state2 = OrderedDict(state)
    state2["_contextualizer._forward_transformer.layers.9.norm.gamma"] = torch.ones(16)
    with pytest.raises(WeightsError, match="holds unexpected .*layers.9"):
        load_trf(write_folder(tmp_path / "x", state2))
    del state2["_contextualizer._forward_transformer.layers.9.norm.gamma"], state2["_contextualizer._forward_transformer.norm.beta"]
    with pytest.raises(WeightsError, match="lacks .*_forward_transformer.norm.beta"):
        load_trf(write_folder(tmp_path / "y", state2))


def test_an_archive_with_a_link_is_refused_before_anything_is_unpacked(tmp_path, monkeypatch):
    monkeypatch.setenv(published.CACHE_ENV, str(tmp_path / "cache"))
    target = tmp_path / "bad.tar.gz"
    with tarfile.open(target, "w:gz") as handle:
        for name in ("config.json", "weights.th"):
            info = tarfile.TarInfo(name)
            data = json.dumps(archive_settings("tiny")).encode() if name == "config.json" else b""
            info.size = len(data)
            handle.addfile(info, io.BytesIO(data))
        link = tarfile.TarInfo("vocabulary")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc"
        handle.addfile(link)
    with pytest.raises(WeightsError, match="'vocabulary' is a link: refused"):
        load_bilm(str(target))


@pytest.fixture()
def mirror(tmp_path, monkeypatch):
    """A random-weights archive served where a mirror keeps elmo-transformer's archive."""
    root = tmp_path / "served"
    write_random_trf(root / (MODEL.mirror_path + MODEL.archive), "tiny", seed=4)
    server = LoopbackServer(root)
    monkeypatch.setenv(published.MIRROR_ENV, server.url)
    monkeypatch.setenv(published.CACHE_ENV, str(tmp_path / "cache"))
    yield server
    server.close()


def test_the_published_name_downloads_records_its_digest_and_converts_once(mirror, monkeypatch, tmp_path):
    assert MODEL.format == "allennlp-transformer" and MODEL.shape is None and MODEL.sha256 == {} and MODEL.download_size is None
    monkeypatch.delenv(published.MIRROR_ENV)
    assert MODEL.url(MODEL.archive) == published.PUBLISHED_BASE + "models/transformer-elmo-2019.01.10.tar.gz"
    monkeypatch.setenv(published.MIRROR_ENV, mirror.url)
    bilm = load_bilm("elmo-transformer")
    served = mirror.root / (MODEL.mirror_path + MODEL.archive)
    np.testing.assert_array_equal(layers_of(bilm), layers_of(load_trf(write_random_trf(tmp_path / "same", "tiny", seed=4))))
    import hashlib

    digest = hashlib.sha256(served.read_bytes()).hexdigest()
    assert first_seen.first_seen(MODEL)[MODEL.archive]["sha256"] == digest
    assert read_config("elmo-transformer").n_layers == 2
    requests = len(mirror.log)
    monkeypatch.setattr(trf_archive, "convert_trf", lambda *a, **k: pytest.fail("converted twice"))
    load_bilm("elmo-transformer")
    assert len(mirror.log) == requests and download.is_cached("elmo-transformer")
    from spacy_elmo.hub.lm_head import load_lm_head

    assert load_lm_head("elmo-transformer", download=False).weight.shape == (11, 16)  # the softmax kept by the conversion


def test_the_component_embed_and_a_listener_take_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(published.CACHE_ENV, str(tmp_path / "cache"))
    archive = str(write_random_trf(tmp_path / "m.tar.gz", "tiny", seed=6))
    text = "The bank of the river ."
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": archive})
    doc = nlp(text)
    bilm = load_bilm(archive)
    layers = bilm.embed_batch([[t.text for t in doc]])[0]
    assert doc.tensor.shape == (6, 32)
    np.testing.assert_allclose(doc.tensor, layers.mean(0), rtol=0, atol=1e-5)  # the default mix
    nlp.to_disk(tmp_path / "pipeline")  # the biLM travels inside the pipeline
    again = spacy.load(tmp_path / "pipeline")
    assert isinstance(again.get_pipe("elmo").bilm, TransformerBiLM)
    np.testing.assert_array_equal(again(text).tensor, doc.tensor)
    capsys.readouterr()
    assert main(["embed", text, "--weights", archive, "--mix", "top"]) == 0
    assert capsys.readouterr().out.strip()
    from spacy.training import Example

    tagger = spacy.blank("en")
    tagger.add_pipe("elmo", config={"weights": archive, "set_hooks": False})
    listener = {"@architectures": "spacy-elmo.ElmoListener.v1", "width": 16, "mix": {"@architectures": "spacy-elmo.ScalarMix.v1", "init": "top"}}
    tagger.add_pipe("tagger", config={"model": {"@architectures": "spacy.Tagger.v2", "tok2vec": listener}})
    egs = [Example.from_dict(tagger.make_doc(t), {"tags": g}) for t, g in (("The bank lends money .", ["D", "N", "V", "N", "."]), ("A dog ran .", ["D", "N", "V", "."]))]
    optimizer = tagger.initialize(lambda: egs)
    first = tagger.update(egs, sgd=optimizer)["tagger"]
    for _ in range(10):
        last = tagger.update(egs, sgd=optimizer)["tagger"]
    assert last < first


def test_the_archives_softmax_is_its_lm_head(tmp_path, monkeypatch):
    from spacy_elmo.hub.lm_head import load_lm_head
    from spacy_elmo.hub.trf_random import WORDS

    monkeypatch.setenv(published.CACHE_ENV, str(tmp_path / "cache"))
    archive = write_random_trf(tmp_path / "m.tar.gz", "tiny", seed=8)
    state = random_archive_state("tiny", seed=8)
    vocab, weight, bias = load_lm_head(str(archive))
    # their loss reads row r for vocabulary id r + 1 (id 0: padding), line r of tokens.txt
    assert list(vocab) == ["@@UNKNOWN@@", *WORDS]
    assert torch.equal(weight, state["_softmax_loss.softmax_w"][: len(vocab)])
    assert torch.equal(bias, state["_softmax_loss.softmax_b"][: len(vocab)])


def test_induce_change_and_embed_corpus_take_it(tmp_path, monkeypatch):
    """The sense and corpus commands read a transformer ELMo archive through the one biLM interface:
    `induce` and `change` (the archive's softmax as their LM head) and `embed-corpus`, whose
    output is the biLM's own layers. Three blocks (four layers, not the LSTM's three): the default
    mix is the average of the contextual layers whatever their number."""
    monkeypatch.setenv(published.CACHE_ENV, str(tmp_path / "cache"))
    archive = str(write_random_trf(tmp_path / "m.tar.gz", "small", seed=6))
    lines = ["The bank of the river flooded .", "She sat on the bank and watched the water .", "The bank raised its rates .", "He went to the bank to get money ."]
    (tmp_path / "a.txt").write_text("\n".join(lines * 4) + "\n")
    (tmp_path / "b.txt").write_text("\n".join(list(reversed(lines)) * 4) + "\n")
    assert main(["induce", str(tmp_path / "a.txt"), "--words", "bank", "--weights", archive, "--out", str(tmp_path / "ind"), "--min-occurrences", "3"]) == 0
    senses = json.loads((tmp_path / "ind" / "bank.json").read_text())
    assert senses["word"] == "bank" and len(senses["occurrences"]) == 16
    out = tmp_path / "ch"
    assert main(["change", str(tmp_path / "a.txt"), str(tmp_path / "b.txt"), "--words", "bank", "--weights", archive, "--out", str(out), "--min-occurrences", "3", "--no-pages"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert [w["word"] for w in report["words"]] == ["bank"] and report["words"][0]["p_value"] is not None
    assert main(["embed-corpus", str(tmp_path / "a.txt"), str(tmp_path / "ec.hdf5"), "--weights", archive]) == 0
    h5py = pytest.importorskip("h5py")
    with h5py.File(tmp_path / "ec.hdf5", "r") as data:  # AllenNLP's layout: line i -> [layers, tokens, dim]
        first = data["0"][()]
    np.testing.assert_allclose(first, load_bilm(archive).embed_batch([lines[0].split()])[0], rtol=0, atol=1e-5)
