"""Command ``embed-corpus``: a large corpus embedded line by line, resumable, on one machine or a Dask cluster."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from ._util import PRECISION_OPT, PROG, Arg, Opt, UserError, app, check_mix, lang_code, mix_spec, model_path, msg, user_errors


@app.command("embed-corpus")
@user_errors
def embed_corpus_cli(
    # fmt: off
    input: Path = Arg(
        ...,
        help="Text file, or folder of .txt/.txt.gz files, with one sentence or document per line (whitespace-tokenized unless --tokenizer spacy)",
    ),
    output: Path = Arg(..., help="HDF5 file to write (--format hdf5), or folder for the shards (--format shards)"),
    layers: str = Opt(
        "all",
        "--layers",
        help="all: every biLM layer, shape (L+1, n, dim); top: the last layer, (n, dim); mix: the --mix of the layers, (n, dim)",
    ),
    mix: str = Opt(
        "average",
        "--mix",
        "-m",
        help="With --layers mix: average, top, layer:N or one weight per layer (computed as the elmo component does)",
    ),
    format: str = Opt(
        "hdf5",
        "--format",
        "-f",
        help="hdf5: one file in AllenNLP's layout (needs h5py); shards: a folder of .npz shards + manifest.json, for very large corpora",
    ),
    weights: Path = Opt(
        Path("en_default"),
        "--weights",
        "-w",
        help="biLM folder (spacy-elmo format, or options.json + .hdf5); en_default = the embedded English model",
    ),
    tokenizer: str = Opt(
        "whitespace",
        "--tokenizer",
        help="whitespace: split each line on whitespace (pre-tokenized input, like allennlp elmo); spacy: spaCy's tokenizer for --lang",
    ),
    lang: str = Opt("en", "--lang", "-l", help="spaCy language code of the tokenizer (with --tokenizer spacy)"),
    n_process: int = Opt(1, "--n-process", "-n", help="Local worker processes, each with its own biLM and --threads threads"),
    threads: int = Opt(1, "--threads", "-t", help="CPU threads per process (keep threads x processes within the free cores)"),
    precision: str = PRECISION_OPT,
    cluster: Optional[str] = Opt(
        None,
        "--cluster",
        help="Run on Dask: local:N for a local cluster of N workers, or a scheduler address (tcp://host:8786); OUTPUT must be on a file system all workers share. Default: this machine",
    ),
    retries: int = Opt(2, "--retries", help="With --cluster: times a failed chunk is retried"),
    chunk_lines: int = Opt(
        1000, "--chunk-lines", help="Lines per chunk: the unit of work, of shards and of resuming; memory grows with it"
    ),
    batch_tokens: int = Opt(4096, "--batch-tokens", help="Token budget per biLM batch (rows x (longest + 2))"),
    max_line_tokens: int = Opt(
        10_000, "--max-line-tokens", help="Refuse lines with more tokens than this (memory grows with the longest line)"
    ),
    skip_empty: bool = Opt(
        False, "--skip-empty", help="Leave empty lines out instead of stopping (they still count for line numbers). Default: off"
    ),
    overwrite: bool = Opt(
        False, "--overwrite", help="Replace an existing OUTPUT (and its unfinished shards) instead of refusing or resuming. Default: off"
    ),
    keep_shards: bool = Opt(
        False, "--keep-shards", help="With --format hdf5: keep the OUTPUT.parts shard folder after assembling the file. Default: off"
    ),
    # fmt: on
) -> None:
    """Embed a large corpus line by line into AllenNLP's HDF5 layout (or .npz shards); rerun the same command to resume."""
    from ..embedding.run import EmbedOptions, embed_corpus
    from ..threads import oversubscription_message

    spec = None
    if layers == "mix":
        spec = mix_spec(mix)
        check_mix(spec, model_path(weights))
    else:
        model_path(weights)
    if cluster is None:
        warning = oversubscription_message(threads, n_process)
        if warning:
            msg.warn(warning)
    options = EmbedOptions(
        input=input,
        output=output,
        layers=layers,
        mix=spec if spec is not None else "average",
        format=format,
        weights=str(weights),
        tokenizer=tokenizer,
        lang=lang_code(lang) if tokenizer == "spacy" else lang,
        chunk_lines=chunk_lines,
        batch_tokens=batch_tokens,
        max_line_tokens=max_line_tokens,
        skip_empty=skip_empty,
        n_process=n_process,
        threads=threads,
        precision=precision,
        cluster=cluster,
        retries=retries,
        overwrite=overwrite,
        keep_shards=keep_shards,
    )
    try:
        summary = embed_corpus(options, log=msg.info)
    except KeyboardInterrupt:
        raise UserError(f"interrupted: the finished chunks are kept; rerun the same command ({PROG} embed-corpus ...) to resume.") from None
    rate = f", {summary.tokens_per_second:,.0f} tokens/s" if summary.seconds else ""
    resumed = f" ({summary.resumed_chunks} chunks from an earlier run)" if summary.resumed_chunks else ""
    msg.good(
        f"wrote {summary.output}: {summary.lines:,} lines, {summary.tokens:,} tokens in {summary.chunks} chunk{'s' if summary.chunks != 1 else ''}{resumed}{rate}"
    )
