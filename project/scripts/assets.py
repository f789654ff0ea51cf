#!/usr/bin/env python3
"""The evaluation data: unpack the zip packages that ``spacy project assets`` fetched, and check a
data folder (the project's ``assets/data`` or a local copy in the same layout) file by file.

    python scripts/assets.py unpack assets/downloads assets/data   # WiC and the WSD framework zips
    python scripts/assets.py check assets/data [--only wic wsd ud wnut books craft]

``check`` compares every file (or its ``.gz`` copy, decompressed) with the SHA-256 below, the
files of the pinned releases named in project.yml, and the corpora (``books``, ``craft``) with the
SHA-256 in ``assets/manifests/``; it prints one line per dataset and exits 1 with one line naming
``spacy project assets`` when a file is missing, or naming the file that differs. Gutenberg books
that differ are counted, not refused: Project Gutenberg revises its files in place.
"""
from __future__ import annotations

import argparse
import csv
import gzip
import hashlib
import shutil
import sys
import zipfile
from pathlib import Path
from typing import Dict, Iterable, Optional

# dataset -> file (relative to its folder) -> SHA-256 of the uncompressed file
EXPECTED: Dict[str, Dict[str, Optional[str]]] = {
    "ud": {
        "ud_english_ewt/en_ewt-ud-train.conllu": "3fb78e2b55482c8ee00caa653af436c88c9e5bc9a73ce26e4ae3ddc79d2b7e7b",
        "ud_english_ewt/en_ewt-ud-dev.conllu": "531a54ff90d6ab12201c5a50c3e78e6ddac4de69abc4bce5d275d3cd29efe2b6",
        "ud_english_ewt/en_ewt-ud-test.conllu": "e266e515a0a7547657ed3d90d9ba46487d6bd251f27ad4269d4e8a427c8555cd",
    },
    "wnut": {
        "wnut17_ner/wnut17train.conll": "731820e13f71af324c6b55a1575ec2ce59fbaa2a0806f8f0400b98d56cd6a7a5",
        "wnut17_ner/emerging.dev.conll": "e053b752b8155113ca66e7db08af5f2f5f43ab993694e4774f1ec5bad42312d8",
        "wnut17_ner/emerging.test.annotated": "2aa79b764e56ec9264a1b30fdd9b70195bd00ff400b62edd8f399d5f13c178f0",
    },
    "wic": {
        "wic/train.data.txt": "3a56ff8285ca9703d6c91dfb7cc79760171899c560bb6a8698fa4559a71b160d",
        "wic/train.gold.txt": "3f614ca12c03a90fecc34471d8ae666f924a3c657b5620fcfb46d9b2b50bb7b2",
        "wic/dev.data.txt": "1c360246ffa3904fc1d8f6f16bb7ae0d7980a1a27e9200e9b43c32fd35af11e7",
        "wic/dev.gold.txt": "665ee959c2cf7db2a4255b7a049bdfa165b970482145cfd2ac456007d4dcf1d6",
        "wic/test.data.txt": "28befe601f5bdbc8e452e9538f6d3582a164647ad5949a9808a74908e70031f7",
        "wic/test.gold.txt": "a69386c579762d9ddf988a61896a2e912f402410185f5e8316007093799b341f",
    },
    "wsd": {
        "wsd_raganato/Evaluation_Datasets/ALL/ALL.data.xml": "27a9da01b6d4a1e4dc7c76d15148a38eaa56cc0df371cae4416d04e541b6fe36",
        "wsd_raganato/Evaluation_Datasets/ALL/ALL.gold.key.txt": "0bf2ffc38f572587c72b59ea928da676423b99b5a54bd1a83eb4848b517d3170",
        "wsd_raganato/Evaluation_Datasets/semeval2007/semeval2007.data.xml": "ff0cb1350acf7d0bf09f05b18c537870c8205f12daa2510099674a227c149f38",
        "wsd_raganato/Evaluation_Datasets/semeval2007/semeval2007.gold.key.txt": "06dce0b5892bb5c625ebfd8755d1a31a5a04df6882709aa29c1dcd44befb3b41",
        "wsd_raganato/Evaluation_Datasets/semeval2013/semeval2013.data.xml": "58682da53cdb24e7563f9a77bc357616eee6863399c2be62f8927c9d5eb20245",
        "wsd_raganato/Evaluation_Datasets/semeval2013/semeval2013.gold.key.txt": "3dcedb0b9bed2906c3651d089236801c5353198ba6eda0575f864e3d18ee81cc",
        "wsd_raganato/Evaluation_Datasets/semeval2015/semeval2015.data.xml": "e0804170a39fac9d0da6c707b0b974d493a385743557a40626abf36609372650",
        "wsd_raganato/Evaluation_Datasets/semeval2015/semeval2015.gold.key.txt": "3a15c65607f27efb3846a71a303b21d0916b5bb527348bf27f526d6770301eaf",
        "wsd_raganato/Evaluation_Datasets/senseval2/senseval2.data.xml": "5f5fe6a74fdd4ee85ca271c49a3b88131e4a7ba04a11a1392c1333efcbfe9be9",
        "wsd_raganato/Evaluation_Datasets/senseval2/senseval2.gold.key.txt": "1e1c43116dadc796763c59f66cc61aa204cfb1886e5825836a96cf9b96a056e8",
        "wsd_raganato/Evaluation_Datasets/senseval3/senseval3.data.xml": "ecd472808c5f3873b0e90fda6182519e5ed6081929435a67eb7f2c5a8fd36839",
        "wsd_raganato/Evaluation_Datasets/senseval3/senseval3.gold.key.txt": "1faa09ca47a9c4627c0c1078dfc30e39c16d6ce728a532cc670007fbca0be70e",
        # SemCor: present, not pinned (the framework's file and a converted copy both work; they differ)
        "wsd_raganato/Training_Corpora/SemCor/semcor.data.xml": None,
        "wsd_raganato/Training_Corpora/SemCor/semcor.gold.key.txt": None,
    },
}
# the corpora of the `full` workflow: dataset -> (folder, manifest in assets/manifests, differences refused)
MANIFESTS = Path(__file__).resolve().parent.parent / "assets" / "manifests"
CORPORA = {"books": ("gutenberg_en_books", True), "craft": ("craft_biomed_fulltext", False)}
WIC_ZIP_SHA256 = "f1a2fb67d903c5b9b1180f1035d4228f7c0254e8f5f868d556235457046bd4b2"
FETCH = "run `spacy project assets project/` then `spacy project run unpack-assets project/`, or pass --vars.data_root PATH"


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _corpus_files(folder: str) -> Dict[str, Optional[str]]:
    with open(MANIFESTS / f"{folder}.tsv", encoding="utf-8", newline="") as handle:
        rows = list(csv.DictReader(handle, delimiter="\t"))
    files = {f"{folder}/{row['file']}": row["sha256"] for row in rows}
    files.update({f"{folder}/{row['copyright_file']}": row["copyright_sha256"] for row in rows if row.get("copyright_file")})
    return files


