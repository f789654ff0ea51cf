"""Public downstream data as spaCy training files: gold tokens, one sentence per Doc.

* UD English EWT (CoNLL-U, optionally .gz): words, XPOS (``tag_``), UPOS (``pos_``), heads and
  dependency labels; multiword-token ranges and empty nodes are skipped (the syntactic words are
  the tokens).
* WNUT17 NER (``token<TAB>BIO``): sentences end at an empty line *or* at a line whose token field
  is empty (the train file separates 2,394 of its sentences with a TAB-only line).

Nested low-data subsets (1%, 10%, 100% of the training sentences) are prefixes of one fixed
shuffle, so every smaller subset is contained in the larger ones.
"""
from __future__ import annotations

import gzip
import random
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence, Tuple

from spacy.tokens import Doc, DocBin, Span
from spacy.vocab import Vocab

Sentence = List[Tuple[str, ...]]


def _open(path: Path):
    return gzip.open(path, "rt", encoding="utf-8") if str(path).endswith(".gz") else open(path, encoding="utf-8")


def read_conllu(path: Path) -> Iterator[Sentence]:
    """(form, xpos, upos, head, deprel) per syntactic word, one list per sentence."""
    sentence: Sentence = []
    with _open(path) as fh:
        for line in fh:
            line = line.rstrip("\n")
            if not line:
                if sentence:
                    yield sentence
                sentence = []
                continue
            if line.startswith("#"):
                continue
            cols = line.split("\t")
            if len(cols) != 10:
                raise ValueError(f"{path}: not a CoNLL-U line (expected 10 tab-separated columns): {line[:80]!r}")
            if "-" in cols[0] or "." in cols[0]:
                continue
            sentence.append((cols[1], cols[4], cols[3], cols[6], cols[7]))
    if sentence:
        yield sentence


def conllu_doc(vocab: Vocab, sentence: Sentence) -> Doc:
    words = [w[0] for w in sentence]
    heads = [int(w[3]) - 1 if w[3] not in ("0", "_") else i for i, w in enumerate(sentence)]
    doc = Doc(
        vocab,
        words=words,
        tags=[w[1] for w in sentence],
        pos=[w[2] if w[2] != "_" else "X" for w in sentence],
        heads=heads,
        deps=[w[4].split(":")[0] if w[4] != "_" else "dep" for w in sentence],
        sent_starts=[True] + [False] * (len(words) - 1),
    )
    return doc


def read_bio(path: Path) -> Iterator[Tuple[List[str], List[str]]]:
    """(words, BIO tags) per sentence of a WNUT-style two-column file."""
    words: List[str] = []
    tags: List[str] = []
    with _open(path) as fh:
        for n, line in enumerate(fh, 1):
            cols = line.rstrip("\n").split("\t")
            if not cols[0].strip():  # empty or TAB-only line: a sentence break
                if words:
                    yield words, tags
                words, tags = [], []
                continue
            if len(cols) < 2:
                raise ValueError(f"{path}:{n}: expected 'token<TAB>tag', got {line.rstrip()!r}")
            words.append(cols[0])
            tags.append(cols[-1].strip())
    if words:
        yield words, tags


def bio_doc(vocab: Vocab, words: List[str], tags: List[str]) -> Doc:
    doc = Doc(vocab, words=words, sent_starts=[True] + [False] * (len(words) - 1))
    spans: List[Span] = []
    start: Optional[int] = None
    label = ""
    for i, tag in enumerate(tags + ["O"]):
        inside = tag.startswith("I-") and start is not None and tag[2:] == label
        if start is not None and not inside:
            spans.append(Span(doc, start, i, label=label))
            start = None
        if tag.startswith("B-") or (tag.startswith("I-") and start is None):
            start, label = i, tag[2:]
    doc.set_ents(spans, default="outside")
    return doc


def nested_subsets(n: int, fractions: Sequence[float], seed: int = 0) -> Dict[float, List[int]]:
    """Indices for each fraction: prefixes of one shuffle, so smaller subsets are nested in larger."""
    order = list(range(n))
    random.Random(seed).shuffle(order)
    return {f: sorted(order[: max(1, round(n * f))]) for f in fractions}


def write_docbin(docs: Sequence[Doc], path: Path) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    DocBin(docs=docs, store_user_data=False).to_disk(path)
    return sum(len(d) for d in docs)


