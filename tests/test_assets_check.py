"""``spacy project run assets-check``: offline, every missing asset with its URL, size, checksum and
path, and the placed files checked against their MD5."""
from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

import assets_check  # project/scripts (conftest puts it on the path)

REPO = Path(__file__).resolve().parent.parent
PROJECT = REPO / "project"


def small_project(tmp_path: Path) -> Path:
    project = tmp_path / "proj"
    (project / "assets" / "manifests").mkdir(parents=True)
    good, other = b"first file\n", b"second file\n"
    (project / "project.yml").write_text(
        "title: t\nvars:\n  base: https://example.org/data\nassets:\n"
        f"  - dest: assets/data/a.txt\n    url: ${{vars.base}}/a.txt\n    checksum: {hashlib.md5(good).hexdigest()}\n"
        f"  - dest: assets/data/b.txt\n    url: ${{vars.base}}/b.txt\n    checksum: {hashlib.md5(other).hexdigest()}\n"
        "  - dest: assets/downloads/c.zip\n    url: https://example.org/c.zip\n    description: unversioned\n"
        "commands: []\n",
        encoding="utf-8",
    )
    (project / "assets" / "manifests" / "asset_sizes.tsv").write_text(f"dest\tsize\nassets/data/a.txt\t{len(good)}\n")
    return project


def run(project: Path, *args: str):
    return subprocess.run([sys.executable, str(PROJECT / "scripts" / "assets_check.py"), "--project", str(project), *args],
                          capture_output=True, text=True, timeout=120)


def test_missing_assets_are_listed_with_url_size_checksum_and_path(tmp_path):
    project = small_project(tmp_path)
    result = run(project, "--tsv", str(tmp_path / "missing.tsv"))
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert lines[0].startswith("3 of 3 assets are missing")
    first = lines[1].split("\t")
    assert first == ["  assets/data/a.txt", "https://example.org/data/a.txt", "11 B", f"md5 {hashlib.md5(b'first file' + bytes([10])).hexdigest()}"]
    assert "size not recorded" in lines[2] and "no checksum" in lines[3]
    assert (tmp_path / "missing.tsv").read_text().splitlines()[1].split("\t")[:3] == ["assets/data/a.txt", "https://example.org/data/a.txt", "11"]


def test_placed_files_are_checked(tmp_path):
    project = small_project(tmp_path)
    (project / "assets" / "data").mkdir(parents=True)
    (project / "assets" / "downloads").mkdir(parents=True)
    (project / "assets" / "data" / "a.txt").write_bytes(b"first file\n")
    (project / "assets" / "data" / "b.txt").write_bytes(b"not the pinned file\n")
    (project / "assets" / "downloads" / "c.zip").write_bytes(b"zip")
    result = run(project)
    assert result.returncode == 1
    assert "differs: assets/data/b.txt" in result.stdout and "https://example.org/data/b.txt" in result.stdout
    assert result.stdout.splitlines()[-1] == "present: 1 match their MD5, 1 without a pinned checksum, 1 differ; missing: 0"
    (project / "assets" / "data" / "b.txt").write_bytes(b"second file\n")
    result = run(project)
    assert result.returncode == 0, result.stdout
    assert result.stdout.splitlines()[-1] == "present: 2 match their MD5, 1 without a pinned checksum, 0 differ; missing: 0"


def test_every_pinned_asset_of_the_project_has_a_recorded_size():
    assets = assets_check.load_assets(PROJECT)
    assert len(assets) > 300
    assert [a.dest for a in assets if a.md5 and a.size is None] == []


def test_the_project_command_runs(tmp_path):
    copy = tmp_path / "project"
    shutil.copytree(PROJECT, copy, ignore=shutil.ignore_patterns("corpus", "training", "metrics", "packages", "data", "downloads"))
    result = subprocess.run([sys.executable, "-m", "spacy", "project", "run", "assets-check", str(copy)], capture_output=True, text=True, timeout=300)
    assert result.returncode == 1  # nothing downloaded in the copy
    assert "assets are missing" in result.stdout and "Traceback" not in result.stderr
    assert "assets/data/ud_english_ewt/en_ewt-ud-train.conllu\thttps://" in result.stdout


def test_a_gzipped_asset_is_checked_on_its_stored_bytes(tmp_path):
    # spaCy's own asset checksum is the MD5 of the file as stored: a .gz is not decompressed first
    import gzip

    path = tmp_path / "x.txt.gz"
    path.write_bytes(gzip.compress(b"some text\n", mtime=0))
    assert assets_check.md5(path) == hashlib.md5(path.read_bytes()).hexdigest()
    assert assets_check.md5(path) != hashlib.md5(b"some text\n").hexdigest()