def check_corpus(root: Path, dataset: str) -> int:
    """Check one corpus folder of ``root`` against its manifest; Gutenberg differences are reported only."""
    folder, lenient = CORPORA[dataset]
    files = _corpus_files(folder)
    differ = []
    for name, expected in files.items():
        path = root / name
        if not path.is_file():
            print(f"{dataset}: {path} is missing; run `spacy project assets project/` then `spacy project run convert-corpora project/`, or pass --vars.data_root PATH", file=sys.stderr)
            return 1
        if sha256(path) != expected:
            if not lenient:
                print(f"{dataset}: {path} differs from the pinned commit (SHA-256); fetch it again", file=sys.stderr)
                return 1
            differ.append(Path(name).name)
    note = f"; {len(differ)} differ from the text our figures used (revised by Project Gutenberg: {' '.join(differ)})" if differ else ""
    print(f"{dataset}: {len(files)} files OK in {root / folder}{note}")
    return 0


def check(root: Path, only: Iterable[str]) -> int:
    for dataset in only:
        if dataset in CORPORA:
            if check_corpus(root, dataset):
                return 1
            continue
        for name, expected in EXPECTED[dataset].items():
            path = root / name
            if not path.is_file() and (root / (name + ".gz")).is_file():
                path = root / (name + ".gz")
            if not path.is_file():
                print(f"{dataset}: {root / name} is missing; {FETCH}", file=sys.stderr)
                return 1
            if expected is not None and sha256(path) != expected:
                print(f"{dataset}: {path} differs from the pinned release (SHA-256); fetch it again", file=sys.stderr)
                return 1
        print(f"{dataset}: {len(EXPECTED[dataset])} files OK in {root}")
    return 0


def unpack(downloads: Path, root: Path) -> int:
    wic_zip, wsd_zip = downloads / "WiC_dataset.zip", downloads / "WSD_Evaluation_Framework.zip"
    for path in (wic_zip, wsd_zip):
        if not path.is_file():
            print(f"{path} is missing; {FETCH}", file=sys.stderr)
            return 1
    if sha256(wic_zip) != WIC_ZIP_SHA256:
        print(f"{wic_zip} is not the pinned WiC release (SHA-256 differs); delete it and fetch again", file=sys.stderr)
        return 1
    with zipfile.ZipFile(wic_zip) as archive:  # train/train.data.txt, ... -> wic/train.data.txt
        for member in archive.namelist():
            name = Path(member).name
            if name.endswith(".txt"):
                _extract(archive, member, root / "wic" / name)
    with zipfile.ZipFile(wsd_zip) as archive:  # WSD_Evaluation_Framework/{Evaluation_Datasets,Training_Corpora/SemCor}/...
        for member in archive.namelist():
            parts = Path(member).parts
            if len(parts) > 2 and not member.endswith("/") and (parts[1] == "Evaluation_Datasets" or parts[1:3] == ("Training_Corpora", "SemCor")):
                if member.endswith((".xml", ".txt")) or parts[-1] == "README":
                    _extract(archive, member, root / "wsd_raganato" / Path(*parts[1:]))
    print(f"unpacked WiC and the WSD framework into {root} (WSD framework zip SHA-256 {sha256(wsd_zip)})")
    return check(root, ["wic", "wsd"])


def _extract(archive: zipfile.ZipFile, member: str, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(dest.name + ".tmp")
    with archive.open(member) as src, open(tmp, "wb") as out:
        shutil.copyfileobj(src, out)
    tmp.replace(dest)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("unpack")
    p.add_argument("downloads", type=Path)
    p.add_argument("root", type=Path)
    p = sub.add_parser("check")
    p.add_argument("root", type=Path)
    p.add_argument("--only", nargs="+", choices=sorted(EXPECTED) + sorted(CORPORA), default=sorted(EXPECTED) + sorted(CORPORA))
    args = parser.parse_args()
    sys.exit(unpack(args.downloads, args.root) if args.command == "unpack" else check(args.root, args.only))


if __name__ == "__main__":
    main()
