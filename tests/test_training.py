"""biLM pretraining, resume, distributed training, fine-tuning and export on tiny corpora."""
import gzip
import json
import os
import random
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from spacy_elmo import load_bilm
from spacy_elmo.training import TrainConfig, load_language_model, perplexity, prepare_corpus, train
from spacy_elmo.training.baseline import unigram_perplexity
from spacy_elmo.training.trainer import save_checkpoint

from .conftest import ALLENNLP

GENERAL = {
    "det": ["the", "a", "every", "one"],
    "adj": ["old", "quiet", "brave", "small", "dark", "happy"],
    "noun": ["dog", "king", "river", "house", "sailor", "garden", "horse", "letter"],
    "verb": ["sees", "finds", "follows", "loves", "keeps", "leaves"],
}
DOMAIN = {
    "det": ["the", "a", "each"],
    "adj": ["mutant", "mouse", "nuclear", "expressed", "retinal"],
    "noun": ["protein", "gene", "receptor", "cell", "embryo", "allele", "kinase"],
    "verb": ["binds", "regulates", "inhibits", "activates", "encodes"],
}


def sentences(words, n, seed):
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        s = f"{rng.choice(words['det']).capitalize()} {rng.choice(words['adj'])} {rng.choice(words['noun'])} {rng.choice(words['verb'])} {rng.choice(words['det'])} {rng.choice(words['noun'])}."
        out.append(s)
    return out


