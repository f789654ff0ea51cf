"""The hand-written sense probe: do a biLM's vectors separate word senses in context?

24 ambiguous words, two senses each, six sentences per sense, written for this probe (not taken
from any evaluation set; ``sense_probe.json`` beside this module). Each sentence goes through a
blank English pipeline with the ``elmo`` component (its ``mix``); per word, the mean cosine of the
word's vectors (``token._.elmo``) within a sense and across senses, and leave-one-out
nearest-centroid sense accuracy (the paper's WSD method; the centroids are a
:class:`~spacy_elmo.senses.SenseInventory`, the ``elmo_senses`` component's); and the accuracy over
all 288 sentences. A static vector (the context-free layer 0) is the same in every sentence:
cosine 1.0 everywhere and chance-level accuracy. The default model's ship rule reads it
(docs/model-card.md).
"""

from __future__ import annotations

import itertools
import json
from functools import lru_cache
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from .items import item_string

PROBE = Path(__file__).with_name("sense_probe.json")
SUMMARY_MIXES = ("top", "average", "layer:1")


@lru_cache(maxsize=1)
def probe_senses() -> Dict[str, Tuple[Tuple[str, List[str]], ...]]:
    """word -> ((sense, sentences), (sense, sentences)), as written in ``sense_probe.json``."""
    return {word: tuple(senses.items()) for word, senses in json.loads(PROBE.read_text(encoding="utf-8")).items()}


def probe_pipeline(
    weights: Optional[str] = None, mix: Any = "average", precision: Optional[str] = None, threads: Optional[int] = None
) -> Any:
    """A blank English pipeline with the ``elmo`` component: ``weights`` (None: the embedded default),
    ``mix``, and ``precision`` and ``threads`` (None: the component's defaults)."""
    import spacy

    config: Dict[str, Any] = {"mix": mix, "weights": weights, "precision": precision, "threads": threads}
    config = {key: value for key, value in config.items() if value is not None}
    nlp = spacy.blank("en")
    nlp.add_pipe("elmo", config=config)
    return nlp


def _vectors(nlp: Any, word: str, sentences: List[str]) -> np.ndarray:
    return np.stack([next(t for t in doc if t.lower_ == word)._.elmo for doc in nlp.pipe(sentences)])


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def evaluate(nlp: Any) -> Dict[str, Any]:
    """The probe through ``nlp`` (see :func:`probe_pipeline`): ``overall_accuracy`` (leave-one-out
    nearest-centroid accuracy over every sentence) and, per word, its ``senses``,
    ``within_sense_cos``, ``across_sense_cos`` and ``nearest_centroid_accuracy``."""
    from ..senses import SenseInventory

    words, correct_all, total, outcomes = {}, 0, 0, []
    for word, ((sense_a, sents_a), (sense_b, sents_b)) in probe_senses().items():
        va, vb = _vectors(nlp, word, sents_a), _vectors(nlp, word, sents_b)
        within = [_cosine(x, y) for v in (va, vb) for x, y in itertools.combinations(v, 2)]
        across = [_cosine(x, y) for x in va for y in vb]
        vectors = np.concatenate([va, vb])
        labels = [sense_a] * len(va) + [sense_b] * len(vb)
        correct = 0
        for i in range(len(labels)):  # leave one out: centroids of the other sentences, nearest by cosine
            rest = [j for j in range(len(labels)) if j != i]
            inventory = SenseInventory()
            inventory.add_vectors([word] * len(rest), [labels[j] for j in rest], vectors[rest])
            prediction = inventory.disambiguate_vector(word, vectors[i])
            hit = prediction is not None and prediction.sense == labels[i]
            correct += int(hit)
            outcomes.append(hit)
        words[word] = {
            "senses": f"{sense_a} / {sense_b}",
            "within_sense_cos": float(np.mean(within)),
            "across_sense_cos": float(np.mean(across)),
            "nearest_centroid_accuracy": correct / len(labels),
        }
        correct_all, total = correct_all + correct, total + len(labels)
    # one character per sentence, words and senses in the probe's order ("1" correct): paired comparisons
    return {"overall_accuracy": correct_all / total, "correct": item_string(outcomes), "words": words}


def table(report: Dict[str, Any]) -> str:
    """One mix's report as a markdown table, a row per word and the overall accuracy."""
    lines = [
        "| word | senses | cos within a sense | cos across senses | nearest-centroid accuracy (leave-one-out) |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for word, r in report["words"].items():
        lines.append(
            f"| {word} | {r['senses']} | {r['within_sense_cos']:.2f} | {r['across_sense_cos']:.2f} | {r['nearest_centroid_accuracy']:.0%} |"
        )
    lines.append(f"| **all {len(report['words'])} words** | | | | **{report['overall_accuracy']:.1%}** |")
    return "\n".join(lines)


def summary_table(reports: Dict[str, Dict[str, Any]]) -> str:
    """Several mixes' reports (mix -> report) as a markdown table, a row per mix."""
    lines = [
        "| mix | words | sentences | nearest-centroid accuracy (leave-one-out) | mean cos within / across |",
        "| --- | ---: | ---: | ---: | ---: |",
    ]
    sentences = sum(len(texts) for senses in probe_senses().values() for _, texts in senses)
    for mix, r in reports.items():
        within = np.mean([x["within_sense_cos"] for x in r["words"].values()])
        across = np.mean([x["across_sense_cos"] for x in r["words"].values()])
        lines.append(f"| {mix} | {len(r['words'])} | {sentences} | {r['overall_accuracy']:.1%} | {within:.2f} / {across:.2f} |")
    return "\n".join(lines)
