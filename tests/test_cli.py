"""The command line: spaCy's conventions (help and defaults everywhere), one-line user errors."""
import io
import subprocess
import sys

import pytest
import typer

from spacy_elmo.cli import app, main
from spacy_elmo.progress import LineProgress, progress_class

from .conftest import ALLENNLP

COMMANDS = ["embed", "convert", "export", "prepare", "pretrain", "finetune", "evaluate", "package", "snapshot", "ship", "average", "refit-bias", "widen", "mixes", "embed-corpus", "wic", "wsd", "sense-probe", "index", "neighbours", "induce", "wsi-eval", "explore", "change", "change-eval", "download", "models", "random-weights"]


def run(capsys, *argv):
    code = main(list(map(str, argv)))
    out, err = capsys.readouterr()
    return code, out, err


def test_every_command_is_there_and_every_option_has_help_and_shows_its_default():
    group = typer.main.get_command(app)
    assert sorted(group.commands) == sorted(COMMANDS)
    for name, command in group.commands.items():
        assert command.help, name
        for param in command.params:
            if getattr(param, "hidden", False) or param.name == "help":
                continue
            assert param.help, f"{name} {param.name} has no help text"
            assert param.show_default, f"{name} {param.name} does not show its default"
            if not param.required and (param.default is None or param.default is False):  # typer prints none for these
                assert "default" in param.help.lower(), f"{name} {param.name}: say its default in the help text"


@pytest.mark.parametrize("name", COMMANDS)
def test_help_shows_defaults(capsys, name):
    code, out, _ = run(capsys, name, "--help")
    assert code == 0 and "Usage:" in out
    if name in ("embed", "prepare", "evaluate", "package"):
        assert "[default:" in out


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["embed", "Hi.", "--mix", "bogus"], "is not a mix"),
        (["embed", "Hi.", "--mix", "layer:7"], "layer:0 to layer:2"),
        (["embed", "Hi.", "--mix", "1,2"], "3 comma-separated weights"),
        (["embed", "Hi.", "--mix", "layer:x"], "whole number"),
        (["embed", "Hi.", "--weights", "no/such/model"], "not found"),
        (["embed", "Hi.", "--weights", str(ALLENNLP.parent)], "neither config.json (spacy-elmo format) nor options.json"),
        (["embed", "Hi.", "--threads", "-1"], "--threads"),
        (["evaluate", str(ALLENNLP), "."], "has no softmax"),
        (["evaluate", "en_default", "no/such/corpus"], "prepare"),
        (["finetune", "en_default", "no/such/corpus", "out"], "prepare"),
        (["convert", "no/options.json", "no/weights.hdf5", "out"], "not found"),
        (["prepare", "no/such/text", "--out-dir", "out"], "not found"),
        (["export", "no/such/model", "out"], "not found"),
        (["snapshot", "no/such/run", "out"], "not a training run folder"),
        (["evaluate"], "Missing argument"),
        (["no-such-command"], "No such command"),
        (["embed", "Hi.", "--threads", "many"], "--threads"),
        (["embed", "Hi.", "--precision", "int4"], "precision must be one of"),
    ],
)
def test_user_errors_are_one_line_and_exit_2(capsys, argv, expected):
    code, out, err = run(capsys, *argv)
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], err
    assert "Traceback" not in out + err


def test_package_refuses_to_overwrite_without_force(capsys, tmp_path):
    target = tmp_path / "pipeline"
    target.mkdir()
    (target / "keep.txt").write_text("mine")
    code, _, err = run(capsys, "package", "en_default", target)
    assert code == 2 and "--force" in err and (target / "keep.txt").is_file()
    code, out, err = run(capsys, "package", "en_default", target, "--force")
    assert code == 0, err
    assert not (target / "keep.txt").exists() and (target / "config.cfg").is_file()
    assert "spacy.load()" in out


def test_embed_with_the_default_model(capsys, tmp_path):
    code, out, err = run(capsys, "embed", "The bank lends money. The bank of the river.", "--mix", "top", "-o", tmp_path / "v.npz")
    assert code == 0, err
    assert "cos(with token" in out and (tmp_path / "v.npz").is_file()


def test_embed_in_int8_writes_vectors_near_float32(capsys, tmp_path):
    from spacy_elmo.kernels import cpu

    if cpu.int8_path() is None:
        pytest.skip("this CPU has no int8 product path (needs AVX2)")
    import numpy as np

    text = "The bank lends money. The bank of the river."
    for precision in ("float32", "int8"):
        code, _, err = run(capsys, "embed", text, "--precision", precision, "-o", tmp_path / f"{precision}.npz")
        assert code == 0, err
    a, b = (np.load(tmp_path / f"{p}.npz")["vectors"] for p in ("float32", "int8"))
    cos = (a * b).sum(-1) / (np.linalg.norm(a, axis=-1) * np.linalg.norm(b, axis=-1))
    assert not np.array_equal(a, b) and cos.min() > 0.998


def test_python_m_and_spacy_elmo_entry_points():
    for cmd in ([sys.executable, "-m", "spacy_elmo", "--help"], [sys.executable, "-m", "spacy", "elmo", "--help"]):
        result = subprocess.run(cmd, capture_output=True, text=True)
        assert result.returncode == 0, result.stderr
        assert "finetune" in result.stdout and "package" in result.stdout
    bad = subprocess.run([sys.executable, "-m", "spacy_elmo", "evaluate", "no/such/model", "x"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "not found" in bad.stderr


def test_progress_in_logs_is_periodic_lines():
    stream = io.StringIO()
    assert progress_class(stream) is LineProgress  # not a terminal
    bar = LineProgress(total=400, desc="train", unit="step", file=stream, every=0)
    for _ in range(3):
        bar.update(1)
    bar.set_postfix(loss="5.000")
    bar.close()
    lines = stream.getvalue().splitlines()
    assert len(lines) == 4 and "\r" not in stream.getvalue()
    assert lines[-1].startswith("train: 3/400 steps (1%)") and "loss=5.000" in lines[-1]
    quiet = io.StringIO()
    bar = LineProgress(range(1000), desc="prepare", file=quiet, every=3600)
    assert sum(1 for _ in bar) == 1000
    assert quiet.getvalue().count("\n") == 1  # only the closing line
