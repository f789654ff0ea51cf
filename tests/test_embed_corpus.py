"""embed-corpus: AllenNLP's HDF5 layout read back with h5py, vectors equal to the API and the
component, one-line input errors, resume after SIGKILL, and a 2-worker Dask run."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import spacy
from spacy.tokens import Doc

from spacy_elmo import load_bilm
from spacy_elmo.cli import main
from spacy_elmo.embedding import EmbedOptions, embed_corpus, iter_shard_dir, shards

h5py = pytest.importorskip("h5py")

REPO = Path(__file__).resolve().parent.parent
LINES = [
    "He sat on the bank of the river .",
    "The bank lends money .",
    "A longer line , with a comma and several more words than the others .",
    "He sat on the bank of the river .",
    "Short .",
    "Ice melts in spring , and the river rises over its bank .",
    "Money .",
]


def write(path: Path, lines) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def run(capsys, *argv):
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def read_allennlp(path: Path):
    """The way an AllenNLP user reads `allennlp elmo` output."""
    with h5py.File(path, "r") as f:
        index = json.loads(f["sentence_to_index"][0])
        arrays = {key: f[key][...] for key in f.keys() if key != "sentence_to_index"}
    return index, arrays


@pytest.fixture(scope="module")
def bilm():
    return load_bilm()


def test_hdf5_all_layers_is_allennlps_layout_and_matches_embed_sentences(tmp_path, capsys, bilm):
    source = write(tmp_path / "in.txt", LINES)
    code, out, err = run(capsys, "embed-corpus", source, tmp_path / "out.hdf5", "--chunk-lines", 3)
    assert code == 0, err
    assert "wrote" in out and not (tmp_path / "out.hdf5.parts").exists()
    index, arrays = read_allennlp(tmp_path / "out.hdf5")
    assert sorted(arrays, key=int) == [str(i) for i in range(len(LINES))]
    # text -> dataset name; the repeated line maps to its last index, as in allennlp
    assert index == {text: str(max(i for i, t in enumerate(LINES) if t == text)) for text in LINES}
    expected = bilm.embed_sentences([line.split() for line in LINES], max_batch_tokens=4096)
    for i, line in enumerate(LINES):
        got = arrays[str(i)]
        assert got.dtype == np.float32 and got.shape == (3, len(line.split()), 256)
        np.testing.assert_allclose(got, expected[i], atol=1e-5, rtol=0)
    # one chunk = the same batches as embed_sentences: identical to the bit
    code, _, err = run(capsys, "embed-corpus", source, tmp_path / "one.hdf5", "--chunk-lines", 100)
    assert code == 0, err
    _, single = read_allennlp(tmp_path / "one.hdf5")
    for i in range(len(LINES)):
        assert np.array_equal(single[str(i)], expected[i])


def test_top_and_mix_match_the_elmo_component(tmp_path, capsys, bilm):
    source = write(tmp_path / "in.txt", LINES)
    assert run(capsys, "embed-corpus", source, tmp_path / "top.hdf5", "--layers", "top")[0] == 0
    assert run(capsys, "embed-corpus", source, tmp_path / "mix.hdf5", "--layers", "mix", "--mix", "1,2,3")[0] == 0
    _, top = read_allennlp(tmp_path / "top.hdf5")
    _, mixed = read_allennlp(tmp_path / "mix.hdf5")
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"mix": [1.0, 2.0, 3.0]})
    for i, line in enumerate(LINES):
        words = line.split()
        layers = bilm.embed_sentences([words])[0]
        assert top[str(i)].shape == (len(words), 256)
        np.testing.assert_allclose(top[str(i)], layers[-1], atol=1e-5, rtol=0)
        doc = nlp(Doc(nlp.vocab, words=words, sent_starts=[True] + [False] * (len(words) - 1)))
        np.testing.assert_allclose(mixed[str(i)], doc.tensor, atol=1e-5, rtol=0)


def test_shards_format_spacy_tokenizer_and_folder_input(tmp_path, capsys):
    folder = tmp_path / "corpus"
    (folder / "b").mkdir(parents=True)
    write(folder / "a.txt", ["He sat on the river's bank.", "It's raining."])
    write(folder / "b" / "c.txt", ["The bank lends money."])
    (folder / "notes.md").write_text("not part of the corpus\n")
    out = tmp_path / "shards"
    code, _, err = run(capsys, "embed-corpus", folder, out, "--format", "shards", "--tokenizer", "spacy", "--layers", "mix", "--chunk-lines", 2)
    assert code == 0, err
    manifest = shards.read_manifest(out)
    assert manifest["complete"] and manifest["lines"] == 3 and [s["file"] for s in manifest["shards"]] == ["shard-000000.npz", "shard-000001.npz"]
    items = list(iter_shard_dir(out))
    assert [line for line, *_ in items] == [0, 1, 2]
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo")
    for (line, text, tokens, vectors), expected_text in zip(items, ["He sat on the river's bank.", "It's raining.", "The bank lends money."]):
        doc = nlp(expected_text)
        assert text == expected_text and tokens == [t.text for t in doc]
        np.testing.assert_allclose(vectors, doc.tensor, atol=1e-5, rtol=0)
    # rerunning a finished shards output is a no-op
    code, out_text, _ = run(capsys, "embed-corpus", folder, out, "--format", "shards", "--tokenizer", "spacy", "--layers", "mix", "--chunk-lines", 2)
    assert code == 0 and "already complete" in out_text


@pytest.mark.parametrize(
    "lines,extra,needle",
    [
        (None, [], "input not found"),
        ([], [], "has no lines"),
        (["one line", "", "two"], [], "line 2 (corpus line 1) is empty"),
        (["a " * 20], ["--max-line-tokens", "10"], "has 20 tokens, more than --max-line-tokens 10"),
        (["a b"], ["--layers", "everything"], "--layers 'everything'"),
        (["a b"], ["--layers", "mix", "--mix", "layer:7"], "--mix does not fit this model"),
        (["a b"], ["--n-process", "2", "--cluster", "local:2"], "exclude each other"),
        (["a b"], ["--precision", "int4"], "--precision 'int4'"),
    ],
)
def test_input_errors_are_one_line(tmp_path, capsys, lines, extra, needle):
    source = tmp_path / "in.txt" if lines is None else write(tmp_path / "in.txt", lines)
    code, _, err = run(capsys, "embed-corpus", source, tmp_path / "out.hdf5", *extra)
    assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out.hdf5").exists()


def test_skip_empty_keeps_line_numbers(tmp_path, capsys):
    source = write(tmp_path / "in.txt", ["one line", "   ", "two words"])
    assert run(capsys, "embed-corpus", source, tmp_path / "out.hdf5", "--skip-empty")[0] == 0
    index, arrays = read_allennlp(tmp_path / "out.hdf5")
    assert sorted(arrays) == ["0", "2"] and index == {"one line": "0", "two words": "2"}


def test_existing_output_and_a_different_configuration_are_refused(tmp_path, capsys):
    source = write(tmp_path / "in.txt", LINES)
    out = tmp_path / "out.hdf5"
    assert run(capsys, "embed-corpus", source, out)[0] == 0
    code, _, err = run(capsys, "embed-corpus", source, out)
    assert code == 2 and "already exists" in err and "--overwrite" in err
    assert run(capsys, "embed-corpus", source, out, "--overwrite", "--layers", "top")[0] == 0
    # an unfinished shards output started with other options: refused, naming the difference
    parts = tmp_path / "part"
    options = EmbedOptions(input=source, output=parts, format="shards", chunk_lines=2)
    embed_corpus(options)
    manifest = shards.read_manifest(parts)
    manifest["complete"] = False
    shards.write_json(parts / shards.MANIFEST, manifest)
    code, _, err = run(capsys, "embed-corpus", source, parts, "--format", "shards", "--chunk-lines", 2, "--layers", "top")
    assert code == 2 and "different configuration (layers: 'all' then, 'top' now)" in err, err
    write(tmp_path / "in.txt", LINES + ["one more line ."])
    code, _, err = run(capsys, "embed-corpus", source, parts, "--format", "shards", "--chunk-lines", 2)
    assert code == 2 and "input content changed" in err, err


def test_sentence_to_index_streamed_to_disk_is_exact_json_for_any_text(tmp_path, capsys):
    lines = ['say "hi" \\ there', "caf\u00e9 \u00fcber \U0001F600", "tab\tinside", 'say "hi" \\ there', "{ } : ,"]
    source = write(tmp_path / "in.txt", lines)
    assert run(capsys, "embed-corpus", source, tmp_path / "out.hdf5", "--chunk-lines", 2, "--layers", "top")[0] == 0
    index, arrays = read_allennlp(tmp_path / "out.hdf5")
    assert index == {text: str(max(i for i, t in enumerate(lines) if t == text)) for text in lines}
    assert list(index) == list(dict.fromkeys(lines))  # AllenNLP's order: first occurrence
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_overwrite_deletes_only_our_own_output(tmp_path, capsys):
    source = write(tmp_path / "in.txt", LINES)
    # a shards OUTPUT folder holding an unrelated file: refused, naming it, and nothing deleted
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "thesis.tex").write_text("years of work\n")
    (folder / "manifest.json").write_text("{}\n")
    code, _, err = run(capsys, "embed-corpus", source, folder, "--format", "shards", "--overwrite")
    assert code == 2 and "holds files that are not spacy-elmo corpus output (thesis.tex)" in err and len(err.strip().splitlines()) == 1, err
    assert (folder / "thesis.tex").read_text() == "years of work\n" and (folder / "manifest.json").exists()
    # an HDF5 OUTPUT that is a folder, or a file that is not HDF5: refused, left alone
    code, _, err = run(capsys, "embed-corpus", source, folder, "--overwrite")
    assert code == 2 and "is a folder, not an HDF5 file" in err and (folder / "thesis.tex").exists(), err
    notes = tmp_path / "notes.hdf5"
    notes.write_text("my notes\n")
    code, _, err = run(capsys, "embed-corpus", source, notes, "--overwrite")
    assert code == 2 and "is not an HDF5 file" in err and notes.read_text() == "my notes\n", err
    # our own outputs are replaced
    out = tmp_path / "out"
    assert run(capsys, "embed-corpus", source, out, "--format", "shards", "--chunk-lines", 3)[0] == 0
    assert run(capsys, "embed-corpus", source, out, "--format", "shards", "--overwrite", "--layers", "top")[0] == 0
    assert shards.read_manifest(out)["config"]["layers"] == "top"
    assert run(capsys, "embed-corpus", source, tmp_path / "out.hdf5")[0] == 0
    assert run(capsys, "embed-corpus", source, tmp_path / "out.hdf5", "--overwrite", "--layers", "top")[0] == 0


def test_spacy_tokenizer_line_limit_is_checked_before_anything_is_written(tmp_path, capsys):
    # one whitespace token, nine spaCy tokens
    source = write(tmp_path / "in.txt", ["fine line .", "a,b,c,d,e"])
    out = tmp_path / "shards"
    code, _, err = run(capsys, "embed-corpus", source, out, "--format", "shards", "--tokenizer", "spacy", "--max-line-tokens", "5")
    assert code == 2 and "line 2 (corpus line 1) has 9 tokens, more than --max-line-tokens 5" in err, err
    assert not out.exists()  # no manifest, no shard: the run never started


def test_worker_cache_is_bounded_and_loads_once_across_threads(monkeypatch):
    from spacy_elmo.embedding import worker

    monkeypatch.setattr(worker, "_EMBEDDERS", type(worker._EMBEDDERS)())
    specs = [worker.EmbedSpec("en_default", layers=layers) for layers in ("all", "top", "mix")]
    before = worker.ChunkEmbedder.loads
    threads = [threading.Thread(target=worker.get_embedder, args=(specs[0],)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert worker.ChunkEmbedder.loads == before + 1
    for spec in specs:
        worker.get_embedder(spec)
    assert list(worker._EMBEDDERS) == specs[-worker.MAX_EMBEDDERS:]


KILLABLE = (
    "import sys; import spacy_elmo.cli.embed_corpus; from spacy_elmo.cli import main; "
    "sys.exit(main(sys.argv[1:]))"
)


def test_chunks_skip_the_done_ones_and_keep_line_numbers_across_files(tmp_path):
    from spacy_elmo.embedding.reader import input_files, iter_chunks

    write(tmp_path / "a.txt", [f"line {i}" for i in range(4)])
    write(tmp_path / "b.txt", [f"line {i}" for i in range(4, 10)])
    files = input_files(tmp_path)
    every = list(iter_chunks(files, 3))
    assert [(c.index, c.first_line, c.texts) for c in every] == [
        (0, 0, ["line 0", "line 1", "line 2"]), (1, 3, ["line 3", "line 4", "line 5"]),
        (2, 6, ["line 6", "line 7", "line 8"]), (3, 9, ["line 9"]),
    ]
    assert [(c.index, c.first_line) for c in iter_chunks(files, 3, done={1, 3})] == [(0, 0), (2, 6)]
    assert [c.index for c in iter_chunks(files, 3, done={0, 1, 2, 3})] == []


def test_at_most_a_window_of_chunks_is_read_ahead_of_the_results():
    from concurrent.futures import ThreadPoolExecutor

    from spacy_elmo.embedding.reader import Chunk
    from spacy_elmo.embedding.run import bounded
    from spacy_elmo.embedding.worker import ChunkResult

    pulled = []

    def chunks():
        for i in range(50):
            pulled.append(i)
            yield Chunk(i, i, [f"line {i}"])

    def work(chunk):
        time.sleep(0.001)
        return ChunkResult(chunk.index, 1, 1, 0.0, 0, 1)

    seen = []
    with ThreadPoolExecutor(2) as pool:
        for result in bounded(lambda chunk: pool.submit(work, chunk), chunks(), window=4):
            seen.append(result.index)
            assert len(pulled) - len(seen) <= 4  # the input is read lazily: memory bounded by the window
    assert sorted(seen) == list(range(50))


def test_resume_after_sigkill_is_identical_to_an_uninterrupted_run(tmp_path, capsys):
    rng = np.random.default_rng(0)
    words = "the a river bank money lends sat on of he she it ice melts spring rises over its".split()
    lines = [" ".join(rng.choice(words, size=int(rng.integers(3, 14)))) + " ." for _ in range(1200)]
    source = write(tmp_path / "in.txt", lines)
    out = tmp_path / "killed.hdf5"
    parts = tmp_path / "killed.hdf5.parts"
    n_chunks = 60
    env = dict(os.environ, OMP_NUM_THREADS="1", SPACY_ELMO_PROGRESS_EVERY="1000")
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLABLE, "embed-corpus", str(source), str(out), "--chunk-lines", "20"],
        cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            if parts.is_dir() and len(shards.finished_chunks(parts)) >= 2:
                break
            time.sleep(0.01)
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the run finished before it could be killed"
    done_at_kill = shards.finished_chunks(parts)
    assert 2 <= len(done_at_kill) < n_chunks and not out.exists()

    code, stdout, err = run(capsys, "embed-corpus", source, out, "--chunk-lines", 20)
    assert code == 0, err
    assert f"resuming {parts}: {len(done_at_kill)} of {n_chunks} chunks already done" in stdout
    code, _, err = run(capsys, "embed-corpus", source, tmp_path / "whole.hdf5", "--chunk-lines", 20)
    assert code == 0, err

    resumed_index, resumed = read_allennlp(out)
    whole_index, whole = read_allennlp(tmp_path / "whole.hdf5")
    assert sorted(resumed, key=int) == [str(i) for i in range(len(lines))]  # none missing, none twice
    assert resumed_index == whole_index
    assert resumed.keys() == whole.keys() and all(np.array_equal(resumed[k], whole[k]) for k in whole)
    assert not parts.exists() and not list(tmp_path.glob(".*.tmp"))


def test_n_process_2_gives_the_single_process_output(tmp_path):
    source = write(tmp_path / "in.txt", LINES * 3)
    single = embed_corpus(EmbedOptions(input=source, output=tmp_path / "single.hdf5", chunk_lines=4))
    multi = embed_corpus(EmbedOptions(input=source, output=tmp_path / "multi.hdf5", chunk_lines=4, n_process=2))
    assert single.workers == 1 and multi.workers == 2 and {r.loads for r in multi.results} == {1}
    one_index, one = read_allennlp(tmp_path / "single.hdf5")
    two_index, two = read_allennlp(tmp_path / "multi.hdf5")
    assert one_index == two_index and one.keys() == two.keys() and len(two) == len(LINES) * 3
    assert all(np.array_equal(one[k], two[k]) for k in one)


def test_two_dask_workers_with_a_failed_task_give_the_single_process_output(tmp_path):
    distributed = pytest.importorskip("distributed")
    import cloudpickle

    from spacy_elmo.embedding.cluster import dask_executor

    source = write(tmp_path / "in.txt", LINES * 4)
    single = embed_corpus(EmbedOptions(input=source, output=tmp_path / "single", format="shards", chunk_lines=3))
    marker = tmp_path / "failed-once"

    class FailChunkOnce(distributed.WorkerPlugin):
        """On the workers: the first attempt at chunk 2 leaves a half-written file and fails."""

        def setup(self, worker):
            from spacy_elmo.embedding import shards as worker_shards

            real = worker_shards.write_shard

            def flaky(path, *args, **kwargs):
                if path.name == worker_shards.shard_name(2):
                    try:
                        fd = os.open(marker, os.O_CREAT | os.O_EXCL)
                    except FileExistsError:
                        return real(path, *args, **kwargs)
                    os.close(fd)
                    (path.parent / f".{path.name}.crashed.tmp").write_bytes(b"half a shard")
                    raise RuntimeError("injected failure")
                return real(path, *args, **kwargs)

            worker_shards.write_shard = flaky

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        with distributed.Client(cluster) as client:
            client.wait_for_workers(2)
            client.register_plugin(FailChunkOnce())
            options = EmbedOptions(input=source, output=tmp_path / "cluster", format="shards", chunk_lines=3)
            summary = embed_corpus(options, executor=dask_executor(client, retries=2))
    assert marker.exists(), "the injected failure did not happen"
    loads = {}
    for result in summary.results:
        loads[result.pid] = max(loads.get(result.pid, 0), result.loads)
    assert len(loads) == 2 and set(loads.values()) == {1}, loads  # two workers, each loaded the biLM once
    assert sorted(r.index for r in summary.results) == list(range(single.chunks))  # every chunk reported once
    assert sorted(p.name for p in (tmp_path / "cluster").iterdir()) == sorted(p.name for p in (tmp_path / "single").iterdir())
    a, b = list(iter_shard_dir(tmp_path / "single")), list(iter_shard_dir(tmp_path / "cluster"))
    assert [x[:3] for x in a] == [x[:3] for x in b] and [x[0] for x in b] == list(range(len(LINES) * 4))
    assert all(np.array_equal(x[3], y[3]) for x, y in zip(a, b))
    assert shards.read_manifest(tmp_path / "cluster")["shards"] == shards.read_manifest(tmp_path / "single")["shards"]


def test_int8_corpus_matches_embed_sentences_in_int8_and_is_its_own_configuration(tmp_path, capsys, bilm):
    import copy

    from spacy_elmo.embedding.worker import PRECISIONS
    from spacy_elmo.kernels import cpu

    assert PRECISIONS == type(bilm).INFERENCE_PRECISIONS
    if cpu.int8_path() is None:
        pytest.skip("this CPU has no int8 product path (needs AVX2)")
    source = write(tmp_path / "in.txt", LINES)
    code, _, err = run(capsys, "embed-corpus", source, tmp_path / "out.hdf5", "--chunk-lines", 100, "--precision", "int8")
    assert code == 0, err
    _, arrays = read_allennlp(tmp_path / "out.hdf5")
    quantized = copy.deepcopy(bilm)
    quantized.set_inference_precision("int8")
    expected = quantized.embed_sentences([line.split() for line in LINES])
    for i in range(len(LINES)):  # one chunk = the same batches as embed_sentences: equal to the bit
        assert np.array_equal(arrays[str(i)], expected[i])
    from spacy_elmo.embedding.worker import _EMBEDDERS

    int8_embedders = [e for spec, e in _EMBEDDERS.items() if spec.precision == "int8"]  # this process's worker
    assert int8_embedders and all(e.bilm.float_products_released for e in int8_embedders)  # LSTM weights held once, in int8
    assert not np.array_equal(arrays["0"][1:], bilm.embed_sentences([LINES[0].split()])[0][1:])
