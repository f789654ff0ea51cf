"""Commands ``wic``, ``wsd``, ``sense-probe``, ``index`` and ``neighbours`` (registered on spacy-elmo's command line)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, cast

from ..assets import require_files
from ..evaluation.wic import DEFAULT_WIC_DIR
from ..evaluation.wsd_data import DEFAULT_WSD_DIR
from ._util import DEFAULT_THREADS, PRECISION_OPT, Arg, Opt, UserError, app, apply_threads, mix_spec, model_path, msg, user_errors

WSD_FILES = [
    f"{sub}/{name}.{kind}"
    for sub, name in (
        ("Training_Corpora/SemCor", "semcor"),
        ("Evaluation_Datasets/semeval2007", "semeval2007"),
        ("Evaluation_Datasets/ALL", "ALL"),
    )
    for kind in ("data.xml", "gold.key.txt")
]


def _weights(weights: Optional[Path]) -> Optional[str]:
    return None if weights is None or str(weights) in ("en_default", "default") else str(model_path(weights))


def _precision(precision: str) -> str:
    """``precision`` if the biLM can run in it (checked before any model is loaded), else a one-line error."""
    from ..embedding.worker import PRECISIONS

    if precision not in PRECISIONS:
        raise UserError(f"--precision must be one of {', '.join(PRECISIONS)}, got {precision!r}")
    if precision == "int8":  # this CPU's int8 path, checked before the model is loaded
        from ..kernels.int8 import Int8Unavailable, activation_levels

        try:
            activation_levels()
        except Int8Unavailable as err:
            raise UserError(f"--precision int8: {err}") from None
    return precision


def _write_json(output: Optional[Path], report: dict) -> None:
    if output is not None:
        from ..files import write_json

        output.parent.mkdir(parents=True, exist_ok=True)
        write_json(output, report)
        msg.good(f"wrote {output}")


def _text_files(paths: List[Path]) -> List[Path]:
    """The text files named, a folder standing for its .txt/.txt.gz files (sorted)."""
    from ..embedding.reader import SUFFIXES
    from ..induction.corpus import corpus_files

    try:
        return corpus_files(paths, suffixes=SUFFIXES, kind="text")
    except FileNotFoundError as err:
        raise UserError(f"{err}: pass .txt or .txt.gz files, or a folder of them.") from None


def _elmo_pipeline(weights: Path, store_layers: bool):
    """A blank English pipeline with a sentencizer and ``elmo``; and its biLM's fingerprint."""
    import spacy

    from ..bilm.fingerprint import bilm_fingerprint
    from ..pipeline.component import Elmo

    nlp = spacy.blank("en")
    nlp.add_pipe("sentencizer")
    config: Dict[str, Any] = {"store_layers": store_layers}
    if _weights(weights):
        config["weights"] = _weights(weights)
    elmo = cast(Elmo, nlp.add_pipe("elmo", config=config))
    return nlp, bilm_fingerprint(elmo.bilm)


@app.command("wic")
@user_errors
def wic_cli(
    # fmt: off
    data: Path = Opt(DEFAULT_WIC_DIR, "--data", "-d", help="WiC folder ({train,dev,test}.data.txt and .gold.txt)"),
    weights: Path = Opt(Path("en_default"), "--weights", "-w", help="biLM folder; en_default = the embedded English model"),
    threads: int = Opt(DEFAULT_THREADS, "--threads", "-t", help="CPU threads for the biLM (0 = one per core)"),
    output: Optional[Path] = Opt(None, "--output", "-o", help="Also write the report as JSON here. Default: none"),
    precision: str = PRECISION_OPT,
    # fmt: on
) -> None:
    """WiC accuracy: cosine of the target word's two vectors; threshold on train, layer/mix on dev, accuracy on test."""
    from ..evaluation import wic

    precision = _precision(precision)
    require_files(data, [f"{split}.{kind}.txt" for split in ("train", "dev", "test") for kind in ("data", "gold")], "WiC")
    apply_threads(threads)
    report = wic.evaluate(_weights(weights), data, precision=precision)
    msg.text(wic.table(report))
    msg.good(f"WiC test accuracy {100 * report['test_accuracy']:.1f} ({report['chosen_on_dev']}, chosen on dev; {report['seconds']:.0f} s)")
    _write_json(output, report)


@app.command("wsd")
@user_errors
def wsd_cli(
    # fmt: off
    data: Path = Opt(DEFAULT_WSD_DIR, "--data", "-d", help="Raganato WSD framework folder (Training_Corpora/SemCor, Evaluation_Datasets)"),
    weights: Path = Opt(Path("en_default"), "--weights", "-w", help="biLM folder; en_default = the embedded English model"),
    threads: int = Opt(DEFAULT_THREADS, "--threads", "-t", help="CPU threads for the biLM (0 = one per core)"),
    output: Optional[Path] = Opt(None, "--output", "-o", help="Also write the report as JSON here. Default: none"),
    inventory: Optional[Path] = Opt(
        None,
        "--inventory",
        "-i",
        help="Also write the SemCor sense inventory (layer/mix chosen on semeval2007) to this file, for the elmo_senses component. Default: none",
    ),
    cache_dir: Optional[Path] = Opt(None, "--cache-dir", help="Keep the embedded instances here (reused by later runs). Default: none"),
    precision: str = PRECISION_OPT,
    # fmt: on
) -> None:
    """All-words WSD: SemCor sense centroids, F1 on the Raganato test sets per layer/mix, beside the most frequent SemCor sense."""
    from ..evaluation import wsd

    precision = _precision(precision)
    require_files(data, WSD_FILES, "WSD (Raganato framework + SemCor)")
    apply_threads(threads)
    report = wsd.evaluate(_weights(weights), data, cache_dir=cache_dir, save_inventory=inventory, log=msg.info, precision=precision)
    msg.text(wsd.table(report))
    _write_json(output, report)


