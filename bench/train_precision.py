"""bf16 against fp32 training on the CPU: step speed, step agreement, and learning curves.

``speed``: one process builds the same model twice (fp32 and bf16 training precision, same
initial weights, each with its own AdamW) and alternates their steps over the same batches of
a prepared corpus, so both see the same load on a shared machine. Reports per step the CPU
seconds of the process (one thread: tokens per CPU-second = tokens/s per core) and wall
seconds, the medians and their ratio, and for the first step (identical weights and batch)
the two losses and the cosine / relative difference of every gradient::

    python bench/train_precision.py speed corpus/full-mixed --init en_default --steps 12 --json bench/results/train_precision_speed.json

Both build the models after applying the glibc heap tuning that training applies
(``--malloc-tuning off``: glibc's defaults; see ``spacy_elmo/training/allocator.py``).

``profile``: the same alternating steps under torch.profiler; each op's self time goes to one of
matrix products (``mm``/``bmm``/``baddbmm``/``addmm``/convolutions), elementwise (every other
ATen op and the compiled kernels, named ``compiled::NAME``), softmax (everything in the loss's
forward and in the backward nodes between the loss and the LSTM's top states, its products
included), optimizer (``zero_grad`` and ``step``) and other (Python between the ops, the autograd
engine). Shares of the profiled step's time, and those shares of its CPU milliseconds, as a
markdown table (``--markdown`` appends its rows) and JSON with each precision's top ops::

    python bench/train_precision.py profile corpus/full-mixed --steps 5 --label after --json bench/results/train_step_split-after.json --markdown bench/results/train_step_split.md

``curves``: two run folders of ``pretrain``/``finetune`` (same config and seed, one per
precision): validation perplexity at the steps both evaluated (matched tokens) and the
median training tokens/s and tokens per CPU-second of their logs::

    python bench/train_precision.py curves runs/cmp-fp32 runs/cmp-bf16 --json bench/results/train_precision_curves.json
"""
from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
from pathlib import Path
from typing import Any, Callable, Dict, List, Set, Tuple

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bench/, also when this file is loaded from elsewhere (the tests)
from bench_common import Clock, machine, peak_rss_mb, use_threads, write_results  # noqa: E402


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


CATEGORIES = ("matrix products", "elementwise", "softmax", "optimizer", "other")
_MATMUL = {"aten::mm", "aten::bmm", "aten::baddbmm", "aten::addmm", "aten::addbmm", "aten::matmul", "aten::linear", "aten::_addmm_activation"}
_COMPILED = ("forward", "hidden_grad", "backward", "max_pool", "softmax_lse", "softmax_grad_")  # the compiled kernels' entry points used in training


def _category(event: Any, softmax_nodes: Set[int]) -> str:
    """Where an event's self time goes: its phase (the loss, the optimizer) first, else its kind."""
    node = event
    while node is not None:
        if node.name == "bench::bookkeeping":
            return "bookkeeping"
        if node.name == "bench::optimizer":
            return "optimizer"
        if node.name == "bench::softmax":
            return "softmax"
        if node.name.startswith("autograd::engine::evaluate_function:") and node.sequence_nr in softmax_nodes:
            return "softmax"
        node = node.cpu_parent
    name = event.name
    if name.rstrip("_") in _MATMUL or (name.startswith("aten::") and "conv" in name):  # in place too (baddbmm_)
        return "matrix products"
    if name.startswith("compiled::") or name.startswith("aten::"):
        return "elementwise"
    return "other"  # Python between the ops, the autograd engine, the bench's own ranges


