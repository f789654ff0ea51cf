"""spacy-elmo's command line, in spaCy's style (typer, wasabi).

Three ways in, the same commands: ``python -m spacy_elmo COMMAND``, ``spacy elmo COMMAND`` (through
spaCy's ``spacy_cli`` entry point) and ``spacy-elmo COMMAND``. Every option shows its default in
``--help``. A user error (a missing file, a bad ``--mix``, a model without a softmax, ...) ends the
command with one line on stderr that names the problem and the fix, and exit status 2.
"""
from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, TextIO, TypeVar

import typer
from wasabi.util import ICONS, color, locale_escape, supports_ansi

from .bilm.resolve import resolve_weights
from .bilm.weights import WeightsError
from .threads import DEFAULT_THREADS, available_cores, first_oversubscription_message, oversubscription_message

PROG = "python -m spacy_elmo"
HELP = (
    "ELMo for spaCy: embed text with the `elmo` component, convert and export weights, and train "
    "or adapt your own biLM (prepare -> pretrain -> evaluate -> finetune -> package)."
)

app = typer.Typer(
    name="elmo",
    help=HELP,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)

class _Messages:
    """wasabi's icons and colours, one unwrapped line per message (colour only on a terminal)."""

    def _line(self, kind: str, text: str, stream: TextIO) -> None:
        line = locale_escape(f"{ICONS[kind]} {' '.join(str(text).split())}")
        if stream.isatty() and supports_ansi() and not os.environ.get("NO_COLOR"):
            line = color(line, fg=COLORS[kind])
        print(line, file=stream, flush=True)

    def good(self, text: str) -> None:
        self._line("good", text, sys.stdout)

    def info(self, text: str) -> None:
        self._line("info", text, sys.stdout)

    def text(self, text: str) -> None:
        print(text, flush=True)

    def warn(self, text: str) -> None:
        self._line("warn", text, sys.stderr)

    def fail(self, text: str) -> None:
        self._line("fail", text, sys.stderr)


COLORS = {"good": "green", "info": "blue", "warn": "yellow", "fail": "red"}
msg = _Messages()

F = TypeVar("F", bound=Callable[..., Any])


def Arg(*args: Any, **kwargs: Any) -> Any:
    """A positional argument (spaCy's convention: help text, default shown)."""
    return typer.Argument(*args, show_default=True, **kwargs)


def Opt(*args: Any, **kwargs: Any) -> Any:
    """An option (spaCy's convention: help text, default shown)."""
    return typer.Option(*args, show_default=True, **kwargs)


class UserError(Exception):
    """A problem with the command's input: reported as one line, never a traceback."""


def fail(message: str) -> None:
    """Print one error line on stderr and end the command with exit status 2."""
    msg.fail(message)
    raise typer.Exit(2)


