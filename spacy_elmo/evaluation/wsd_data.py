"""Readers for the all-words WSD framework of Raganato et al. (2017).

Each corpus is a ``NAME.data.xml`` (optionally gzipped) of ``<text>/<sentence>`` elements whose
children are ``<wf lemma pos>`` (plain words) and ``<instance id lemma pos>`` (words to
disambiguate), plus a ``NAME.gold.key.txt`` with ``instance_id key [key ...]`` lines (WordNet 3.0
sense keys such as ``bank%1:14:00::``). Tokens are kept as given (gold tokenisation; multiword
expressions stay joined with ``_``).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, Iterator, List, Sequence, Tuple, Union

from ..assets import ASSETS_DATA
from ..gzipped import open_read

DEFAULT_WSD_DIR = ASSETS_DATA / "wsd_raganato"
EVAL_SETS: Tuple[str, ...] = ("senseval2", "senseval3", "semeval2007", "semeval2013", "semeval2015", "ALL")
DEV_SET = "semeval2007"


@dataclass
class WsdSentence:
    """One sentence: gold words, lemmas, POS tags and the positions of its sense-tagged instances."""

    id: str
    words: List[str]
    lemmas: List[str]
    pos: List[str]
    instances: List[Tuple[int, str]] = field(default_factory=list)  # (token index, instance id)


def _find(folder: Path, name: str) -> Path:
    for candidate in (folder / name, folder / (name + ".gz")):
        if candidate.exists():
            return candidate
    raise FileNotFoundError(f"{folder / name}(.gz) not found: is the WSD data at {folder}?")


def read_sentences(path: Union[str, Path]) -> List[WsdSentence]:
    """Parse a ``.data.xml`` (or ``.data.xml.gz``) file."""
    path = Path(path)
    out: List[WsdSentence] = []
    with open_read(path, "rb") as fh:
        for _event, elem in ET.iterparse(fh, events=("end",)):
            if elem.tag != "sentence":
                continue
            sent = WsdSentence(id=elem.get("id", str(len(out))), words=[], lemmas=[], pos=[])
            for child in elem:
                if child.tag not in ("wf", "instance"):
                    continue
                if child.tag == "instance":
                    sent.instances.append((len(sent.words), child.get("id", "")))
                sent.words.append((child.text or "").strip() or "_")
                sent.lemmas.append(child.get("lemma", ""))
                sent.pos.append(child.get("pos", ""))
            out.append(sent)
            elem.clear()
    if not out:
        raise ValueError(f"{path}: no <sentence> elements; not a Raganato-format WSD file")
    return out


def read_gold(path: Union[str, Path]) -> Dict[str, List[str]]:
    """``instance id -> [sense keys]`` from a ``.gold.key.txt`` (or ``.gz``) file."""
    gold: Dict[str, List[str]] = {}
    with open_read(path, "rb") as fh:
        for number, raw in enumerate(fh, 1):
            parts = raw.decode("utf-8").split()
            if not parts:
                continue
            if len(parts) < 2:
                raise ValueError(f"{path}:{number}: expected 'instance_id sense_key [...]', got {raw!r}")
            gold[parts[0]] = parts[1:]
    return gold


def load_corpus(folder: Union[str, Path], name: str) -> Tuple[List[WsdSentence], Dict[str, List[str]]]:
    """Sentences and gold keys of a corpus by name: ``semcor`` or one of :data:`EVAL_SETS`."""
    folder = Path(folder)
    sub = folder / "Training_Corpora" / "SemCor" if name.lower() == "semcor" else folder / "Evaluation_Datasets" / name
    stem = "semcor" if name.lower() == "semcor" else name
    return read_sentences(_find(sub, f"{stem}.data.xml")), read_gold(_find(sub, f"{stem}.gold.key.txt"))


def instance_key(lemma: str, pos: str) -> str:
    """The inventory key of an instance: ``lemma|POS`` (senses are chosen among the lemma's, per POS)."""
    return f"{lemma.lower()}|{pos}"


def iter_instances(sentences: Sequence[WsdSentence]) -> Iterator[Tuple[int, int, str, str]]:
    """``(sentence number, token index, instance id, inventory key)`` for every instance."""
    for s, sent in enumerate(sentences):
        for i, iid in sent.instances:
            yield s, i, iid, instance_key(sent.lemmas[i], sent.pos[i])


def to_docs(sentences: Sequence[WsdSentence], vocab) -> List:
    """spaCy Docs with the gold words, lemmas and POS tags (one sentence per Doc)."""
    from spacy.tokens import Doc

    docs = []
    for sent in sentences:
        pos = [p if p != "." else "PUNCT" for p in sent.pos]
        pos = [{"CONJ": "CCONJ", "PRT": "PART"}.get(p, p) for p in pos]
        docs.append(Doc(vocab, words=sent.words, lemmas=[lemma or w for lemma, w in zip(sent.lemmas, sent.words)], pos=pos))
    return docs
