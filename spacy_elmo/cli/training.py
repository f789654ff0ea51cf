"""Commands ``prepare``, ``pretrain``, ``finetune``, ``evaluate``, ``snapshot``, ``ship``, ``average``, ``refit-bias``, ``widen`` and ``package``: training a biLM and shipping it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict, List, Optional

from ..threads import DEFAULT_THREADS, oversubscription_message
from ._util import (
    PROG,
    Arg,
    Opt,
    UserError,
    app,
    apply_threads,
    lang_code,
    model_path,
    msg,
    prepared_dir,
    refuse_overwrite,
    use_line_progress,
    user_errors,
)


@app.command("prepare")
@user_errors
def prepare_cli(
    # fmt: off
    inputs: List[Path] = Arg(
        ..., help="UTF-8 text files or folders (.txt, .gz); a folder's manifest.tsv (file, split) assigns train/valid/test"
    ),
    out_dir: Path = Opt(..., "--out-dir", "-o", help="Folder for the sentence shards, vocab.txt and stats.json"),
    lang: str = Opt(
        "en", "--lang", "-l", help="spaCy language code of the text (en, de, ru, zh, ar, ...): its tokenizer and sentence splitter"
    ),
    min_count: int = Opt(1, "--min-count", help="Keep words seen at least this often in the vocabulary"),
    max_vocab: Optional[int] = Opt(None, "--max-vocab", help="At most this many vocabulary entries (specials included). Default: no limit"),
    shard_size: int = Opt(100_000, "--shard-size", help="Sentences per shard file"),
    max_files: Optional[int] = Opt(None, "--max-files", help="Use only the first N files of each split (quick runs). Default: all"),
    layout: str = Opt(
        "auto",
        "--layout",
        help="line: one sentence or document per line; paragraph: blank-line separated paragraphs; auto: decide per file from its first lines",
    ),
    held_out: float = Opt(
        0.02,
        "--held-out",
        help="Fraction of the training text moved to valid + test (half each) when no valid/test files are given; 0 = none",
    ),
    # fmt: on
) -> None:
    """Tokenize text into sentence shards and a frequency-sorted vocabulary (the input of pretrain/finetune)."""
    from ..training.corpus import LAYOUTS, prepare_corpus

    missing = [str(p) for p in inputs if not p.exists()]
    if missing:
        raise UserError(f"not found: {', '.join(missing)}. Pass existing text files or folders.")
    use_line_progress()
    if layout not in LAYOUTS:
        raise UserError(f"--layout {layout!r}: use one of {', '.join(LAYOUTS)}.")
    if not 0 <= held_out < 1:
        raise UserError(f"--held-out {held_out}: give a fraction in [0, 1), e.g. 0.02.")
    lang_code(lang)
    stats = prepare_corpus(
        inputs,
        out_dir,
        lang=lang,
        min_count=min_count,
        max_vocab=max_vocab,
        shard_size=shard_size,
        max_files=max_files,
        layout=layout,
        held_out=held_out,
    )
    for split, s in stats.items():
        msg.text(
            f"{split:>5}: {s.files} files, {s.lines:,} lines, {s.sentences:,} sentences, {s.tokens:,} tokens; "
            f"{s.skipped_lines} bad lines skipped, {s.split_units} over-long units split"
        )
    if stats["valid"].sentences == 0:
        msg.warn("no validation text: list valid files in a manifest.tsv, or use --held-out > 0 (pretrain/finetune evaluate on it)")
    msg.good(f"wrote {out_dir}")


TRAIN_OVERRIDES = (
    "max_steps",
    "max_minutes",
    "time_cap_minutes",
    "lr",
    "warmup_steps",
    "threads",
    "max_tokens",
    "seed",
    "eval_every",
    "checkpoint_every",
    "precision",
    "malloc_tuning",
    "lang",
)


def _train(
    init_model: Optional[Path],
    data_dir: Path,
    out_dir: Path,
    config: Optional[Path],
    resume: bool,
    dump_weights: Optional[Path],
    overrides: Dict[str, Any],
) -> None:
    import srsly

    from ..training.corpus import prepared_lang
    from ..training.trainer import TrainConfig, saved_config, train

    prepared_dir(data_dir)
    recorded = prepared_lang(data_dir)
    if overrides.get("lang") is not None:
        lang_code(overrides["lang"])
        if recorded is not None and overrides["lang"] != recorded:
            raise UserError(
                f"--lang {overrides['lang']}: {data_dir} holds {recorded!r} text (prepare --lang {recorded}, in its stats.json); "
                f"pass --lang {recorded}, or prepare the text again with --lang {overrides['lang']}."
            )
    elif recorded is not None:
        overrides = {**overrides, "lang": recorded}
    values: Dict[str, Any] = {}
    if config is not None:
        if not config.is_file():
            raise UserError(f"--config {config} not found: pass a JSON file of TrainConfig fields (e.g. project/configs/tiny.json).")
        try:
            values = dict(srsly.read_json(config))
        except ValueError as err:
            raise UserError(f"--config {config} is not valid JSON ({err}).") from None
    values.update(data_dir=str(data_dir), out_dir=str(out_dir))
    if init_model is not None:
        values["init_model"] = str(init_model)
    values.update({k: v for k, v in overrides.items() if v is not None})
    if resume:  # what the command line leaves unsaid comes from the run being resumed; what it says must agree
        # except the precision: unsaid, the trainer keeps the one the checkpoint trained in (auto resolved there)
        saved = {k: v for k, v in (saved_config(out_dir) or {}).items() if k != "precision"}
        values = {**saved, **values}
    known = set(TrainConfig.__dataclass_fields__)
    unknown = sorted(set(values) - known)
    if unknown:
        raise UserError(f"--config {config}: unknown field(s) {', '.join(unknown)}; known fields: {', '.join(sorted(known))}.")
    if values.get("threads") and os.environ.get("WORLD_SIZE", "1") == "1":
        warning = oversubscription_message(int(values["threads"]))
        if warning:
            msg.warn(warning)
    use_line_progress()
    train_config = TrainConfig(**values)
    result = train(train_config, resume=resume, dump_weights=dump_weights)
    if os.environ.get("RANK", "0") == "0":  # one line, from the first process of a torchrun job
        if result.get("stopped_by") == "time_cap_minutes":
            msg.warn(
                f"stopped by the time cap ({train_config.time_cap_minutes:g} minutes) at step {result['step']:,} of "
                f"{train_config.max_steps:,}: not the planned run; --resume continues it"
            )
        print(json.dumps(result))


# the options that pretrain and finetune share
_CONFIG_HELP = "JSON file of TrainConfig fields (architecture, optimiser, batch sizes); the options below override it. Default: none (TrainConfig's defaults)"
_RESUME_HELP = "Continue from OUT_DIR/checkpoints/last.pt if it exists (exact resume: model, optimiser, RNG, data position). Default: off"
_FROM_CONFIG = "Default: from --config, else TrainConfig's"


def _train_default(name: str) -> str:
    """TrainConfig's default of a field, for the help text (read from the dataclass, so it cannot drift)."""
    try:
        from ..training.trainer import TrainConfig

        return f"({TrainConfig.__dataclass_fields__[name].default:g})"
    except Exception:  # pragma: no cover - help text only
        return ""