def write_lm_text(sentences: Sequence[Sentence], folder: Path, held_out: int = 500) -> None:
    """The training sentences as unlabelled text for LM fine-tuning, one paragraph each; the last
    ``held_out`` of them form the validation split (manifest.tsv), so no dev or test text is used."""
    folder.mkdir(parents=True, exist_ok=True)
    parts = {"ewt-train.txt": sentences[: len(sentences) - held_out], "ewt-train-heldout.txt": sentences[len(sentences) - held_out :]}
    for name, part in parts.items():
        with open(folder / name, "w", encoding="utf-8") as fh:
            for sentence in part:
                fh.write(" ".join(w[0] for w in sentence) + "\n\n")
    (folder / "manifest.tsv").write_text("file\tsplit\newt-train.txt\ttrain\newt-train-heldout.txt\tvalid\n", encoding="utf-8")


def prepare_ud(ud_dir: Path, out_dir: Path, fractions: Sequence[float] = (0.01, 0.1, 1.0), seed: int = 0) -> Dict[str, Dict[str, int]]:
    """train-{pct}.spacy (nested subsets), dev.spacy, test.spacy and train.txt (one sentence a line)."""
    vocab = Vocab()
    stats: Dict[str, Dict[str, int]] = {}
    for split in ("train", "dev", "test"):
        path = ud_dir / f"en_ewt-ud-{split}.conllu.gz"
        if not path.exists():
            path = ud_dir / f"en_ewt-ud-{split}.conllu"
        sentences = list(read_conllu(path))
        docs = [conllu_doc(vocab, s) for s in sentences]
        if split == "train":
            write_lm_text(sentences, out_dir / "train-text")
            for fraction, indices in nested_subsets(len(docs), fractions, seed).items():
                name = f"train-{fraction * 100:g}pct"
                tokens = write_docbin([docs[i] for i in indices], out_dir / f"{name}.spacy")
                stats[name] = {"sentences": len(indices), "tokens": tokens}
        else:
            stats[split] = {"sentences": len(docs), "tokens": write_docbin(docs, out_dir / f"{split}.spacy")}
    return stats


def prepare_wnut(wnut_dir: Path, out_dir: Path) -> Dict[str, Dict[str, int]]:
    vocab = Vocab()
    files = {"train": "wnut17train.conll", "dev": "emerging.dev.conll", "test": "emerging.test.annotated"}
    stats: Dict[str, Dict[str, int]] = {}
    for split, name in files.items():
        docs = [bio_doc(vocab, words, tags) for words, tags in read_bio(wnut_dir / name)]
        tokens = write_docbin(docs, out_dir / f"{split}.spacy")
        stats[split] = {"sentences": len(docs), "tokens": tokens, "entities": sum(len(d.ents) for d in docs)}
    return stats


def conllu_sentence_docs(path: Path) -> List[Doc]:
    """One Doc per sentence of a CoNLL-U file (optionally .gz), through spaCy's own converter
    (``spacy convert``'s ``conllu``): the syntactic words are the tokens (a contraction such as
    German "im" = "in" + "dem" gives two), XPOS in ``tag_``, UPOS in ``pos_``, heads and labels."""
    from spacy.training.converters import conllu_to_docs

    with _open(path) as fh:
        text = fh.read()
    if not text.strip():
        raise ValueError(f"{path}: no sentences (an empty CoNLL-U file)")
    try:
        return list(conllu_to_docs(text, n_sents=1, no_print=True))
    except ValueError as err:  # a line without the ten tab-separated columns
        raise ValueError(f"{path}: not CoNLL-U ({err})") from None


def prepare_conllu_prefixes(train: Path, test: Path, sizes: Sequence[int], out_dir: Path) -> Dict[str, Dict[str, int]]:
    """``train-{n}.spacy`` for each ``n`` in ``sizes`` (the first ``n`` sentences of ``train``, so the
    smaller sets are prefixes of the larger) and ``test.spacy`` (every sentence of ``test``)."""
    docs = conllu_sentence_docs(train)
    too_many = [n for n in sizes if n > len(docs) or n < 1]
    if too_many:
        raise ValueError(f"{train} has {len(docs)} sentences: cannot train on {', '.join(map(str, too_many))} of them")
    stats: Dict[str, Dict[str, int]] = {}
    for n in sizes:
        stats[f"train-{n}"] = {"sentences": n, "tokens": write_docbin(docs[:n], out_dir / f"train-{n}.spacy")}
    test_docs = conllu_sentence_docs(test)
    stats["test"] = {"sentences": len(test_docs), "tokens": write_docbin(test_docs, out_dir / "test.spacy")}
    return stats
