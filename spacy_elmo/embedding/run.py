"""``embed_corpus``: check the input, resume or start the shard folder, run the chunks, finish.

Resume works from the shard folder (``OUTPUT.parts/`` next to an HDF5 output, or the
``--format shards`` output folder itself): its manifest holds the configuration and the input's
SHA-256; a rerun with the same ones skips every chunk whose shard exists and embeds the rest, and
any difference is refused with the keys that differ. The HDF5 file is assembled only when every
chunk is done. Memory is bounded by a chunk (``chunk_lines`` lines and their vectors, times the
chunks in flight), not by the corpus.
"""

from __future__ import annotations

import hashlib
import re
import time
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Set, Union

from ..hub.resolve import DEFAULT_NAMES
from . import shards
from .reader import Chunk, CorpusError, Scan, input_files, iter_chunks, scan_input
from .worker import LAYERS, PRECISIONS, TOKENIZERS, ChunkResult, EmbedSpec, Executor, MixValue, embed_chunk, make_tokenizer

FORMATS = ("hdf5", "shards")


@dataclass
class EmbedOptions:
    """A corpus run. ``cluster``: None (this machine), ``local:N`` (a local Dask cluster of N
    workers) or a Dask scheduler address such as ``tcp://10.0.0.5:8786``."""

    input: Path
    output: Path
    layers: str = "all"
    mix: Union[str, Sequence[float]] = "average"
    format: str = "hdf5"
    weights: str = "en_default"
    tokenizer: str = "whitespace"
    lang: str = "en"
    chunk_lines: int = 1000
    batch_tokens: int = 4096
    max_line_tokens: int = 10_000
    skip_empty: bool = False
    n_process: int = 1
    threads: int = 1
    precision: str = "float32"
    cluster: Optional[str] = None
    retries: int = 2
    overwrite: bool = False
    keep_shards: bool = False


@dataclass
class EmbedSummary:
    output: Path
    lines: int  # lines embedded (all, this run and earlier ones)
    tokens: int
    chunks: int
    resumed_chunks: int  # chunks found finished when this run started
    seconds: float  # embedding time of this run
    run_tokens: int  # tokens embedded by this run
    workers: int
    results: List[ChunkResult]

    @property
    def tokens_per_second(self) -> float:
        return self.run_tokens / self.seconds if self.seconds > 0 else 0.0


