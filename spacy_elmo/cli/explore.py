"""Command ``explore``: a word's induced senses as one HTML page (registered on spacy-elmo's command line)."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from ._util import Arg, Opt, UserError, app, msg, user_errors


@app.command("explore")
@user_errors
def explore_cli(
    # fmt: off
    senses: Path = Arg(..., help="Saved induced senses of a word: NAME.json (with NAME.npz next to it), as save_word_senses writes them"),
    output: Optional[Path] = Arg(None, help="The HTML page to write. Default: NAME.html next to the senses"),
    neighbours: int = Opt(10, "--neighbours", "-k", help="How many nearest occurrences a click on a point lists"),
    title: Optional[str] = Opt(None, "--title", help="The page's title. Default: Senses of “WORD”"),
    # fmt: on
) -> None:
    """Write a page that shows a word's occurrences on a map coloured by sense: hover a point for
    its sentence, click it for its nearest occurrences. One file, opens offline."""
    from ..senses.explore import write_explore_page
    from ..senses.induced import load_word_senses, word_senses_files

    if senses.is_dir():
        raise UserError(
            f"{senses} is a folder: pass the NAME.json of one word's saved senses (save_word_senses writes NAME.json + NAME.npz)"
        )
    if neighbours < 1:
        raise UserError(f"--neighbours {neighbours}: must be 1 or more")
    json_path, _ = word_senses_files(senses)
    if output is None:
        output = json_path.with_suffix(".html")
    if output.suffix.lower() not in (".html", ".htm"):
        raise UserError(f"{output}: the page is HTML; name it NAME.html")
    word_senses = load_word_senses(senses)
    try:
        path = write_explore_page(word_senses, output, neighbours=neighbours, title=title)
    except ImportError as err:
        raise UserError(str(err)) from None  # Plotly is not installed
    size = path.stat().st_size / 1e6
    msg.good(
        f"wrote {path} ({len(word_senses.occurrences):,} occurrences of {word_senses.word!r}, {len(word_senses.senses)} senses, {size:.1f} MB)"
    )