_TRAIN_OPTIONS = {  # one definition each; typer needs the parameters spelled out in each signature
    "config": Opt(None, "--config", "-c", help=_CONFIG_HELP),
    "resume": Opt(False, "--resume", help=_RESUME_HELP),
    "max_steps": Opt(None, "--max-steps", help=f"Optimiser steps. {_FROM_CONFIG} {_train_default('max_steps')}"),
    "max_minutes": Opt(
        None,
        "--max-minutes",
        help=f"Stop and export after this wall time, the decay following the clock (not reproducible on another machine); 0 = no limit. {_FROM_CONFIG} {_train_default('max_minutes')}",
    ),
    "time_cap_minutes": Opt(
        None,
        "--time-cap-minutes",
        help=f"Safety cap on wall time: stop there (resumable) without changing the step schedule, and say so; 0 = none. {_FROM_CONFIG} {_train_default('time_cap_minutes')}",
    ),
    "lr": Opt(None, "--lr", help=f"Peak learning rate. {_FROM_CONFIG} {_train_default('lr')}"),
    "warmup_steps": Opt(None, "--warmup-steps", help=f"Linear warm-up steps. {_FROM_CONFIG} {_train_default('warmup_steps')}"),
    "threads": Opt(
        None, "--threads", "-t", help=f"CPU threads per process; 0 = torch's default. {_FROM_CONFIG} {_train_default('threads')}"
    ),
    "max_tokens": Opt(
        None, "--max-tokens", help=f"Token budget per batch (rows x padded length). {_FROM_CONFIG} {_train_default('max_tokens')}"
    ),
    "seed": Opt(None, "--seed", help=f"Random seed. {_FROM_CONFIG} {_train_default('seed')}"),
    "eval_every": Opt(None, "--eval-every", help=f"Validation perplexity every N steps. {_FROM_CONFIG} {_train_default('eval_every')}"),
    "checkpoint_every": Opt(
        None, "--checkpoint-every", help=f"Checkpoint every N steps. {_FROM_CONFIG} {_train_default('checkpoint_every')}"
    ),
    "precision": Opt(
        None,
        "--precision",
        help="Training products: fp32, fp32-fused (the same float32 maths through the training kernels: ~1.5x fp32's speed on a CPU without native bf16), bf16 (float32 master weights, bf16 matrix products; fast on CPUs with AMX/AVX512-BF16) or auto (bf16 only on a CPU with AMX/AVX512-BF16; fp32 elsewhere, a GPU included). Default: from --config, else fp32; with --resume, the checkpoint's (a different one is used with a warning)",
    ),
    "malloc_tuning": Opt(
        None,
        "--malloc-tuning/--no-malloc-tuning",
        help="Keep freed large buffers in the heap between steps (glibc's mallopt: faster steps, resident memory stays at the peak; SPACY_ELMO_MALLOC_TUNING=0 also turns it off). Default: from --config, else on",
    ),
    "dump_weights": Opt(None, "--dump-weights", hidden=True, help="Testing: each rank writes its final weights here"),
    "lang": Opt(
        None,
        "--lang",
        "-l",
        help="spaCy language code of the text, recorded in train_config.json; must be the one `prepare --lang` recorded in "
        "DATA_DIR/stats.json. Default: that one (en for a folder that records none)",
    ),
}


