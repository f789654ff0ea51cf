"""Command ``explore``: a word's induced senses as one HTML page (registered on spacy-elmo's command line)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

from ..induction import DEFAULT_REPRESENTATION
from ._util import DEFAULT_THREADS, Arg, Opt, UserError, app, apply_threads, lang_code, msg, user_errors
from .induce import REPRESENTATION_HELP, induction_settings

PAGE_SUFFIXES = (".html", ".htm")


def _split_output(inputs: List[Path]) -> "tuple[List[Path], Optional[Path]]":
    """The inputs and the page: after a saved WORD.json the next argument is the page; otherwise a last NAME.html is."""
    from ..induction.induce import is_saved_word_senses

    if len(inputs) == 2 and is_saved_word_senses(inputs[0]):
        return inputs[:1], inputs[1]
    if len(inputs) > 1 and inputs[-1].suffix.lower() in PAGE_SUFFIXES:
        return inputs[:-1], inputs[-1]
    return inputs, None


@app.command("explore")
@user_errors
def explore_cli(
    # fmt: off
    inputs: List[Path] = Arg(
        ...,
        help="What to show, then optionally the page (PAGE.html): a saved WORD.json (with WORD.npz next to it); an induce --out "
        "folder (with --word); or a corpus (text files, folders of them, .spacy DocBins) to induce --word's senses from",
    ),
    word: Optional[str] = Opt(
        None,
        "--word",
        help="The word: its file in an induce --out folder, or the word to induce from a corpus. Default: none (needed for both)",
    ),
    weights: Path = Opt(Path("en_default"), "--weights", "-w", help="With a corpus: the biLM folder; en_default = the embedded model"),
    representation: str = Opt(DEFAULT_REPRESENTATION, "--representation", "-r", help="With a corpus: " + REPRESENTATION_HELP),
    n_senses: int = Opt(0, "--n-senses", help="With a corpus: a fixed number of senses (0 = chosen from the data)"),
    lang: str = Opt(
        "en", "--lang", "-l", help="With a corpus: its spaCy language code (en, de, ru, zh, ar, ...): tokenizer, stop words, word forms"
    ),
    threads: int = Opt(DEFAULT_THREADS, "--threads", "-t", help="With a corpus: CPU threads for the biLM (0 = one per core)"),
    neighbours: int = Opt(10, "--neighbours", "-k", help="How many nearest occurrences a click on a point lists"),
    title: Optional[str] = Opt(None, "--title", help="The page's title. Default: Senses of “WORD”"),
    # fmt: on
) -> None:
    """Write a page that shows a word's occurrences on a map coloured by sense: hover a point for
    its sentence, click it for its nearest occurrences. One file, opens offline."""
    from ..explore.page import PLOTLY_MISSING, plotly_available, write_explore_page
    from ..induction.induce import file_stem, holds_saved_senses, is_saved_word_senses, word_senses_from
    from ..induction.induced import word_senses_files
    from ..induction.naming import plural

    if neighbours < 1:
        raise UserError(f"--neighbours {neighbours}: must be 1 or more")
    if not plotly_available():  # the page is all explore writes: say so before inducing anything
        raise UserError(PLOTLY_MISSING)
    sources, output = _split_output(inputs)
    saved = is_saved_word_senses(sources[0]) or (len(sources) == 1 and holds_saved_senses(sources[0]))
    if saved and (representation != DEFAULT_REPRESENTATION or n_senses or lang != "en" or str(weights) not in ("en_default", "default")):
        raise UserError(
            f"{sources[0]} holds senses induced already: --weights, --representation and --n-senses apply to a corpus, as does --lang"
        )
    settings = None if saved else induction_settings(representation, n_senses, lang=lang_code(lang))
    if output is None:  # next to a saved WORD.json, inside an induce --out folder, or here for a corpus
        if is_saved_word_senses(sources[0]):
            output = word_senses_files(sources[0])[0].with_suffix(".html")
        else:
            output = (sources[0] if saved else Path()) / f"{file_stem(word or sources[0].name)}.html"
    if output.suffix.lower() not in PAGE_SUFFIXES:
        raise UserError(f"{output}: the page is HTML; name it NAME.html")
    if not saved:
        apply_threads(threads)
    spec = None if str(weights) in ("en_default", "default") else str(weights)
    word_senses = word_senses_from(sources, word, weights=spec, settings=settings, log=msg.info)
    if word_senses.note:
        msg.warn(word_senses.note)
    try:
        path = write_explore_page(word_senses, output, neighbours=neighbours, title=title)
    except ImportError as err:
        raise UserError(str(err)) from None  # Plotly is not installed
    size = path.stat().st_size / 1e6
    msg.good(
        f"wrote {path} ({plural(len(word_senses.occurrences), 'occurrence')} of {word_senses.word!r}, "
        f"{plural(len(word_senses.senses), 'sense')}, {size:.1f} MB)"
    )
