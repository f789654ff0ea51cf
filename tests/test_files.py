"""The files we write: atomic writes, folders complete only with their manifest, biLM fingerprints
recorded with every index, inventory and cache, and the token index's queries (read-only, thread
safe, O(1) length). Uses the tiny AllenNLP test biLM and a copy of it with other weights."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import numpy as np
import pytest
import spacy
import torch

from spacy_elmo import WeightsError, load_bilm, save_native
from spacy_elmo.bilm.fingerprint import FingerprintError, bilm_fingerprint
from spacy_elmo.cli import main
from spacy_elmo.files import (
    IncompleteFolderError,
    check_folder,
    finish_folder,
    replace_folder,
    start_folder,
    write_atomic,
    write_bytes,
)
from spacy_elmo.senses import ElmoSenses, SenseInventory
from spacy_elmo.search.index import TokenIndex

from .conftest import ALLENNLP


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Two biLMs of the same shape: the fixture, and the fixture with every weight moved."""
    folder = tmp_path_factory.mktemp("models")
    original = load_bilm(ALLENNLP)
    save_native(original, folder / "a")
    other = load_bilm(ALLENNLP)
    with torch.no_grad():
        for parameter in other.parameters():
            parameter.mul_(0.5)
    save_native(other, folder / "b")
    return folder / "a", folder / "b"


def elmo_nlp(weights: Path, store_layers: bool = False):
    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    nlp.add_pipe("elmo", config={"weights": str(weights), "store_layers": store_layers})
    return nlp


def random_index(n: int = 500, dim: int = 16, **kwargs) -> TokenIndex:
    rng = np.random.default_rng(0)
    index = TokenIndex(store_context=False, **kwargs)
    for start in range(0, n, 100):
        m = min(100, n - start)
        index.add(rng.normal(size=(m, dim)), list(range(start, start + m)), [0] * m, [0] * m, [f"w{i}" for i in range(start, start + m)])
    return index


# ---------------------------------------------------------------------------------- the helper


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path):
    target = write_bytes(tmp_path / "data.bin", b"old")

    def half_then_crash(handle):
        handle.write(b"new but not who")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_atomic(target, half_then_crash)
    assert target.read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.bin"]