@app.command("pretrain")
@user_errors
def pretrain_cli(
    # fmt: off
    data_dir: Path = Arg(..., help="Output folder of `prepare`"),
    out_dir: Path = Arg(..., help="Folder for checkpoints, metrics.jsonl, learning_curve.png and the exported model/"),
    config: Optional[Path] = _TRAIN_OPTIONS["config"],
    resume: bool = _TRAIN_OPTIONS["resume"],
    max_steps: Optional[int] = _TRAIN_OPTIONS["max_steps"],
    max_minutes: Optional[float] = _TRAIN_OPTIONS["max_minutes"],
    time_cap_minutes: Optional[float] = _TRAIN_OPTIONS["time_cap_minutes"],
    lr: Optional[float] = _TRAIN_OPTIONS["lr"],
    warmup_steps: Optional[int] = _TRAIN_OPTIONS["warmup_steps"],
    threads: Optional[int] = _TRAIN_OPTIONS["threads"],
    max_tokens: Optional[int] = _TRAIN_OPTIONS["max_tokens"],
    seed: Optional[int] = _TRAIN_OPTIONS["seed"],
    eval_every: Optional[int] = _TRAIN_OPTIONS["eval_every"],
    checkpoint_every: Optional[int] = _TRAIN_OPTIONS["checkpoint_every"],
    precision: Optional[str] = _TRAIN_OPTIONS["precision"],
    malloc_tuning: Optional[bool] = _TRAIN_OPTIONS["malloc_tuning"],
    lang: Optional[str] = _TRAIN_OPTIONS["lang"],
    dump_weights: Optional[Path] = _TRAIN_OPTIONS["dump_weights"],
    # fmt: on
) -> None:
    """Train a biLM from scratch on prepared text (runs under torchrun for DistributedDataParallel)."""
    overrides = {name: value for name, value in locals().items() if name in TRAIN_OVERRIDES}
    _train(None, data_dir, out_dir, config, resume, dump_weights, overrides)


