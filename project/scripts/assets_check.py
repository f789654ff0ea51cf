#!/usr/bin/env python3
"""Offline help for the project's assets: which files are missing, where each one comes from and
where to place it, and whether the placed ones are the pinned files.

    python scripts/assets_check.py                      # from project/ (or: spacy project run assets-check project/)
    python scripts/assets_check.py --tsv missing.tsv    # the missing files as a table (dest, url, size, md5)

For each asset of project.yml it prints, when the file is absent, its path (relative to the project
folder), URL, size and MD5 (spaCy's checksum); when it is present, it checks the MD5 against the
pinned one. Sizes come from ``assets/manifests/asset_sizes.tsv`` (measured on the pinned files);
files without a pinned checksum (Project Gutenberg's unversioned books, the two zip packages) are
reported as present, and are checked later by ``convert-corpora`` and ``unpack-assets``. Exit
status 0 when every asset is present and matches, 1 otherwise. ``record-sizes DIR`` measures the
pinned files found below DIR (by name, ``.gz`` copies decompressed) into the sizes table.
"""
from __future__ import annotations

import argparse
import csv
import gzip
import hashlib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Optional

PROJECT = Path(__file__).resolve().parent.parent
SIZES = Path("assets") / "manifests" / "asset_sizes.tsv"


@dataclass
class Asset:
    dest: str
    url: str
    md5: Optional[str]
    size: Optional[int]


def load_assets(project: Path) -> List[Asset]:
    """The URL assets of ``project``'s project.yml (variables resolved), with their recorded sizes."""
    from weasel.util import load_project_config

    config = load_project_config(project)
    sizes = read_sizes(project / SIZES)
    return [
        Asset(a["dest"], a["url"], a.get("checksum"), sizes.get(a["dest"]))
        for a in config.get("assets", [])
        if a.get("url")
    ]


def read_sizes(path: Path) -> Dict[str, int]:
    if not path.is_file():
        return {}
    with path.open(encoding="utf-8", newline="") as handle:
        return {row["dest"]: int(row["size"]) for row in csv.DictReader(handle, delimiter="\t")}


def md5(path: Path) -> str:
    """The MD5 of the file's bytes as stored (a .gz is not decompressed): what `spacy project assets` checks."""
    digest = hashlib.md5()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def human(size: Optional[int]) -> str:
    if size is None:
        return "size not recorded"
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{size:,} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000  # type: ignore[assignment]
    return ""  # unreachable


def check(project: Path, assets: Iterable[Asset], tsv: Optional[Path] = None) -> int:
    """Print the missing and the mismatching assets; 0 when all are present and match."""
    missing: List[Asset] = []
    differ: List[str] = []
    unpinned = matched = 0
    assets = list(assets)
    for asset in assets:
        path = project / asset.dest
        if not path.is_file():
            missing.append(asset)
        elif asset.md5 is None:
            unpinned += 1
        else:
            got = md5(path)
            if got == asset.md5:
                matched += 1
            else:
                differ.append(f"{asset.dest}: MD5 {got}, expected {asset.md5} (delete it and place the file from {asset.url})")
    if missing:
        total = sum(a.size or 0 for a in missing)
        print(f"{len(missing)} of {len(assets)} assets are missing ({human(total)} recorded). Place each file at its path below, "
              f"relative to {project.name}/ (or run `spacy project assets` with network access), then run this again:")
        for asset in missing:
            checksum = f"md5 {asset.md5}" if asset.md5 else "no checksum (checked after conversion)"
            print(f"  {asset.dest}\t{asset.url}\t{human(asset.size)}\t{checksum}")
    for line in differ:
        print(f"differs: {line}")
    print(f"present: {matched} match their MD5, {unpinned} without a pinned checksum, {len(differ)} differ; missing: {len(missing)}")
    if tsv is not None:
        with tsv.open("w", encoding="utf-8", newline="") as handle:
            writer = csv.writer(handle, delimiter="\t", lineterminator="\n")
            writer.writerow(["dest", "url", "size", "md5"])
            writer.writerows([a.dest, a.url, "" if a.size is None else a.size, a.md5 or ""] for a in missing)
    return 1 if missing or differ else 0


def record_sizes(project: Path, assets: Iterable[Asset], search: Path) -> int:
    """Write the sizes table from the pinned files found below ``search`` (MD5 must match)."""
    found: Dict[str, List[Path]] = {}
    for path in search.rglob("*"):
        if path.is_file():
            found.setdefault(path.name[:-3] if path.suffix == ".gz" else path.name, []).append(path)
    sizes = read_sizes(project / SIZES)
    for asset in assets:
        if asset.md5 is None:
            continue
        for candidate in found.get(Path(asset.dest).name, []):
            if md5(candidate) == asset.md5:
                opener = gzip.open if candidate.suffix == ".gz" else open
                with opener(candidate, "rb") as handle:
                    sizes[asset.dest] = sum(len(block) for block in iter(lambda: handle.read(1 << 20), b""))
                break
    out = project / SIZES
    with out.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.writer(handle, delimiter="\t", lineterminator="\n")
        writer.writerow(["dest", "size"])
        writer.writerows(sorted(sizes.items()))
    print(f"{len(sizes)} sizes in {out}")
    return 0


def main(argv: Optional[List[str]] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--project", type=Path, default=PROJECT, help="the project folder (default: this script's)")
    ap.add_argument("--tsv", type=Path, help="also write the missing assets as a table")
    ap.add_argument("--record-sizes", type=Path, metavar="DIR", help="measure the pinned files found below DIR into the sizes table")
    args = ap.parse_args(argv)
    assets = load_assets(args.project)
    if args.record_sizes is not None:
        return record_sizes(args.project, assets, args.record_sizes)
    return check(args.project, assets, args.tsv)


if __name__ == "__main__":
    sys.exit(main())
