#!/usr/bin/env python3
"""bfloat16 inference against float32: speed, distance, and what users feel.

    python bench/bf16.py --weights DIR --text books --sentences 500           # speed + cosine
    python bench/bf16.py --text books --downstream                            # embedded default model

* speed: ``embed_sentences`` tokens/s at ``--batch`` (64) per precision, runs of the two
  precisions interleaved (``--repeats`` each; the best run is reported, all are kept);
* distance: per-token cosine of every layer's bfloat16 vector to its float32 vector (mean, 1st
  percentile, minimum) over all tokens of the text;
* with ``--downstream`` (meant for a trained model, e.g. the embedded default): a softmax POS
  tagger trained on float32 features of UD EWT train sentences and scored on UD EWT test with
  float32 and with bfloat16 features; nearest-neighbour recall@10 of bfloat16 token vectors
  against float32 ones (the text's tokens, average of the layers, exact cosine search); WiC test
  accuracy (``spacy_elmo.evaluation.wic``) and the sense probe (``spacy_elmo.evaluation.sense_probe``) per precision.

``--text``: ``books`` (the Gutenberg test books of the project's assets, else the project's in-repo
general sample), ``ud`` (UD English EWT test), or a path (one whitespace-tokenised sentence per
line, or a ``.conllu``/``.conllu.gz`` file). Writes ``--json`` and prints a markdown table.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

import numpy as np
import torch
from bench_common import DATA, add_threads, machine, text_sentences, timed, token_cosines, ud_path, use_threads, write_results
from bench_common import ud_sentences as conllu_sentences


def run_precision(bilm, sentences: Sequence[Sequence[str]], precision: str, batch: int) -> Dict[str, Any]:
    bilm.set_inference_precision(precision)
    bilm.embed_sentences(sentences[:batch], batch_size=batch)  # warm-up (and the one weight conversion)
    out, seconds = timed(bilm.embed_sentences, sentences, batch_size=batch)
    return {"seconds": seconds, "tokens_per_s": sum(map(len, sentences)) / seconds, "outputs": out}


def layer_cosines(ref: List[np.ndarray], fast: List[np.ndarray]) -> List[Dict[str, float]]:
    """Per layer: the mean, 1st percentile and minimum of the per-token cosines."""
    return [{"mean": float(c.mean()), "p1": float(np.percentile(c, 1)), "min": float(c.min())} for c in token_cosines(ref, fast)]


LENGTH_BUCKETS = ((1, 10), (10, 20), (20, 40), (40, 1000))


def cosine_by_length(sentences: Sequence[Sequence[str]], ref: List[np.ndarray], fast: List[np.ndarray]) -> List[Dict[str, Any]]:
    """:func:`layer_cosines`' 1st percentile per layer, per bucket of sentence lengths (a model
    whose recurrence amplifies small errors loses most on its longest sentences)."""
    rows = []
    for lo, hi in LENGTH_BUCKETS:
        keep = [k for k, s in enumerate(sentences) if lo <= len(s) < hi]
        if keep:
            cos = layer_cosines([ref[k] for k in keep], [fast[k] for k in keep])
            rows.append({"lengths": [lo, hi - 1], "tokens": sum(len(sentences[k]) for k in keep), "p1": [c["p1"] for c in cos]})
    return rows


def neighbour_recall(ref: List[np.ndarray], fast: List[np.ndarray], queries: int = 1000, k: int = 10) -> float:
    """Mean overlap of each query token's k nearest tokens (cosine, itself excluded) in bfloat16
    and in float32, layers averaged."""
    def unit(outputs: List[np.ndarray]) -> torch.Tensor:
        x = torch.from_numpy(np.concatenate(outputs, axis=1).mean(0))
        return x / x.norm(dim=1, keepdim=True).clamp_min(1e-12)

    a, b = unit(ref), unit(fast)
    chosen = torch.randperm(len(a), generator=torch.Generator().manual_seed(0))[:queries]
    sa, sb = a[chosen] @ a.T, b[chosen] @ b.T
    rows = torch.arange(len(chosen))
    sa[rows, chosen] = sb[rows, chosen] = -2.0  # not its own neighbour
    top_a, top_b = sa.topk(k).indices, sb.topk(k).indices
    hits = sum(len(set(x.tolist()) & set(y.tolist())) for x, y in zip(top_a, top_b))
    return hits / (len(chosen) * k)


def tagger_accuracy(bilm, train_sentences: int, test_sentences: int) -> Dict[str, float]:
    """A softmax tagger over all layers (concatenated), trained on float32 features and scored
    on float32 and on bfloat16 features of the same test sentences."""
    train = conllu_sentences(ud_path("train"), train_sentences, with_tags=True)
    test = conllu_sentences(ud_path("test"), test_sentences, with_tags=True)
    tags = sorted({t for _, ts in train for t in ts} | {t for _, ts in test for t in ts})
    index = {t: i for i, t in enumerate(tags)}

    def features(data, precision):
        bilm.set_inference_precision(precision)
        out = bilm.embed_sentences([w for w, _ in data], max_batch_tokens=4096)
        x = np.concatenate([o.transpose(1, 0, 2).reshape(o.shape[1], -1) for o in out])
        y = np.array([index[t] for _, ts in data for t in ts])
        return torch.from_numpy(x), torch.from_numpy(y)

    x_train, y_train = features(train, "float32")
    x_test32, y_test = features(test, "float32")
    x_test16, _ = features(test, "bfloat16")
    mean, std = x_train.mean(0), x_train.std(0) + 1e-6
    torch.manual_seed(0)
    model = torch.nn.Linear(x_train.shape[1], len(tags))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, weight_decay=1e-5)
    xs = (x_train - mean) / std
    for _ in range(30):
        for batch in torch.randperm(len(xs)).split(512):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(xs[batch]), y_train[batch]).backward()
            opt.step()
    with torch.no_grad():
        acc32 = float((model((x_test32 - mean) / std).argmax(1) == y_test).float().mean())
        acc16 = float((model((x_test16 - mean) / std).argmax(1) == y_test).float().mean())
    return {"float32": 100 * acc32, "bfloat16": 100 * acc16, "train_tokens": len(xs), "test_tokens": len(y_test), "tags": len(tags)}


def sense_probe(weights: Optional[str], precision: str) -> float:
    from spacy_elmo.evaluation.sense_probe import evaluate, probe_pipeline

    return 100 * evaluate(probe_pipeline(weights or None, "average", precision))["overall_accuracy"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--weights", help="model directory (default: the embedded default model)")
    ap.add_argument("--text", default="books", help="books, ud or a file (see above)")
    ap.add_argument("--sentences", type=int, default=500)
    ap.add_argument("--batch", type=int, default=64)
    add_threads(ap)
    ap.add_argument("--json", type=Path, help="also write the report here")
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--downstream", action="store_true", help="tagger, neighbours, WiC and sense probe")
    ap.add_argument("--tagger-train", type=int, default=2000, help="UD EWT train sentences for the tagger")
    args = ap.parse_args()
    use_threads(args.threads)
    from spacy_elmo import load_bilm

    bilm = load_bilm(args.weights) if args.weights else load_bilm()
    sentences = text_sentences(args.text, args.sentences)
    report: Dict[str, Any] = {
        "weights": Path(args.weights).name if args.weights else "en_default",  # the folder's name: no machine paths
        "text": args.text,
        "sentences": len(sentences),
        "tokens": sum(map(len, sentences)),
        "batch": args.batch,
        "threads": args.threads,
        "machine": machine(args.threads),
        "runs": {"float32": [], "bfloat16": []},
    }
    outputs: Dict[str, List[np.ndarray]] = {}
    for _ in range(args.repeats):
        for precision in ("float32", "bfloat16"):
            run = run_precision(bilm, sentences, precision, args.batch)
            outputs[precision] = run.pop("outputs")
            report["runs"][precision].append(run)
            print(f"{precision}: {run['tokens_per_s']:.0f} tokens/s", file=sys.stderr)
    best = {p: max(r["tokens_per_s"] for r in runs) for p, runs in report["runs"].items()}
    report["tokens_per_s"] = best
    report["speedup"] = best["bfloat16"] / best["float32"]
    # each bfloat16 run against the float32 run just before it: robust to a machine whose load drifts
    pairs = [b["tokens_per_s"] / f["tokens_per_s"] for f, b in zip(report["runs"]["float32"], report["runs"]["bfloat16"])]
    report["pair_speedups"] = pairs
    report["median_pair_speedup"] = float(np.median(pairs))
    report["cosine"] = layer_cosines(outputs["float32"], outputs["bfloat16"])
    report["cosine_by_length"] = cosine_by_length(sentences, outputs["float32"], outputs["bfloat16"])
    if args.downstream:
        report["neighbour_recall_at_10"] = neighbour_recall(outputs["float32"], outputs["bfloat16"])
        report["tagger"] = tagger_accuracy(bilm, args.tagger_train, 1000)
        from spacy_elmo.evaluation.wic import DEFAULT_WIC_DIR, evaluate

        wic_dir = DATA / "wic" if (DATA / "wic").is_dir() else DEFAULT_WIC_DIR
        wic = {p: evaluate(args.weights, wic_dir, precision=p) for p in ("float32", "bfloat16")}
        report["wic_test"] = {p: 100 * float(r["test_accuracy"]) for p, r in wic.items()}
        report["wic_chosen_on_dev"] = {p: r["chosen_on_dev"] for p, r in wic.items()}
        # each layer/mix with its own train threshold, per precision: the choice on dev can flip on a tie
        report["wic_rows_test"] = {p: {k: 100 * v["test"] for k, v in r["rows"].items()} for p, r in wic.items()}
        report["sense_probe"] = {p: sense_probe(args.weights, p) for p in ("float32", "bfloat16")}
    print(markdown(report))
    write_results(args.json, report)


def markdown(r: Dict[str, Any]) -> str:
    t = r["tokens_per_s"]
    lines = [
        f"{r['weights']}, text {r['text']} ({r['sentences']} sentences, {r['tokens']} tokens), batch {r['batch']}, {r['threads']} thread(s)",
        "",
        "| measure | float32 | bfloat16 | bar |",
        "| --- | ---: | ---: | --- |",
        f"| biLM tokens/s (best of {len(r['runs']['float32'])}) | {t['float32']:.0f} | {t['bfloat16']:.0f} ({r['speedup']:.2f}x) | >= 2.0x |",
        f"| speed-up of each bfloat16 run over the float32 run before it (median) | | "
        f"{' / '.join(f'{x:.2f}' for x in r['pair_speedups'])} ({r['median_pair_speedup']:.2f}x) | >= 2.0x |",
    ]
    for k, c in enumerate(r["cosine"]):
        lines.append(f"| layer {k}: cosine to float32, mean / 1st percentile / min | | {c['mean']:.5f} / {c['p1']:.5f} / {c['min']:.4f} | p1 >= 0.99 |")
    for b in r.get("cosine_by_length", []):
        lines.append(f"| sentences of {b['lengths'][0]}-{b['lengths'][1]} tokens ({b['tokens']} tokens): cosine 1st percentile per layer | | "
                     f"{' / '.join(f'{x:.5f}' for x in b['p1'])} | p1 >= 0.99 |")
    if "tagger" in r:
        g = r["tagger"]
        lines.append(f"| POS tagger trained on float32 features: UD EWT test accuracy | {g['float32']:.2f} | {g['bfloat16']:.2f} ({g['bfloat16'] - g['float32']:+.2f}) | loss <= 0.1 |")
        lines.append(f"| nearest-neighbour recall@10 against float32 | | {r['neighbour_recall_at_10']:.3f} | >= 0.95 |")
        w, s = r["wic_test"], r["sense_probe"]
        c = r.get("wic_chosen_on_dev", {})
        lines.append(f"| WiC test accuracy, layer/mix chosen on dev per precision ({c.get('float32')} / {c.get('bfloat16')}) | {w['float32']:.1f} | {w['bfloat16']:.1f} ({w['bfloat16'] - w['float32']:+.1f}) | within 0.5 |")
        rows = r.get("wic_rows_test")
        if rows:
            worst = max(abs(rows["bfloat16"][k] - rows["float32"][k]) for k in rows["float32"])
            same = rows["bfloat16"][c["float32"]]
            lines.append(f"| WiC test accuracy at float32's choice ({c['float32']}); largest change of any layer/mix | {rows['float32'][c['float32']]:.1f} | {same:.1f} ({same - rows['float32'][c['float32']]:+.1f}); {worst:.1f} | within 0.5 |")
        lines.append(f"| sense probe (288 sentences, average mix) | {s['float32']:.1f} | {s['bfloat16']:.1f} ({s['bfloat16'] - s['float32']:+.1f}) | within 0.5 |")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