def user_errors(func: F) -> F:
    """Report the errors a user can cause (and fix) as one line instead of a traceback."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except (UserError, WeightsError) as err:
            fail(str(err))
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError) as err:
            fail(str(err))
        except ValueError as err:  # the training stack reports bad data and settings as ValueError
            fail(str(err))

    return wrapper  # type: ignore[return-value]


# ---------------------------------------------------------------------------------------------
# checks shared by the commands


def model_path(value: Path, what: str = "biLM") -> Path:
    """The folder of a biLM argument, through :func:`resolve_weights`: a model folder, en_default
    (the embedded default), or a published model's name (downloaded on first use); one line naming
    the argument when it holds no biLM."""
    try:
        location = resolve_weights(str(value))
    except WeightsError as error:
        raise UserError(f"{what} {value}: {error}") from None
    if location.folder is None:
        raise UserError(f"{what} {value}: pass the folder that holds the {what}")
    return location.folder


def prepared_dir(value: Path) -> Path:
    """The output folder of ``prepare`` (it holds vocab.txt and one folder per split)."""
    if not (value / "vocab.txt").is_file():
        where = "does not exist" if not value.exists() else "has no vocab.txt"
        raise UserError(f"{value} {where}: it must be the output of `{PROG} prepare TEXT --out-dir {value}`; run that first.")
    return value


def mix_spec(value: str) -> Any:
    """``average``, ``top``, ``layer:N`` or comma-separated weights (``0.2,0.3,0.5``)."""
    text = value.strip()
    if text in ("average", "top") or text.startswith("layer:"):
        if text.startswith("layer:") and not text[6:].strip().lstrip("-").isdigit():
            raise UserError(f"--mix {value!r}: expected layer:N with a whole number N, e.g. --mix layer:0 (the context-free layer).")
        return text
    try:
        weights = [float(w) for w in text.split(",")]
    except ValueError:
        raise UserError(
            f"--mix {value!r} is not a mix: use average, top, layer:N (0 = context-free layer) or one weight per layer, e.g. 1,1,2."
        ) from None
    return weights


def model_layers(path: Path) -> int:
    """Number of output layers (L+1) of a model folder, read from its config without loading weights."""
    import srsly

    from .bilm.layout import read_options
    from .bilm.weights import CONFIG_NAME, find_original_files

    if (path / CONFIG_NAME).is_file():
        options = srsly.read_json(path / CONFIG_NAME)["options"]
    else:
        options = read_options(find_original_files(path)[0])
    return int(options["lstm"]["n_layers"]) + 1


def check_mix(spec: Any, path: Path) -> None:
    """Validate a mix against the model's layers (a layer index out of range, wrong number of weights)."""
    from .bilm.scalar_mix import mix_logits

    n_layers = model_layers(path)
    try:
        mix_logits(spec, n_layers)
    except ValueError as err:
        raise UserError(
            f"--mix does not fit this model: {err}. Use average, top, layer:0 to layer:{n_layers - 1}, "
            f"or {n_layers} comma-separated weights."
        ) from None


def apply_threads(threads: int, what: str = "--threads") -> int:
    """Set torch's thread count for this process (0 = one per core); warn in one line if it oversubscribes."""
    from .threads import set_threads

    if threads < 0:
        raise UserError(f"{what} {threads}: use a whole number >= 1, or 0 for one thread per CPU core.")
    set_threads(threads)
    import torch

    warning = first_oversubscription_message(torch.get_num_threads())
    if warning:
        msg.warn(warning)
    return torch.get_num_threads()


def use_line_progress() -> None:
    """In logs (not a terminal), the training stack's tqdm bars print periodic lines instead."""
    from . import progress

    if progress.is_terminal():
        return
    from .training import corpus, trainer

    for module in (corpus, trainer):
        if getattr(module, "tqdm", None) is progress.tqdm:
            module.tqdm = progress.LineProgress  # type: ignore[attr-defined]


def refuse_overwrite(out_dir: Path, force: bool) -> None:
    if out_dir.exists() and (not out_dir.is_dir() or any(out_dir.iterdir())) and not force:
        raise UserError(f"{out_dir} already exists and is not empty: choose another folder, or add --force to overwrite it.")


# ---------------------------------------------------------------------------------------------
# commands


