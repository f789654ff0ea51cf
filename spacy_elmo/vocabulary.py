"""The package's one reader of a vocabulary file: one token a line, in the rows of its softmax.

The format, for every model (ours and the published ones): UTF-8; a line ends at ``\\n`` and
only there (a token may hold any other character, line separators such as U+2028 or ``\\r``
included, so a file reads the same whichever program wrote the token); an optional
``<TAB>count`` column (a whole number) after the token, as spacy-elmo's ``vocab.txt`` has. A
line's position is its row in the softmax, so an empty line (a token missing) and a token listed
twice are errors naming their line, never skipped; a final newline is optional.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, List, NamedTuple, Union


class VocabularyError(ValueError):
    """A vocabulary file that cannot be read as one token a line."""


class VocabularyFile(NamedTuple):
    """The tokens of a vocabulary file, in row order, and their counts (0 where none is given)."""

    tokens: List[str]
    counts: List[int]


def read_vocabulary(path: Union[str, "os.PathLike[str]"]) -> VocabularyFile:
    """Read ``path`` (see the module's format); raises :class:`VocabularyError` naming the file
    and line of the first problem, or an ``OSError`` when it cannot be read at all."""
    data = Path(path).read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        at = data.count(b"\n", 0, err.start) + 1
        raise VocabularyError(f"{path}, line {at}: not UTF-8 text ({err.reason}); the vocabulary is damaged") from None
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the final newline
    tokens: List[str] = []
    counts: List[int] = []
    first: Dict[str, int] = {}
    for number, line in enumerate(lines, 1):
        token, tab, count = line.partition("\t")
        if not token:
            raise VocabularyError(f"{path}, line {number}: no token (an empty line); a vocabulary lists one token a line, in softmax rows")
        if tab and not (count.isascii() and count.isdigit()):
            raise VocabularyError(f"{path}, line {number}: the count {count!r} of {token!r} is not a whole number")
        if token in first:
            raise VocabularyError(
                f"{path}, line {number}: {token!r} is duplicated (first on line {first[token]}); a vocabulary lists each token once"
            )
        first[token] = number
        tokens.append(token)
        counts.append(int(count) if tab else 0)
    return VocabularyFile(tokens, counts)
