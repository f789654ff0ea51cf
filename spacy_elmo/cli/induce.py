"""Commands ``induce`` (word senses from a corpus) and ``wsi-eval`` (sense induction on SemEval-2010 Task 14)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional

from ..induction import DEFAULT_REPRESENTATION, SIGNIFICANCE
from ._util import DEFAULT_THREADS, Arg, Opt, UserError, app, apply_threads, lang_code, msg, user_errors

REPRESENTATION_HELP = (
    "substitutes (the LM's predicted words), vectors (ELMo vectors, layers 1-2), context (the words around, with the model's "
    "word vectors), or several joined by '+' (e.g. substitutes+context; both = substitutes+vectors)"
)
# the clustering options induce and wsi-eval share (one definition each)
REPRESENTATION_OPT = Opt(DEFAULT_REPRESENTATION, "--representation", "-r", help=REPRESENTATION_HELP)
MAX_SENSES_OPT = Opt(10, "--max-senses", help="At most this many senses per word")
N_SENSES_OPT = Opt(0, "--n-senses", help="A fixed number of senses per word (0 = chosen per word from the data)")
MIN_SHARE_OPT = Opt(0.05, "--min-share", help="A sense holds at least this share of a word's occurrences (else it is not split off)")
SIGNIFICANCE_OPT = Opt(
    SIGNIFICANCE,
    "--significance",
    help="A split into two senses must beat one Gaussian of the same spread by this many standard deviations (higher: fewer senses)",
)
TEST_AXES_OPT = Opt(
    2,
    "--test-axes",
    help="The split test reads this many leading principal axes of the occurrences being split (0 = all of them)",
)
TEMPERATURE_OPT = Opt(0.5, "--temperature", help="Temperature of the substitute distributions (below 1 sharpens)")
PRIOR_WEIGHT_OPT = Opt(
    0.75,
    "--prior-weight",
    help="Substitutes ranked by log p(w|context) - this * log p(w), p(w) the LM's mean prediction over the corpus (0 = off)",
)
PATTERN_OPT = Opt(
    "",
    "--pattern",
    help="Also read the LM through Amrami & Goldberg's symmetric pattern: the biLM reads 'w1 .. X WORD X .. wn', the forward "
    "LM predicting 'X WORD ___' and the backward '___ WORD X'; none = the plain reading only. Default: the language's word for "
    "'and' (and, und, и, 和, و, ...; none for a language whose word the package does not know)",
)
LANG_OPT = Opt(
    "en",
    "--lang",
    "-l",
    help="spaCy language code of the corpus (en, de, ru, zh, ar, ...): its tokenizer, stop words and word forms",
)


def pattern_word(pattern: str) -> Optional[str]:
    """``--pattern``: a word, ``none`` for no pattern, or empty (the default) for the language's word for "and"."""
    from ..induction.induce import LANGUAGE_AND

    if not pattern.strip():
        return LANGUAGE_AND
    return None if pattern.strip().lower() == "none" else pattern


def _words(words: Optional[str]) -> Optional[Dict[str, List[str]]]:
    """``bank,cell`` or ``lie=lay/lain/lying,bank`` -> ``{word: [other forms]}``."""
    if not words:
        return None
    out: Dict[str, List[str]] = {}
    for item in words.split(","):
        word, _, forms = item.strip().partition("=")
        if not word.strip():
            raise UserError(f"--words {words!r}: an empty word; use e.g. --words bank,cell or --words lie=lay/lain,bank")
        out[word.strip()] = [f.strip() for f in forms.split("/") if f.strip()]
    return out


def show_forms(words: List[Any], lang: str) -> None:
    """For each ``(word, occurrences, seen)``: the forms matched and how often (in the occurrences kept);
    then how forms are matched in language ``lang`` and how to add more."""
    from ..induction.forms import form_counts, forms_hint, forms_line

    for word, occurrences, seen in words:
        where = f" (in the {len(occurrences):,} occurrences kept of {seen:,})" if seen > len(occurrences) else ""
        msg.info(forms_line(word, form_counts(o.text[o.start : o.end] for o in occurrences), where))
    msg.info(forms_hint([word for word, _, _ in words], lang))