@app.command("embed")
@user_errors
def embed_cli(
    # fmt: off
    text: Optional[str] = Arg(None, help="Text to embed. Default: read standard input"),
    weights: Path = Opt(Path("en_default"), "--weights", "-w", help="biLM folder (spacy-elmo format, or options.json + .hdf5); en_default = the embedded English model"),
    mix: str = Opt("average", "--mix", "-m", help="How to combine the biLM layers: average, top, layer:N (0 = context-free layer) or one weight per layer, e.g. 1,1,2"),
    lang: str = Opt("en", "--lang", "-l", help="spaCy language code of the tokenizer"),
    threads: int = Opt(DEFAULT_THREADS, "--threads", "-t", help="CPU threads for the biLM (0 = one per core); more than the free cores slows it down"),
    output: Optional[Path] = Opt(None, "--output", "-o", help="Also write vectors, layers and tokens to this .npz file. Default: none"),
    # fmt: on
) -> None:
    """Run the `elmo` component over a text and summarise each token's vector."""
    import numpy as np
    import spacy

    spec = mix_spec(mix)
    path = model_path(weights)
    check_mix(spec, path)
    apply_threads(threads)
    if output is not None and output.parent != Path("") and not output.parent.is_dir():
        raise UserError(f"--output {output}: folder {output.parent} does not exist; create it or write elsewhere.")
    if text is None:
        if sys.stdin.isatty():
            raise UserError(f"no text: pass it as an argument ({PROG} embed \"Some text.\") or on standard input.")
        text = sys.stdin.read()
    nlp = spacy.blank(lang)
    config: Dict[str, Any] = {"weights": str(path), "mix": spec}
    if "threads" in nlp.get_factory_meta("elmo").default_config:  # the component's own setting, where it has one
        config["threads"] = threads
    nlp.add_pipe("elmo", config=config)
    doc = nlp(text)
    msg.info(f"{len(doc)} tokens, ELMo vectors {doc.tensor.shape}, biLM layers {doc._.elmo_layers.shape}")
    seen: Dict[str, Any] = {}
    for token in doc:
        if token.is_space:
            continue
        line = f"{token.i:>5}  {token.text[:20]:<20} |v|={np.linalg.norm(token._.elmo):7.3f}"
        first = seen.setdefault(token.lower_, token)
        if first is not token:
            line += f"  cos(with token {first.i}, same word)={token.similarity(first):.3f}"
        print(line)
    if output is not None:
        np.savez(output, vectors=doc.tensor, layers=doc._.elmo_layers, tokens=np.array([t.text for t in doc]))
        msg.good(f"wrote {output}")


@app.command("convert")
@user_errors
def convert_cli(
    # fmt: off
    options: Path = Arg(..., help="options.json of the original (published) model"),
    weights: Path = Arg(..., help="The model's .hdf5 weights file"),
    out_dir: Path = Arg(..., help="Folder to write (config.json + weights.pt)"),
    # fmt: on
) -> None:
    """Convert original ELMo weights (options.json + .hdf5) to the native format: faster to load, no h5py."""
    from .bilm.weights import load_original, save_native

    for path, what in ((options, "options file"), (weights, "weights file")):
        if not path.is_file():
            raise UserError(f"{what} not found: {path}. Pass the published model's options.json and its .hdf5 file.")
    model = load_original(options, weights)
    out = save_native(model, out_dir)
    n_params = sum(p.numel() for p in model.parameters())
    msg.good(f"wrote {out} ({n_params:,} parameters, {model.n_output_layers} layers of width {model.output_dim})")


@app.command("export")
@user_errors
def export_cli(
    # fmt: off
    model: Path = Arg(..., help="biLM folder (or en_default)"),
    out_dir: Path = Arg(..., help="Folder to write options.json and weights.hdf5 to"),
    # fmt: on
) -> None:
    """Write a biLM in the original options.json + weights.hdf5 format (readable by AllenNLP and bilm-tf)."""
    from .bilm import load_bilm, save_original

    options, weights = save_original(load_bilm(model_path(model)), out_dir)
    msg.good(f"wrote {options} and {weights}")


