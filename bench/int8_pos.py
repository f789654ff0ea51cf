#!/usr/bin/env python3
"""A tagger trained on float32 ELMo vectors, read on int8 ones: UD EWT POS accuracy at both.

    OMP_NUM_THREADS=1 python bench/int8_pos.py MODEL_DIR [MODEL_DIR ...] --test project/corpus/ud/test.spacy --json OUT.json

Each ``MODEL_DIR`` is a trained pipeline with the ``elmo`` component and a tagger listening to it
(e.g. ``spacy train`` with ``project/configs/downstream/tagger-elmo.cfg``, as
``project/scripts/downstream.py`` and ``candidate_report.py``'s 1% POS row train them). It is
loaded twice, once as trained (float32) and once with ``[components.elmo] precision = "int8"``,
and both score the same test Docs: tag accuracy, the paired difference over the test tokens with
its 95% bootstrap interval and the number of tokens tagged differently.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Dict, List

from bench_common import machine, use_threads, write_results


def tags(model: Path, test: Path, precision: str) -> List[tuple]:
    """(predicted, gold) tag of every test token through ``model`` read at ``precision``."""
    import spacy
    from spacy.tokens import DocBin

    nlp = spacy.load(model, config={"components": {"elmo": {"precision": precision}}})
    gold = list(DocBin().from_disk(test).get_docs(nlp.vocab))
    predicted = nlp.pipe([spacy.tokens.Doc(nlp.vocab, words=[t.text for t in doc]) for doc in gold], batch_size=64)
    return [(p.tag_, g.tag_) for doc, ref in zip(predicted, gold) for p, g in zip(doc, ref)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("models", nargs="+", type=Path, help="trained pipelines (each a tagger on the elmo component)")
    parser.add_argument("--test", type=Path, required=True, help="the test Docs (.spacy) with gold tags")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    use_threads(args.threads)
    from spacy_elmo.evaluation.items import item_string, paired_difference

    rows: Dict[str, Any] = {}
    lines = ["| model | float32 tag accuracy | int8 tag accuracy | int8 - float32, paired | tokens tagged differently |", "| --- | ---: | ---: | --- | ---: |"]
    for model in args.models:
        full, quantized = tags(model, args.test, "float32"), tags(model, args.test, "int8")
        right = {p: item_string(t == g for t, g in pairs) for p, pairs in (("float32", full), ("int8", quantized))}
        paired = paired_difference(right["int8"], right["float32"])
        changed = sum(a[0] != b[0] for a, b in zip(full, quantized))
        accuracy = {p: 100 * s.count("1") / len(s) for p, s in right.items()}
        rows[str(model)] = {"accuracy": accuracy, "paired": paired, "tokens": len(full), "tags_changed": changed}
        lines.append(f"| {model.name if model.name != 'model-best' else model.parent.name} | {accuracy['float32']:.2f} | {accuracy['int8']:.2f} | "
                     f"{paired['difference']:+.3f} [{paired['low']:+.3f}, {paired['high']:+.3f}] | {changed} of {len(full)} |")  # fmt: skip
    write_results(args.json, {"machine": machine(args.threads), "test": str(args.test), "models": rows}, "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
