"""The spaCy project's data: asset definitions that validate and are pinned, no default reading
outside the clone, one-line errors when the data is missing, and the checks run against a local
copy when one is present (``../shared/data`` beside the repository, or ``SPACY_ELMO_DATA_COPY``)."""
from __future__ import annotations

import hashlib
import gzip
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from weasel.util import load_project_config

from spacy_elmo.cli import main

REPO = Path(__file__).resolve().parent.parent
PROJECT = REPO / "project"
LOCAL_COPY = Path(os.environ.get("SPACY_ELMO_DATA_COPY", REPO.parent / "shared" / "data"))
needs_copy = pytest.mark.skipif(not LOCAL_COPY.is_dir(), reason=f"no local copy of the evaluation data at {LOCAL_COPY} (set SPACY_ELMO_DATA_COPY)")


@pytest.fixture(scope="module")
def config():
    return load_project_config(PROJECT)  # validates project.yml against weasel's schema


def test_assets_are_pinned_with_checksums_and_licences(config):
    assets = config["assets"]
    datasets = {Path(a["dest"]).parts[2] if a["dest"].startswith("assets/data/") else Path(a["dest"]).name for a in assets}
    assert {"ud_english_ewt", "wnut17_ner", "WiC_dataset.zip", "WSD_Evaluation_Framework.zip"} <= datasets
    for asset in assets:
        assert asset["dest"].startswith("assets/"), asset["dest"]
        url = asset["url"]
        pinned = re.search(r"/[0-9a-f]{40}/", url) or "/r2.16/" in url or url.endswith(".zip")
        assert pinned, f"{url} is not pinned to a commit or a release"
        if not url.endswith(".zip"):  # zips are checked by unpack-assets (SHA-256)
            assert re.fullmatch(r"[0-9a-f]{32}", asset.get("checksum", "")), f"{asset['dest']} has no MD5 checksum"
        assert re.search(r"Licen[cs]e|Terms|licence", asset["description"]), f"{asset['dest']}: no licence note"


def test_no_default_reads_outside_the_clone(config):
    for name, value in config["vars"].items():
        text = str(value)
        assert not text.startswith("/") and "../.." not in text, f"var {name}={value} points outside the clone"
    for command in config["commands"]:
        for line in command.get("script", []):
            assert "../.." not in line and "shared/data" not in line, f"{command['name']}: {line}"


def test_evaluation_commands_without_data_name_spacy_project_assets(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for command in (["wic"], ["wsd"], ["wic", "--data", str(tmp_path / "nowhere")]):
        assert main(command) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and "spacy project assets" in err, err
    result = subprocess.run(
        [sys.executable, str(PROJECT / "scripts" / "downstream.py"), "prepare", "--ud", str(tmp_path / "ud")],
        capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=300,
    )
    assert result.returncode != 0 and result.stderr.strip().count("\n") == 0 and "spacy project assets" in result.stderr
    result = subprocess.run([sys.executable, str(PROJECT / "scripts" / "assets.py"), "check", str(tmp_path)], capture_output=True, text=True)
    assert result.returncode == 1 and "spacy project assets" in result.stderr


def _md5(path: Path) -> str:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rb") as handle:
        return hashlib.md5(handle.read()).hexdigest()


@needs_copy
def test_local_copy_matches_the_pinned_assets(config):
    """The MD5 in project.yml is that of the same file in the local copy (gzipped there or not)."""
    for asset in config["assets"]:
        if "checksum" not in asset:
            continue
        relative = Path(asset["dest"]).relative_to("assets/data")
        local = LOCAL_COPY / relative
        local = local if local.is_file() else local.with_name(local.name + ".gz")
        assert _md5(local) == asset["checksum"], relative


@needs_copy
def test_workflow_pieces_run_against_the_local_copy():
    """`spacy project run check-assets` with data_root pointed at the copy; then `wic`'s data check passes."""
    result = subprocess.run(
        [sys.executable, "-m", "spacy", "project", "run", "check-assets", str(PROJECT), "--vars.data_root", str(LOCAL_COPY)],
        capture_output=True, text=True, env=dict(os.environ, PYTHONPATH=str(REPO)), timeout=600,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    for dataset in ("ud", "wic", "wnut", "wsd"):
        assert f"{dataset}: " in result.stdout and "files OK" in result.stdout
    from spacy_elmo.assets import require_files

    require_files(LOCAL_COPY / "wic", ["train.data.txt", "test.gold.txt"], "WiC")
