"""Reading a corpus for sense induction: sentences as tokens with character offsets, streamed.

A corpus is a text file (``.txt`` or ``.txt.gz``: one paragraph per line or blank-line
separated), a folder of them, a spaCy ``.spacy`` DocBin, or Docs (e.g. from ``nlp.pipe``) or
strings given directly. Text is tokenised by spaCy's tokenizer of the corpus's language (``lang``:
:mod:`..lang`) and split into sentences by spaCy's sentencizer (a Doc's own sentence boundaries
when it has them). A line that is not UTF-8 is an error that
names the file and the line; a corrupt or truncated ``.gz`` file is a ``ValueError`` that names it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator, List, Sequence, Tuple, Union

from spacy.tokens import Doc, DocBin

from ..gzipped import GzipError, open_read
from ..lang import language

Corpus = Union[str, Path, Sequence[Union[str, Path]], Iterable[Doc], Iterable[str]]
TEXT_SUFFIXES = (".txt", ".txt.gz")


@dataclass(frozen=True)
class Sentence:
    """A sentence: its text, its tokens and their character spans in the text, and where it came from."""

    text: str
    tokens: List[str]
    spans: List[Tuple[int, int]]
    source: str


def _is_paths(corpus: object) -> bool:
    if isinstance(corpus, (str, Path)):
        return True
    return isinstance(corpus, (list, tuple)) and bool(corpus) and all(isinstance(c, Path) for c in corpus)


def corpus_files(
    corpus: Union[str, Path, Sequence[Union[str, Path]]],
    suffixes: Tuple[str, ...] = TEXT_SUFFIXES + (".spacy",),
    kind: str = "corpus",
) -> List[Path]:
    """The files a path argument names, a folder standing for its files with one of ``suffixes``
    (sorted); ``FileNotFoundError`` (its message names the ``kind`` of file) for a missing path or
    a folder with none."""
    paths = [Path(corpus)] if isinstance(corpus, (str, Path)) else [Path(p) for p in corpus]
    out: List[Path] = []
    for path in paths:
        if path.is_dir():
            found = sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith(suffixes))
            if not found:
                raise FileNotFoundError(f"{path} is a folder with no {' or '.join(suffixes)} files")
            out.extend(found)
        elif path.is_file():
            out.append(path)
        else:
            raise FileNotFoundError(f"{kind} file not found: {path}")
    return out


def _lines(path: Path) -> Iterator[Tuple[int, str]]:
    with open_read(path, "rb") as handle:
        try:
            for number, raw in enumerate(handle, 1):
                try:
                    yield number, raw.decode("utf-8")
                except UnicodeDecodeError as error:
                    raise ValueError(
                        f"{path}, line {number}: not UTF-8 text ({error.reason} at byte {error.start}); convert the file to UTF-8"
                    ) from None
        except GzipError as error:  # the stream is checked as it is read: a damaged file ends here, never short
            raise ValueError(f"{error}: the file is damaged or not gzip; fix or remove it") from None


def _doc_sentences(doc: Doc, source: str) -> Iterator[Sentence]:
    spans = doc.sents if doc.has_annotation("SENT_START") else [doc[:]]
    for span in spans:
        tokens = [t for t in span if not t.is_space]
        if not tokens:
            continue
        offset = span.start_char
        yield Sentence(span.text, [t.text for t in tokens], [(t.idx - offset, t.idx - offset + len(t.text)) for t in tokens], source)


def read_sentences(corpus: Corpus, batch_size: int = 256, lang: str = "en") -> Iterator[Sentence]:
    """Every sentence of ``corpus``, in order, tokenised in language ``lang``; see the module docstring for what a corpus is."""
    nlp = language(lang).blank(sentencizer=True)
    if _is_paths(corpus):
        for path in corpus_files(corpus):  # type: ignore[arg-type]
            if path.suffix == ".spacy":
                try:
                    docs = list(DocBin().from_disk(path).get_docs(nlp.vocab))
                except Exception as error:  # noqa: BLE001 - whatever the reason, it is not a DocBin we can read
                    raise ValueError(f"{path}: not a readable spaCy DocBin ({error})") from None
                for index, doc in enumerate(docs):
                    if not doc.has_annotation("SENT_START"):
                        doc = nlp.get_pipe("sentencizer")(doc)
                    yield from _doc_sentences(doc, f"{path.name}#{index}")
                continue
            texts = ((line.strip(), f"{path.name}:{number}") for number, line in _lines(path) if line.strip())
            for doc, source in nlp.pipe(texts, as_tuples=True, batch_size=batch_size):
                yield from _doc_sentences(doc, source)
        return
    items: Iterable[Any] = corpus  # type: ignore[assignment]  # not paths: Docs or strings
    for index, item in enumerate(items):
        if isinstance(item, Doc):
            doc = (
                item
                if item.has_annotation("SENT_START")
                else nlp.get_pipe("sentencizer")(Doc(nlp.vocab, words=[t.text for t in item], spaces=[bool(t.whitespace_) for t in item]))
            )
            yield from _doc_sentences(doc, f"doc {index}")
        elif isinstance(item, str):
            if item.strip():
                yield from _doc_sentences(nlp(item.strip()), f"text {index}")
        else:
            raise TypeError(f"corpus item {index} is a {type(item).__name__}: give paths, Docs or strings")
