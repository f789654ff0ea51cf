#!/usr/bin/env python3
"""SemEval-2010 Task 14 (word sense induction): unpack the organisers' two archives into the layout
``spacy elmo wsi-eval`` reads, and check them against the files our figures were measured on.

    python scripts/wsi_data.py unpack assets/downloads assets/data/wsi_semeval2010
    python scripts/wsi_data.py check assets/data/wsi_semeval2010

The organisers' archives are not versioned (hence no checksum in project.yml): ``test_data.tar.gz``
holds ``test_data/{nouns,verbs}/*.xml``; ``evaluation.zip`` the scorers and keys, of which we keep
the gold key (``unsup_eval/keys/all.key``, saved as ``keys/gold.all.key``) and the baseline keys
found beside it (``keys/baselines/``). ``check`` compares the gold key's and the instances' MD5
with ours and exits 1 with one line naming what differs. Placing the same files by hand works too.
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
import tarfile
import zipfile
from pathlib import Path

GOLD_MD5 = "42671b2db6a8e45840d145f0a9b443c1"
TEST_DATA_MD5 = "2ef9ce43ebc5ce90a79fd6af5f4f36d3"  # weasel's checksum of the test_data folder
BASELINES = ("mfs_all.key", "1cl1inst.key", "random1.key")


def unpack(downloads: Path, out: Path) -> None:
    tar, zipped = downloads / "semeval2010_wsi_test_data.tar.gz", downloads / "semeval2010_wsi_evaluation.zip"
    for path in (tar, zipped):
        if not path.is_file():
            sys.exit(f"{path} is missing: run `spacy project assets project/` first (or place the SemEval-2010 files by hand, see docs/senses.md)")
    out.mkdir(parents=True, exist_ok=True)
    with tarfile.open(tar) as archive:
        archive.extractall(out, filter="data")
    with zipfile.ZipFile(zipped) as archive:
        names = archive.namelist()
        gold = [n for n in names if n.endswith("unsup_eval/keys/all.key")]
        if not gold:
            sys.exit(f"{zipped}: no unsup_eval/keys/all.key inside; is it the organisers' evaluation.zip?")
        (out / "keys" / "baselines").mkdir(parents=True, exist_ok=True)
        with archive.open(gold[0]) as src, open(out / "keys" / "gold.all.key", "wb") as dest:
            shutil.copyfileobj(src, dest)
        for name in names:
            if Path(name).name in BASELINES:
                with archive.open(name) as src, open(out / "keys" / "baselines" / Path(name).name, "wb") as dest:
                    shutil.copyfileobj(src, dest)
    check(out)


def check(folder: Path) -> None:
    from weasel.util import get_checksum

    gold = folder / "keys" / "gold.all.key"
    if not gold.is_file() or not (folder / "test_data").is_dir():
        sys.exit(f"{folder} lacks keys/gold.all.key or test_data/: unpack the archives or place the release there (docs/senses.md)")
    if hashlib.md5(gold.read_bytes()).hexdigest() != GOLD_MD5:
        sys.exit(f"{gold} differs from the gold key our figures used (MD5 {GOLD_MD5})")
    if get_checksum(folder / "test_data") != TEST_DATA_MD5:
        sys.exit(f"{folder / 'test_data'} differs from the instances our figures used (checksum {TEST_DATA_MD5})")
    found = [b for b in BASELINES if (folder / "keys" / "baselines" / b).is_file()]
    print(f"SemEval-2010 Task 14: gold key and test instances match ours; baseline keys: {', '.join(found) or 'none'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    u = sub.add_parser("unpack")
    u.add_argument("downloads", type=Path)
    u.add_argument("out", type=Path)
    c = sub.add_parser("check")
    c.add_argument("folder", type=Path)
    args = parser.parse_args()
    if args.command == "unpack":
        unpack(args.downloads, args.out)
    else:
        check(args.folder)


if __name__ == "__main__":
    main()
