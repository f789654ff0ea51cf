"""Commands ``change`` (which words are used differently in two corpora) and ``change-eval``
(the measures against known truth on the synthetic SemCor benchmark)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

from ..evaluation.wsd_data import DEFAULT_WSD_DIR
from ._util import DEFAULT_THREADS, Arg, Opt, UserError, app, apply_threads, lang_code, msg, user_errors
from .induce import LANG_OPT, MAX_SENSES_OPT, MIN_SHARE_OPT, REPRESENTATION_OPT, SIGNIFICANCE_OPT, TEST_AXES_OPT, _words, show_forms

MEASURE_HELP = (
    "apd (average pairwise distance), apd_c (APD less the corpora's own), prt (prototype distance), jsd (of sense shares) "
    "or mahal (distance of the means along the main axes, each scaled by its spread)"
)
# the options change and change-eval share (one definition each; the induction's are induce's own)
MAX_OCC_OPT = Opt(200, "--max-occurrences", help="Occurrences sampled per word and corpus (a seeded uniform sample beyond)")
AT_LEAST_OPT = Opt(5, "--at-least", help="Binary call: a sense with at least this many occurrences in one corpus ...")
AT_MOST_OPT = Opt(2, "--at-most", help="... and at most this many in the other was gained or lost (SemEval-2020 Task 1)")
VECTORS_OPT = Opt(
    "",
    "--vectors",
    help="What APD, APD-c, PRT and MAHAL compare: elmo (each occurrence's ELMo vector), context (the words around it) "
    "or both. Default: both (chosen on the synthetic benchmark's dev half)",
)
SEED_OPT = Opt(0, "--seed", help="Seed of the samples and the bootstrap")
TEST_OPT = Opt(
    "",
    "--test",
    help="The binary call's test: energy (the energy distance over the occurrences as the senses were induced from them) "
    "or measure (the ranking measure's own permutation test). Default: energy (chosen on the dev lemmas and the tuning flip sets)",
)
THREADS_OPT = Opt(DEFAULT_THREADS, "--threads", "-t", help="CPU threads for the biLM (0 = one per core)")
WEIGHTS_OPT = Opt(
    Path("en_default"), "--weights", "-w", help="biLM folder (with softmax.pt + vocab.txt for substitutes); en_default = the embedded model"
)


def change_settings(
    representation: str,
    max_senses: int,
    min_share: float,
    significance: float,
    test_axes: int,
    max_occurrences: int,
    at_least: int,
    at_most: int,
    seed: int,
    lang: str = "en",
    **options,
):
    """The command line's options as :class:`ChangeSettings` (the corpora in language ``lang``); a bad value is one line."""
    from ..change.detect import ChangeSettings
    from ..change.measures import BinaryRule
    from .induce import induction_settings

    induction = induction_settings(
        representation,
        max_senses=max_senses,
        min_share=min_share,
        significance=significance,
        test_axes=test_axes,
        seed=seed,
        lang=lang,
    )
    options = {name: value for name, value in options.items() if value != ""}  # "": the option was not given, ChangeSettings decides
    try:
        return ChangeSettings(
            max_occurrences=max_occurrences, rule=BinaryRule(at_least, at_most), seed=seed, induction=induction, **options
        )
    except ValueError as err:
        raise UserError(str(err)) from None


def corpus_paths(value: Path) -> List[Path]:
    """A corpus argument: one path, or several joined by commas (``a.txt,b.txt``) when no file has that whole name."""
    from ..induction.corpus import corpus_files

    paths = [value] if value.exists() or "," not in str(value) else [Path(p.strip()) for p in str(value).split(",") if p.strip()]
    corpus_files(paths)  # a missing file is one line now, not after loading the model
    return paths


def check_not_empty(paths: List[Path], which: str, argument: Path, lang: str = "en") -> None:
    """One line naming corpus ``which`` when it holds no sentence (checked before the model loads: nothing is written)."""
    from ..induction.corpus import read_sentences

    if next(iter(read_sentences(paths, lang=lang)), None) is None:
        raise UserError(f"corpus {which} ({argument}) is empty: it holds no sentence to measure; nothing written")


def _spec(weights: Path) -> Optional[str]:
    return None if str(weights) in ("en_default", "default") else str(weights)


