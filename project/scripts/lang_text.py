#!/usr/bin/env python3
"""A language's running text as an input folder for ``prepare``: the three split files and a manifest.

    python scripts/lang_text.py SOURCE OUT_DIR

``SOURCE`` holds ``train.txt.gz``, ``valid.txt.gz`` and ``test.txt.gz`` (or the same names without
``.gz``), one paragraph per line. ``OUT_DIR`` gets a symbolic link to each (a copy where the file
system refuses links) and ``manifest.tsv`` (``file`` and ``split`` columns), so ``prepare`` keeps
the source's own splits instead of holding out a share of the training text. Re-running replaces
the links and the manifest; any other file in ``OUT_DIR`` is an error, so nothing is overwritten
silently.
"""

from __future__ import annotations

import argparse
import csv
import os
import shutil
import sys
from pathlib import Path
from typing import List, Optional, Tuple

SPLITS = ("train", "valid", "test")


def split_files(source: Path) -> List[Tuple[Path, str]]:
    """(file, split) for each split of ``source``; one line naming what is missing otherwise."""
    if not source.is_dir():
        raise SystemExit(f"{source}: not a folder (expected train.txt.gz, valid.txt.gz and test.txt.gz in it)")
    found, missing = [], []
    for split in SPLITS:
        path = next((source / name for name in (f"{split}.txt.gz", f"{split}.txt") if (source / name).is_file()), None)
        if path is None:
            missing.append(f"{split}.txt.gz")
        else:
            found.append((path, split))
    if missing:
        raise SystemExit(f"{source}: missing {', '.join(missing)} (one paragraph per line, one file per split)")
    return found


def link_or_copy(path: Path, target: Path) -> str:
    """A symbolic link at ``target`` to ``path`` (absolute), or a copy; returns which."""
    if target.is_symlink() or target.exists():
        target.unlink()
    try:
        os.symlink(path.resolve(), target)
        return "link"
    except OSError:
        shutil.copyfile(path, target)
        return "copy"


def write_input(source: Path, out: Path) -> List[Tuple[str, str, str]]:
    """Writes ``out`` (links and ``manifest.tsv``); returns (file, split, link or copy) per file."""
    files = split_files(source)
    names = {path.name for path, _ in files} | {"manifest.tsv"}
    if out.exists():
        strangers = sorted(p.name for p in out.iterdir() if p.name not in names)
        if strangers:
            raise SystemExit(f"{out} holds other files ({', '.join(strangers[:3])}): remove them or choose another folder")
    out.mkdir(parents=True, exist_ok=True)
    rows = [(path.name, split, link_or_copy(path, out / path.name)) for path, split in files]
    with (out / "manifest.tsv").open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh, delimiter="\t", lineterminator="\n")
        writer.writerow(["file", "split"])
        writer.writerows((name, split) for name, split, _ in rows)
    return rows


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("source", type=Path, help="folder with train.txt.gz, valid.txt.gz and test.txt.gz")
    ap.add_argument("out", type=Path, help="input folder to write for prepare")
    args = ap.parse_args(argv)
    for name, split, how in write_input(args.source, args.out):
        print(f"{split:>5}: {name} ({how})")
    print(f"wrote {args.out / 'manifest.tsv'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