@app.command("prepare")
@user_errors
def prepare_cli(
    # fmt: off
    inputs: List[Path] = Arg(..., help="UTF-8 text files or folders (.txt, .gz); a folder's manifest.tsv (file, split) assigns train/valid/test"),
    out_dir: Path = Opt(..., "--out-dir", "-o", help="Folder for the sentence shards, vocab.txt and stats.json"),
    lang: str = Opt("en", "--lang", "-l", help="spaCy language code of the tokenizer"),
    min_count: int = Opt(1, "--min-count", help="Keep words seen at least this often in the vocabulary"),
    max_vocab: Optional[int] = Opt(None, "--max-vocab", help="At most this many vocabulary entries (specials included). Default: no limit"),
    shard_size: int = Opt(100_000, "--shard-size", help="Sentences per shard file"),
    max_files: Optional[int] = Opt(None, "--max-files", help="Use only the first N files of each split (quick runs). Default: all"),
    layout: str = Opt("auto", "--layout", help="line: one sentence or document per line; paragraph: blank-line separated paragraphs; auto: decide per file from its first lines"),
    held_out: float = Opt(0.02, "--held-out", help="Fraction of the training text moved to valid + test (half each) when no valid/test files are given; 0 = none"),
    # fmt: on
) -> None:
    """Tokenize text into sentence shards and a frequency-sorted vocabulary (the input of pretrain/finetune)."""
    from .training.corpus import LAYOUTS, prepare_corpus

    missing = [str(p) for p in inputs if not p.exists()]
    if missing:
        raise UserError(f"not found: {', '.join(missing)}. Pass existing text files or folders.")
    use_line_progress()
    if layout not in LAYOUTS:
        raise UserError(f"--layout {layout!r}: use one of {', '.join(LAYOUTS)}.")
    if not 0 <= held_out < 1:
        raise UserError(f"--held-out {held_out}: give a fraction in [0, 1), e.g. 0.02.")
    stats = prepare_corpus(
        inputs, out_dir, lang=lang, min_count=min_count, max_vocab=max_vocab, shard_size=shard_size, max_files=max_files,
        layout=layout, held_out=held_out,
    )
    for split, s in stats.items():
        msg.text(
            f"{split:>5}: {s.files} files, {s.lines:,} lines, {s.sentences:,} sentences, {s.tokens:,} tokens; "
            f"{s.skipped_lines} bad lines skipped, {s.split_units} over-long units split"
        )
    if stats["valid"].sentences == 0:
        msg.warn("no validation text: list valid files in a manifest.tsv, or use --held-out > 0 (pretrain/finetune evaluate on it)")
    msg.good(f"wrote {out_dir}")


TRAIN_OVERRIDES = ("max_steps", "max_minutes", "lr", "warmup_steps", "threads", "max_tokens", "seed", "eval_every", "checkpoint_every", "precision")


def _train(
    init_model: Optional[Path], data_dir: Path, out_dir: Path, config: Optional[Path], resume: bool,
    dump_weights: Optional[Path], overrides: Dict[str, Any],
) -> None:
    import srsly

    from .training.trainer import TrainConfig, saved_config, train

    prepared_dir(data_dir)
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
        values = {**(saved_config(out_dir) or {}), **values}
    known = set(TrainConfig.__dataclass_fields__)
    unknown = sorted(set(values) - known)
    if unknown:
        raise UserError(f"--config {config}: unknown field(s) {', '.join(unknown)}; known fields: {', '.join(sorted(known))}.")
    if values.get("threads") and os.environ.get("WORLD_SIZE", "1") == "1":
        warning = oversubscription_message(int(values["threads"]))
        if warning:
            msg.warn(warning)
    use_line_progress()
    result = train(TrainConfig(**values), resume=resume, dump_weights=dump_weights)
    if os.environ.get("RANK", "0") == "0":  # one line, from the first process of a torchrun job
        print(json.dumps(result))


# the options that pretrain and finetune share
_CONFIG_HELP = "JSON file of TrainConfig fields (architecture, optimiser, batch sizes); the options below override it. Default: none (TrainConfig's defaults)"
_RESUME_HELP = "Continue from OUT_DIR/checkpoints/last.pt if it exists (exact resume: model, optimiser, RNG, data position). Default: off"
_FROM_CONFIG = "Default: from --config, else TrainConfig's"


def _train_default(name: str) -> str:
    """TrainConfig's default of a field, for the help text (read from the dataclass, so it cannot drift)."""
    try:
        from .training.trainer import TrainConfig

        return f"({TrainConfig.__dataclass_fields__[name].default:g})"
    except Exception:  # pragma: no cover - help text only
        return ""




