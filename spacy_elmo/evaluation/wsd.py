"""All-words WSD with sense centroids (Peters et al. 2018, section 5.3) on Raganato et al. (2017).

Sense centroids come from SemCor; each test instance takes the nearest centroid among the senses
SemCor shows for its lemma and POS, or, with a prior weight lambda, the sense maximising
``cosine + lambda * log p(sense | lemma, POS)`` (SemCor's sense frequencies; lambda chosen on the
dev set). Without WordNet (none is available offline here) a lemma that
SemCor never tags has no candidate senses: such instances stay unanswered, which costs recall,
and the most-frequent-sense baseline (the SemCor sense seen most often with the lemma and POS)
has exactly the same coverage. Scores follow the framework's scorer: P = correct / answered,
R = correct / all, F1 their harmonic mean; an answer is correct when it is one of the gold keys.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ..bilm.scalar_mix import apply_mix, spec_weights
from ..senses.inventory import SenseInventory
from ..senses.vectors import candidate_mixes
from .items import item_string
from .wsd_data import DEFAULT_WSD_DIR, DEV_SET, EVAL_SETS, WsdSentence, iter_instances, load_corpus

TEST_SETS = tuple(s for s in EVAL_SETS if s != "ALL")
#: the prior weights (lambda in cosine + lambda * log p(sense | lemma)) tried on the dev set
PRIOR_WEIGHTS = (0.0, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0)


def embed_instances(
    bilm, sentences: Sequence[WsdSentence], batch_tokens: int = 4096, log: Optional[Callable[[str], None]] = None
) -> np.ndarray:
    """float32 ``[n_instances, L+1, dim]``: every instance's biLM layers, in :func:`iter_instances` order."""
    wanted: Dict[int, List[int]] = {}
    order: Dict[Tuple[int, int], int] = {}
    for n, (s, i, _iid, _key) in enumerate(iter_instances(sentences)):
        wanted.setdefault(s, []).append(i)
        order[(s, i)] = n
    ids = sorted(wanted)
    out: Optional[np.ndarray] = None
    start = last = time.time()
    done = 0
    for pos, layers in bilm.iter_embeddings([sentences[s].words for s in ids], max_batch_tokens=batch_tokens):
        s = ids[pos]
        if out is None:
            out = np.zeros((len(order), layers.shape[0], layers.shape[2]), dtype=np.float32)
        for i in wanted[s]:
            out[order[(s, i)]] = layers[:, i]
        done += 1
        if log is not None and time.time() - last > 30:
            last = time.time()
            log(f"embedded {done}/{len(ids)} sentences ({time.time() - start:.0f} s)")
    assert out is not None
    return out


def corpus_digest(sentences: Sequence[WsdSentence]) -> str:
    """SHA-256 of what :func:`embed_instances` reads: every sentence's words and instance positions."""
    digest = hashlib.sha256()
    for sent in sentences:
        digest.update(json.dumps([sent.words, [i for i, _iid in sent.instances]], ensure_ascii=False).encode("utf-8") + b"\n")
    return digest.hexdigest()