def induction_settings(representation: str, n_senses: int = 0, test_axes: int = 2, **options: Any):
    """The command line's induction options as :class:`InductionSettings` (0 senses = chosen per
    word, 0 test axes = all of them); a bad value is one line."""
    from ..induction.induce import REPRESENTATION_CHOICES, REPRESENTATIONS, InductionSettings

    if representation not in REPRESENTATIONS:
        raise UserError(f"--representation {representation!r}: use one of {REPRESENTATION_CHOICES}")
    try:
        return InductionSettings(representation=representation, n_senses=n_senses or None, test_axes=test_axes or None, **options)
    except ValueError as err:
        raise UserError(str(err)) from None


@app.command("induce")
@user_errors
def induce_cli(
    # fmt: off
    corpus: List[Path] = Arg(..., help="Text files (.txt/.txt.gz, a paragraph per line), folders of them, or .spacy DocBins"),
    out: Path = Opt(
        ..., "--out", "-o", help="Folder for WORD.json + WORD.npz per word (the induced senses, for explore) and inventory.bin"
    ),
    words: Optional[str] = Opt(
        None, "--words", help="Target words, comma-separated; extra forms after '=' split by '/': lie=lay/lain,bank. Default: find them"
    ),
    n_words: int = Opt(20, "--n-words", "-n", help="Without --words: how many frequent words whose occurrences spread most"),
    weights: Path = Opt(
        Path("en_default"),
        "--weights",
        "-w",
        help="biLM folder (with softmax.pt + vocab.txt for substitutes); en_default = the embedded model",
    ),
    representation: str = REPRESENTATION_OPT,
    max_senses: int = MAX_SENSES_OPT,
    n_senses: int = N_SENSES_OPT,
    min_share: float = MIN_SHARE_OPT,
    significance: float = SIGNIFICANCE_OPT,
    test_axes: int = TEST_AXES_OPT,
    temperature: float = TEMPERATURE_OPT,
    prior_weight: float = PRIOR_WEIGHT_OPT,
    pattern: str = PATTERN_OPT,
    lang: str = LANG_OPT,
    min_occurrences: int = Opt(10, "--min-occurrences", help="A word seen fewer times gets one sense"),
    max_occurrences: int = Opt(2000, "--max-occurrences", help="Occurrences kept per word (a uniform sample beyond)"),
    check: int = Opt(
        0,
        "--check",
        help="Also run the pseudoword check with this many pairs of frequent words other than the targets (printed, saved, "
        "shown by explore); 0 = off",
    ),
    threads: int = Opt(DEFAULT_THREADS, "--threads", "-t", help="CPU threads for the biLM (0 = one per core)"),
    # fmt: on
) -> None:
    """Induce word senses from a corpus with the biLM's own language model; print each sense's name and write an inventory for elmo_senses."""
    from ..bilm.fingerprint import bilm_fingerprint
    from ..hub.load import load_bilm
    from ..induction.corpus import corpus_files
    from ..induction.induce import build_inventory, induce, load_head
    from ..induction.induced import best_split_line
    from ..induction.naming import plural

    settings = induction_settings(
        representation,
        n_senses,
        max_senses=max_senses,
        min_share=min_share,
        significance=significance,
        test_axes=test_axes,
        min_occurrences=min_occurrences,
        max_occurrences=max_occurrences,
        temperature=temperature,
        prior_weight=prior_weight,
        pattern=pattern_word(pattern),
        lang=lang_code(lang),
    )
    if check < 0:
        raise UserError(f"--check {check}: give how many pseudoword pairs to test (0 = no check)")
    corpus_files(corpus)  # a missing file is one line now, not after loading the model
    apply_threads(threads)
    spec = None if str(weights) in ("en_default", "default") else str(weights)
    bilm = load_bilm(spec)
    head = load_head(spec)
    results = induce(corpus, _words(words), n_words=n_words, bilm=bilm, head=head, settings=settings, log=msg.info)
    if words:
        show_forms([(r.word, r.occurrences, int(r.extra.get("seen", len(r.occurrences)))) for r in results], settings.lang)
    if not any(r.occurrences for r in results):
        raise UserError("none of the target words occurs in the corpus: nothing induced (nothing written)")
    for result in results:
        if result.note:
            msg.warn(result.note)
        for sense in result.senses:
            example = result.occurrences[sense.examples[0]].text if sense.examples else ""
            msg.text(f"{sense.name}\t{sense.count}\t{example[:100]}")
        almost = best_split_line(result)
        if almost:
            msg.text(f"  {almost}")
    report = None
    if check:
        from ..evaluation.wsi_check import pseudoword_check

        targets = [form for r in results for form in (r.word, *r.forms)]  # the targets are ambiguous by choice: never a pseudoword's half
        report = pseudoword_check(corpus, bilm, head, settings, n_pairs=check, exclude=targets)
        for result in results:
            result.extra["check"] = report.as_dict()
        mean = report.mean_ari
        (msg.good if mean is not None and mean >= 0.6 and len(report.pairs) == check else msg.warn)(report.line())
    inventory = build_inventory(results, bilm_fingerprint(bilm))
    _write_out(out, results, inventory, report)
    n_senses = sum(len(r.senses) for r in results)
    msg.good(
        f"wrote {out}: WORD.json + WORD.npz per word and inventory.bin ({plural(n_senses, 'sense')} of {plural(len(results), 'word')})"
    )