_TRAIN_OPTIONS = {  # one definition each; typer needs the parameters spelled out in each signature
    "config": Opt(None, "--config", "-c", help=_CONFIG_HELP),
    "resume": Opt(False, "--resume", help=_RESUME_HELP),
    "max_steps": Opt(None, "--max-steps", help=f"Optimiser steps. {_FROM_CONFIG} {_train_default('max_steps')}"),
    "max_minutes": Opt(None, "--max-minutes", help=f"Stop and export after this wall time; 0 = no limit. {_FROM_CONFIG} {_train_default('max_minutes')}"),
    "lr": Opt(None, "--lr", help=f"Peak learning rate. {_FROM_CONFIG} {_train_default('lr')}"),
    "warmup_steps": Opt(None, "--warmup-steps", help=f"Linear warm-up steps. {_FROM_CONFIG} {_train_default('warmup_steps')}"),
    "threads": Opt(None, "--threads", "-t", help=f"CPU threads per process; 0 = torch's default. {_FROM_CONFIG} {_train_default('threads')}"),
    "max_tokens": Opt(None, "--max-tokens", help=f"Token budget per batch (rows x padded length). {_FROM_CONFIG} {_train_default('max_tokens')}"),
    "seed": Opt(None, "--seed", help=f"Random seed. {_FROM_CONFIG} {_train_default('seed')}"),
    "eval_every": Opt(None, "--eval-every", help=f"Validation perplexity every N steps. {_FROM_CONFIG} {_train_default('eval_every')}"),
    "checkpoint_every": Opt(None, "--checkpoint-every", help=f"Checkpoint every N steps. {_FROM_CONFIG} {_train_default('checkpoint_every')}"),
    "precision": Opt(None, "--precision", help="Training products: fp32, bf16 (float32 master weights, bf16 matrix products; fast on CPUs with AMX/AVX512-BF16) or auto (bf16 where the CPU has it). Default: from --config, else fp32"),
    "dump_weights": Opt(None, "--dump-weights", hidden=True, help="Testing: each rank writes its final weights here"),
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
    lr: Optional[float] = _TRAIN_OPTIONS["lr"],
    warmup_steps: Optional[int] = _TRAIN_OPTIONS["warmup_steps"],
    threads: Optional[int] = _TRAIN_OPTIONS["threads"],
    max_tokens: Optional[int] = _TRAIN_OPTIONS["max_tokens"],
    seed: Optional[int] = _TRAIN_OPTIONS["seed"],
    eval_every: Optional[int] = _TRAIN_OPTIONS["eval_every"],
    checkpoint_every: Optional[int] = _TRAIN_OPTIONS["checkpoint_every"],
    precision: Optional[str] = _TRAIN_OPTIONS["precision"],
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
    lr: Optional[float] = _TRAIN_OPTIONS["lr"],
    warmup_steps: Optional[int] = _TRAIN_OPTIONS["warmup_steps"],
    threads: Optional[int] = _TRAIN_OPTIONS["threads"],
    max_tokens: Optional[int] = _TRAIN_OPTIONS["max_tokens"],
    seed: Optional[int] = _TRAIN_OPTIONS["seed"],
    eval_every: Optional[int] = _TRAIN_OPTIONS["eval_every"],
    checkpoint_every: Optional[int] = _TRAIN_OPTIONS["checkpoint_every"],
    precision: Optional[str] = _TRAIN_OPTIONS["precision"],
    dump_weights: Optional[Path] = _TRAIN_OPTIONS["dump_weights"],
    # fmt: on
) -> None:
    """Continue the language-model objective from a biLM on in-domain text, keeping its vocabulary."""
    overrides = {name: value for name, value in locals().items() if name in TRAIN_OVERRIDES}
    _train(model_path(model), data_dir, out_dir, config, resume, dump_weights, overrides)


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
    # fmt: on
) -> None:
    """Held-out perplexity (forward, backward, average; full softmax) beside a unigram baseline."""
    import srsly

    from .training.baseline import unigram_perplexity
    from .training.trainer import SOFTMAX_NAME, load_language_model, perplexity

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
    result: Dict[str, Any] = {"model": str(model), "data": str(data_dir), "split": split}
    result.update(perplexity(lm, vocab, data_dir, split, max_tokens=max_tokens, limit=limit))
    result["unigram_ppl"] = unigram_perplexity(vocab, data_dir, split, limit=limit)
    msg.good(
        f"{split} perplexity: forward {result['ppl_fwd']:.2f}, backward {result['ppl_bwd']:.2f}, average {result['ppl_avg']:.2f} "
        f"over {result['tokens']:,} predictions (unigram baseline {result['unigram_ppl']:.1f})"
    )
    if output is not None:
        srsly.write_json(output, result)