def cached_instances(
    bilm, name: str, sentences: Sequence[WsdSentence], cache_dir: Optional[Path], log: Optional[Callable[[str], None]] = None
) -> np.ndarray:
    """:func:`embed_instances`, kept in ``cache_dir`` when given.

    The cache file is named by the biLM's content fingerprint (config + weights) and the corpus
    digest, and records both: a model retrained in the same folder gets its own file, and a file
    whose recorded keys differ from its name is embedded again (with a line that says so). Files
    are written atomically."""
    from ..bilm.fingerprint import bilm_fingerprint
    from ..files import write_atomic

    if cache_dir is None:
        return embed_instances(bilm, sentences, log=log)
    say = log or (lambda text: None)
    fingerprint, corpus = bilm_fingerprint(bilm), corpus_digest(sentences)
    if bilm.inference_precision != "float32":  # other products, other vectors: a file of their own
        fingerprint = f"{fingerprint}-{bilm.inference_precision}"
    path = Path(cache_dir) / f"wsd-{name}-{fingerprint[:16]}{fingerprint[64:]}-{corpus[:16]}.npz"
    if path.is_file():
        try:
            with np.load(path, allow_pickle=False) as data:
                if str(data["fingerprint"]) == fingerprint and str(data["corpus"]) == corpus:
                    say(f"{name}: embeddings from the cache {path} (biLM {fingerprint[:12]})")
                    return data["vectors"]
                say(f"{name}: the cache {path} was made by another biLM or corpus: embedding again (biLM {fingerprint[:12]})")
        except (OSError, ValueError, KeyError) as err:
            say(f"{name}: the cache {path} cannot be read ({err}): embedding again")
    array = embed_instances(bilm, sentences, log=log)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, lambda handle: np.savez(handle, vectors=array, fingerprint=np.array(fingerprint), corpus=np.array(corpus)))
    say(f"{name}: cached the embeddings in {path} (biLM {fingerprint[:12]})")
    return array


def score(predictions: Sequence[Optional[str]], gold: Sequence[Sequence[str]]) -> Dict[str, float]:
    """Precision, recall and F1 (in %) as the framework's scorer computes them, plus coverage."""
    answered = sum(p is not None for p in predictions)
    correct = sum(p is not None and p in g for p, g in zip(predictions, gold))
    p = correct / answered if answered else 0.0
    r = correct / len(gold) if gold else 0.0
    return {
        "P": 100 * p,
        "R": 100 * r,
        "F1": 100 * (2 * p * r / (p + r) if p + r else 0.0),
        "coverage": 100 * answered / len(gold) if gold else 0.0,
        "n": len(gold),
    }