def _write_out(out: Path, results: List[Any], inventory: Any, report: Any) -> None:
    """Write everything into a scratch folder beside ``out``, then move it in: a failure leaves ``out`` as it was."""
    from ..files import write_into, write_json
    from ..induction.induce import save_senses

    def write(scratch: Path) -> None:
        save_senses(scratch, results)
        inventory.to_disk(scratch / "inventory.bin")
        if report is not None:
            write_json(scratch / "pseudoword-check.json", report.as_dict())

    write_into(out, write)


@app.command("wsi-eval")
@user_errors
def wsi_eval_cli(
    # fmt: off
    data: Path = Opt(
        Path("assets/data/wsi_semeval2010"),
        "--data",
        "-d",
        help="SemEval-2010 Task 14 folder (test_data/, keys/gold.all.key, keys/baselines/)",
    ),
    weights: Path = Opt(Path("en_default"), "--weights", "-w", help="biLM folder; en_default = the embedded English model"),
    representation: str = REPRESENTATION_OPT,
    max_senses: int = MAX_SENSES_OPT,
    n_senses: int = N_SENSES_OPT,
    min_share: float = MIN_SHARE_OPT,
    significance: float = SIGNIFICANCE_OPT,
    test_axes: int = TEST_AXES_OPT,
    temperature: float = TEMPERATURE_OPT,
    prior_weight: float = PRIOR_WEIGHT_OPT,
    pattern: str = PATTERN_OPT,
    context: int = Opt(0, "--context", help="Tokens of the surrounding sentences given to the biLM on each side"),
    threads: int = Opt(DEFAULT_THREADS, "--threads", "-t", help="CPU threads for the biLM (0 = one per core)"),
    key: Optional[Path] = Opt(None, "--key", help="Also write the system key (graded: label/weight) here. Default: none"),
    output: Optional[Path] = Opt(None, "--output", "-o", help="Also write the report as JSON here. Default: none"),
    # fmt: on
) -> None:
    """Word sense induction on SemEval-2010 Task 14: paired F-score, V-measure, AVG and clusters per word, beside the baselines."""
    from ..evaluation import wsi_eval

    settings = induction_settings(
        representation,
        n_senses,
        max_senses=max_senses,
        min_share=min_share,
        significance=significance,
        test_axes=test_axes,
        temperature=temperature,
        prior_weight=prior_weight,
        pattern=pattern_word(pattern),
    )
    if not (data / wsi_eval.GOLD_KEY).is_file():
        raise UserError(
            f"{data / wsi_eval.GOLD_KEY} not found: place the SemEval-2010 Task 14 release (test_data/ and keys/) in {data} "
            "(see docs/senses.md#semeval-2010-task-14), or pass --data"
        )
    apply_threads(threads)
    spec = None if str(weights) in ("en_default", "default") else str(weights)
    report = wsi_eval.evaluate(data, spec, settings, context=context, key_out=key, log=msg.info)
    msg.text(wsi_eval.table(report))
    ours = report["ours"]
    msg.good(
        f"SemEval-2010 WSI: F-S {ours['F-S']:.1f}, V-M {ours['V-M']:.1f}, AVG {ours['AVG']:.1f}, "
        f"{ours['clusters_per_word']:.1f} clusters per word ({report['seconds']:.0f} s, {report['threads']} thread(s))"
    )
    if output is not None:
        from ..files import write_json

        output.parent.mkdir(parents=True, exist_ok=True)
        write_json(output, report)
        msg.good(f"wrote {output}")