@app.command("finetune")
@user_errors
def finetune_cli(
    # fmt: off
    model: Path = Arg(..., help="biLM to start from: a spacy-elmo model folder, an options.json + .hdf5 folder, or en_default"),
    data_dir: Path = Arg(..., help="Output folder of `prepare` on the in-domain text"),
    out_dir: Path = Arg(..., help="Folder for checkpoints, metrics.jsonl, learning_curve.png and the exported model/"),
    config: Optional[Path] = _TRAIN_OPTIONS["config"],
    resume: bool = _TRAIN_OPTIONS["resume"],
    max_steps: Optional[int] = _TRAIN_OPTIONS["max_steps"],
    max_minutes: Optional[float] = _TRAIN_OPTIONS["max_minutes"],
    time_cap_minutes: Optional[float] = _TRAIN_OPTIONS["time_cap_minutes"],
    lr: Optional[float] = _TRAIN_OPTIONS["lr"],
    warmup_steps: Optional[int] = _TRAIN_OPTIONS["warmup_steps"],
    threads: Optional[int] = _TRAIN_OPTIONS["threads"],
    max_tokens: Optional[int] = _TRAIN_OPTIONS["max_tokens"],
    seed: Optional[int] = _TRAIN_OPTIONS["seed"],
    eval_every: Optional[int] = _TRAIN_OPTIONS["eval_every"],
    checkpoint_every: Optional[int] = _TRAIN_OPTIONS["checkpoint_every"],
    precision: Optional[str] = _TRAIN_OPTIONS["precision"],
    malloc_tuning: Optional[bool] = _TRAIN_OPTIONS["malloc_tuning"],
    lang: Optional[str] = _TRAIN_OPTIONS["lang"],
    dump_weights: Optional[Path] = _TRAIN_OPTIONS["dump_weights"],
    # fmt: on
) -> None:
    """Continue the language-model objective from a biLM on in-domain text, keeping its vocabulary."""
    overrides = {name: value for name, value in locals().items() if name in TRAIN_OVERRIDES}
    _train(model_path(model), data_dir, out_dir, config, resume, dump_weights, overrides)


def _vocab_file(value: Path) -> Path:
    """``--common-with``: a vocab.txt, a model folder holding one, or a model's name (en_default, ...)."""
    if value.is_file():
        return value
    found = (value if value.is_dir() else model_path(value, what="--common-with")) / "vocab.txt"
    if not found.is_file():
        raise UserError(f"--common-with {value}: no vocab.txt there (give a model trained by spacy-elmo, or its vocab.txt)")
    return found