@app.command("ship")
@user_errors
def ship_cli(
    # fmt: off
    run_dir: Path = Arg(..., help="Output folder of `pretrain` or `finetune` (its model/ holds the export), or a model folder such as a snapshot export"),
    dest: Path = Arg(..., help="Folder to write, in the embedded default's layout (softmax stored in float16)"),
    force: bool = Opt(False, "--force", help="Overwrite a non-empty DEST. Default: off"),
    # fmt: on
) -> None:
    """Copy a trained biLM into the layout of the embedded default (the command that made the shipped model)."""
    from .training.ship import model_folder, ship_model

    try:
        model_folder(run_dir)
    except FileNotFoundError as err:
        raise UserError(str(err)) from None
    refuse_overwrite(dest, force)
    for name, size in ship_model(run_dir, dest).items():
        msg.text(f"{name:<20} {size / 1e6:8.2f} MB")
    msg.good(f"wrote {dest}")


@app.command("package")
@user_errors
def package_cli(
    # fmt: off
    model: Path = Arg(..., help="biLM folder to package (or en_default)"),
    out_dir: Path = Arg(..., help="Pipeline folder to write; spacy.load(OUT_DIR) opens it"),
    lang: str = Opt("en", "--lang", "-l", help="spaCy language code of the pipeline"),
    name: str = Opt("elmo", "--name", "-n", help="Pipeline name in meta.json"),
    force: bool = Opt(False, "--force", "-f", help="Overwrite OUT_DIR if it exists. Default: off"),
    # fmt: on
) -> None:
    """Write a spaCy pipeline folder with the `elmo` component and the biLM inside."""
    import shutil

    import spacy

    path = model_path(model)
    refuse_overwrite(out_dir, force)
    if out_dir.exists() and force:
        shutil.rmtree(out_dir) if out_dir.is_dir() else out_dir.unlink()
    nlp = spacy.blank(lang)
    nlp.add_pipe("elmo", config={"weights": str(path)})
    nlp.initialize()
    nlp.meta["name"] = name
    nlp.meta["description"] = f"ELMo vectors from the biLM in {path.name} (spacy-elmo)"
    nlp.to_disk(out_dir)
    doc = spacy.load(out_dir)("A quick check .")
    msg.good(f"wrote {out_dir}: spacy.load() gives ELMo vectors of shape {doc.tensor.shape}")


@app.command("download")
@user_errors
def download_cli(
    # fmt: off
    name: str = Arg(..., help="Published model: elmo-small, elmo-medium, elmo-original, elmo-original-5.5b or elmo-pubmed"),
    force: bool = Opt(False, "--force", "-f", help="Download again even when a verified copy is cached. Default: off"),
    # fmt: on
) -> None:
    """Download a published ELMo model into the cache (SPACY_ELMO_CACHE), resuming an interrupted transfer, and verify it."""
    from .bilm.download import download
    from .bilm.published import PUBLISHED

    if name not in PUBLISHED:
        raise UserError(f"unknown model {name!r}: choose one of {', '.join(PUBLISHED)} (see `{PROG} models`).")
    folder = download(name, force=force)
    msg.good(f"{name} is ready in {folder}: use weights={name!r} (or the folder) to load it")