def evaluate(
    weights: Optional[str] = None,
    folder: Path = DEFAULT_WSD_DIR,
    cache_dir: Optional[Path] = None,
    log: Callable[[str], None] = lambda m: print(m, file=sys.stderr, flush=True),
    save_inventory: Optional[Path] = None,
    precision: str = "float32",
) -> Dict[str, Any]:
    """Nearest-centroid WSD per layer/mix and the most-frequent-sense baseline, F1 on every test set.

    ``precision``: the biLM's inference precision (float32, bfloat16 or int8), recorded in the report.

    ``save_inventory``: also write the SemCor sense inventory of the layer/mix chosen on the dev
    set (semeval2007) there, keyed ``lemma|POS``, for the ``elmo_senses`` component.
    ``cache_dir``: keep the embedded instances there, keyed by the biLM's fingerprint (default: none)."""
    from ..hub.load import load_bilm

    start = time.time()
    from ..bilm.fingerprint import bilm_fingerprint

    bilm = load_bilm(weights) if weights else load_bilm()
    bilm.set_inference_precision(precision)
    fingerprint = bilm_fingerprint(bilm)
    train_sents, train_gold = load_corpus(folder, "semcor")
    test_sents, test_gold = load_corpus(folder, "ALL")
    log(f"SemCor: {len(train_sents)} sentences, {len(train_gold)} instances; ALL: {len(test_gold)} instances")
    train_x = cached_instances(bilm, "semcor", train_sents, cache_dir, log)
    test_x = cached_instances(bilm, "ALL", test_sents, cache_dir, log)
    embed_seconds = time.time() - start

    train = list(iter_instances(train_sents))
    lemmas, senses, rows = [], [], []
    for n, (_s, _i, iid, key) in enumerate(train):
        for sense in train_gold[iid]:
            lemmas.append(key)
            senses.append(sense)
            rows.append(n)
    test = list(iter_instances(test_sents))
    test_keys = [key for _s, _i, _iid, key in test]
    gold = [test_gold[iid] for _s, _i, iid, _key in test]
    dataset = [iid.split(".", 1)[0] for _s, _i, iid, _key in test]

    def by_set(predictions: List[Optional[str]]) -> Dict[str, Dict[str, float]]:
        out = {"ALL": score(predictions, gold)}
        for name in TEST_SETS:
            keep = [k for k, d in enumerate(dataset) if d == name]
            out[name] = score([predictions[k] for k in keep], [gold[k] for k in keep])
        return out

    rows_out: Dict[str, Dict[str, Dict[str, float]]] = {}
    inventory = None
    inventories: Dict[str, SenseInventory] = {}
    scored: Dict[str, list] = {}
    for name, spec in candidate_mixes(train_x.shape[1]).items():
        w = spec_weights(spec, train_x.shape[1])
        inventory = SenseInventory(layer=spec, key="lemma_pos", fingerprint=fingerprint)
        inventory.add_vectors(lemmas, senses, apply_mix(train_x[rows], w, layer_axis=1))
        predictions = inventory.predict(test_keys, apply_mix(test_x, w, layer_axis=1))
        rows_out[name] = by_set([p.sense if p is not None else None for p in predictions])
        inventories[name], scored[name] = inventory, predictions
        log(f"{name}: ALL F1 {rows_out[name]['ALL']['F1']:.1f}")
    assert inventory is not None
    mfs = by_set([inventory.most_frequent(key) for key in test_keys])
    chosen = max(rows_out, key=lambda k: rows_out[k][DEV_SET]["F1"])
    seen = sum(key in inventory for key in test_keys)
    # the component's min_score: below this cosine to the nearest centroid, the most frequent sense
    frequent = [inventory.most_frequent(key) for key in test_keys]
    dev = [k for k, d in enumerate(dataset) if d == DEV_SET]
    best_t, best_f1 = None, -1.0
    for t in np.round(np.arange(0.0, 1.0001, 0.01), 2):
        chosen_t = [
            None if p is None else (p.sense if p.score is not None and p.score >= t else frequent[k]) for k, p in enumerate(scored[chosen])
        ]
        f1 = score([chosen_t[k] for k in dev], [gold[k] for k in dev])["F1"]
        if f1 > best_f1:
            best_t, best_f1 = float(t), f1
    backoff = by_set(
        [
            None if p is None else (p.sense if p.score is not None and p.score >= best_t else frequent[k])
            for k, p in enumerate(scored[chosen])
        ]
    )
    log(f"{chosen} with the most frequent sense below cosine {best_t} (chosen on {DEV_SET}): ALL F1 {backoff['ALL']['F1']:.1f}")
    # the component's prior_weight: cosine + lambda * log p(sense | lemma, POS), lambda and the
    # layer/mix chosen together on the dev set
    dev_keys, dev_gold = [test_keys[k] for k in dev], [gold[k] for k in dev]
    prior_rows: Dict[str, Dict[str, Any]] = {}
    for name, spec in candidate_mixes(train_x.shape[1]).items():
        w = spec_weights(spec, train_x.shape[1])
        dev_x = apply_mix(test_x[dev], w, layer_axis=1)
        best_w, best_dev = 0.0, -1.0
        for weight in PRIOR_WEIGHTS:
            predicted = inventories[name].predict(dev_keys, dev_x, prior_weight=weight)
            f1 = score([p.sense if p is not None else None for p in predicted], dev_gold)["F1"]
            if f1 > best_dev + 1e-9:
                best_w, best_dev = float(weight), f1
        predicted = inventories[name].predict(test_keys, apply_mix(test_x, w, layer_axis=1), prior_weight=best_w)
        answers = [p.sense if p is not None else None for p in predicted]
        prior_rows[name] = {
            "prior_weight": best_w,
            "scores": by_set(answers),
            # one character per ALL instance, in file order ("1" correct): paired comparisons
            "test_correct": item_string(a is not None and a in g for a, g in zip(answers, gold)),
        }
        log(f"{name} + {best_w} * log prior (chosen on {DEV_SET}): ALL F1 {prior_rows[name]['scores']['ALL']['F1']:.1f}")
    prior_chosen = max(prior_rows, key=lambda k: prior_rows[k]["scores"][DEV_SET]["F1"])
    if save_inventory is not None:
        best = inventories[prior_chosen]
        best.to_disk(save_inventory)
        log(
            f"wrote the SemCor sense inventory ({prior_chosen}) to {save_inventory}; use it with "
            f"elmo_senses prior_weight = {prior_rows[prior_chosen]['prior_weight']}"
        )
    return {
        "weights": weights or "en_default",
        "bilm_fingerprint": fingerprint,
        "precision": precision,
        "rows": rows_out,
        "most_frequent_sense": mfs,
        "min_score_backoff": {
            "layer": chosen,
            "min_score": best_t,
            "scores": backoff,
            "answered_by_centroid": sum(p is not None and p.score is not None and p.score >= best_t for p in scored[chosen]),
        },
        "chosen_on_dev": chosen,
        "with_prior": {"rows": prior_rows, "chosen_on_dev": prior_chosen, "weights_tried": list(PRIOR_WEIGHTS)},
        "dev_set": DEV_SET,
        "train_instances": len(train),
        "train_sense_keys": len(lemmas),
        "test_instances": len(test),
        "test_lemma_pos_seen_in_semcor": seen,
        "embed_seconds": embed_seconds,
        "seconds": time.time() - start,
    }