@app.command("change")
@user_errors
def change_cli(
    # fmt: off
    corpus_a: Path = Arg(
        ...,
        help="The first corpus: a text file (.txt/.txt.gz, a paragraph per line), a folder of them, a .spacy DocBin, or several joined by commas",
    ),
    corpus_b: Path = Arg(..., help="The second corpus, in the same forms"),
    out: Path = Opt(..., "--out", "-o", help="Folder for report.json, report.tsv, senses/ (for explore) and pages/"),
    words: Optional[str] = Opt(
        None, "--words", help="Target words, comma-separated; extra forms after '=' split by '/'. Default: content words frequent in both"
    ),
    n_words: int = Opt(20, "--n-words", "-n", help="Without --words: how many words frequent in both corpora"),
    names: Optional[str] = Opt(None, "--names", help="The corpora's names in the report, comma-separated. Default: their file names"),
    measure: str = Opt(
        "", "--measure", "-m", help=f"Rank by {MEASURE_HELP}. Default: mahal (chosen on the synthetic benchmark's dev half)"
    ),
    weights: Path = WEIGHTS_OPT,
    representation: str = REPRESENTATION_OPT,
    max_senses: int = MAX_SENSES_OPT,
    min_share: float = MIN_SHARE_OPT,
    significance: float = SIGNIFICANCE_OPT,
    test_axes: int = TEST_AXES_OPT,
    max_occurrences: int = MAX_OCC_OPT,
    vectors: str = VECTORS_OPT,
    min_occurrences: int = Opt(10, "--min-occurrences", help="A word with fewer occurrences in either corpus is listed, not measured"),
    at_least: int = AT_LEAST_OPT,
    at_most: int = AT_MOST_OPT,
    resamples: int = Opt(200, "--resamples", help="Bootstrap replicates for each measure's interval"),
    confidence: float = Opt(0.95, "--confidence", help="Coverage of the bootstrap intervals"),
    alpha: float = Opt(
        0.05,
        "--alpha",
        help="The binary call: a word changed when its permutation test's q-value (adjusted over the words) is at most this",
    ),
    permutations: int = Opt(999, "--permutations", help="Shuffles of the corpus labels in each word's permutation test"),
    test: str = TEST_OPT,
    seed: int = SEED_OPT,
    pages: bool = Opt(True, "--pages/--no-pages", help="Also write an explore page per word (pages/WORD.html; needs Plotly)"),
    lang: str = LANG_OPT,
    threads: int = THREADS_OPT,
    # fmt: on
) -> None:
    """Which words are used differently in two corpora: APD, APD-c, PRT and the JSD of jointly induced senses, with
    bootstrap intervals, a ranking, a binary call that is a permutation test (false discoveries controlled over the words), and
    each word's senses with their shares in A and B."""
    from ..change.detect import detect_change
    from ..change.report import explain, write_report
    from ..explore.page import PLOTLY_MISSING, plotly_available
    from ..hub.load import load_bilm
    from ..induction.induce import load_head
    from ..induction.naming import plural

    settings = change_settings(
        representation,
        max_senses,
        min_share,
        significance,
        test_axes,
        max_occurrences,
        at_least,
        at_most,
        seed,
        lang_code(lang),
        min_occurrences=min_occurrences,
        n_resamples=resamples,
        alpha=alpha,
        n_permutations=permutations,
        confidence=confidence,
        measure=measure,
        vectors=vectors,
        test=test,
    )
    pair = [n.strip() for n in names.split(",")] if names else [corpus_a.name.split(",")[0], corpus_b.name.split(",")[0]]
    if len(pair) != 2 or not all(pair):
        raise UserError(f"--names {names!r}: give two names, comma-separated, e.g. --names 1850s,2000s")
    if out.exists() and not out.is_dir():
        raise UserError(f"--out {out} is a file: give a folder (report.json, report.tsv, senses/ and pages/ go into it)")
    paths_a, paths_b = corpus_paths(corpus_a), corpus_paths(corpus_b)
    check_not_empty(paths_a, "A", corpus_a, lang)
    check_not_empty(paths_b, "B", corpus_b, lang)
    skipped_pages = pages and not plotly_available()
    if skipped_pages:  # asked before any work: the report is written all the same, without its pages
        msg.warn(f"{PLOTLY_MISSING}: the explore pages will be skipped; report.json, report.tsv and senses/ are written")
        pages = False
    apply_threads(threads)
    spec = _spec(weights)
    bilm, head = load_bilm(spec), load_head(spec)
    report = detect_change(
        paths_a, paths_b, _words(words), n_words=n_words, names=(pair[0], pair[1]), bilm=bilm, head=head, settings=settings, log=msg.info
    )
    if words:
        show_forms([(c.word, c.word_senses.occurrences if c.word_senses else [], c.seen_a + c.seen_b) for c in report.words], lang)
    for change in report.words:
        if not change.measured:
            msg.warn(change.note or change.word)
            continue
        for line in explain(change, report.names):
            msg.text(line)
    try:
        written = write_report(report, out, pages=pages)
    except ImportError as err:
        raise UserError(f"{err} (or pass --no-pages)") from None
    measured = sum(c.measured for c in report.words)
    if not measured:
        raise UserError(f"no target word occurs {settings.min_occurrences} times in both corpora: nothing measured (see {written['json']})")
    msg.good(
        f"wrote {out}: report.json, report.tsv, senses/{', pages/' if 'pages' in written else ''} ({plural(measured, 'word')} measured, {report.seconds:.0f} s)"
    )
    if skipped_pages:
        msg.warn(
            f"pages/ skipped: {PLOTLY_MISSING}; then `spacy-elmo explore {out}/senses --word WORD` writes a word's page from what was saved"
        )