@app.command("evaluate")
@user_errors
def evaluate_cli(
    # fmt: off
    model: Path = Arg(..., help="Model trained or fine-tuned by spacy-elmo (it needs its softmax), or en_default"),
    data_dir: Path = Arg(..., help="Output folder of `prepare`"),
    split: str = Opt("test", "--split", "-s", help="Which split to score: train, valid or test"),
    limit: int = Opt(0, "--limit", help="Score only the first N sentences; 0 = all"),
    max_tokens: int = Opt(4096, "--max-tokens", help="Token budget per batch"),
    threads: int = Opt(DEFAULT_THREADS, "--threads", "-t", help="CPU threads (0 = one per core)"),
    output: Optional[Path] = Opt(None, "--output", "-o", help="Also write the figures to this JSON file. Default: none"),
    common_with: Optional[Path] = Opt(
        None,
        "--common-with",
        help="Another model (or its vocab.txt): also score over the words both vocabularies hold plus one 'other word' event, "
        "so that models with different vocabularies compare. Default: none",
    ),
    # fmt: on
) -> None:
    """Held-out perplexity (forward, backward, average; full softmax) beside a unigram baseline."""
    from ..training.baseline import unigram_perplexity
    from ..training.data import Vocabulary
    from ..training.trainer import SOFTMAX_NAME, load_language_model, perplexities

    path = model_path(model)
    if not (path / SOFTMAX_NAME).is_file():
        raise UserError(
            f"{model} has no softmax ({SOFTMAX_NAME}): perplexity needs a biLM trained by spacy-elmo. Published ELMo "
            f"weights ship without one; fine-tune first ({PROG} finetune {model} DATA OUT) and evaluate OUT/model."
        )
    prepared_dir(data_dir)
    if split not in ("train", "valid", "test"):
        raise UserError(f"--split {split!r}: use train, valid or test.")
    if not any((data_dir / split).glob("shard-*.txt")):
        raise UserError(f"{data_dir} has no {split} sentences: give `prepare` {split} files (manifest.tsv) or use --split valid/train.")
    if output is not None and output.parent != Path("") and not output.parent.is_dir():
        output.parent.mkdir(parents=True, exist_ok=True)
    apply_threads(threads)
    lm, vocab = load_language_model(path)
    shared = None if common_with is None else set(vocab.tokens) & set(Vocabulary.load(_vocab_file(common_with)).tokens)
    result: Dict[str, Any] = {"model": str(model), "data": str(data_dir), "split": split}
    full, common = perplexities(lm, vocab, data_dir, split, max_tokens=max_tokens, limit=limit, common_words=shared)
    result.update(full)
    result["unigram_ppl"] = unigram_perplexity(vocab, data_dir, split, limit=limit)
    if common is not None:
        result["common"] = {"with": str(common_with), **common}
        msg.info(
            f"over the {common['common_types']:,} words both vocabularies hold plus 'other': average {common['ppl_avg']:.2f} "
            f"(forward {common['ppl_fwd']:.2f}, backward {common['ppl_bwd']:.2f})"
        )
    msg.good(
        f"{split} perplexity: forward {result['ppl_fwd']:.2f}, backward {result['ppl_bwd']:.2f}, average {result['ppl_avg']:.2f} "
        f"over {result['tokens']:,} predictions (unigram baseline {result['unigram_ppl']:.1f})"
    )
    if output is not None:
        from ..files import write_json

        write_json(output, result, indent=2)


@app.command("snapshot")
@user_errors
def snapshot_cli(
    # fmt: off
    run_dir: Path = Arg(..., help="Output folder of a running or interrupted `pretrain` or `finetune` (it has checkpoints/last.pt)"),
    dest: Path = Arg(..., help="Model folder to write (biLM, softmax, vocabulary, snapshot.json), for `evaluate`, the benches and `ship`"),
    force: bool = Opt(False, "--force", help="Overwrite a non-empty DEST. Default: off"),
    # fmt: on
) -> None:
    """Export a training run's last checkpoint as a model folder, without stopping the run."""
    from ..training.snapshot import export_checkpoint

    if not (run_dir / "checkpoints" / "last.pt").is_file():
        raise UserError(f"{run_dir / 'checkpoints' / 'last.pt'} not found: {run_dir} is not a training run folder with a checkpoint.")
    refuse_overwrite(dest, force)
    info = export_checkpoint(run_dir, dest)
    msg.good(f"wrote {dest}: step {info['step']:,}, {info['tokens']:,} tokens, {info['elapsed_minutes']:.1f} minutes of training")


