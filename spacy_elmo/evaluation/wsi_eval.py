"""Sense induction on SemEval-2010 Task 14: induce per target word, score against the gold key.

:func:`evaluate` induces the senses of the task's 100 words from their test instances (the
target sentence, optionally with ``context`` tokens of the sentences around it as biLM input),
writes a system key and scores it (:mod:`.wsi_score`) beside the organisers' baselines found
next to the gold key. It also scores the inventory's view: every instance re-labelled by the
nearest centroid of its word's induced senses (what ``elmo_senses`` does with an induced
inventory in a pipeline), so the cost of disambiguating new text by vectors is measured.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import numpy as np
import torch

from ..induction.induce import Inducer, InductionSettings, build_inventory, load_head, sense_label
from ..induction.induced import Occurrence, WordSenses
from ..induction.naming import plural
from .wsi_data import read_semeval2010
from .wsi_score import Key, WsiScore, read_key, score, write_key

GOLD_KEY = "keys/gold.all.key"
BASELINES = {
    "one cluster per word (mfs_all)": "mfs_all.key",
    "one cluster per instance (1cl1inst)": "1cl1inst.key",
    "random (random1)": "random1.key",
}
PUBLISHED = [
    ("Amrami & Goldberg 2019, BERT-large substitutes", 71.3, 40.4, 53.6),
    ("Ansell et al. 2021, PolyLM large", 67.5, 43.6, 54.3),
]


def instance_key(results: Sequence[WordSenses], hard: bool = True) -> Key:
    """A system key from induced senses (each occurrence's ``source`` is its instance id)."""
    key: Dict[str, Dict[str, Any]] = {}
    for r in results:
        labels = r.labels
        key[r.word] = {
            o.source: (sense_label(r.word, int(c)) if hard else {sense_label(r.word, j): float(w) for j, w in enumerate(r.weights[i])})
            for i, (o, c) in enumerate(zip(r.occurrences, labels))
        }
    return key


def evaluate(
    data: Union[str, Path],
    weights: Optional[Any] = None,
    settings: Optional[InductionSettings] = None,
    *,
    context: int = 0,
    words: Optional[Sequence[str]] = None,
    key_out: Optional[Path] = None,
    log: Optional[Callable[[str], None]] = None,
    progress: bool = True,
) -> Dict[str, Any]:
    """Induce and score on SemEval-2010 Task 14 (``data``: the release folder with ``test_data/`` and ``keys/``)."""
    from ..bilm.fingerprint import bilm_fingerprint
    from ..hub.load import load_bilm
    from ..progress import progress_bar

    data = Path(data)
    if not (data / GOLD_KEY).is_file():
        raise FileNotFoundError(f"{data / GOLD_KEY} not found: {data} is not the SemEval-2010 Task 14 folder (test_data/, keys/)")
    settings = settings or InductionSettings()
    gold = read_key(data / GOLD_KEY)
    instances = read_semeval2010(data, words)
    started = time.perf_counter()
    bilm = load_bilm(weights)
    head = load_head(weights)
    inducer = Inducer(bilm, head, settings)
    n = sum(len(v) for v in instances.values())
    bar = progress_bar(total=n, desc="wsi", unit=" instances", disable=not progress)
    with torch.inference_mode():
        for word, items in instances.items():
            for item in items:
                tokens, position = item.window(context)
                sentence = " ".join(item.tokens)
                start = sum(len(t) + 1 for t in item.tokens[: item.position])
                inducer.add(word, tokens, position, Occurrence(sentence, start, start + len(item.tokens[item.position]), item.id))
                bar.update(1)
        inducer.flush()
    embedded = time.perf_counter() - started
    results = inducer.senses(list(instances))
    bar.close()
    seconds = time.perf_counter() - started
    chosen = sorted(instances)
    system = instance_key(results)
    ours = score(system, gold, chosen)
    inventory = build_inventory(results, bilm_fingerprint(bilm))
    relabelled: Key = {}
    for r in results:
        vectors = np.asarray(r.extra["elmo_vectors"], dtype=np.float32)
        predictions = inventory.predict([r.word.lower()] * len(vectors), vectors)
        relabelled[r.word] = {o.source: (p.sense if p is not None else "none") for o, p in zip(r.occurrences, predictions)}
    centroid = score(relabelled, gold, chosen)
    if key_out is not None:
        key_out.parent.mkdir(parents=True, exist_ok=True)
        write_key(key_out, instance_key(results, hard=False))
    report: Dict[str, Any] = {
        "model": str(weights or "en_default"),
        "settings": {k: (list(v) if isinstance(v, tuple) else v) for k, v in vars(settings).items()},
        "context_tokens": context,
        "words": len(chosen),
        "instances": n,
        "seconds": round(seconds, 1),
        "seconds_biLM": round(embedded, 1),
        "threads": torch.get_num_threads(),
        "ours": ours.as_dict(),
        # the settings' defaults were chosen on the even-numbered words (alphabetical order): the odd ones are held out
        "ours_tuning_words": score(system, gold, chosen[0::2]).as_dict() if len(chosen) > 1 else None,
        "ours_held_out_words": score(system, gold, chosen[1::2]).as_dict() if len(chosen) > 1 else None,
        "ours_by_centroid": centroid.as_dict(),
        "baselines": {},
        "published": [{"system": s, "F-S": f, "V-M": v, "AVG": a} for s, f, v, a in PUBLISHED],
        "notes": [r.note for r in results if r.note],
    }
    for name, file in BASELINES.items():
        path = data / "keys" / "baselines" / file
        if path.is_file():
            report["baselines"][name] = score(read_key(path), gold, chosen).as_dict()
    if log:
        log(f"induced {plural(sum(len(r.senses) for r in results), 'sense')} for {plural(len(results), 'word')} in {seconds:.0f} s")
    return report


def table(report: Dict[str, Any]) -> str:
    """The report as a Markdown table: ours, ours re-labelled by centroid, the baselines, published systems."""
    rows: List[str] = ["| system | F-S | V-M | AVG | clusters/word |", "|---|---:|---:|---:|---:|"]

    def row(name: str, s: Dict[str, Any]) -> None:
        k = s.get("clusters_per_word")
        rows.append(f"| {name} | {s['F-S']:.1f} | {s['V-M']:.1f} | {s['AVG']:.1f} | {'-' if k is None else f'{k:.1f}'} |")

    rep = report["settings"]["representation"]
    row(f"ours: {rep} (induced labels)", report["ours"])
    if report.get("ours_held_out_words"):
        held_out = report["ours_held_out_words"]
        row(f"ours: {rep}, the {held_out['words']} held-out (odd-numbered) words only", held_out)
    row(f"ours: {rep}, re-labelled by the inventory's vector centroids", report["ours_by_centroid"])
    for name, s in report["baselines"].items():
        row(f"baseline: {name}", s)
    for p in report["published"]:
        row(f"published: {p['system']}", {**p, "clusters_per_word": None})
    return "\n".join(rows)


def per_word(result: WsiScore) -> str:
    """One line per word: F-S, V-M and clusters."""
    return "\n".join(f"{w}\t{f:.1f}\t{v:.1f}\t{k}" for w, (f, v, k) in sorted(result.per_word.items()))
