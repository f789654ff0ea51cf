"""bf16 against fp32 training on the CPU: step speed, step agreement, and learning curves.

``speed``: one process builds the same model twice (fp32 and bf16 training precision, same
initial weights, each with its own AdamW) and alternates their steps over the same batches of
a prepared corpus, so both see the same load on a shared machine. Reports per step the CPU
seconds of the process (one thread: tokens per CPU-second = tokens/s per core) and wall
seconds, the medians and their ratio, and for the first step (identical weights and batch)
the two losses and the cosine / relative difference of every gradient::

    python bench/train_precision.py speed corpus/full-mixed --init en_default --steps 12 --json bench/results/train_precision_speed.json

``curves``: two run folders of ``pretrain``/``finetune`` (same config and seed, one per
precision): validation perplexity at the steps both evaluated (matched tokens) and the
median training tokens/s and tokens per CPU-second of their logs::

    python bench/train_precision.py curves runs/cmp-fp32 runs/cmp-bf16 --json bench/results/train_precision_curves.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any, Dict, List

import torch


def speed(args: argparse.Namespace) -> Dict[str, Any]:
    from spacy_elmo.cli import model_path
    from spacy_elmo.training.data import Position, training_batches
    from spacy_elmo.training.trainer import TrainConfig, build_model, training_vocab

    torch.set_num_threads(args.threads)
    init = str(model_path(Path(args.init))) if args.init else None
    config = TrainConfig(data_dir=str(args.data), init_model=init, n_samples=args.samples, max_tokens=args.max_tokens)
    vocab = training_vocab(config)
    stream = training_batches(Path(args.data), vocab, args.max_tokens, 50, args.seed, Position(), 0, 1)
    batches = [next(stream)[1] for _ in range(args.steps)]
    models, optimizers = {}, {}
    for name, dtype in (("fp32", None), ("bf16", torch.bfloat16)):
        torch.manual_seed(args.seed)
        model = build_model(config, vocab)
        model.set_train_dtype(dtype)
        model.train()
        models[name] = model
        optimizers[name] = torch.optim.AdamW(model.parameters(), lr=config.lr, fused=True if dtype is not None else None)
    rows: Dict[str, List[Dict[str, float]]] = {"fp32": [], "bf16": []}
    first: Dict[str, Any] = {}
    for index, batch in enumerate(batches):
        for name in ("fp32", "bf16") if index % 2 == 0 else ("bf16", "fp32"):
            model, optimizer = models[name], optimizers[name]
            torch.manual_seed(args.seed + index)  # the same dropout masks and softmax samples for both
            wall, cpu = time.perf_counter(), time.process_time()
            loss, _ = model(batch)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if index == 0:
                first[name] = (float(loss.detach()), {k: p.grad.detach().clone() for k, p in model.named_parameters()})
            optimizer.step()
            rows[name].append({"cpu_s": time.process_time() - cpu, "wall_s": time.perf_counter() - wall, "tokens": batch.n_targets})
    grads = {}
    for key, ref in first["fp32"][1].items():
        got = first["bf16"][1][key]
        cos = float(torch.nn.functional.cosine_similarity(ref.flatten(), got.flatten(), dim=0))
        grads[key] = {"cosine": cos, "relative_l2": float((got - ref).norm() / ref.norm().clamp_min(1e-30))}
    measured = {name: r[1:] for name, r in rows.items()}  # the first step of each warms up allocators and kernels
    summary = {}
    for name, r in measured.items():
        cpu = statistics.median(x["tokens"] / x["cpu_s"] for x in r)
        wall = statistics.median(x["tokens"] / x["wall_s"] for x in r)
        summary[name] = {"tokens_per_cpu_s": cpu, "tokens_per_wall_s": wall, "median_step_cpu_s": statistics.median(x["cpu_s"] for x in r)}
    return {
        "what": "alternating fp32 / bf16 training steps in one process, same batches, same initial weights",
        "config": {"init": args.init, "data": Path(args.data).name, "n_samples": args.samples, "max_tokens": args.max_tokens, "steps": args.steps, "threads": args.threads},
        "torch": torch.__version__,
        "summary": summary,
        "speedup_cpu": summary["bf16"]["tokens_per_cpu_s"] / summary["fp32"]["tokens_per_cpu_s"],
        "speedup_wall": summary["bf16"]["tokens_per_wall_s"] / summary["fp32"]["tokens_per_wall_s"],
        "first_step": {
            "loss_fp32": first["fp32"][0], "loss_bf16": first["bf16"][0],
            "worst_gradient_cosine": min(g["cosine"] for g in grads.values()),
            "worst_gradient_relative_l2": max(g["relative_l2"] for g in grads.values()),
            "gradients": grads,
        },
        "steps": rows,
    }


def _records(run: Path) -> List[Dict[str, Any]]:
    return [json.loads(line) for line in (Path(run) / "metrics.jsonl").read_text().splitlines() if line.strip()]


def curves(args: argparse.Namespace) -> Dict[str, Any]:
    runs = {"fp32": _records(args.fp32), "bf16": _records(args.bf16)}
    valid = {name: {r["step"]: r for r in recs if "valid_ppl_avg" in r} for name, recs in runs.items()}
    matched = []
    for step in sorted(set(valid["fp32"]) & set(valid["bf16"])):
        a, b = valid["fp32"][step], valid["bf16"][step]
        matched.append({
            "step": step, "tokens": a["tokens"], "tokens_bf16": b["tokens"],
            "ppl_fp32": a["valid_ppl_avg"], "ppl_bf16": b["valid_ppl_avg"],
            "relative_difference": b["valid_ppl_avg"] / a["valid_ppl_avg"] - 1,
        })
    speed = {}
    for name, recs in runs.items():
        train = [r for r in recs if "tokens_per_s" in r]
        entry = {"logged_windows": len(train), "last_step": train[-1]["step"] if train else 0,
                 "median_tokens_per_s": statistics.median(r["tokens_per_s"] for r in train) if train else None}
        per_cpu = [r["tokens_per_cpu_s"] for r in train if "tokens_per_cpu_s" in r]
        if per_cpu:
            entry["median_tokens_per_cpu_s"] = statistics.median(per_cpu)
        speed[name] = entry
    last_matched = matched[-1]["step"] if matched else 0
    for name, samples in (("fp32", args.cpu_fp32), ("bf16", args.cpu_bf16)):
        if samples:
            speed[name]["over_matched_steps"] = _sampled_rate(samples, last_matched)
    if all("over_matched_steps" in speed[n] for n in speed):
        a, b = speed["fp32"]["over_matched_steps"], speed["bf16"]["over_matched_steps"]
        speed["speedup_cpu"] = b["tokens_per_cpu_s"] / a["tokens_per_cpu_s"]
        speed["speedup_wall"] = b["tokens_per_wall_s"] / a["tokens_per_wall_s"]
    return {"fp32_run": Path(args.fp32).name, "bf16_run": Path(args.bf16).name, "matched": matched, "speed": speed}


def _sampled_rate(path: Path, up_to_step: int) -> Dict[str, float]:
    """Tokens per CPU-second and per wall-second of a run between its first logged step and
    ``up_to_step``, from a sampler file of ``wall_time cpu_seconds step tokens`` lines (the
    process's utime + stime every few seconds; evaluations on the way included)."""
    rows = [tuple(float(x) for x in line.split()) for line in Path(path).read_text().splitlines() if len(line.split()) == 4]
    first = next(r for r in rows if r[2] > 0)
    last = max((r for r in rows if 0 < r[2] <= up_to_step), key=lambda r: r[2])
    begin = next(r for r in rows if r[2] == first[2])  # the first sample that saw each step logged
    end = next(r for r in rows if r[2] == last[2])
    tokens = end[3] - begin[3]
    return {"from_step": begin[2], "to_step": end[2], "tokens": tokens, "cpu_s": end[1] - begin[1], "wall_s": end[0] - begin[0],
            "tokens_per_cpu_s": tokens / (end[1] - begin[1]), "tokens_per_wall_s": tokens / (end[0] - begin[0])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("speed")
    s.add_argument("data", type=Path, help="a prepared corpus (python -m spacy_elmo prepare)")
    s.add_argument("--init", default="en_default", help="biLM to start from (its vocabulary is used); '' = a fresh 512/128 model")
    s.add_argument("--steps", type=int, default=12)
    s.add_argument("--samples", type=int, default=2048)
    s.add_argument("--max-tokens", type=int, default=4096)
    s.add_argument("--threads", type=int, default=1)
    s.add_argument("--seed", type=int, default=1)
    s.add_argument("--json", type=Path)
    c = sub.add_parser("curves")
    c.add_argument("fp32", type=Path)
    c.add_argument("bf16", type=Path)
    c.add_argument("--cpu-fp32", type=Path, help="sampler file of the fp32 run: lines 'wall cpu_s step tokens'")
    c.add_argument("--cpu-bf16", type=Path, help="the same for the bf16 run")
    c.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = speed(args) if args.command == "speed" else curves(args)
    text = json.dumps(result, indent=1)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(text + "\n")
    summary = {k: v for k, v in result.items() if k not in ("steps",)}
    if "first_step" in summary:
        summary["first_step"] = {k: v for k, v in summary["first_step"].items() if k != "gradients"}
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