@app.command("sense-probe")
@user_errors
def sense_probe_cli(
    # fmt: off
    weights: Path = Opt(Path("en_default"), "--weights", "-w", help="biLM folder; en_default = the embedded English model"),
    mix: str = Opt("average", "--mix", "-m", help="The vectors compared: average, top, layer:N or one weight per layer"),
    summary: bool = Opt(False, "--summary", help="The mixes top, average and layer:1, overall accuracy only. Default: off"),
    threads: int = Opt(DEFAULT_THREADS, "--threads", "-t", help="CPU threads for the biLM (0 = one per core)"),
    output: Optional[Path] = Opt(None, "--output", "-o", help="Also write the report as JSON here (--summary: per mix). Default: none"),
    precision: str = PRECISION_OPT,
    # fmt: on
) -> None:
    """The hand-written sense probe: 24 ambiguous words, two senses, six sentences each; cosine within and across senses, leave-one-out nearest-centroid accuracy."""
    from ..evaluation import sense_probe

    apply_threads(threads)
    mixes = sense_probe.SUMMARY_MIXES if summary else (mix_spec(mix),)
    precision = _precision(precision)
    reports = {
        str(m): sense_probe.evaluate(sense_probe.probe_pipeline(_weights(weights), m, precision=precision, threads=threads)) for m in mixes
    }
    for report in reports.values():
        report["precision"] = precision
    if summary:
        msg.text(sense_probe.summary_table(reports))
        _write_json(output, reports)
    else:
        report = next(iter(reports.values()))
        msg.text(sense_probe.table(report))
        _write_json(output, report)


def _paragraphs(paths: List[Path]) -> Iterator[str]:
    from ..training.corpus import SplitStats, read_units

    for path in paths:
        yield from read_units(path, "paragraph", SplitStats())


@app.command("index")
@user_errors
def index_cli(
    # fmt: off
    texts: List[Path] = Arg(..., help="Text files (.txt or .txt.gz; paragraphs separated by blank lines), or folders of them"),
    out: Path = Opt(..., "--out", "-o", help="Folder to write the index to"),
    weights: Path = Opt(Path("en_default"), "--weights", "-w", help="biLM folder; en_default = the embedded English model"),
    layer: Optional[str] = Opt(
        None, "--layer", "-l", help="Vectors to index: average, top, layer:N or weights (default: the component's mix)"
    ),
    backend: str = Opt("exact", "--backend", "-b", help='exact, or hnswlib (approximate; pip install "spacy-elmo[ann]")'),
    max_tokens: int = Opt(
        0, "--max-tokens", help="Index exactly this many token occurrences (non-space tokens; the last paragraph is cut), 0 = all"
    ),
    threads: int = Opt(DEFAULT_THREADS, "--threads", "-t", help="CPU threads for the biLM (0 = one per core)"),
    # fmt: on
) -> None:
    """Embed texts and build a nearest-neighbour index over their token occurrences."""
    from ..search.index import TokenIndex

    if max_tokens < 0:
        raise UserError(f"--max-tokens must be 0 (all) or more, got {max_tokens}")
    files = _text_files(texts)
    apply_threads(threads)
    nlp, fingerprint = _elmo_pipeline(weights, store_layers=layer is not None)
    index = TokenIndex(layer=mix_spec(layer) if layer else None, backend=backend, fingerprint=fingerprint)
    for doc in nlp.pipe(_paragraphs(files), batch_size=64):
        index.add_docs([doc], max_total=max_tokens or None)
        if max_tokens and len(index) >= max_tokens:
            break
    index.save(out)
    msg.good(f"indexed {len(index):,} token occurrences ({backend}) in {out}")


@app.command("neighbours")
@user_errors
def neighbours_cli(
    # fmt: off
    index_dir: Path = Arg(..., help="Index folder written by the index command"),
    text: str = Arg(..., help="A sentence with the query word"),
    word: str = Opt(..., "--word", help="The query word (its first occurrence in the text)"),
    k: int = Opt(10, "--k", "-k", help="Number of neighbours"),
    weights: Path = Opt(Path("en_default"), "--weights", "-w", help="biLM folder the index was built with"),
    same_word: bool = Opt(
        False, "--same-word", help="Only occurrences of the query word (its senses, as in the paper's play table). Default: all occurrences"
    ),
    # fmt: on
) -> None:
    """The k token occurrences of an index nearest to a word in context."""
    from ..search.index import TokenIndex

    index = TokenIndex.load(index_dir)
    nlp, fingerprint = _elmo_pipeline(weights, store_layers=index.layer is not None)
    if index.fingerprint is None:
        msg.warn(
            f"{index_dir} records no biLM fingerprint (built by an older release): cannot check that --weights is the model that built it"
        )
    index.check_fingerprint(fingerprint, f"--weights {weights}")
    doc = nlp(text)
    token = next((t for t in doc if t.text == word), None) or next((t for t in doc if t.lower_ == word.lower()), None)
    if token is None:
        raise UserError(f"--word {word!r} is not a token of the text ({[t.text for t in doc]})")
    for hit in index.query(token, k=k, word=token.text if same_word else None):
        msg.text(f"{hit.score:.3f}\t{hit.text}\tdoc {hit.doc} sentence {hit.sentence} token {hit.token}\t{hit.context or ''}")
