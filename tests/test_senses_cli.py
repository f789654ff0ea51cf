"""The wic, wsd, index and neighbours commands (spacy_elmo.cli.senses) on small inputs."""
from __future__ import annotations

import pytest
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


def test_user_errors(tmp_path):
    for args, message in (
        (["wic", "--data", str(tmp_path / "nowhere")], "WiC data not found"),
        (["wsd", "--data", str(tmp_path / "nowhere")], "WSD (Raganato framework + SemCor) data not found"),
        (["index", str(tmp_path / "missing.txt"), "--out", str(tmp_path / "idx")], "text file not found"),
        (["neighbours", str(tmp_path), "a play", "--word", "play"], "not a token index folder"),
    ):
        result = runner.invoke(app, args)
        assert result.exit_code == 2 and message in result.output, (args, result.output)