@app.command("ship")
@user_errors
def ship_cli(
    # fmt: off
    run_dir: Path = Arg(
        ..., help="Output folder of `pretrain` or `finetune` (its model/ holds the export), or a model folder such as a snapshot export"
    ),
    dest: Path = Arg(..., help="Folder to write, in the embedded default's layout (softmax stored in float16)"),
    force: bool = Opt(False, "--force", help="Overwrite a non-empty DEST. Default: off"),
    # fmt: on
) -> None:
    """Copy a trained biLM into the layout of the embedded default (the command that made the shipped model)."""
    from ..training.ship import model_folder, ship_model

    try:
        model_folder(run_dir)
    except FileNotFoundError as err:
        raise UserError(str(err)) from None
    refuse_overwrite(dest, force)
    for name, size in ship_model(run_dir, dest).items():
        msg.text(f"{name:<20} {size / 1e6:8.2f} MB")
    msg.good(f"wrote {dest}")


@app.command("average")
@user_errors
def average_cli(
    # fmt: off
    runs: List[Path] = Arg(..., help="Two or more `finetune` output folders (or model folders) that continued one model"),
    out: Path = Opt(..., "--out", "-o", help="Model folder to write: the mean of their weights (and softmax), for `evaluate` and `ship`"),
    force: bool = Opt(False, "--force", help="Overwrite a non-empty OUT. Default: off"),
    # fmt: on
) -> None:
    """Average the weights of runs that continued one model (a uniform model soup); each input's weights verified first."""
    from ..training.average import average_models

    refuse_overwrite(out, force)
    try:
        record = average_models(runs, out)
    except (FileNotFoundError, ValueError) as err:
        raise UserError(str(err)) from None
    msg.good(f"wrote {out}: the mean of {len(record['inputs'])} models (weights SHA-256 {record['weights_sha256'][:12]}...)")


@app.command("refit-bias")
@user_errors
def refit_bias_cli(
    # fmt: off
    model: Path = Arg(..., help="`finetune` output folder (or model folder) with its softmax"),
    data_dir: Path = Opt(
        ...,
        "--data",
        "-d",
        help="Output folder of `prepare` on the corpus the model was trained on (its vocabulary's counts and training sentences)",
    ),
    out: Path = Opt(..., "--out", "-o", help="Model folder to write: MODEL's files with the refit softmax bias, for `evaluate` and `ship`"),
    sentences: int = Opt(4000, "--sentences", help="Training sentences whose states the bias is fitted over"),
    iterations: int = Opt(4, "--iterations", help="Damped scaling steps"),
    rows: bool = Opt(
        False, "--rows", help="Then fit the output vectors too (full softmax, the best read of the valid split kept). Default: off"
    ),
    row_sentences: int = Opt(12000, "--row-sentences", help="With --rows: training sentences the output vectors are fitted over"),
    row_epochs: float = Opt(0.5, "--row-epochs", help="With --rows: passes over their contexts"),
    threads: int = Opt(DEFAULT_THREADS, "--threads", "-t", help="CPU threads (0 = one per core)"),
    force: bool = Opt(False, "--force", help="Overwrite a non-empty OUT. Default: off"),
    # fmt: on
) -> None:
    """Refit the softmax bias to the full softmax's likelihood condition (each word's predicted mass = its count), and with --rows
    the output vectors to the full softmax; the biLM unchanged."""
    from ..training.bias_refit import RefitSettings, refit_model

    prepared_dir(data_dir)
    refuse_overwrite(out, force)
    apply_threads(threads)
    try:
        settings = RefitSettings(sentences=sentences, iterations=iterations, rows=rows, row_sentences=row_sentences, row_epochs=row_epochs)
        record = refit_model(model, data_dir, out, settings, progress=True)
    except (FileNotFoundError, ValueError) as err:
        raise UserError(str(err)) from None
    first, last = record["history"][0], record["history"][-1]
    msg.good(
        f"wrote {out}: bias refit over {record['contexts']:,} contexts; mean |log(count / predicted)| of the 1,000 most frequent "
        f"{first['top1000_mean_abs_log_ratio']:.3f} before the first step, {last['top1000_mean_abs_log_ratio']:.3f} before the last"
    )
    if "rows" in record:
        reads = record["rows"]["reads"]
        best = min(reads, key=lambda r: r["valid_ppl"])
        msg.good(
            f"output vectors fitted over {record['rows']['contexts']:,} contexts: validation perplexity {reads[0]['valid_ppl']:.2f} "
            f"after the bias refit, {best['valid_ppl']:.2f} at the step kept ({best['step']} of {reads[-1]['step']})"
        )