def write_corpus(folder: Path, words, seed=0, n_train=600) -> Path:
    folder.mkdir(parents=True)
    (folder / "a.txt").write_text("\n\n".join(sentences(words, n_train // 2, seed)) + "\n", encoding="utf-8")
    with gzip.open(folder / "b.txt.gz", "wt", encoding="utf-8") as fh:
        fh.write("\n\n".join(sentences(words, n_train // 2, seed + 1)))
    (folder / "valid.txt").write_text("\n\n".join(sentences(words, 80, seed + 2)), encoding="utf-8")
    (folder / "test.txt").write_text("\n\n".join(sentences(words, 80, seed + 3)), encoding="utf-8")
    rows = ["file\tsplit", "a.txt\ttrain", "b.txt.gz\ttrain", "valid.txt\tvalid", "test.txt\ttest"]
    (folder / "manifest.tsv").write_text("\n".join(rows) + "\n")
    return folder


def tiny_config(data_dir, out_dir, **kw):
    values = dict(
        data_dir=str(data_dir), out_dir=str(out_dir), lstm_dim=32, projection_dim=16, char_dim=8,
        filters=[[1, 16], [2, 16], [3, 32]], n_highway=1, max_steps=60, warmup_steps=5, lr=1e-2,
        max_tokens=512, log_every=10, eval_every=1000, eval_sentences=100, checkpoint_every=20, threads=1, dropout=0.0,
    )
    values.update(kw)
    return TrainConfig(**values)


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpora")
    general = prepare_corpus([write_corpus(root / "general", GENERAL)], root / "general-prep")
    domain = prepare_corpus([write_corpus(root / "domain", DOMAIN, seed=10)], root / "domain-prep")
    return root, general, domain


@pytest.fixture(scope="module")
def pretrained(prepared, tmp_path_factory):
    root = prepared[0]
    out = tmp_path_factory.mktemp("pretrained")
    result = train(tiny_config(root / "general-prep", out))
    return out, result


def test_prepare_splits_vocab_and_bad_utf8(tmp_path):
    folder = write_corpus(tmp_path / "c", GENERAL, n_train=40)
    with (folder / "a.txt").open("ab") as fh:
        fh.write(b"\n\nA broken \xff\xfe line\n\nThe end .\n")
    stats = prepare_corpus([folder], tmp_path / "prep", min_count=2, max_vocab=20)
    assert stats["train"].skipped_lines == 1 and stats["train"].files == 2
    assert stats["valid"].sentences == 80 and stats["test"].sentences == 80
    vocab = [line.split("\t") for line in (tmp_path / "prep" / "vocab.txt").read_text().splitlines()]
    assert [t for t, _ in vocab[:3]] == ["<S>", "</S>", "<UNK>"] and len(vocab) == 20
    counts = [int(c) for _, c in vocab[3:]]
    assert counts == sorted(counts, reverse=True) and min(counts) >= 2
    first = (tmp_path / "prep" / "train" / "shard-00000.txt").read_text().splitlines()[0].split(" ")
    assert first[-1] == "." and len(first) == 7  # tokenized, one sentence per line


def test_pretraining_learns_far_better_than_unigram(prepared, pretrained):
    root = prepared[0]
    out, result = pretrained
    model, vocab = load_language_model(out / "model")
    test = perplexity(model, vocab, root / "general-prep", "test")
    unigram = unigram_perplexity(vocab, root / "general-prep", "test")
    assert test["ppl_avg"] < 0.5 * unigram, (test, unigram)
    assert abs(test["ppl_avg"] - (test["ppl_fwd"] + test["ppl_bwd"]) / 2) < 1e-9
    records = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert records[-1]["valid_ppl_avg"] < records[0]["train_ppl_fwd"]
    assert (out / "learning_curve.png").stat().st_size > 1000
    assert (out / "checkpoints" / "last.pt").is_file()


def test_perplexity_over_common_words_collapses_the_rest_into_one_event(prepared, pretrained, tmp_path):
    """Models with different vocabularies compare over the words both hold plus one 'other word':
    all words -> the ordinary figure; no words -> 1; any set in between -> at most the ordinary figure."""
    root = prepared[0]
    model, vocab = load_language_model(pretrained[0] / "model")
    data = root / "general-prep"
    full = perplexity(model, vocab, data, "test")
    every = perplexity(model, vocab, data, "test", common_words=vocab.tokens)
    assert every["ppl_avg"] == pytest.approx(full["ppl_avg"], rel=1e-5) and every["common_types"] == len(vocab) - 1
    assert perplexity(model, vocab, data, "test", common_words=[])["ppl_avg"] == pytest.approx(1.0)
    half = vocab.tokens[: len(vocab) // 2]
    some = perplexity(model, vocab, data, "test", common_words=half + ["not-a-word"])
    assert 1.0 < some["ppl_avg"] < full["ppl_avg"] and some["common_types"] == len(half) - 1  # <UNK> is always "other"
    # the command line: against a vocabulary file, and a path without one is one line
    other = tmp_path / "vocab.txt"
    other.write_text("".join(f"{t}\t1\n" for t in half), encoding="utf-8")
    out = tmp_path / "ppl.json"
    cmd = [sys.executable, "-m", "spacy_elmo", "evaluate", str(pretrained[0] / "model"), str(data), "--common-with", str(other), "-o", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text())["common"]["ppl_avg"] == pytest.approx(some["ppl_avg"], rel=1e-5)
    (tmp_path / "empty").mkdir()
    bad = subprocess.run(cmd[:-4] + ["--common-with", str(tmp_path / "empty")], capture_output=True, text=True)
    assert bad.returncode != 0 and "--common-with" in bad.stdout + bad.stderr


def test_exported_model_works_in_the_component_and_original_format(pretrained, tmp_path):
    out = pretrained[0]
    bilm = load_bilm(out / "model")
    cmd = [sys.executable, "-m", "spacy_elmo", "export", str(out / "model"), str(tmp_path / "orig")]
    assert subprocess.run(cmd, capture_output=True).returncode == 0
    again = load_bilm(tmp_path / "orig")
    sents = [["The", "old", "dog", "sees", "a", "river", "."]]
    assert np.array_equal(bilm.embed_sentences(sents)[0], again.embed_sentences(sents)[0])
    import spacy

    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config={"weights": str(out / "model")})
    assert nlp("The brave king leaves.").tensor.shape == (5, 32)


def test_resume_after_interruption_is_exact(prepared, tmp_path):
    data = prepared[0] / "general-prep"
    straight = tmp_path / "straight"
    train(tiny_config(data, straight, max_steps=12, checkpoint_every=4, dropout=0.2, n_samples=20))
    interrupted = tmp_path / "interrupted"
    assert train(tiny_config(data, interrupted, max_steps=12, checkpoint_every=4, dropout=0.2, n_samples=20), interrupt_at=7)["interrupted"]
    assert not (interrupted / "model").exists()
    train(tiny_config(data, interrupted, max_steps=12, checkpoint_every=4, dropout=0.2, n_samples=20), resume=True)
    a = torch.load(straight / "checkpoints" / "last.pt", weights_only=False)
    b = torch.load(interrupted / "checkpoints" / "last.pt", weights_only=False)
    assert a["step"] == b["step"] == 12 and a["position"] == b["position"]
    for name, tensor in a["model"].items():
        assert torch.equal(tensor, b["model"][name]), name
    steps = [json.loads(x)["step"] for x in (interrupted / "metrics.jsonl").read_text().splitlines() if "train_ppl_fwd" in x]
    assert steps == sorted(steps)


def test_checkpoint_write_is_atomic(tmp_path, monkeypatch):
    path = tmp_path / "last.pt"
    save_checkpoint(path, {"step": 1})

    def crash(obj, f, *args, **kwargs):
        Path(f).write_bytes(b"partial")
        raise KeyboardInterrupt

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(path, {"step": 2})
    monkeypatch.undo()
    assert torch.load(path, weights_only=False) == {"step": 1}


def test_finetune_lowers_in_domain_perplexity(prepared, pretrained, tmp_path):
    root = prepared[0]
    base = pretrained[0] / "model"
    model, vocab = load_language_model(base)
    before = perplexity(model, vocab, root / "domain-prep", "test")
    out = tmp_path / "ft"
    cmd = [sys.executable, "-m", "spacy_elmo", "finetune", str(base), str(root / "domain-prep"), str(out),
           "--max-steps", "40", "--threads", "1", "--lr", "0.005", "--warmup-steps", "5"]
    result = subprocess.run(cmd, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-2000:]
    tuned, tuned_vocab = load_language_model(out / "model")
    assert tuned_vocab.tokens == vocab.tokens  # the vocabulary is kept
    after = perplexity(tuned, tuned_vocab, root / "domain-prep", "test")
    assert after["ppl_avg"] < 0.7 * before["ppl_avg"], (before, after)


def test_finetune_from_original_weights_without_softmax(prepared, tmp_path):
    root = prepared[0]
    out = tmp_path / "ft-orig"
    config = tiny_config(root / "domain-prep", out, init_model=str(ALLENNLP), max_steps=30, lr=3e-3)
    train(config)
    model, vocab = load_language_model(out / "model")
    records = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    first = next(r for r in records if "train_ppl_fwd" in r)
    assert records[-1]["valid_ppl_avg"] < first["train_ppl_fwd"]
    assert vocab.tokens[:3] == ["<S>", "</S>", "<UNK>"] and len(vocab) == len((root / "domain-prep" / "vocab.txt").read_text().splitlines())


def test_finetune_with_the_corpus_vocabulary_keeps_shared_rows_and_learns(prepared, pretrained, tmp_path):
    # vocab_from="corpus": a new text brings its own vocabulary; the biLM and the shared words'
    # output vectors carry over, so the start is far better than a fresh softmax
    from spacy_elmo.training.trainer import build_model, copy_softmax_rows
    from spacy_elmo.training.data import Vocabulary

    root = prepared[0]
    base = pretrained[0] / "model"
    old_model, old_vocab = load_language_model(base)
    corpus_vocab = Vocabulary.load(root / "domain-prep" / "vocab.txt")
    config = tiny_config(root / "domain-prep", tmp_path / "ft-vocab", init_model=str(base), vocab_from="corpus", max_steps=20, lr=3e-3)
    model = build_model(config, corpus_vocab)
    assert model.softmax.out_features == len(corpus_vocab)
    shared = [t for t in corpus_vocab.tokens if t in old_vocab.index]
    assert 3 < len(shared) < len(corpus_vocab)  # both kinds of rows are exercised
    for token in shared:
        assert torch.equal(model.softmax.weight[corpus_vocab.index[token]], old_model.softmax.weight[old_vocab.index[token]])
    unigram = torch.tensor([float(c) for c in corpus_vocab.counts]).add(1).log()
    assert torch.allclose(model.softmax.bias - model.softmax.bias.max(), unigram - unigram.max(), atol=1e-5)
    with pytest.raises(ValueError, match="init softmax has shape"):
        copy_softmax_rows(model, old_model.softmax.weight[:, :3], old_vocab, corpus_vocab)
    train(config)
    tuned, tuned_vocab = load_language_model(tmp_path / "ft-vocab" / "model")
    assert tuned_vocab.tokens == corpus_vocab.tokens
    assert perplexity(tuned, tuned_vocab, root / "domain-prep", "test")["ppl_avg"] < len(corpus_vocab)
    with pytest.raises(ValueError, match="vocab_from must be"):
        tiny_config(root / "domain-prep", tmp_path / "x", vocab_from="model")


@pytest.mark.slow
def test_two_process_ddp_with_a_time_budget_stops_together_and_stays_identical(prepared, tmp_path):
    # the time budget sets the learning rate and the stop: every rank must read rank 0's clock
    data = prepared[0] / "general-prep"
    config = tmp_path / "cfg.json"
    cfg = tiny_config(data, tmp_path / "ddp", max_steps=10**6, max_minutes=0.1, checkpoint_every=10**6).__dict__
    config.write_text(json.dumps(cfg))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", "spacy_elmo",
           "pretrain", str(data), str(tmp_path / "ddp"), "--config", str(config), "--dump-weights", str(tmp_path / "dump")]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    final = json.loads(result.stdout.strip().splitlines()[-1])
    assert final["stopped_early"] and final["step"] > 1
    a = torch.load(tmp_path / "dump" / "rank0.pt")
    b = torch.load(tmp_path / "dump" / "rank1.pt")
    for name in a:
        assert torch.equal(a[name], b[name]), name


@pytest.mark.slow
def test_two_process_ddp_replicas_stay_identical(prepared, tmp_path):
    data = prepared[0] / "general-prep"
    config = tmp_path / "cfg.json"
    cfg = tiny_config(data, tmp_path / "ddp", max_steps=6, checkpoint_every=3, dropout=0.1).__dict__
    config.write_text(json.dumps(cfg))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", "spacy_elmo",
           "pretrain", str(data), str(tmp_path / "ddp"), "--config", str(config), "--dump-weights", str(tmp_path / "dump")]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    a = torch.load(tmp_path / "dump" / "rank0.pt")
    b = torch.load(tmp_path / "dump" / "rank1.pt")
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    assert json.loads(result.stdout.strip().splitlines()[-1])["step"] == 6
    exported = load_bilm(tmp_path / "ddp" / "model").state_dict()
    assert all(torch.equal(exported[n], a[f"bilm.{n}"]) for n in exported)  # rank 0 exported what it trained
    steps = [json.loads(x) for x in (tmp_path / "ddp" / "metrics.jsonl").read_text().splitlines() if "train_ppl_fwd" in x]
    assert steps and steps[-1]["tokens"] > 0


# ---------------------------------------------------------------- precision and optimizer settings on resume


def _logged_precisions(out):
    return [json.loads(x)["precision"] for x in (out / "metrics.jsonl").read_text().splitlines() if "train_ppl_fwd" in x]


def test_resume_keeps_the_checkpoints_precision_unless_told(prepared, tmp_path, monkeypatch):
    # before: --resume took the saved "auto" and resolved it again, so a run moved to a machine
    # without bf16 went on in fp32 without a word
    from dataclasses import asdict

    import spacy_elmo.training.precision as precision
    from spacy_elmo.cli import main

    data = prepared[0] / "general-prep"
    kw = dict(max_steps=4, checkpoint_every=2, log_every=1, n_samples=20)
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: True)
    for name in ("kept", "switched"):
        assert train(tiny_config(data, tmp_path / name, precision="auto", **kw), interrupt_at=2)["interrupted"]
    assert torch.load(tmp_path / "kept" / "checkpoints" / "last.pt", weights_only=False)["precision"] == "bf16"
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: False)  # resumed on another machine
    settings = {k: v for k, v in asdict(tiny_config(data, tmp_path, **kw)).items() if k != "precision"}
    (tmp_path / "cfg.json").write_text(json.dumps(settings))
    args = ["pretrain", str(data), "OUT", "--config", str(tmp_path / "cfg.json"), "--resume"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main([a.replace("OUT", str(tmp_path / "kept")) for a in args]) == 0
    assert not [w for w in caught if "resuming a run" in str(w.message)]  # nothing was asked: nothing to say
    assert _logged_precisions(tmp_path / "kept") == ["bfloat16"] * 4
    with pytest.warns(UserWarning, match=r"resuming a run trained in bf16 with precision fp32-fused \(precision='auto' on cpu\)"):
        assert main([a.replace("OUT", str(tmp_path / "switched")) for a in args] + ["--precision", "auto"]) == 0
    assert _logged_precisions(tmp_path / "switched") == ["bfloat16"] * 2 + ["float32-fused"] * 2


def test_resume_keeps_this_runs_optimizer_settings(prepared, tmp_path, monkeypatch):
    # before: the checkpoint's param groups came back whole, so an fp32 run resumed from a bf16
    # checkpoint stepped with the fused AdamW of bf16 runs, not the fp32 implementation
    import spacy_elmo.training.trainer as trainer

    data = prepared[0] / "general-prep"
    kw = dict(max_steps=4, checkpoint_every=2, n_samples=20)
    assert train(tiny_config(data, tmp_path / "run", precision="bf16", **kw), interrupt_at=2)["interrupted"]
    saved = torch.load(tmp_path / "run" / "checkpoints" / "last.pt", weights_only=False)["optimizer"]
    assert saved["param_groups"][0]["fused"] is True
    flags = []
    step = trainer._step

    def spy(config, wrapped, model, optimizer, *args):
        flags.append({k: v for k, v in optimizer.param_groups[0].items() if k not in ("params", "lr")})
        return step(config, wrapped, model, optimizer, *args)

    monkeypatch.setattr(trainer, "_step", spy)
    with pytest.warns(UserWarning, match="trained in bf16 with precision fp32"):
        train(tiny_config(data, tmp_path / "run", precision="fp32", **kw), resume=True)
    fresh = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=1.0).param_groups[0]  # what an fp32 run builds
    assert flags and all(f["fused"] is fresh["fused"] and f["foreach"] is fresh["foreach"] for f in flags)
    assert all(f["fused"] is not True for f in flags)


def test_restore_optimizer_loads_the_state_and_keeps_the_settings():
    from spacy_elmo.training.checkpoint import restore_optimizer

    params = [torch.nn.Parameter(torch.ones(3))]
    bf16_run = torch.optim.AdamW(params, lr=0.5, fused=True)
    params[0].grad = torch.ones(3)
    bf16_run.step()
    fp32_run = torch.optim.AdamW(params, lr=0.1)
    restore_optimizer(fp32_run, bf16_run.state_dict())
    group = fp32_run.param_groups[0]
    assert not group["fused"] and group["lr"] == 0.1
    assert torch.equal(fp32_run.state[params[0]]["exp_avg"], bf16_run.state[params[0]]["exp_avg"])
    with pytest.raises(ValueError, match="2 parameter groups, this run's 1"):
        restore_optimizer(fp32_run, {**bf16_run.state_dict(), "param_groups": bf16_run.state_dict()["param_groups"] * 2})


def test_a_cpu_clock_budget_stops_the_run_on_this_process_cpu_time(prepared, tmp_path):
    """clock "cpu": max_minutes counts the process's CPU minutes (a pilot's arms that share a machine get
    the same budget), and every record says which clock its minutes are on."""
    with pytest.raises(ValueError, match="clock must be one of wall, cpu"):
        tiny_config(prepared[0] / "general-prep", tmp_path / "x", clock="gpu")
    result = train(tiny_config(prepared[0] / "general-prep", tmp_path / "cpu", clock="cpu", max_minutes=0.02, max_steps=100000, log_every=2))
    assert result["stopped_early"] and result["step"] < 100000
    records = [json.loads(x) for x in (tmp_path / "cpu" / "metrics.jsonl").read_text().splitlines()]
    train_records = [r for r in records if "loss" in r]
    assert train_records and all(r["clock"] == "cpu" for r in train_records)
    assert 0.5 < max(r["elapsed_s"] for r in train_records) < 30  # seconds on the run's clock
    assert torch.load(tmp_path / "cpu" / "checkpoints" / "last.pt", weights_only=False)["elapsed_minutes"] >= 0.02
