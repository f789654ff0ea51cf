#!/usr/bin/env python3
"""One short GPU check of every device path: run it on a machine with a CUDA GPU.

    python bench/gpu_check.py                      # on a GPU machine (about 10 minutes)
    python bench/gpu_check.py --dry-run            # the same steps on the CPU, tiny sizes

1. parity: the embedded default biLM on the CPU and on the GPU, same sentences, float32 (max
   absolute difference, minimum per-token cosine) and bfloat16 inference (cosine to the CPU's
   float32);
2. ``spacy train --gpu-id 0``: 50 steps of the project's ELMo tagger config, frozen biLM and
   fine-tuned (``frozen = false``), on UD EWT sentences (or the in-repo toy sentences), then the
   trained pipeline tags on the GPU;
3. pretraining: 200 bfloat16 (``amp``) steps of the tiny recipe with 1 process, then with 2
   (``torchrun --nproc_per_node 2``; on a one-GPU machine both processes share it), tokens/s each.

Each step prints one line and the figures go to ``--json`` (default ``gpu_check.json`` in the
work folder). Exit status 1 if any step fails; the others still run.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any, Callable, Dict, List

from bench_common import DATA, REPO, SAMPLE_BOOKS, Clock, machine, timed, token_cosines, ud_sentences, write_results

TAGGER_CONFIG = REPO / "project" / "configs" / "downstream" / "tagger-elmo.cfg"
TINY_RECIPE = REPO / "project" / "configs" / "tiny.json"
TOY = [
    ("The cat sat on the mat .", ["DET", "NOUN", "VERB", "ADP", "DET", "NOUN", "PUNCT"]),
    ("A dog ran home .", ["DET", "NOUN", "VERB", "NOUN", "PUNCT"]),
    ("The bank lends money .", ["DET", "NOUN", "VERB", "NOUN", "PUNCT"]),
    ("We sat on the bank .", ["PRON", "VERB", "ADP", "DET", "NOUN", "PUNCT"]),
]
SENTENCES = [
    "The quick brown fox jumped over the lazy dog near the river bank .".split(),
    "She put all her money in the bank and walked home .".split(),
    "Deposits rose sharply last quarter".split(),
    ["Hi"],
]


def run(args: List[Any], **kwargs: Any) -> str:
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, args[:6]))} ... exited {result.returncode}:\n{result.stdout[-1500:]}\n{result.stderr[-3000:]}")
    return result.stdout + result.stderr


def parity(device: str, work: Path, dry_run: bool) -> Dict[str, Any]:
    import numpy as np
    import torch

    from spacy_elmo import load_bilm

    cpu = load_bilm()
    ref = cpu.embed_sentences(SENTENCES)
    gpu = load_bilm().to(device)
    out = gpu.embed_sentences(SENTENCES)
    cos = token_cosines(ref, out)
    gpu.set_inference_precision("bfloat16")
    cos16 = token_cosines(ref, gpu.embed_sentences(SENTENCES))
    assert gpu._bf16.lstm.conversions == 1, "the bfloat16 weights were not converted exactly once"
    report = {"max_abs_diff_fp32": float(np.abs(np.concatenate(ref, axis=1) - np.concatenate(out, axis=1)).max()), "min_cos_fp32": float(cos.min()), "min_cos_bf16": float(cos16.min())}
    if device.startswith("cuda"):
        report["device_name"] = torch.cuda.get_device_name(device)
    assert report["min_cos_fp32"] > 0.9999, report
    assert report["min_cos_bf16"] > 0.99, report
    return report


def training_data(work: Path, dry_run: bool) -> None:
    import spacy
    from spacy.tokens import Doc, DocBin

    nlp = spacy.blank("en")
    ud = DATA / "ud_english_ewt" / "en_ewt-ud-train.conllu"
    ud = ud if ud.is_file() else ud.with_name(ud.name + ".gz")
    if ud.is_file() and not dry_run:
        pairs = ud_sentences(ud, 1200, with_tags=True)
    else:
        pairs = [(text.split(), tags) for text, tags in TOY] * 25
    docs = [Doc(nlp.vocab, words=w, tags=t, sent_starts=[True] + [False] * (len(w) - 1)) for w, t in pairs]
    DocBin(docs=docs[:-200] if len(docs) > 400 else docs).to_disk(work / "train.spacy")
    DocBin(docs=docs[-200:] if len(docs) > 400 else docs[:20]).to_disk(work / "dev.spacy")


def spacy_train(frozen: bool, gpu_id: int, work: Path, dry_run: bool) -> Dict[str, Any]:
    if not (work / "train.spacy").exists():
        training_data(work, dry_run)
    out = work / ("tagger-frozen" if frozen else "tagger-finetuned")
    steps = 10 if dry_run else 50
    _, seconds = timed(run, [sys.executable, "-m", "spacy", "train", TAGGER_CONFIG, "--output", out, "--gpu-id", gpu_id,
                             "--paths.train", work / "train.spacy", "--paths.dev", work / "dev.spacy",
                             "--training.max_steps", steps, "--training.eval_frequency", steps,
                             "--components.elmo.frozen", str(frozen).lower(), "--components.elmo.model.precision", "float32"])
    code = (
        "import json, sys, spacy\n"
        f"gpu = {gpu_id}\n"
        "if gpu >= 0: spacy.require_gpu(gpu)\n"
        f"nlp = spacy.load({str(out / 'model-last')!r})\n"
        "docs = list(nlp.pipe(['The cat sat on the mat .', 'We went home .']))\n"
        "print(json.dumps([[t.tag_ for t in d] for d in docs]))\n"
    )
    tags = json.loads(run([sys.executable, "-c", code]).strip().splitlines()[-1])
    assert all(all(tag for tag in doc) for doc in tags), tags
    return {"steps": steps, "seconds": round(seconds, 1), "tags": tags}


def pretrain(processes: int, work: Path, dry_run: bool) -> Dict[str, Any]:
    corpus = work / "corpus"
    if not (corpus / "vocab.txt").exists():
        run([sys.executable, "-m", "spacy_elmo", "prepare", SAMPLE_BOOKS, "--out-dir", corpus, "--max-vocab", "20000"])
    recipe = json.loads(TINY_RECIPE.read_text())
    recipe.update(amp=True, threads=1, eval_every=10**9, checkpoint_every=10**9, log_every=50)
    config = work / "recipe-amp.json"
    config.write_text(json.dumps(recipe))
    steps = 5 if dry_run else 200
    out = work / f"pretrain-{processes}"
    command: List[Any] = ["-m", "spacy_elmo", "pretrain", corpus, out, "--config", config, "--max-steps", steps]
    if processes == 1:
        command = [sys.executable, *command]
    else:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", processes, *command]
    _, seconds = timed(run, command, env={**os.environ, "OMP_NUM_THREADS": "1"})
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    last = metrics[-1] if metrics else {}
    # tokens/s over the whole command, start-up and the final evaluation included
    return {"steps": steps, "seconds": round(seconds, 1), "tokens_per_s": round(last.get("tokens", 0) / seconds), "last_metrics": last}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dry-run", action="store_true", help="run every step on the CPU with tiny sizes")
    ap.add_argument("--gpu-id", type=int, default=0)
    ap.add_argument("--work", type=Path, help="work folder (default: a new temporary one)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--steps", help="comma-separated subset of: parity, spacy_train_frozen, spacy_train_finetuned, "
                    "pretrain_amp_1_process, pretrain_amp_2_processes (default: all)")
    args = ap.parse_args()
    import torch

    if not args.dry_run and not torch.cuda.is_available():
        raise SystemExit("no CUDA GPU visible to torch: run on a GPU machine, or pass --dry-run for the CPU rehearsal")
    device = "cpu" if args.dry_run else f"cuda:{args.gpu_id}"
    gpu_id = -1 if args.dry_run else args.gpu_id
    work = args.work or Path(tempfile.mkdtemp(prefix="gpu-check-"))
    work.mkdir(parents=True, exist_ok=True)
    steps: Dict[str, Callable[[], Dict[str, Any]]] = {
        "parity": lambda: parity(device, work, args.dry_run),
        "spacy_train_frozen": lambda: spacy_train(True, gpu_id, work, args.dry_run),
        "spacy_train_finetuned": lambda: spacy_train(False, gpu_id, work, args.dry_run),
        "pretrain_amp_1_process": lambda: pretrain(1, work, args.dry_run),
        "pretrain_amp_2_processes": lambda: pretrain(2, work, args.dry_run),
    }
    if args.steps:
        wanted = args.steps.split(",")
        unknown = [w for w in wanted if w not in steps]
        if unknown:
            raise SystemExit(f"--steps: unknown step(s) {', '.join(unknown)}; choose from {', '.join(steps)}")
        steps = {name: steps[name] for name in wanted}
    report: Dict[str, Any] = {"device": device, "dry_run": args.dry_run, "machine": machine()}
    failed = False
    for name, step in steps.items():
        with Clock() as clock:
            try:
                report[name] = {"ok": True, **step()}
            except Exception as error:  # noqa: BLE001 - report every step, fail at the end
                failed = True
                report[name] = {"ok": False, "error": f"{type(error).__name__}: {error}"[-3000:], "trace": traceback.format_exc()[-2000:]}
        print(f"{name}: {'ok' if report[name]['ok'] else 'FAILED'} ({clock.seconds:.0f} s) "
              + json.dumps({k: v for k, v in report[name].items() if k not in ('ok', 'trace')})[:400], flush=True)
    path = args.json or work / "gpu_check.json"
    write_results(path, report)
    print(f"report: {path}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
