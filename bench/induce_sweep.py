#!/usr/bin/env python3
"""Sense induction settings over cached LM states: SemEval-2010 Task 14 variants in seconds, not minutes.

    python bench/induce_sweep.py cache --data project/assets/data/wsi_semeval2010 [--context 0]
    python bench/induce_sweep.py run "prior_weight=0" "prior_weight=0.75 pattern=and" ...

``cache`` runs the embedded default biLM once over every instance, reading the pattern sentence
(``w1 .. X and X .. wn``), which gives the plain and the pattern states and the vector in one run,
and keeps them (a few tens of MB) in ``--cache`` (default: the system's temporary folder).
``run`` takes settings, each a space-separated list of ``key=value``: any
:class:`~spacy_elmo.induction.induce.InductionSettings` field (``prior_weight``, ``pattern``
(``and`` or ``none``), ``top_k``, ``temperature``, ``significance``, ``min_share``, ``max_senses``, ``n_senses``,
``n_representatives``, ``representation`` ...). It fills the package's own ``Inducer`` with the cached states, so
what it scores is what ``wsi-eval`` computes (up to the float16 rounding of the states), and
prints F-S / V-M / AVG / clusters per word on the 50 tuning (even-numbered) words, the 50
held-out (odd) words and all 100; ``--out`` appends each result as a JSON line.
"""

from __future__ import annotations

import argparse
import json
import pickle
import tempfile
import time
from dataclasses import fields
from pathlib import Path
from typing import Any, Dict

import numpy as np
import torch

PATTERN = "and"
DEFAULT_CACHE = Path(tempfile.gettempdir()) / "spacy-elmo-wsi-states"


def cache(data: Path, folder: Path, context: int) -> Path:
    """Run the biLM over every instance once (pattern sentence) and save the states."""
    from spacy_elmo.bilm.batching import plan_batches
    from spacy_elmo.evaluation.wsi_data import read_semeval2010
    from spacy_elmo.hub.load import load_bilm
    from spacy_elmo.induction.substitutes import lm_states

    bilm = load_bilm(None)
    items = [(word, item) for word, group in read_semeval2010(data).items() for item in group]
    windows = [item.window(context) for _, item in items]
    keys = ("forward", "backward", "pattern_forward", "pattern_backward")
    out: Dict[str, list] = {k: [None] * len(items) for k in (*keys, "vectors")}
    started = time.perf_counter()
    with torch.inference_mode():
        for chunk in plan_batches([len(t) + 3 for t, _ in windows], 256, 4000):
            states = lm_states(bilm, [windows[i][0] for i in chunk], [windows[i][1] for i in chunk], pattern=PATTERN)
            for j, i in enumerate(chunk):
                for k in keys:
                    out[k][i] = getattr(states, k)[j].numpy().astype(np.float16)
                out["vectors"][i] = states.vectors[j].astype(np.float16)
    saved: Dict[str, Any] = {k: np.stack(v) for k, v in out.items()}
    saved["word"] = [w for w, _ in items]
    saved["id"] = [item.id for _, item in items]
    saved["tokens"] = [(item.tokens, item.position) for _, item in items]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"states-context{context}.pkl"
    path.write_bytes(pickle.dumps(saved))
    print(f"cached {len(items)} instances in {path} ({time.perf_counter() - started:.0f} s of biLM)")
    return path


def run(path: Path, spec: str, data: Path) -> Dict[str, Any]:
    """Score one setting over the cached states."""
    from spacy_elmo.evaluation.wsi_eval import GOLD_KEY, instance_key
    from spacy_elmo.evaluation.wsi_score import read_key, score
    from spacy_elmo.hub.load import load_bilm
    from spacy_elmo.induction.induce import Inducer, InductionSettings, _Store, load_head
    from spacy_elmo.induction.induced import Occurrence

    states = pickle.loads(path.read_bytes())
    options = dict(item.split("=", 1) for item in spec.split())
    types = {f.name: f.type for f in fields(InductionSettings)}
    kwargs: Dict[str, Any] = {}
    for key, value in options.items():
        if key not in types:
            raise SystemExit(f"{key!r} is not an InductionSettings field")
        if key == "pattern":
            kwargs[key] = None if value.lower() == "none" else value
        elif key == "representation":
            kwargs[key] = value
        else:
            kwargs[key] = float(value) if "." in value else int(value)
    settings = InductionSettings(**kwargs)
    if settings.pattern not in (None, PATTERN):
        raise SystemExit(f"the cache holds the {PATTERN!r} pattern's states only")
    inducer = Inducer(load_bilm(None), load_head(None), settings)
    names = ["forward", "backward"] + (["pattern_forward", "pattern_backward"] if settings.pattern else [])
    if settings.prior_weight > 0:
        inducer._add_to_prior([torch.as_tensor(states[k].astype(np.float32)) for k in names])
    for i, word in enumerate(states["word"]):
        store = inducer.stores.setdefault(word, _Store(word, 10**9))
        tokens, position = states["tokens"][i]
        start = sum(len(t) + 1 for t in tokens[:position])
        store.occurrences.append(Occurrence(" ".join(tokens), start, start + len(tokens[position]), states["id"][i]))
        store.seen += 1
        store.rows.append((states["vectors"][i], *(states[k][i] for k in names)))
    results = inducer.senses(sorted(inducer.stores))
    system, gold = instance_key(results), read_key(data / GOLD_KEY)
    words = sorted(inducer.stores)
    out: Dict[str, Any] = {"settings": spec}
    for name, chosen in (("tuning (even)", words[0::2]), ("held-out (odd)", words[1::2]), ("all", words)):
        s = score(system, gold, chosen).as_dict()
        out[name] = {k: s[k] for k in ("F-S", "V-M", "AVG", "clusters_per_word")}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("command", choices=("cache", "run"))
    parser.add_argument("settings", nargs="*", help="run: settings, each 'key=value key=value'")
    parser.add_argument("--data", type=Path, default=Path("project/assets/data/wsi_semeval2010"))
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--context", type=int, default=0, help="tokens of the surrounding sentences on each side")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None, help="run: append each result as a JSON line here")
    args = parser.parse_intermixed_args()
    torch.set_num_threads(args.threads)
    path = args.cache / f"states-context{args.context}.pkl"
    if args.command == "cache":
        cache(args.data, args.cache, args.context)
        return
    if not path.is_file():
        raise SystemExit(f"{path} not found: run `python bench/induce_sweep.py cache --context {args.context}` first")
    for spec in args.settings or [""]:
        started = time.perf_counter()
        result = run(path, spec, args.data)
        line = "  ".join(
            f"{name}: {r['F-S']:.1f} / {r['V-M']:.1f} / {r['AVG']:.1f} / {r['clusters_per_word']:.1f}"
            for name, r in result.items()
            if name != "settings"
        )
        print(f"{spec or 'defaults':40s} {line}  ({time.perf_counter() - started:.0f} s)", flush=True)
        if args.out is not None:
            with args.out.open("a", encoding="utf-8") as f:
                f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()