def _loss_nodes(loss: torch.Tensor, boundaries: List[Any]) -> Set[int]:
    """Sequence numbers of the autograd nodes between the loss and the LSTM's top states: the
    softmax's backward (the autograd engine runs these first, before the LSTM's)."""
    stop = {id(b) for b in boundaries if b is not None}
    seen: Set[int] = set()
    found: Set[int] = set()
    todo = [loss.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or id(node) in seen or id(node) in stop:
            continue
        seen.add(id(node))
        found.add(int(node._sequence_nr()))
        todo.extend(next_node for next_node, _ in node.next_functions)
    return found


def _instrument(model: Any, captured: Dict[str, Any]) -> None:
    """Wrap the model's loss in a ``bench::softmax`` range and keep the LSTM states it reads."""
    from torch.profiler import record_function

    states = model.hidden_and_targets
    loss = model._sampled_nll
    logits = model._logits

    def hidden_and_targets(batch: Any) -> Any:
        out = states(batch)
        captured["boundaries"] = [out[0].grad_fn, out[2].grad_fn]
        return out

    def wrap(function: Callable[..., torch.Tensor]) -> Callable[..., torch.Tensor]:
        def wrapped(*args: Any) -> torch.Tensor:
            with record_function("bench::softmax"):
                return function(*args)

        return wrapped

    model.hidden_and_targets = hidden_and_targets
    model._sampled_nll = wrap(loss)
    model._logits = wrap(logits)


def _instrument_compiled() -> None:
    """Name each call of the compiled kernels in the profile (``compiled::NAME``)."""
    from torch.profiler import record_function

    from spacy_elmo.kernels import native

    kernels = native.library()
    if kernels is None:
        return
    for name in _COMPILED:
        function = getattr(kernels, name)

        def wrapped(*args: Any, _function: Callable[..., Any] = function, _name: str = name, **kwargs: Any) -> Any:
            with record_function(f"compiled::{_name}"):
                return _function(*args, **kwargs)

        setattr(kernels, name, wrapped)


def profile(args: argparse.Namespace) -> Dict[str, Any]:
    """The per-step time split (see :data:`CATEGORIES`) of fp32 and bf16 steps, alternating as
    ``speed`` does, from torch.profiler's per-op self times (the first step of each unprofiled)."""
    from torch.profiler import ProfilerActivity, record_function
    from torch.profiler import profile as torch_profile

    batches, models, optimizers = _setup(args)
    _instrument_compiled()
    captured: Dict[str, Any] = {}
    for model in models.values():
        _instrument(model, captured)
    steps: Dict[str, List[Dict[str, float]]] = {"fp32": [], "bf16": []}
    ops: Dict[str, Dict[str, List[float]]] = {"fp32": {}, "bf16": {}}
    for index, batch in enumerate(batches):
        for name in ("fp32", "bf16") if index % 2 == 0 else ("bf16", "fp32"):
            model, optimizer = models[name], optimizers[name]
            torch.manual_seed(args.seed + index)
            recorder = torch_profile(activities=[ProfilerActivity.CPU]) if index > 0 else contextlib.nullcontext()
            with Clock() as clock, recorder as prof:
                with record_function("bench::step"):
                    loss, _ = model(batch)
                    with record_function("bench::bookkeeping"):  # not counted in the step
                        softmax_nodes = _loss_nodes(loss, captured["boundaries"])
                    with record_function("bench::optimizer"):
                        optimizer.zero_grad(set_to_none=True)
                    with record_function("bench::backward"):
                        loss.backward()
                    with record_function("bench::optimizer"):
                        optimizer.step()
            cpu = clock.cpu_seconds
            if index == 0:
                continue
            events = prof.profiler.function_events
            step = next(e for e in events if e.name == "bench::step")
            split = dict.fromkeys((*CATEGORIES, "bookkeeping"), 0.0)
            for event in events:
                if event.time_range.start < step.time_range.start or event.time_range.end > step.time_range.end:
                    continue
                category = _category(event, softmax_nodes)
                split[category] += event.self_cpu_time_total / 1e3
                per_op = ops[name].setdefault(f"{event.name} [{category}]", [0.0, 0.0])
                per_op[0] += event.self_cpu_time_total / 1e3
                per_op[1] += 1
            split["total"] = step.time_range.elapsed_us() / 1e3 - split.pop("bookkeeping")
            split["tokens"] = batch.n_targets
            split["cpu"] = 1e3 * cpu
            steps[name].append(split)
    summary: Dict[str, Any] = {}
    for name, rows in steps.items():
        mean = {key: statistics.fmean(r[key] for r in rows) for key in (*CATEGORIES, "total", "cpu")}
        top = sorted(ops[name].items(), key=lambda item: -item[1][0])[: args.top]
        summary[name] = {
            "step_ms": mean["total"],
            "step_cpu_ms": mean["cpu"],
            "ms": {c: mean[c] for c in CATEGORIES},
            "share": {c: mean[c] / mean["total"] for c in CATEGORIES},
            # the shares applied to the step's CPU time: on a busy machine wall times stretch, CPU times less
            "cpu_ms": {c: mean[c] / mean["total"] * mean["cpu"] for c in CATEGORIES},
            "top_ops": [{"op": op, "ms_per_step": t / len(rows), "calls_per_step": n / len(rows)} for op, (t, n) in top],
        }
    return {
        "what": "per-step time split of alternating fp32 / bf16 training steps (torch.profiler self times: wall ms per step, shares, and the shares of the step's CPU ms)",
        "label": args.label,
        "config": _config(args),
        "machine": machine(args.threads),
        "summary": summary,
        "max_rss_mb": peak_rss_mb(),
        "steps": steps,
    }


def split_markdown(results: List[Dict[str, Any]]) -> str:
    """A markdown table of :func:`profile` results: each category's share of the step and that share
    of the step's CPU milliseconds."""
    lines = [
        "| run | precision | step CPU ms (profiled) | " + " | ".join(CATEGORIES) + " |",
        "| --- | --- | ---: | " + " | ".join("---:" for _ in CATEGORIES) + " |",
    ]
    for result in results:
        for name, row in result["summary"].items():
            cells = [f"{100 * row['share'][c]:.0f}% ({row['cpu_ms'][c]:.0f})" for c in CATEGORIES]
            lines.append(f"| {result['label']} | {name} | {row['step_cpu_ms']:.0f} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


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
    p = sub.add_parser("profile", help="per-step time split: matrix products / elementwise / softmax / optimizer / other")
    for sub_parser in (s, p):
        sub_parser.add_argument("data", type=Path, help="a prepared corpus (python -m spacy_elmo prepare)")
        sub_parser.add_argument("--init", default="en_default", help="biLM to start from (its vocabulary is used); '' = a fresh 512/128 model")
        sub_parser.add_argument("--steps", type=int, default=12 if sub_parser is s else 5)
        sub_parser.add_argument("--samples", type=int, default=2048)
        sub_parser.add_argument("--max-tokens", type=int, default=4096)
        sub_parser.add_argument("--threads", type=int, default=1)
        sub_parser.add_argument("--seed", type=int, default=1)
        sub_parser.add_argument(
            "--malloc-tuning", choices=("on", "off"), default="on", help="glibc heap tuning as training applies it (on, its default) or not"
        )
        sub_parser.add_argument("--json", type=Path)
    p.add_argument("--label", default="", help="names the run in the markdown table")
    p.add_argument("--top", type=int, default=15, help="list this many ops with the most self time")
    p.add_argument("--markdown", type=Path, help="append the table's rows to this file (the header when it is new)")
    c = sub.add_parser("curves")
    c.add_argument("fp32", type=Path)
    c.add_argument("bf16", type=Path)
    c.add_argument("--cpu-fp32", type=Path, help="sampler file of the fp32 run: lines 'wall cpu_s step tokens'")
    c.add_argument("--cpu-bf16", type=Path, help="the same for the bf16 run")
    c.add_argument("--json", type=Path)
    args = parser.parse_args()
    result = {"speed": speed, "profile": profile, "curves": curves}[args.command](args)
    if args.command == "profile" and args.markdown:
        table = split_markdown([result])
        if args.markdown.is_file():
            table = "\n".join(table.splitlines()[2:]) + "\n"
        with args.markdown.open("a", encoding="utf-8") as handle:
            handle.write(table)
    if args.json:
        write_results(args.json, result)
    summary = {k: v for k, v in result.items() if k not in ("steps",)}
    if args.command == "profile":
        print(split_markdown([result]))
    if "first_step" in summary:
        summary["first_step"] = {k: v for k, v in summary["first_step"].items() if k != "gradients"}
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