@app.command("change-eval")
@user_errors
def change_eval_cli(
    # fmt: off
    data: Path = Opt(
        DEFAULT_WSD_DIR,
        "--data",
        "-d",
        help="Raganato WSD framework folder (the benchmark reads Training_Corpora/SemCor)",
    ),
    weights: Path = WEIGHTS_OPT,
    representation: str = REPRESENTATION_OPT,
    max_senses: int = MAX_SENSES_OPT,
    min_share: float = MIN_SHARE_OPT,
    significance: float = SIGNIFICANCE_OPT,
    test_axes: int = TEST_AXES_OPT,
    at_least: int = AT_LEAST_OPT,
    at_most: int = AT_MOST_OPT,
    vectors: str = VECTORS_OPT,
    test: str = TEST_OPT,
    size: int = Opt(50, "--size", help="Occurrences in each of a lemma's two sampled corpora"),
    min_per_sense: int = Opt(20, "--min-per-sense", help="A lemma takes part with two senses of at least this many SemCor occurrences"),
    max_lemmas: int = Opt(0, "--max-lemmas", help="At most this many lemmas (0 = every eligible one)"),
    seed: int = SEED_OPT,
    threads: int = THREADS_OPT,
    output: Optional[Path] = Opt(
        None, "--output", "-o", help="Also write the results (scores and one row per lemma) as JSON here. Default: none"
    ),
    # fmt: on
) -> None:
    """The synthetic change benchmark from SemCor: Spearman of APD, APD-c, PRT and JSD against the true JSD of the
    sampled sense distributions, and the binary call's accuracy; dev and held-out test halves of the lemmas."""
    from ..change import synthetic

    settings = change_settings(
        representation,
        max_senses,
        min_share,
        significance,
        test_axes,
        2 * size,
        at_least,
        at_most,
        seed,
        min_occurrences=2,
        vectors=vectors,
        test=test,
    )
    semcor = data / "Training_Corpora" / "SemCor"
    if not any((semcor / f"semcor.data.xml{gz}").is_file() for gz in ("", ".gz")):
        raise UserError(f"SemCor not found in {semcor}: place the WSD framework (with Training_Corpora/SemCor) there, or pass --data")
    apply_threads(threads)
    result = synthetic.evaluate(
        data, _spec(weights), settings, size=size, min_per_sense=min_per_sense, max_lemmas=max_lemmas or None, seed=seed, log=msg.info
    )
    msg.text(synthetic.table(result))
    best = result["best_on_dev"]
    msg.good(
        f"best on dev: {best}; on the held-out test lemmas Spearman {result['best_on_test']:.3f}, "
        f"binary accuracy {result['scores']['test']['binary_accuracy']:.3f} ({result['seconds']:.0f} s, {result['threads']} thread(s))"
    )
    by_threshold = result["binary_by_threshold"]
    if by_threshold:
        msg.info(
            f"binary call by a threshold on {best} instead (chosen on dev: {by_threshold['threshold']:.4g}): "
            f"accuracy {by_threshold['dev']:.3f} on dev, {by_threshold['test']:.3f} on test"
        )
    if output is not None:
        from ..files import write_json

        output.parent.mkdir(parents=True, exist_ok=True)
        write_json(output, result)
        msg.good(f"wrote {output}")
