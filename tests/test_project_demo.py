"""The spaCy project's `all` workflow, the demo a newcomer runs first, end to end on the bundled
samples: the biLM it pretrains from scratch beats the unigram baseline on the general test text,
fine-tuning lowers the in-domain perplexity without falling below that baseline on general text,
and the packaged pipeline loads. Runs the workflow's own commands (`spacy project run all`), so a
change to project.yml or to the tiny configs that stops the model from learning fails here."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import spacy

REPO = Path(__file__).resolve().parent.parent
PROJECT = REPO / "project"


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> Path:
    """A copy of the project (the bundled samples only) after `spacy project run all`."""
    root = tmp_path_factory.mktemp("demo") / "project"
    root.mkdir()
    shutil.copy(PROJECT / "project.yml", root)
    for folder in ("configs", "scripts", "assets/general_sample", "assets/domain_sample"):
        shutil.copytree(PROJECT / folder, root / folder)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    run = subprocess.run(
        [sys.executable, "-m", "spacy", "project", "run", "all", str(root)], capture_output=True, text=True, env=env, timeout=1800
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    return root


def _metrics(demo: Path, name: str) -> dict:
    return json.loads((demo / "metrics" / f"tiny-{name}.json").read_text())


@pytest.mark.slow
def test_the_pretrained_biLM_clearly_beats_the_unigram_baseline(demo):
    general = _metrics(demo, "general-test")
    assert general["tokens"] > 50_000  # the whole test book (3,000 sentences), not a handful
    assert general["ppl_avg"] < 0.5 * general["unigram_ppl"], general  # 0.43 at lr 0.01; 0.56 at the old lr 0.003
    assert max(general["ppl_fwd"], general["ppl_bwd"]) < general["unigram_ppl"], general
    curve = [json.loads(line) for line in (demo / "training" / "tiny-general" / "metrics.jsonl").read_text().splitlines()]
    valid = [r["valid_ppl_avg"] for r in curve if "valid_ppl_avg" in r]
    assert valid == sorted(valid, reverse=True) and len(valid) >= 2  # still improving at every evaluation


@pytest.mark.slow
def test_fine_tuning_adapts_to_the_domain_and_still_beats_the_baseline_on_general_text(demo):
    before, after = _metrics(demo, "domain-before"), _metrics(demo, "domain-after")
    assert before["tokens"] == after["tokens"] and after["ppl_avg"] < 0.9 * before["ppl_avg"], (before, after)
    assert after["ppl_avg"] < after["unigram_ppl"], after
    general_before, general_after = _metrics(demo, "general-test"), _metrics(demo, "general-after")
    assert general_after["ppl_avg"] < general_after["unigram_ppl"], (general_before, general_after)


@pytest.mark.slow
def test_the_report_and_the_package(demo):
    report = (demo / "metrics" / "tiny-report.md").read_text()
    general = _metrics(demo, "general-test")
    assert f"| pretrained biLM | general test | {general['ppl_fwd']:.1f} | {general['ppl_bwd']:.1f} | {general['ppl_avg']:.1f} | {general['unigram_ppl']:.1f} |" in report
    nlp = spacy.load(demo / "packages" / "tiny-elmo-domain")
    doc = nlp("The protein binds the receptor.")
    assert doc.tensor.shape[0] == len(doc) and doc.tensor.any()
