#!/usr/bin/env python3
"""One short training leg of the default biLM on one GPU, prepared on a CPU machine.

    python scripts/gpu_leg.py pack corpus/mixed-v2 corpus/gpu-leg --max-mb 40
    python scripts/gpu_leg.py run corpus/gpu-leg --init ../spacy_elmo/models/en_default \\
        --run training/gpu-leg --out packages/gpu-leg --config configs/gpu-leg.json

``pack`` takes whole training shards of a prepared corpus (its shards are already shuffled
across sources) and the start of its validation split, each compressed with xz, until the folder
would pass ``--max-mb``; the corpus's vocabulary goes with them. ``run`` unpacks them into the run
folder, continues ``--init`` (the shipped default: same shape and vocabulary, so the snapshot
stays embeddable) for at most the config's ``max_minutes`` at a large batch (``amp`` on the GPU),
resumes when the run folder holds a checkpoint, and writes the snapshot in the embedded layout
(``weights.pt`` and a float16 ``softmax.pt``, each checked against ``--max-file-mib``) with
``leg.json`` (steps, tokens, minutes, validation perplexity, the device). It needs only torch,
numpy, tqdm and srsly: no spaCy, so it runs where only a deep-learning stack is installed.
On a CPU, ``--max-steps`` and ``--max-tokens`` make a tiny rehearsal of the same command.
"""

from __future__ import annotations

import argparse
import json
import lzma
import shutil
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Dict, List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent.parent.parent))  # the repository, for spacy_elmo

MIB = 1024 * 1024


def pack(corpus: Path, dest: Path, max_mb: float, valid_sentences: int = 2000) -> Dict[str, Any]:
    """Compressed training shards (whole ones, in order) + the first validation sentences + vocab."""
    train = sorted((corpus / "train").glob("shard-*.txt"))
    valid = sorted((corpus / "valid").glob("shard-*.txt"))
    if not train or not valid or not (corpus / "vocab.txt").is_file():
        raise SystemExit(f"{corpus} is not a prepared corpus (train/ and valid/ shards and vocab.txt): run `prepare` first")
    if dest.exists():
        shutil.rmtree(dest)
    (dest / "train").mkdir(parents=True)
    (dest / "valid").mkdir()
    shutil.copyfile(corpus / "vocab.txt", dest / "vocab.txt")
    with open(valid[0], encoding="utf-8") as fh:
        head = "".join(line for _, line in zip(range(valid_sentences), fh))
    (dest / "valid" / "shard-00000.txt.xz").write_bytes(lzma.compress(head.encode("utf-8"), preset=9))
    budget = int(max_mb * 1e6) - 1024  # room for pack.json
    used = sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())
    kept, sentences = 0, 0
    for shard in train:
        raw = shard.read_bytes()
        data = lzma.compress(raw, preset=6)
        if used + len(data) > budget:
            break
        (dest / "train" / f"shard-{kept:05d}.txt.xz").write_bytes(data)
        used += len(data)
        kept += 1
        sentences += raw.count(b"\n")
    if not kept:
        raise SystemExit(f"not one training shard of {corpus} fits in {max_mb} MB compressed: use smaller shards (prepare --shard-size)")
    record = {"corpus": corpus.name, "train_shards": kept, "of_shards": len(train), "train_sentences": sentences, "mb": round(used / 1e6, 2)}
    (dest / "pack.json").write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return record


def unpack(packed: Path, corpus: Path) -> Path:
    """The packed shards as the plain-text corpus folder the trainer reads (kept for a resume)."""
    for split in ("train", "valid"):
        (corpus / split).mkdir(parents=True, exist_ok=True)
        for src in sorted((packed / split).glob("shard-*.txt.xz")):
            out = corpus / split / src.name[: -len(".xz")]
            if not out.is_file():
                tmp = out.with_suffix(".part")
                tmp.write_bytes(lzma.decompress(src.read_bytes()))
                tmp.replace(out)
    shutil.copyfile(packed / "vocab.txt", corpus / "vocab.txt")
    return corpus


def run(args: argparse.Namespace) -> Dict[str, Any]:
    import torch

    from spacy_elmo.training.ship import ship_model
    from spacy_elmo.training.trainer import TrainConfig, train

    settings = json.loads(args.config.read_text(encoding="utf-8"))
    for key in ("max_minutes", "max_steps", "max_tokens", "n_samples"):
        value = getattr(args, key)
        if value is not None:
            settings[key] = value
    corpus = unpack(args.data, args.run / "corpus")
    config = TrainConfig(**{**settings, "data_dir": str(corpus), "out_dir": str(args.run), "init_model": str(args.init)})
    start = time.time()
    result = train(config, resume=(args.run / "checkpoints" / "last.pt").is_file())
    sizes = ship_model(args.run, args.out)
    too_big = {name: size for name, size in sizes.items() if name in ("weights.pt", "softmax.pt") and size > args.max_file_mib * MIB}
    leg = {
        "device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
        "torch": torch.__version__,
        "seconds": round(time.time() - start, 1),
        "config": {k: v for k, v in asdict(config).items() if k not in ("data_dir", "out_dir", "init_model")},
        "result": result,
        "files": sizes,
    }
    (args.out / "leg.json").write_text(json.dumps(leg, indent=1, default=str) + "\n", encoding="utf-8")
    if too_big:
        raise SystemExit(f"snapshot files over {args.max_file_mib} MiB: {too_big}")
    return leg


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("pack", help="compress a subset of a prepared corpus for the leg")
    p.add_argument("corpus", type=Path)
    p.add_argument("dest", type=Path)
    p.add_argument("--max-mb", type=float, default=40.0)
    p.add_argument("--valid-sentences", type=int, default=2000)
    r = sub.add_parser("run", help="train the leg and write the snapshot")
    r.add_argument("data", type=Path, help="a folder written by `pack`")
    r.add_argument("--init", type=Path, required=True, help="the model the leg continues (the shipped default's folder)")
    r.add_argument("--run", type=Path, required=True, help="run folder (checkpoints; resumable)")
    r.add_argument("--out", type=Path, required=True, help="where the snapshot goes")
    r.add_argument("--config", type=Path, required=True)
    r.add_argument("--max-minutes", type=float, default=None)
    r.add_argument("--max-steps", type=int, default=None)
    r.add_argument("--max-tokens", type=int, default=None)
    r.add_argument("--n-samples", type=int, default=None)
    r.add_argument("--max-file-mib", type=float, default=16.0)
    args = ap.parse_args(argv)
    if args.command == "pack":
        print(json.dumps(pack(args.corpus, args.dest, args.max_mb, args.valid_sentences)))
    else:
        leg = run(args)
        print(json.dumps({k: leg[k] for k in ("device", "seconds", "files")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