def table(report: Dict[str, Any]) -> str:
    """The report as a markdown table of F1 per test set."""
    sets = ("senseval2", "senseval3", "semeval2007", "semeval2013", "semeval2015", "ALL")
    lines = ["| method | " + " | ".join(("SE07 (dev)" if s == DEV_SET else s) for s in sets) + " |", "| --- |" + " ---: |" * len(sets)]
    rows = report["rows"]
    for name, r in rows.items():
        mark = " (best on dev)" if name == report["chosen_on_dev"] else ""
        lines.append(f"| nearest centroid, {name}{mark} | " + " | ".join(f"{r[s]['F1']:.1f}" for s in sets) + " |")
    back = report["min_score_backoff"]
    lines.append(
        f"| nearest centroid, {back['layer']}, most frequent sense below cosine {back['min_score']:.2f} (chosen on dev) | "
        + " | ".join(f"{back['scores'][s]['F1']:.1f}" for s in sets)
        + " |"
    )
    prior = report.get("with_prior")
    if prior:
        for name, r in prior["rows"].items():
            mark = " (best on dev)" if name == prior["chosen_on_dev"] else ""
            lines.append(
                f"| nearest centroid + {r['prior_weight']:g} · log p(sense), {name}{mark} (weight chosen on dev) | "
                + " | ".join(f"{r['scores'][s]['F1']:.1f}" for s in sets)
                + " |"
            )
    mfs = report["most_frequent_sense"]
    lines.append("| most frequent SemCor sense | " + " | ".join(f"{mfs[s]['F1']:.1f}" for s in sets) + " |")
    return "\n".join(lines)


def evaluate_pipeline(nlp, folder: Path = DEFAULT_WSD_DIR, name: str = "ALL", batch_size: int = 64) -> Dict[str, Dict[str, float]]:
    """F1 of a spaCy pipeline's ``token._.elmo_sense`` (``elmo`` + ``elmo_senses`` with a ``lemma_pos``
    inventory) on a test set, read as gold Docs (words, lemmas, POS, one sentence per Doc)."""
    from .wsd_data import to_docs

    sentences, gold = load_corpus(folder, name)
    docs = to_docs(sentences, nlp.vocab)
    for doc in docs:
        for k, token in enumerate(doc):
            token.is_sent_start = k == 0
    predictions: List[Optional[str]] = []
    golds: List[List[str]] = []
    dataset: List[str] = []
    for sent, doc in zip(sentences, nlp.pipe(docs, batch_size=batch_size)):
        for i, iid in sent.instances:
            predictions.append(doc[i]._.elmo_sense)
            golds.append(gold[iid])
            dataset.append(iid.split(".", 1)[0])
    out = {name: score(predictions, golds)}
    if name == "ALL":
        for part in TEST_SETS:
            keep = [k for k, d in enumerate(dataset) if d == part]
            out[part] = score([predictions[k] for k in keep], [golds[k] for k in keep])
    return out