@app.command("widen")
@user_errors
def widen_cli(
    # fmt: off
    model: Path = Arg(..., help="`finetune` output folder (or model folder) with its softmax, an LSTM biLM, or en_default"),
    out: Path = Arg(..., help="Model folder to write: MODEL with wider LSTM cells computing the same function, for `finetune`"),
    cell_dim: int = Opt(..., "--cell-dim", help="LSTM cells per layer and direction after widening (above MODEL's)"),
    seed: int = Opt(
        0,
        "--seed",
        help="Seed of the new cells: which old cell each replicates and the projection shares (or, with zero, their gate weights)",
    ),
    method: str = Opt(
        "copy",
        "--method",
        help="copy: each new cell a replica of an old one, the old projection row split between them (Net2WiderNet); zero: fresh gate weights, projection rows zero",
    ),
    force: bool = Opt(False, "--force", help="Overwrite a non-empty OUT. Default: off"),
    # fmt: on
) -> None:
    """Grow an LSTM biLM's cells without changing its outputs (replicas of its cells, or new cells with zero projection rows), to continue training wider."""
    from ..training.widen import widen_model

    refuse_overwrite(out, force)
    try:
        record = widen_model(model, out, cell_dim, seed=seed, method=method)
    except (FileNotFoundError, ValueError) as err:
        raise UserError(str(err)) from None
    msg.good(
        f"wrote {out}: {record['cell_dim']['from']} -> {record['cell_dim']['to']} cells ({record['method']}), the same outputs (weights SHA-256 {record['weights_sha256'][:12]}...)"
    )


@app.command("package")
@user_errors
def package_cli(
    # fmt: off
    model: Path = Arg(..., help="biLM folder to package (or en_default)"),
    out_dir: Path = Arg(..., help="Pipeline folder to write; spacy.load(OUT_DIR) opens it"),
    lang: str = Opt("en", "--lang", "-l", help="spaCy language code of the pipeline (en, de, ru, zh, ar, ...): its tokenizer"),
    name: str = Opt("elmo", "--name", "-n", help="Pipeline name in meta.json"),
    force: bool = Opt(False, "--force", "-f", help="Overwrite OUT_DIR if it exists. Default: off"),
    # fmt: on
) -> None:
    """Write a spaCy pipeline folder with the `elmo` component and the biLM inside."""
    import shutil

    import spacy

    path = model_path(model)
    lang_code(lang)
    refuse_overwrite(out_dir, force)
    if out_dir.exists() and force:
        shutil.rmtree(out_dir) if out_dir.is_dir() else out_dir.unlink()
    nlp = spacy.blank(lang)
    nlp.add_pipe("elmo", config={"weights": str(path)})
    nlp.initialize()
    nlp.meta["name"] = name
    nlp.meta["description"] = f"ELMo vectors from the biLM in {path.name} (spacy-elmo)"
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    nlp.to_disk(out_dir)
    doc = spacy.load(out_dir)("A quick check .")
    msg.good(f"wrote {out_dir}: spacy.load() gives ELMo vectors of shape {doc.tensor.shape}")