def model_fingerprint(weights: str) -> str:
    """SHA-256 of the biLM's files (native config + weights, or options.json + .hdf5), found as
    ``load_bilm`` finds them: a folder, ``en_default``, a published name (downloaded once here, so
    the workers find it cached) or a converted source (an ELMoForManyLangs folder, a transformer
    ELMo archive: the conversion's files)."""
    from ..bilm.errors import WeightsError
    from ..bilm.weights import CONFIG_NAME
    from ..hub.resolve import resolve_weights

    try:
        location = resolve_weights(weights)
    except WeightsError as err:
        raise CorpusError(f"--weights {weights}: {err}") from None
    if location.native:
        assert location.folder is not None
        files = [location.folder / CONFIG_NAME] + sorted(location.folder.glob("weights*.pt"))
    else:
        assert location.options is not None and location.weights is not None
        files = [location.options, location.weights]
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.name.encode() + b"\0")
        with open(file, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    return digest.hexdigest()


def check_options(options: EmbedOptions) -> None:
    for name, value, allowed in (
        ("--layers", options.layers, LAYERS),
        ("--format", options.format, FORMATS),
        ("--tokenizer", options.tokenizer, TOKENIZERS),
        ("--precision", options.precision, PRECISIONS),
    ):
        if value not in allowed:
            raise CorpusError(f"{name} {value!r}: use one of {', '.join(allowed)}.")
    for name, number, low in (
        ("--chunk-lines", options.chunk_lines, 1),
        ("--batch-tokens", options.batch_tokens, 3),
        ("--max-line-tokens", options.max_line_tokens, 1),
        ("--n-process", options.n_process, 1),
        ("--threads", options.threads, 1),
        ("--retries", options.retries, 0),
    ):
        if number < low:
            raise CorpusError(f"{name} {number}: use a whole number >= {low}.")
    if options.precision == "int8" and options.cluster is None:  # this machine's workers: check its CPU once, here
        from ..kernels.int8 import Int8Unavailable, activation_levels

        try:
            activation_levels()
        except Int8Unavailable as err:
            raise CorpusError(f"--precision int8: {err}") from None
    if options.cluster is not None and options.n_process != 1:
        raise CorpusError("--n-process and --cluster exclude each other: a cluster sets its workers itself (local:N for N local workers).")


def work_folder(options: EmbedOptions) -> Path:
    """Where the shards go: the output itself (``--format shards``) or ``OUTPUT.parts`` next to it."""
    return options.output if options.format == "shards" else options.output.with_name(options.output.name + ".parts")


def run_config(options: EmbedOptions, scan: Scan) -> Dict[str, Any]:
    """What the shards depend on: resuming with any other value would mix two outputs."""
    return {
        "model_sha256": model_fingerprint(options.weights),
        "layers": options.layers,
        "mix": options.mix if options.layers == "mix" else None,
        "tokenizer": options.tokenizer,
        "lang": options.lang if options.tokenizer == "spacy" else None,
        "chunk_lines": options.chunk_lines,
        "batch_tokens": options.batch_tokens,
        "max_line_tokens": options.max_line_tokens,
        "skip_empty": options.skip_empty,
        "input_sha256": scan.sha256,
        "input_lines": scan.n_lines,
        # only when not float32, so that the runs made before the setting existed still resume
        **({"precision": options.precision} if options.precision != "float32" else {}),
    }


def _differences(old: Dict[str, Any], new: Dict[str, Any]) -> List[str]:
    named = {"input_sha256": "input content", "model_sha256": "model weights"}
    out = []
    for key in sorted(set(old) | set(new)):
        if old.get(key) != new.get(key):
            if key in named:
                out.append(f"{named[key]} changed")
            else:
                out.append(f"{key}: {old.get(key)!r} then, {new.get(key)!r} now")
    return out


HDF5_SIGNATURE = b"\x89HDF\r\n\x1a\n"


def foreign_entries(folder: Path) -> List[str]:
    """What ``folder`` holds besides a corpus run's own files (manifest, shards, temporary files)."""
    ours = re.compile(r"^(manifest\.json|shard-\d{6,}\.npz|\..+\.tmp)$")
    return sorted(p.name + ("/" if p.is_dir() else "") for p in folder.iterdir() if not (p.is_file() and ours.match(p.name)))


def check_replaceable(path: Path, kind: str) -> None:
    """Refuse to let ``--overwrite`` delete anything but our own output: an HDF5 file
    (``kind="hdf5"``) or a shard folder holding only a run's files (``kind="shards"``)."""
    if not path.exists() and not path.is_symlink():
        return
    if path.is_symlink():
        raise CorpusError(f"--overwrite: {path} is a symbolic link; remove it yourself or choose another OUTPUT.")
    if kind == "hdf5":
        if path.is_dir():
            raise CorpusError(
                f"--overwrite: {path} is a folder, not an HDF5 file; --overwrite replaces only an earlier output: choose another OUTPUT."
            )
        with open(path, "rb") as handle:
            if handle.read(len(HDF5_SIGNATURE)) != HDF5_SIGNATURE:
                raise CorpusError(
                    f"--overwrite: {path} is not an HDF5 file, so not an earlier output; it is left alone: choose another OUTPUT."
                )
        return
    if not path.is_dir():
        raise CorpusError(f"--overwrite: {path} is a file, not a shard folder of an earlier run; it is left alone: choose another OUTPUT.")
    foreign = foreign_entries(path)
    if foreign:
        shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
        raise CorpusError(
            f"--overwrite: {path} holds files that are not spacy-elmo corpus output ({shown}); nothing was deleted: move them or choose another OUTPUT."
        )


def remove_run_folder(folder: Path) -> None:
    """Delete a shard folder's own files, then the folder if that left it empty."""
    if foreign_entries(folder):
        check_replaceable(folder, "shards")  # raises, naming them
    for path in folder.iterdir():
        path.unlink()
    folder.rmdir()


def prepare_folder(options: EmbedOptions, folder: Path, config: Dict[str, Any]) -> Set[int]:
    """Create the shard folder, or check that an existing one belongs to this configuration;
    returns the chunks already done. ``--overwrite`` deletes only our own output (see
    :func:`check_replaceable`): everything is checked before anything is deleted."""
    if options.overwrite:
        if options.format == "hdf5":
            check_replaceable(options.output, "hdf5")
        check_replaceable(folder, "shards")
        if options.format == "hdf5" and options.output.exists():
            options.output.unlink()
        if folder.exists():
            remove_run_folder(folder)
    if options.format == "hdf5" and options.output.exists():
        raise CorpusError(f"{options.output} already exists: choose another OUTPUT, or pass --overwrite to replace it.")
    if folder.exists():
        if not folder.is_dir():
            raise CorpusError(f"{folder} exists and is a file: choose another OUTPUT, or pass --overwrite.")
        if not (folder / shards.MANIFEST).is_file():
            if any(folder.iterdir()):
                raise CorpusError(f"{folder} exists and is not a spacy-elmo corpus output (no {shards.MANIFEST}): choose another OUTPUT.")
        else:
            manifest = shards.read_manifest(folder)
            if manifest.get("format") != shards.FORMAT or manifest.get("version") != shards.VERSION:
                raise CorpusError(
                    f"{folder} holds another format ({manifest.get('format')} v{manifest.get('version')}): choose another OUTPUT."
                )
            diff = _differences(manifest.get("config", {}), config)
            if diff:
                raise CorpusError(
                    f"{folder} was started with a different configuration ({'; '.join(diff)}): rerun with the same input and "
                    f"options to resume it, or pass --overwrite to start over."
                )
            shards.remove_temporary(folder)
            return {i for i in shards.finished_chunks(folder) if i * options.chunk_lines < config["input_lines"]}
    folder.mkdir(parents=True, exist_ok=True)
    shards.write_json(folder / shards.MANIFEST, {"format": shards.FORMAT, "version": shards.VERSION, "config": config, "complete": False})
    return set()


def run_here(spec: EmbedSpec, folder: Path, chunks: Iterator[Chunk]) -> Iterator[ChunkResult]:
    """Every chunk in this process."""
    for chunk in chunks:
        yield embed_chunk(spec, str(folder), chunk)


def bounded(submit: Callable[[Chunk], "Future[ChunkResult]"], chunks: Iterator[Chunk], window: int) -> Iterator[ChunkResult]:
    """Keep at most ``window`` chunks in flight; yield results as they finish (input read lazily)."""
    pending: Set["Future[ChunkResult]"] = set()
    for chunk in chunks:
        pending.add(submit(chunk))
        while len(pending) >= window:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                yield future.result()
    while pending:
        done, pending = wait(pending, return_when=FIRST_COMPLETED)
        for future in done:
            yield future.result()


def process_executor(n_process: int) -> Executor:
    """``n_process`` local worker processes (spawned, so no OpenMP state is inherited), each loading the biLM once."""

    def run(spec: EmbedSpec, folder: Path, chunks: Iterator[Chunk]) -> Iterator[ChunkResult]:
        import multiprocessing

        with ProcessPoolExecutor(n_process, mp_context=multiprocessing.get_context("spawn")) as pool:
            yield from bounded(lambda chunk: pool.submit(embed_chunk, spec, str(folder), chunk), chunks, 2 * n_process)

    return run


def _progress(total: Optional[int], initial: int) -> Any:
    from ..progress import progress_bar

    return progress_bar(total=total, initial=initial, unit="token", unit_scale=True, desc="embed", dynamic_ncols=True)


def embed_corpus(
    options: EmbedOptions, executor: Optional[Executor] = None, log: Callable[[str], None] = lambda text: None
) -> EmbedSummary:
    """Embed every line of ``options.input`` into ``options.output`` (see the module docstring)."""
    check_options(options)
    files = input_files(options.input)
    if options.format == "hdf5":
        from .hdf5 import require_h5py

        require_h5py()
        if not options.output.parent.is_dir():
            raise CorpusError(f"folder {options.output.parent} does not exist: create it, or write OUTPUT elsewhere.")
    scan = scan_input(files, options.max_line_tokens, options.skip_empty, make_tokenizer(options.tokenizer, options.lang))
    config = run_config(options, scan)
    folder = work_folder(options).absolute()  # workers elsewhere (a cluster) do not share our working directory
    if options.format == "shards" and (folder / shards.MANIFEST).is_file() and not options.overwrite:
        manifest = shards.read_manifest(folder)
        if manifest.get("complete") and not _differences(manifest.get("config", {}), config):
            log(f"{folder} is already complete")
            return _summary(options, manifest["shards"], 0, 0.0, len(manifest["shards"]), 0, [])
    done = prepare_folder(options, folder, config)
    n_chunks = -(-scan.n_lines // options.chunk_lines)
    if done:
        log(f"resuming {folder}: {len(done)} of {n_chunks} chunks already done")
    mix: MixValue = options.mix if isinstance(options.mix, str) else tuple(float(w) for w in options.mix)
    weights = (
        options.weights
        if options.weights in DEFAULT_NAMES and not Path(options.weights).exists()
        else str(Path(options.weights).absolute())
    )
    spec = EmbedSpec(
        weights,
        options.layers,
        mix,
        options.tokenizer,
        options.lang,
        options.batch_tokens,
        options.max_line_tokens,
        options.skip_empty,
        options.threads,
        options.precision,
    )
    if executor is None:
        if options.cluster is not None:
            from .cluster import dask_executor

            executor = dask_executor(options.cluster, options.retries, threads=options.threads)
        elif options.n_process > 1:
            executor = process_executor(options.n_process)
        else:
            executor = run_here
    done_tokens = sum(shards.shard_summary(folder / shards.shard_name(i))["tokens"] for i in sorted(done))
    bar = _progress(scan.n_tokens, done_tokens)
    results: List[ChunkResult] = []
    start = time.perf_counter()
    run_tokens = 0
    try:
        for result in executor(spec, folder, iter_chunks(files, options.chunk_lines, done)):
            results.append(result)
            run_tokens += result.tokens
            bar.update(result.tokens)
            elapsed = time.perf_counter() - start
            bar.set_postfix(chunks=f"{len(done) + len(results)}/{n_chunks}", tok_s=f"{run_tokens / elapsed:,.0f}" if elapsed else "-")
    finally:
        bar.close()
    seconds = time.perf_counter() - start
    missing = set(range(n_chunks)) - shards.finished_chunks(folder)
    if missing:  # never expected: every executor raises on a failed chunk
        raise RuntimeError(f"{len(missing)} chunks have no shard after the run (first: {min(missing)}); rerun to resume")
    shards.remove_temporary(folder)  # left by writers that failed mid-write (their chunk was redone)
    entries = [shards.shard_summary(folder / shards.shard_name(i)) for i in range(n_chunks)]
    for i, entry in enumerate(entries):
        entry["chunk"] = i
        entry["chunk_first_line"] = i * options.chunk_lines
        entry["chunk_lines"] = min(options.chunk_lines, scan.n_lines - i * options.chunk_lines)
    manifest = {
        "format": shards.FORMAT,
        "version": shards.VERSION,
        "config": config,
        "complete": True,
        "shards": entries,
        "lines": sum(e["lines"] for e in entries),
        "tokens": sum(e["tokens"] for e in entries),
    }
    shards.write_json(folder / shards.MANIFEST, manifest)
    if options.format == "hdf5":
        from .hdf5 import assemble

        for stale in options.output.parent.glob(f".{options.output.name}.*.tmp"):
            stale.unlink()
        assemble([folder / e["file"] for e in entries], options.output)
        if not options.keep_shards:
            remove_run_folder(folder)
    workers = len({r.pid for r in results}) if results else 0
    return _summary(options, entries, run_tokens, seconds, len(done), workers, results)


def _summary(
    options: EmbedOptions,
    entries: List[Dict[str, Any]],
    run_tokens: int,
    seconds: float,
    resumed: int,
    workers: int,
    results: List[ChunkResult],
) -> EmbedSummary:
    return EmbedSummary(
        options.output,
        sum(e["lines"] for e in entries),
        sum(e["tokens"] for e in entries),
        len(entries),
        resumed,
        seconds,
        run_tokens,
        workers,
        results,
    )
