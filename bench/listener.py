#!/usr/bin/env python3
"""What a listener costs: in nlp.pipe, the time a tagger with an ElmoListener adds to `elmo`'s
(both timed batch by batch in the same pass, so the ratio is fair on a machine whose speed
drifts), and training words/s of the CNN baseline tagger vs the ELMo tagger (the project's configs).

Real text: UD English EWT test sentences (gold tokens, one sentence per Doc) for prediction and
its train sentences for training. One thread unless --threads. Each prediction figure is the
median of --repeats passes.

    python bench/listener.py [--sentences 2077] [--repeats 3] [--original] [--output bench/results/listener.json]

--original adds the published "original" shapes (2x4096/512, random weights) so the listener's
share can be seen beside a biLM of the paper's size.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

import spacy
from bench_common import REPO, RESULTS, WORK, Clock, add_threads, elmo_nlp, machine, random_weights, timed, ud_path, use_threads, write_results
from spacy.tokens import Doc
from spacy.training import Example
from spacy.training.batchers import minibatch_by_words

sys.path.insert(0, str(REPO / "project" / "scripts"))  # downstream_data: the project's data preparation
from downstream_data import conllu_doc, read_conllu  # noqa: E402

CONFIGS = REPO / "project" / "configs" / "downstream"
MIX_ONLY = {"@architectures": "spacy-elmo.ElmoListener.v1", "width": 96, "mix": {"@architectures": "spacy-elmo.ScalarMix.v1"}}


def load_docs(split: str, limit: int) -> List[Doc]:
    vocab = spacy.blank("en").vocab
    docs = []
    for sentence in read_conllu(ud_path(split)):
        docs.append(conllu_doc(vocab, sentence))
        if len(docs) == limit:
            break
    return docs


def pipeline(weights: Optional[str], tagger: Optional[Dict[str, Any]], train_docs: List[Doc]) -> spacy.Language:
    nlp = elmo_nlp(weights=weights, set_hooks=False)
    if tagger is not None:
        component = nlp.add_pipe("tagger", config={"model": {"@architectures": "spacy.Tagger.v2", "tok2vec": tagger}})
        examples = [Example(nlp.make_doc(" ".join(t.text for t in d)), d) for d in train_docs[:50]]
        nlp.initialize(lambda: examples)
        assert component.model is not None
    else:
        nlp.initialize()
    return nlp


def fresh(docs: List[Doc]) -> List[Doc]:
    return [Doc(d.vocab, words=[t.text for t in d], spaces=[bool(t.whitespace_) for t in d], sent_starts=[t.is_sent_start for t in d]) for d in docs]


def time_components(nlp: spacy.Language, docs: List[Doc], batch_size: int = 1000) -> Dict[str, float]:
    """Seconds spent in each component over the Docs, batch by batch as nlp.pipe runs them.

    Timing both components inside the same pass keeps their ratio fair on a machine whose speed
    drifts (shared cores): each batch runs elmo, then the tagger, back to back.
    """
    seconds = {name: 0.0 for name in nlp.pipe_names}
    batch_docs = fresh(docs)
    for start in range(0, len(batch_docs), batch_size):
        batch = batch_docs[start : start + batch_size]
        for name, proc in nlp.pipeline:
            batch, spent = timed(lambda proc=proc, batch=batch: list(proc.pipe(batch, batch_size=batch_size)))
            seconds[name] += spent
    return seconds


def tagger_listener_config() -> Dict[str, Any]:
    config = spacy.util.load_config(CONFIGS / "tagger-elmo.cfg")
    return dict(config["components"]["tagger"]["model"]["tok2vec"])


def training_rate(config_file: Path, train_docs: List[Doc], steps: int, weights: Optional[str]) -> float:
    overrides = {"components.elmo.model.weights": weights} if "elmo" in config_file.name else {}
    config = spacy.util.load_config(config_file, overrides=overrides, interpolate=True)
    nlp = spacy.util.load_model_from_config(config, auto_fill=True)
    examples = [Example(nlp.make_doc(" ".join(t.text for t in d)), d) for d in train_docs]
    examples = [Example(Doc(nlp.vocab, words=[t.text for t in e.reference]), e.reference) for e in examples]
    optimizer = nlp.initialize(lambda: examples)
    batches = list(minibatch_by_words(examples, size=1000))
    words = 0
    for batch in batches[:3]:  # warm-up
        nlp.update(batch, sgd=optimizer, drop=0.1)
    with Clock() as clock:
        for batch in batches[3 : 3 + steps]:
            nlp.update(batch, sgd=optimizer, drop=0.1)
            words += sum(len(e.reference) for e in batch)
    return words / clock.seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sentences", type=int, default=2077)
    parser.add_argument("--repeats", type=int, default=3)
    add_threads(parser)
    parser.add_argument("--train-steps", type=int, default=30)
    parser.add_argument("--original", action="store_true")
    parser.add_argument("--parts", nargs="+", default=["prediction", "training"], choices=["prediction", "training"],
                        help="what to measure; the other part of an existing --output file is kept")
    parser.add_argument("--work", default=str(WORK), help="folder for the random original-shape weights")
    parser.add_argument("--output", default=str(RESULTS / "listener.json"))
    args = parser.parse_args()
    use_threads(args.threads)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    test_docs = load_docs("test", args.sentences)
    train_docs = load_docs("train", 3000)
    n_tokens = sum(len(d) for d in test_docs)
    models: Dict[str, Optional[str]] = {"default": None}
    if args.original:
        models["original"] = str(random_weights("elmo-original", work / "elmo-original"))  # the shapes of the paper, seed 1
    output = Path(args.output)
    previous = json.loads(output.read_text()) if output.exists() else {}
    results: Dict[str, Any] = {
        **previous,
        "machine": machine(args.threads),
        "text": f"UD EWT test, {len(test_docs)} sentences, {n_tokens} tokens",
    }
    if "prediction" in args.parts:
        results["prediction"] = {}
    for name, weights in (models.items() if "prediction" in args.parts else []):
        docs = test_docs if name == "default" else test_docs[: max(1, args.sentences // 4)]
        tokens = sum(len(d) for d in docs)
        taggers = {
            "ElmoListener: mix only": MIX_ONLY,
            "ElmoListener: mix + MultiHashEmbed + 4-layer CNN (the project's config)": tagger_listener_config(),
        }
        rows = {}
        for key, tagger in taggers.items():
            nlp = pipeline(weights, tagger, train_docs)
            time_components(nlp, docs[:50])  # warm-up (loads weights, fills caches)
            runs = [time_components(nlp, docs) for _ in range(args.repeats)]
            elmo_s = statistics.median(r["elmo"] for r in runs)
            shares = [r["tagger"] / r["elmo"] for r in runs]
            rows[key] = {
                "elmo_tokens_per_second": round(tokens / elmo_s),
                "tagger_time_over_elmo_time": round(statistics.median(shares), 4),
                "runs": [{k: round(v, 3) for k, v in r.items()} for r in runs],
            }
        results["prediction"][name] = {"tokens": tokens, "rows": rows}
        print(json.dumps({name: rows}, indent=1), flush=True)
    if "training" in args.parts:
        results["training_words_per_second"] = {
            "tagger, CNN tok2vec (baseline)": round(training_rate(CONFIGS / "tagger-cnn.cfg", train_docs, args.train_steps, None)),
            "tagger, ElmoListener on the default biLM (frozen)": round(training_rate(CONFIGS / "tagger-elmo.cfg", train_docs, args.train_steps, None)),
        }
        print(json.dumps(results["training_words_per_second"], indent=1))
    write_results(output, results)


if __name__ == "__main__":
    main()