@app.command("models")
@user_errors
def models_cli(
    # fmt: off
    as_json: bool = Opt(False, "--json", help="Print the table as JSON. Default: off"),
    # fmt: on
) -> None:
    """List the published ELMo models: shape, parameters, size on disk and whether each is cached."""
    from .bilm.download import describe
    from .bilm.published import cache_root

    rows = describe()
    if as_json:
        print(json.dumps(rows, indent=2))
        return
    msg.info(f"cache: {cache_root()}")
    msg.text(f"{'name':<20} {'shape':<30} {'parameters':>12} {'on disk':>10}  cached")
    for row in rows:
        size = f"{row['size_on_disk'] / 1e6:.1f} MB" if row["size_on_disk"] else "-"
        msg.text(f"{row['name']:<20} {row['shape']:<30} {row['parameters']:>12,} {size:>10}  {'yes' if row['cached'] else 'no'}")


@app.command("mixes")
@user_errors
def mixes_cli(
    # fmt: off
    pipeline: Path = Arg(..., help="A trained spaCy pipeline folder (e.g. spacy train's model-best)"),
    output: Optional[Path] = Opt(None, "--output", "-o", help="Also write the weights as JSON to this file (default: print only)"),
    # fmt: on
) -> None:
    """Print the layer weights (softmax of s) and gamma that each component learned over the biLM layers."""
    import spacy

    from .pipeline.architectures import learned_mixes

    if not (pipeline / "config.cfg").is_file():
        raise UserError(f"{pipeline} is not a spaCy pipeline folder (no config.cfg): pass e.g. training/model-best")
    found = learned_mixes(spacy.load(pipeline))
    if not found:
        raise UserError(f"{pipeline}: no component has a spacy-elmo ScalarMix (ElmoListener.v1 / ElmoTok2Vec.v1) to report")
    for component, mixes in found.items():
        for mix in mixes:
            weights = ", ".join(f"layer {i}: {w:.3f}" for i, w in enumerate(mix["weights"] or []))
            msg.text(f"{component} ({mix['role']}): {weights}; gamma {mix['gamma']}")
    if output is not None:
        output.write_text(json.dumps(found, indent=2) + "\n")
        msg.good(f"wrote {output}")


# ---------------------------------------------------------------------------------------------


def _click_exceptions() -> Any:
    try:  # typer >= 0.20 carries its own copy of click
        from typer._click import exceptions
    except ImportError:  # pragma: no cover - older typer runs on click itself
        from click import exceptions
    return exceptions


def main(argv: Optional[List[str]] = None, prog_name: Optional[str] = None) -> int:
    """Run a command; returns its exit status. Usage errors are one line, like every other user error."""
    exceptions = _click_exceptions()
    command = typer.main.get_command(app)
    if prog_name is None:
        prog_name = "spacy-elmo" if Path(sys.argv[0]).name == "spacy-elmo" else PROG
    try:
        result = command.main(args=argv, prog_name=prog_name, standalone_mode=False)
    except exceptions.UsageError as err:
        if type(err).__name__ == "NoArgsIsHelpError":  # a bare command shows its help
            err.show()
            return 0
        where = err.ctx.command_path if err.ctx is not None else prog_name
        msg.fail(f"{err.format_message()} (see '{where} --help')")
        return 2
    except exceptions.ClickException as err:
        msg.fail(err.format_message())
        return err.exit_code
    except (typer.Abort, getattr(exceptions, "Abort", typer.Abort)):
        msg.fail("aborted")
        return 1
    return int(result) if isinstance(result, int) else 0


# commands defined in their own subpackages register themselves on ``app`` when imported
from .embedding import cli as _embedding_cli  # noqa: E402,F401  (embed-corpus)
from .senses import cli as _senses_cli  # noqa: E402,F401  (wic, wsd, index, neighbours)

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
