"""ELMoForManyLangs models: the authors' folder read exactly, converted once, refused when unsafe,
and run by the component. Parity with their package is checked against the outputs it gave on the
stored fixture (tests/data/efml, written by bench/parity.py efml --write-fixture): the package
itself is never needed here."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import spacy
import torch
from spacy.tokens import Doc

from spacy_elmo import WeightsError, load_bilm
from spacy_elmo.bilm.characters import TokenBatch
from spacy_elmo.bilm.efml import EfmlBiLM, EfmlTokenBatch
from spacy_elmo.bilm.efml_folder import (
    RECORD_NAME,
    convert_efml,
    efml_config,
    find_model_config,
    load_efml,
    load_tensors,
    read_lexicon,
)
from spacy_elmo.bilm.weights import load_native, save_native
from spacy_elmo.hub.efml import converted_folder, efml_native_folder
from spacy_elmo.hub.efml_random import write_random_efml
from spacy_elmo.hub.load import read_config
from spacy_elmo.layers.bilm_model import bilm_from_bytes, bilm_to_bytes

REPO = Path(__file__).resolve().parent.parent
FIXTURE = REPO / "tests" / "data" / "efml"

TINY = {
    "encoder": {"name": "elmo", "projection_dim": 6, "cell_clip": 3, "proj_clip": 3, "dim": 24, "n_layers": 2},
    "token_embedder": {
        "name": "cnn",
        "activation": "relu",
        "filters": [[1, 4], [2, 4], [3, 8]],
        "n_highway": 1,
        "word_dim": 3,
        "char_dim": 4,
        "max_characters_per_token": 12,
    },
    "dropout": 0.1,
}
SENTENCES = [
    ["Grüße", "aus", "Köln", "!"],
    ["Привет", "мир", "."],
    ["北京", "欢迎", "你", "。"],
    ["مرحبا", "بالعالم"],
    [],
    ["averyveryverylongword", "<bos>", "<S>", "", "☃"],
]
CHARS = sorted(set("GrüßeausKöln!Приветмир.北京欢迎你。مرحبا") - set("ü"))
WORDS = ["aus", "Köln", "мир", "北京", "مرحبا", "averyveryv"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return write_random_efml(tmp_path_factory.mktemp("efml") / "model", TINY, chars=CHARS, words=WORDS, seed=5)


@pytest.fixture(scope="module")
def model(folder):
    return load_efml(folder)


def test_stored_reference_outputs_are_matched_in_float64():
    """Their package's own float64 outputs (every layer, and the average) on the fixture's text:
    four scripts, unknown characters and words, words past the limit, mixed lengths."""
    sentences = json.loads((FIXTURE / "sentences.json").read_text(encoding="utf-8"))
    bilm = load_bilm(str(FIXTURE / "model")).double()
    every = bilm.sents2elmo(sentences, output_layer=-2)
    average = bilm.sents2elmo(sentences, output_layer=-1)
    with np.load(FIXTURE / "reference.npz") as ref:
        assert len(sentences) >= 40 and any(len(s) > 100 for s in sentences) and [] in sentences
        for i, sentence in enumerate(sentences):
            theirs = ref[f"all/{i}"]
            assert theirs.dtype == np.float64 and every[i].shape == theirs.shape == (3, len(sentence), 8)
            assert np.abs(every[i] - theirs).max(initial=0.0) < 1e-6, i
            if sentence:  # their average fails on an empty sentence: none stored
                assert np.abs(average[i] - ref[f"avg/{i}"]).max() < 1e-6, i
        assert sum(1 for key in ref.files if key.startswith("all/")) == len(sentences)


def test_the_fixture_is_their_folder_layout_and_small():
    names = sorted(p.name for p in (FIXTURE / "model").iterdir())
    assert names == ["char.dic", "config.json", "encoder.pkl", "model_config.json", "token_embedder.pkl", "word.dic"]
    assert sum(p.stat().st_size for p in FIXTURE.rglob("*") if p.is_file()) < 1_000_000


def test_load_bilm_reads_the_authors_folder_through_one_conversion(folder, model, monkeypatch):
    first = load_bilm(str(folder))
    assert isinstance(first, EfmlBiLM)
    converted = converted_folder(folder)
    record = json.loads((converted / RECORD_NAME).read_text())
    assert record["source"] == str(folder.resolve())
    for name in ("config.json", "model_config.json", "char.dic", "word.dic", "encoder.pkl", "token_embedder.pkl"):
        assert record["files"][name]["sha256"] == hashlib.sha256((folder / name).read_bytes()).hexdigest()
    ours, direct = first.embed_sentences(SENTENCES), model.embed_sentences(SENTENCES)
    assert all(np.array_equal(a, b) for a, b in zip(ours, direct))

    import spacy_elmo.hub.efml as hub_efml

    def no_conversion(*args, **kwargs):
        raise AssertionError("converted again")

    monkeypatch.setattr(hub_efml, "convert_efml", no_conversion)
    again = load_bilm(str(folder)).embed_sentences(SENTENCES)  # read from the cache
    assert all(np.array_equal(a, b) for a, b in zip(ours, again))


def test_a_changed_source_file_is_converted_again(tmp_path):
    source = write_random_efml(tmp_path / "m", TINY, chars=CHARS, words=WORDS, seed=1)
    before = load_bilm(str(source)).embed_sentences(SENTENCES)
    write_random_efml(source, TINY, chars=CHARS, words=WORDS, seed=2)  # new weights in the same folder
    stamp = os.stat(source / "encoder.pkl").st_mtime_ns + 10**9
    os.utime(source / "encoder.pkl", ns=(stamp, stamp))  # a later change time, even on coarse clocks
    after = load_bilm(str(source)).embed_sentences(SENTENCES)
    assert not np.allclose(before[0], after[0])
    assert np.array_equal(after[0], load_efml(source).embed_sentences(SENTENCES)[0])


def test_read_config_and_checks_read_no_weights(tmp_path):
    source = write_random_efml(tmp_path / "m", TINY, chars=CHARS, words=WORDS, seed=1)
    config = read_config(str(source))
    assert (config.n_layers, config.projection_dim, config.lstm_dim) == (2, 6, 24)
    nlp = spacy.blank("xx")
    nlp.add_pipe("elmo", config={"weights": str(source)})  # checked at creation, not loaded
    assert not converted_folder(source).exists()
    (source / "encoder.pkl").unlink()
    with pytest.raises(WeightsError, match="lacks encoder.pkl"):
        spacy.blank("xx").add_pipe("elmo", config={"weights": str(source)})


def test_the_component_on_the_authors_folder(folder, model, tmp_path):
    nlp = spacy.blank("xx")
    nlp.add_pipe("elmo", config={"weights": str(folder), "mix": "average"})
    words = ["Grüße", "aus", "Köln", "!"]
    doc = nlp(Doc(nlp.vocab, words=words))
    raw = model.embed_sentences([words])[0]
    assert np.allclose(doc._.elmo_layers, raw, atol=1e-6)
    assert np.allclose(doc.tensor, raw.mean(0), atol=1e-5)  # their output_layer=-1
    nlp.to_disk(tmp_path / "pipeline")
    loaded = spacy.load(tmp_path / "pipeline")
    assert isinstance(loaded.get_pipe("elmo").bilm, EfmlBiLM)
    again = loaded(Doc(loaded.vocab, words=words))
    assert np.array_equal(again._.elmo_layers, doc._.elmo_layers)


def test_native_save_and_bytes_keep_the_lexicons(model, tmp_path):
    save_native(model, tmp_path / "native")
    restored = load_native(tmp_path / "native")
    from_bytes = bilm_from_bytes(bilm_to_bytes(model))
    expected = model.embed_sentences(SENTENCES)
    for other in (restored, from_bytes):
        assert isinstance(other, EfmlBiLM)
        assert all(np.array_equal(a, b) for a, b in zip(expected, other.embed_sentences(SENTENCES)))


def test_convert_efml_writes_a_native_folder_with_its_record(folder, tmp_path):
    out = convert_efml(folder, tmp_path / "converted")
    assert sorted(p.name for p in out.iterdir()) == ["config.json", RECORD_NAME, "weights.pt"]
    assert isinstance(load_native(out), EfmlBiLM)


def test_how_tokens_are_read(model):
    vocab = model.vocab
    ids = vocab.ids("Köln")
    chars = vocab.chars
    # <eow>'s entry first and <bow>'s last, as their reader writes them; ü is unknown
    assert list(ids[1:7]) == [chars["<eow>"], chars["K"], chars["ö"], chars["l"], chars["n"], chars["<bow>"]]
    assert ids[0] == vocab.words["Köln"] and all(ids[7:] == chars["<pad>"])
    assert vocab.ids("Grüße")[4] == chars["<oov>"]
    long = vocab.ids("averyveryverylongword")  # cut to M - 2 = 10 code points, for the word too
    assert long[0] == vocab.words["averyveryv"] and long[-1] == chars["<bow>"]
    assert list(vocab.ids("<bos>")[1:4]) == [chars["<eow>"], chars["<bos>"], chars["<bow>"]]
    batch = model.token_batch([["<bos>", "<S>"]])
    assert isinstance(batch, EfmlTokenBatch) and batch.token_index.tolist() == [[1, 1, 3, 2]]  # <bos> is their boundary, <S> a word
    assert vocab.ids("<S>")[0] == vocab.word_oov


def test_batches_made_for_byte_models_are_read_with_the_lexicons(model):
    sentences = [s for s in SENTENCES if "<S>" not in s]
    with torch.inference_mode():
        ours = model(model.token_batch(sentences))
        plain = model(TokenBatch.from_sentences(sentences))
    assert torch.equal(ours, plain)


def test_output_choices(model):
    every = model.sents2elmo(SENTENCES, output_layer=-2)
    average = model.sents2elmo(SENTENCES, output_layer=-1)
    second = model.sents2elmo(SENTENCES, output_layer=1)
    for a, m, s in zip(every, average, second):
        assert a.shape[0] == 3 and np.allclose(m, a.mean(0), atol=1e-6) and np.array_equal(s, a[1])
    with pytest.raises(ValueError, match="output_layer"):
        model.sents2elmo(SENTENCES, output_layer=3)


def _bf16_products_work() -> bool:
    from spacy_elmo.kernels import matmul

    try:
        with torch.inference_mode():
            matmul.linear(torch.ones(2, 8, dtype=torch.bfloat16), torch.ones(8, 8, dtype=torch.bfloat16))
    except RuntimeError:
        return False
    return True


@pytest.mark.skipif(not _bf16_products_work(), reason="this CPU's matrix kernels have no bfloat16 product (tests/test_bf16.py fails here too)")
def test_bfloat16_runs_the_lstm_in_bfloat16(folder):
    model = load_efml(folder)
    exact = model.embed_sentences(SENTENCES)
    model.set_inference_precision("bfloat16")
    approx = model.embed_sentences(SENTENCES)
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(exact, approx))  # the token encoder stays float32
    assert all(np.abs(a - b).max(initial=0.0) < 0.1 for a, b in zip(exact, approx))


def test_lexicons_are_read_as_their_reader_reads_them(tmp_path):
    dic = tmp_path / "x.dic"
    dic.write_text("a\t0\n\u3000\t1\nb\t2\na\t3\n\xa0\t4\n", encoding="utf-8")
    # whitespace-only entries are stripped away and filed under the ideographic space; later lines win
    assert read_lexicon(dic) == {"a": 3, "\u3000": 4, "b": 2}
    dic.write_text("a\t0\nb\tc\td\n", encoding="utf-8")
    with pytest.raises(WeightsError, match="line 2"):
        read_lexicon(dic)


def test_the_sample_config_is_found_by_name(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"config_path": "configs/cnn_50_100_512_4096_sample.json"}))
    config, path, label = find_model_config(tmp_path)
    assert path is None and "sample" in label and config["encoder"]["dim"] == 4096
    (tmp_path / "config.json").write_text(json.dumps({"config_path": "elsewhere/mine.json"}))
    with pytest.raises(WeightsError, match="mine.json"):
        find_model_config(tmp_path)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda c: c["encoder"].update(name="lstm"), "encoder 'lstm' is not supported"),
        (lambda c: c["token_embedder"].update(name="lstm"), "token_embedder 'lstm' is not supported"),
        (lambda c: c["token_embedder"].update(char_dim=0), "without the character CNN"),
        (lambda c: c["token_embedder"].update(max_characters_per_token=6), "max_characters_per_token"),
        (lambda c: c["encoder"].pop("dim"), "'dim' is missing"),
    ],
)
def test_unsupported_or_broken_model_configs_are_one_line_errors(folder, tmp_path, change, message):
    copy = tmp_path / "m"
    shutil.copytree(folder, copy)
    config = json.loads((copy / "model_config.json").read_text())
    change(config)
    (copy / "model_config.json").write_text(json.dumps(config))
    with pytest.raises(WeightsError, match=message) as caught:
        load_bilm(str(copy))
    assert "\n" not in str(caught.value)


class _Touch:
    """A pickled object that would create a file when unpickled by an unrestricted unpickler."""

    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (Path.touch, (Path(self.path),))


def test_a_weights_file_holding_more_than_tensors_is_refused_unopened(folder, tmp_path):
    copy = tmp_path / "m"
    shutil.copytree(folder, copy)
    marker = tmp_path / "ran"
    state = torch.load(copy / "encoder.pkl", weights_only=True)
    torch.save({**state, "payload": _Touch(marker)}, copy / "encoder.pkl")
    with pytest.raises(WeightsError, match="holds more than tensors, refused") as caught:
        load_bilm(str(copy))
    assert "\n" not in str(caught.value) and not marker.exists()
    torch.save({**state, "step": 3}, copy / "encoder.pkl")  # a plain value beside the tensors
    with pytest.raises(WeightsError, match="int 'step' beside its tensors"):
        load_tensors(copy / "encoder.pkl")
    torch.save({**state, "ids": torch.arange(3)}, copy / "encoder.pkl")
    with pytest.raises(WeightsError, match="not floating-point"):
        load_tensors(copy / "encoder.pkl")
    (copy / "encoder.pkl").write_bytes(b"not a torch file")
    with pytest.raises(WeightsError, match="cannot be read as a torch file"):
        load_tensors(copy / "encoder.pkl")


def test_weights_that_do_not_match_the_lexicon_or_config_are_refused(folder, tmp_path):
    copy = tmp_path / "m"
    shutil.copytree(folder, copy)
    with open(copy / "char.dic", "a", encoding="utf-8") as handle:
        handle.write("Z\t999\n")
    with pytest.raises(WeightsError, match="outside the embedding's"):
        load_efml(copy)
    shutil.copy(folder / "char.dic", copy / "char.dic")
    state = torch.load(copy / "encoder.pkl", weights_only=True)
    state.pop("backward_layer_1.state_projection.weight")
    torch.save(state, copy / "encoder.pkl")
    with pytest.raises(WeightsError, match="lacks backward_layer_1.state_projection.weight"):
        load_efml(copy)


def test_the_legacy_pickle_format_reads_the_same(folder, model, tmp_path):
    legacy = write_random_efml(tmp_path / "legacy", TINY, chars=CHARS, words=WORDS, seed=5, legacy_pickle=True)
    assert (legacy / "encoder.pkl").read_bytes()[:2] != b"PK"  # not a zip archive
    assert all(np.array_equal(a, b) for a, b in zip(model.embed_sentences(SENTENCES), load_efml(legacy).embed_sentences(SENTENCES)))


def test_stateful_mode_carries_the_state(folder):
    stateful = load_efml(folder, stateful=True)
    first = stateful.embed_sentences(SENTENCES[:2], batch_size=2)
    second = stateful.embed_sentences(SENTENCES[:2], batch_size=2)
    assert not np.allclose(first[0][1:], second[0][1:]) and np.array_equal(first[0][0], second[0][0])


def test_efml_config_reads_lexicons_only_when_asked(folder):
    assert "chars" not in efml_config(folder, lexicons=False).extra["efml"]
    assert efml_config(folder).extra["efml"]["char_rows"] == len(CHARS) + 6


def test_a_stale_conversion_is_replaced_whole(tmp_path):
    source = write_random_efml(tmp_path / "m", TINY, chars=CHARS, words=WORDS, seed=1)
    folder = efml_native_folder(source)
    (folder / RECORD_NAME).write_text("{}")  # a conversion nobody can vouch for
    assert efml_native_folder(source) == folder and json.loads((folder / RECORD_NAME).read_text())["source"] == str(source.resolve())
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".")]  # no temporary folder left


STAND_IN = """
    import types
    from spacy_elmo import load_bilm

    class _Encoder:
        def __init__(self, bilm):
            self.bilm = bilm

        def reset_states(self):
            self.bilm.reset_state()

    class _Model:
        def __init__(self, bilm):
            self.bilm, self.encoder = bilm, _Encoder(bilm)

        def double(self):
            self.bilm.double()

    class Embedder:
        # their Embedder's interface, on our biLM (stateful, as theirs is)
        def __init__(self, model_dir, batch_size=64):
            self.model = _Model(load_bilm(model_dir, stateful=True))
            self.batch_size = batch_size

        def sents2elmo(self, sents, output_layer=-1):
            return self.model.bilm.sents2elmo(sents, output_layer=output_layer, batch_size=self.batch_size)
    """


def test_the_reference_harness_writes_every_sentence_in_order(folder, tmp_path):
    """``bench/reference.py efml``'s contract with ``bench/parity.py efml``, with a stand-in for their package."""
    package = tmp_path / "fake" / "elmoformanylangs"
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(textwrap.dedent(STAND_IN))
    (tmp_path / "s.json").write_text(json.dumps(SENTENCES, ensure_ascii=False), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "fake"), str(REPO)])}
    cmd = [sys.executable, str(REPO / "bench" / "reference.py"), "efml", "--model", str(folder), "--input", str(tmp_path / "s.json"), "--batch-size", "2"]
    out = subprocess.run([*cmd, "--out", str(tmp_path / "ref.npz"), "--bench", "--double"], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    every = load_efml(folder).double().sents2elmo(SENTENCES, output_layer=-2)
    with np.load(tmp_path / "ref.npz") as npz:
        assert sorted(k for k in npz.files if k.startswith("all/")) == sorted(f"all/{i}" for i in range(len(SENTENCES)))
        assert "avg/4" not in npz.files and "avg/3" in npz.files  # the empty sentence has no average
        for i, array in enumerate(every):
            assert npz[f"all/{i}"].dtype == np.float64 and np.allclose(npz[f"all/{i}"], array, atol=1e-12)
    speed = next(line for line in out.stdout.splitlines() if line.startswith("ref "))
    fields = dict(item.split("=") for item in speed.split()[1:])
    assert fields["sentences"] == str(len(SENTENCES)) and fields["tokens"] == str(sum(map(len, SENTENCES))) and float(fields["tokens_per_s"]) > 0


def test_float32_inference_reads_the_char_cnn_by_tables_to_float_rounding(model):
    """At float32 inference their char CNN runs as table lookups (kernels/char_table.py) where a
    compiler is there; the outputs are the convolutions' to float rounding."""
    from spacy_elmo.kernels import native

    sentences = [s for s in SENTENCES if s]
    with_tables = model.embed_sentences(sentences)
    encoder = model.token_encoder
    if native.library() is not None:  # the tables were made, so read
        assert encoder.char_tables.conversions >= 1 and encoder.char_tables.weights(encoder).get("tables") is not None
    encoder.table_pooled = lambda ids: None
    try:
        convolved = model.embed_sentences(sentences)
    finally:
        del encoder.table_pooled
    for a, b in zip(with_tables, convolved):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-5)
