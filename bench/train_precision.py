"""bf16 against fp32 training on the CPU: step speed and step agreement.

``speed``: one process builds the same model twice (fp32 and bf16 training precision, same
initial weights, each with its own AdamW) and alternates their steps over the same batches of
a prepared corpus, so both see the same load on a shared machine. Reports per step the CPU
seconds of the process (one thread: tokens per CPU-second = tokens/s per core) and wall
seconds, the medians and their ratio, and for the first step (identical weights and batch)
the two losses and the cosine / relative difference of every gradient::

    python bench/train_precision.py speed corpus/full-mixed --init en_default --steps 12 --json bench/results/train_precision_speed.json

Both build the models after applying the glibc heap tuning that training applies
(``--malloc-tuning off``: glibc's defaults; see ``spacy_elmo/training/allocator.py``).
"""
from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any, Dict, List, Tuple

import torch
from bench_common import Clock, machine, peak_rss_mb, use_threads, write_results


def _setup(args: argparse.Namespace) -> Tuple[List[Any], Dict[str, Any], Dict[str, torch.optim.Optimizer]]:
    """The batches, and an fp32 and a bf16 model (same initial weights) with their AdamW each."""
    from spacy_elmo.cli import model_path
    from spacy_elmo.training.data import Position, training_batches
    from spacy_elmo.training.trainer import TrainConfig, build_model, training_vocab

    use_threads(args.threads)
    args.malloc_tuned = False
    if args.malloc_tuning == "on":  # as train() does, before the first step
        from spacy_elmo.training.allocator import tune_allocator

        args.malloc_tuned = tune_allocator()
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
    return batches, models, optimizers


def _config(args: argparse.Namespace) -> Dict[str, Any]:
    return {
        "init": args.init, "data": Path(args.data).name, "n_samples": args.samples, "max_tokens": args.max_tokens,
        "steps": args.steps, "threads": args.threads, "malloc_tuning": args.malloc_tuning, "malloc_tuned": args.malloc_tuned,
    }


def speed(args: argparse.Namespace) -> Dict[str, Any]:
    batches, models, optimizers = _setup(args)
    rows: Dict[str, List[Dict[str, float]]] = {"fp32": [], "bf16": []}
    first: Dict[str, Any] = {}
    for index, batch in enumerate(batches):
        for name in ("fp32", "bf16") if index % 2 == 0 else ("bf16", "fp32"):
            model, optimizer = models[name], optimizers[name]
            torch.manual_seed(args.seed + index)  # the same dropout masks and softmax samples for both
            with Clock() as clock:
                loss, _ = model(batch)
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                if index == 0:
                    first[name] = (float(loss.detach()), {k: p.grad.detach().clone() for k, p in model.named_parameters()})
                optimizer.step()
            rows[name].append({"cpu_s": clock.cpu_seconds, "wall_s": clock.seconds, "tokens": batch.n_targets})
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
        "config": _config(args),
        "machine": machine(args.threads),
        "summary": summary,
        "max_rss_mb": peak_rss_mb(),
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
    s.add_argument("--malloc-tuning", choices=("on", "off"), default="on", help="glibc heap tuning as training applies it (on, its default) or not")
    s.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = speed(args)
    write_results(args.json, result)
    summary = {k: v for k, v in result.items() if k != "steps"}
    summary["first_step"] = {k: v for k, v in summary["first_step"].items() if k != "gradients"}
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
