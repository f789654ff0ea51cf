"""The wic, wsd, sense-probe, index and neighbours commands (spacy_elmo.cli.senses) on small inputs."""
from __future__ import annotations

import json

from typer.testing import CliRunner

from spacy_elmo.cli import app
from spacy_elmo.search.index import TokenIndex

runner = CliRunner()


def test_index_and_neighbours(tmp_path):
    text = tmp_path / "text.txt"
    text.write_text("The actors rehearsed the play for weeks.\n\nThe boys went out to play football.\n\nWe saw a new play at the theatre.\n")
    result = runner.invoke(app, ["index", str(text), "--out", str(tmp_path / "idx")])
    assert result.exit_code == 0, result.output
    assert len(TokenIndex.load(tmp_path / "idx")) == 25
    result = runner.invoke(app, ["neighbours", str(tmp_path / "idx"), "Olivia signed to do a Broadway play .", "--word", "play", "--k", "2"])
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 2 and all("\tplay\t" in line for line in lines)
    result = runner.invoke(app, ["neighbours", str(tmp_path / "idx"), "Olivia signed to do a Broadway play .", "--word", "play", "--k", "5", "--same-word"])
    assert result.exit_code == 0 and [line.split("\t")[1] for line in result.output.strip().splitlines()] == ["play"] * 3
    result = runner.invoke(app, ["neighbours", str(tmp_path / "idx"), "No such word here .", "--word", "play"])
    assert result.exit_code == 2 and "is not a token of the text" in result.output


def test_sense_probe(tmp_path):
    """The hand-written probe (24 words, two senses of six sentences each) with the embedded default:
    its contextual mixes separate senses better than chance; the context-free layer 0 is the same
    vector in every sentence (cosine 1 within and across senses)."""
    from spacy_elmo.evaluation.sense_probe import probe_senses

    senses = probe_senses()
    assert len(senses) == 24 and all(len(pair) == 2 and all(len(texts) == 6 for _, texts in pair) for pair in senses.values())
    result = runner.invoke(app, ["sense-probe", "--summary", "--output", str(tmp_path / "summary.json")])
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "summary.json").read_text(encoding="utf-8"))
    assert list(summary) == ["top", "average", "layer:1"] and "| top | 24 | 288 |" in result.output
    assert all(report["words"].keys() == senses.keys() and report["overall_accuracy"] > 0.6 for report in summary.values())
    result = runner.invoke(app, ["sense-probe", "--mix", "layer:0", "--output", str(tmp_path / "static.json")])
    assert result.exit_code == 0 and "**all 24 words**" in result.output, result.output
    words = json.loads((tmp_path / "static.json").read_text(encoding="utf-8"))["words"]
    assert all(abs(r["within_sense_cos"] - 1) < 1e-5 and abs(r["across_sense_cos"] - 1) < 1e-5 for r in words.values())


def test_user_errors(tmp_path):
    for args, message in (
        (["wic", "--data", str(tmp_path / "nowhere")], "WiC data not found"),
        (["wsd", "--data", str(tmp_path / "nowhere")], "WSD (Raganato framework + SemCor) data not found"),
        (["index", str(tmp_path / "missing.txt"), "--out", str(tmp_path / "idx")], "text file not found"),
        (["neighbours", str(tmp_path), "a play", "--word", "play"], "not a token index folder"),
        (["wic", "--precision", "int4"], "--precision must be one of float32, bfloat16, int8, got 'int4'"),
        (["wsd", "--precision", "fp16"], "--precision must be one of float32, bfloat16, int8, got 'fp16'"),
        (["sense-probe", "--precision", "double"], "--precision must be one of float32, bfloat16, int8, got 'double'"),
    ):
        result = runner.invoke(app, args)
        assert result.exit_code == 2 and message in result.output, (args, result.output)