def test_a_replaced_folder_is_the_new_one_whole_or_the_old_one_untouched(tmp_path):
    out = tmp_path / "model"
    out.mkdir()
    (out / "weights.pt").write_bytes(b"old")
    (out / "old-only.json").write_text("{}")

    def crash(folder: Path) -> None:
        (folder / "weights.pt").write_bytes(b"half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        replace_folder(out, crash)
    assert sorted(p.name for p in out.iterdir()) == ["old-only.json", "weights.pt"] and (out / "weights.pt").read_bytes() == b"old"
    assert replace_folder(out, lambda folder: (folder / "weights.pt").write_bytes(b"new")) == 3
    assert sorted(p.name for p in out.iterdir()) == ["weights.pt"] and (out / "weights.pt").read_bytes() == b"new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]  # no staging folder left either way
    fresh = tmp_path / "deeper" / "fresh"
    replace_folder(fresh, lambda folder: (folder / "a").write_text("a"))
    assert (fresh / "a").read_text() == "a" and oct(fresh.stat().st_mode & 0o777) == oct(0o777 & ~_umask())


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_folder_is_complete_only_with_its_manifest(tmp_path):
    folder = start_folder(tmp_path / "thing", "manifest.json")
    write_bytes(folder / "part.bin", b"12345")
    with pytest.raises(IncompleteFolderError, match=r"thing is an incomplete widget \(it has part.bin but no manifest.json"):
        check_folder(folder, "manifest.json", "widget", ["part.bin"])
    finish_folder(folder, "manifest.json", {"kind": "widget"}, ["part.bin"])
    assert check_folder(folder, "manifest.json", "widget")["files"] == {"part.bin": 5}
    write_bytes(folder / "part.bin", b"123")
    with pytest.raises(IncompleteFolderError, match="part.bin has 3 bytes, manifest.json says 5"):
        check_folder(folder, "manifest.json", "widget")
    start_folder(folder, "manifest.json")  # a new save begins: the folder reads as incomplete at once
    assert not (folder / "manifest.json").exists()


def test_start_folder_removes_only_temporaries_whose_writer_is_gone(tmp_path):
    import os
    import subprocess
    import sys
    import time

    from spacy_elmo import files

    folder = tmp_path / "thing"
    folder.mkdir()
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    try:
        host = files.temporary_name(folder / "x").name.split(".")[-2].split("-")[0]
        keep = [
            folder / f".a.bin.{host}-{live.pid}-00ff.tmp",
            folder / f".b.bin.{host}-{os.getpid()}-00ff.tmp",
            folder / ".c.bin.0123abcd.tmp",
        ]
        gone = [folder / f".d.bin.{host}-{dead.pid}-00ff.tmp", folder / ".e.bin.4567abcd.tmp"]
        for path in keep + gone:
            path.write_bytes(b"half")
        old = time.time() - files.STALE_SECONDS - 60
        os.utime(gone[1], (old, old))  # an old-style name, a day old
        start_folder(folder, "manifest.json")
        assert sorted(p.name for p in folder.iterdir()) == sorted(p.name for p in keep)
    finally:
        live.kill()
        live.wait()


def test_a_write_through_data_changes_the_fingerprint():
    model = load_bilm(ALLENNLP)
    before = bilm_fingerprint(model)
    with torch.no_grad():
        next(model.parameters()).data.mul_(2)  # bumps no version counter
    assert bilm_fingerprint(model) != before


# ---------------------------------------------------------------------------------- token index


def test_token_index_save_is_complete_or_refused(tmp_path, monkeypatch):
    pytest.importorskip("hnswlib")
    index = random_index(backend="hnswlib")
    index.save(tmp_path / "index")
    assert json.loads((tmp_path / "index" / "config.json").read_text())["files"]["hnsw.bin"] > 0
    # a save that dies after the vectors: the folder names itself incomplete (it used to keep the old config.json)
    from spacy_elmo.search import index as index_module

    def crash(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(index_module.files, "write_json", crash)
    with pytest.raises(KeyboardInterrupt):
        random_index(n=200, backend="hnswlib").save(tmp_path / "index")
    monkeypatch.undo()
    with pytest.raises(IncompleteFolderError, match="index is an incomplete token index .*its save was interrupted"):
        TokenIndex.load(tmp_path / "index")


def test_a_missing_hnsw_graph_is_an_error_not_a_silent_rebuild(tmp_path):
    pytest.importorskip("hnswlib")
    random_index(backend="hnswlib").save(tmp_path / "index")
    (tmp_path / "index" / "hnsw.bin").unlink()
    with pytest.raises(IncompleteFolderError, match="hnsw.bin is missing"):
        TokenIndex.load(tmp_path / "index")


def test_len_is_counted_not_summed_and_queries_leave_the_index_unchanged(tmp_path):
    index = random_index(n=500)
    index._blocks = None  # len() must not walk the blocks
    assert len(index) == 500
    pytest.importorskip("hnswlib")
    ann = random_index(n=500, backend="hnswlib", ef=16)
    ann.search(np.ones(16), k=100)
    assert ann._ann.index.ef == 16  # a query with k > ef used to leave the graph at ef=k


def test_concurrent_queries_give_the_serial_results():
    pytest.importorskip("hnswlib")
    index = random_index(n=2000, backend="hnswlib", ef=16)
    rng = np.random.default_rng(1)
    queries = [(rng.normal(size=(4, 16)), k) for k in (5, 40, 80, 10, 120, 3) * 3]
    fresh = random_index(n=2000, backend="hnswlib", ef=16)
    serial = [fresh.search(q, k=k)[1] for q, k in queries]
    results = [None] * len(queries)

    def work(i):
        results[i] = index.search(queries[i][0], k=queries[i][1])[1]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(queries))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for got, want in zip(results, serial):
        np.testing.assert_array_equal(got, want)


def test_index_records_its_biLM_and_neighbours_refuses_another(tmp_path, models, capsys):
    a, b = models
    text = tmp_path / "text.txt"
    text.write_text("He sat on the bank of the river.\n\nThe bank approved the loan.\n", encoding="utf-8")
    assert main(["index", str(text), "--out", str(tmp_path / "index"), "--weights", str(a), "--threads", "1"]) == 0
    index = TokenIndex.load(tmp_path / "index")
    assert index.fingerprint == bilm_fingerprint(load_bilm(a))
    assert main(["neighbours", str(tmp_path / "index"), "the bank of the river", "--word", "bank", "--weights", str(a)]) == 0
    capsys.readouterr()
    code = main(["neighbours", str(tmp_path / "index"), "the bank of the river", "--word", "bank", "--weights", str(b)])
    err = capsys.readouterr().err
    assert code != 0 and "the index was built with the biLM whose fingerprint is" in err and f"--weights {b}" in err


def test_index_accepts_a_folder_of_texts_and_names_what_it_expects(tmp_path, models, capsys):
    a, _ = models
    (tmp_path / "texts").mkdir()
    (tmp_path / "texts" / "one.txt").write_text("The bank approved the loan.\n", encoding="utf-8")
    (tmp_path / "texts" / "two.txt").write_text("A river bank.\n", encoding="utf-8")
    assert main(["index", str(tmp_path / "texts"), "--out", str(tmp_path / "index"), "--weights", str(a), "--threads", "1"]) == 0
    assert len(TokenIndex.load(tmp_path / "index")) == 10
    (tmp_path / "empty").mkdir()
    capsys.readouterr()
    assert main(["index", str(tmp_path / "empty"), "--out", str(tmp_path / "index2"), "--weights", str(a)]) != 0
    assert "is a folder with no .txt or .txt.gz files" in capsys.readouterr().err


def test_index_command_does_not_count_the_index_per_doc(tmp_path, models, monkeypatch):
    a, _ = models
    calls = []
    original = TokenIndex.__len__
    monkeypatch.setattr(TokenIndex, "__len__", lambda self: calls.append(1) or original(self))
    text = tmp_path / "text.txt"
    text.write_text("".join(f"Paragraph number {i} is here.\n\n" for i in range(30)), encoding="utf-8")
    assert main(["index", str(text), "--out", str(tmp_path / "index"), "--weights", str(a), "--threads", "1"]) == 0
    assert len(calls) <= 2  # the summary line (and nothing per Doc)


# ---------------------------------------------------------------------------------- biLM folders


def test_save_native_writes_the_config_last(tmp_path, monkeypatch):
    save_native(load_bilm(ALLENNLP), tmp_path / "model")
    assert json.loads((tmp_path / "model" / "config.json").read_text())["files"]["weights.pt"] > 0
    from spacy_elmo.bilm import weights as weights_module

    def crash(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(weights_module, "finish_folder", crash)
    with pytest.raises(KeyboardInterrupt):
        save_native(load_bilm(ALLENNLP), tmp_path / "model")
    monkeypatch.undo()
    with pytest.raises(WeightsError, match="incomplete spacy-elmo model: weights.pt is there but config.json .* is missing"):
        load_bilm(tmp_path / "model")


# ---------------------------------------------------------------------------------- inventories and the component


def bank_examples(nlp):
    river = [next(t for t in d if t.text == "bank") for d in nlp.pipe(["He sat on the bank of the river.", "The river bank was wet."])]
    money = [next(t for t in d if t.text == "bank") for d in nlp.pipe(["The bank approved the loan.", "She paid the bank."])]
    return [(t, "river", "bank") for t in river] + [(t, "money", "bank") for t in money]


def test_inventory_records_its_biLM_and_the_component_refuses_another(models):
    a, b = models
    nlp_a = elmo_nlp(a)
    inventory = SenseInventory.from_examples(bank_examples(nlp_a), key="lower")
    inventory.fingerprint = bilm_fingerprint(nlp_a.get_pipe("elmo").bilm)
    again = SenseInventory.from_bytes(inventory.to_bytes())
    assert again.fingerprint == inventory.fingerprint
    senses = nlp_a.add_pipe("elmo_senses")
    senses.set_inventory(again)
    assert nlp_a("The bank of the river.")[1]._.elmo_sense in ("river", "money")
    nlp_b = elmo_nlp(b)
    nlp_b.add_pipe("elmo_senses").set_inventory(again)
    with pytest.raises(FingerprintError, match="sense inventory was built with the biLM whose fingerprint is"):
        nlp_b("The bank of the river.")


def test_senses_from_disk_without_its_inventory_fails_naming_it(tmp_path, models):
    nlp = elmo_nlp(models[0])
    inventory = SenseInventory.from_examples(bank_examples(nlp), key="lower")
    senses = ElmoSenses(None, min_score=0.25, backoff=False, inventory=inventory)
    senses.to_disk(tmp_path / "senses")
    (tmp_path / "senses" / "inventory.bin").unlink()
    with pytest.raises(FileNotFoundError, match=r"inventory.bin is missing: 'elmo_senses' was saved with a sense inventory"):
        ElmoSenses(None).from_disk(tmp_path / "senses")
    (tmp_path / "senses" / "cfg").unlink()
    with pytest.raises(FileNotFoundError, match="cfg is missing"):
        ElmoSenses(None).from_disk(tmp_path / "senses")


def test_senses_bytes_and_disk_round_trips_keep_the_settings(tmp_path, models):
    nlp = elmo_nlp(models[0])
    inventory = SenseInventory.from_examples(bank_examples(nlp), key="lower")
    senses = ElmoSenses(None, min_score=0.25, backoff=False, inventory=inventory)
    from_bytes = ElmoSenses(None).from_bytes(senses.to_bytes())
    senses.to_disk(tmp_path / "senses")
    from_disk = ElmoSenses(None).from_disk(tmp_path / "senses")
    for loaded in (from_bytes, from_disk):
        assert (loaded.min_score, loaded.backoff) == (0.25, False)
        assert loaded.inventory.senses("bank") == {"river": 2, "money": 2}


# ---------------------------------------------------------------------------------- the WSD embedding cache


def test_wsd_cache_is_keyed_by_the_biLMs_content_not_its_path(tmp_path, models):
    from spacy_elmo.evaluation.wsd import cached_instances, evaluate
    from spacy_elmo.evaluation.wsd_data import WsdSentence
    import inspect

    assert inspect.signature(evaluate).parameters["cache_dir"].default is None  # not the system temp folder
    a, _ = models
    sentences = [
        WsdSentence(
            "s1",
            ["the", "bank", "of", "the", "river"],
            ["the", "bank", "of", "the", "river"],
            ["DET", "NOUN", "ADP", "DET", "NOUN"],
            [(1, "d000.s000.t000")],
        )
    ]
    cache, lines = tmp_path / "cache", []
    model = load_bilm(a)
    first = cached_instances(model, "semcor", sentences, cache, lines.append)
    again = cached_instances(load_bilm(a), "semcor", sentences, cache, lines.append)
    np.testing.assert_array_equal(first, again)
    assert "from the cache" in lines[-1]
    with torch.no_grad():  # the model is retrained where it lives: same path, other weights
        for parameter in model.parameters():
            parameter.mul_(0.5)
    save_native(model, a)
    retrained = cached_instances(load_bilm(a), "semcor", sentences, cache, lines.append)
    assert "cached the embeddings" in lines[-1]
    assert not np.allclose(retrained, first)
    np.testing.assert_allclose(retrained, load_bilm(a).embed_sentences([sentences[0].words])[0][:, 1][None], atol=1e-5)
    assert not any(p.name.endswith(".tmp") for p in cache.iterdir())
