"""The training commands' glibc heap tuning: on by default for training, switchable, a no-op off
glibc, and never reached by importing the package or running inference."""

import gzip
import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spacy_elmo.cli import app
from spacy_elmo.training import TrainConfig, allocator, prepare_corpus, train

REPO = Path(__file__).resolve().parents[1]


class FakeMallopt:
    """Records the calls that would reach glibc's mallopt."""

    def __init__(self) -> None:
        self.calls = []

    def __call__(self, parameter: int, value: int) -> int:
        self.calls.append((parameter, value))
        return 1


@pytest.fixture()
def mallopt(monkeypatch):
    fake = FakeMallopt()
    monkeypatch.setattr(allocator, "_mallopt", lambda: fake)
    monkeypatch.setattr(allocator, "_applied", False)
    monkeypatch.delenv(allocator.ENV_VAR, raising=False)
    return fake


def test_tuning_sets_mmap_max_and_trim_threshold_once(mallopt):
    assert allocator.tune_allocator() is True
    assert mallopt.calls == [(allocator.M_MMAP_MAX, 0), (allocator.M_TRIM_THRESHOLD, allocator.TRIM_THRESHOLD)]
    assert allocator.tune_allocator() is True  # already in force: no second call
    assert len(mallopt.calls) == 2


@pytest.mark.parametrize("value", ["0", "false", "OFF", " no "])
def test_environment_variable_switches_it_off(mallopt, monkeypatch, value):
    monkeypatch.setenv(allocator.ENV_VAR, value)
    assert allocator.tune_allocator(True) is False
    assert mallopt.calls == []


def test_config_switches_it_off(mallopt):
    assert allocator.tune_allocator(False) is False
    assert mallopt.calls == []


def test_not_glibc_is_a_no_op_with_a_debug_note(monkeypatch, caplog):
    monkeypatch.setattr(allocator, "_applied", False)
    monkeypatch.delenv(allocator.ENV_VAR, raising=False)
    monkeypatch.setattr(allocator.platform, "libc_ver", lambda: ("", ""))
    with caplog.at_level(logging.DEBUG, logger=allocator.__name__):
        assert allocator.tune_allocator() is False
    assert "not glibc" in caplog.text


def test_a_refused_setting_reports_not_applied(monkeypatch):
    monkeypatch.setattr(allocator, "_applied", False)
    monkeypatch.delenv(allocator.ENV_VAR, raising=False)
    monkeypatch.setattr(allocator, "_mallopt", lambda: (lambda parameter, value: 0))
    assert allocator.tune_allocator() is False


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_real_mallopt_is_found_on_glibc():
    import platform

    if platform.libc_ver()[0] != "glibc":
        pytest.skip("not glibc")
    assert allocator._mallopt() is not None


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("alloc")
    text = root / "text"
    text.mkdir()
    lines = [f"The {a} dog sees the {b} cat." for a in ("old", "small", "dark") for b in ("red", "big", "quiet")] * 20
    (text / "a.txt").write_text("\n\n".join(lines) + "\n", encoding="utf-8")
    with gzip.open(text / "b.txt.gz", "wt", encoding="utf-8") as handle:
        handle.write("\n\n".join(lines))
    prepare_corpus([text], root / "prep", held_out=0.1)
    return root / "prep"


def tiny(data_dir, out_dir, **kw):
    values = dict(
        data_dir=str(data_dir), out_dir=str(out_dir), lstm_dim=16, projection_dim=8, char_dim=4, filters=[[1, 8], [2, 8]],
        n_highway=1, max_steps=2, warmup_steps=1, max_tokens=256, eval_every=1000, eval_sentences=10, checkpoint_every=1000, threads=1,
    )
    values.update(kw)
    return TrainConfig(**values)


@pytest.mark.parametrize("setting, env, expected", [(True, None, True), (False, None, False), (True, "0", False)])
def test_train_applies_it_unless_switched_off(corpus, tmp_path, mallopt, monkeypatch, setting, env, expected):
    if env is not None:
        monkeypatch.setenv(allocator.ENV_VAR, env)
    train(tiny(corpus, tmp_path / "run", malloc_tuning=setting))
    assert bool(mallopt.calls) is expected


def test_the_cli_option_reaches_the_config(corpus, tmp_path, monkeypatch):
    seen = []
    monkeypatch.setattr("spacy_elmo.training.trainer.train", lambda config, **kw: seen.append(config.malloc_tuning) or {"step": 0})
    runner = CliRunner()
    for flag, expected in (([], True), (["--no-malloc-tuning"], False), (["--malloc-tuning"], True)):
        result = runner.invoke(app, ["pretrain", str(corpus), str(tmp_path / "out"), "--max-steps", "1", *flag])
        assert result.exit_code == 0, result.output
        assert seen[-1] is expected


def test_resume_may_change_the_setting(corpus, tmp_path, mallopt):
    out = tmp_path / "run"
    assert train(tiny(corpus, out, max_steps=3, checkpoint_every=1), interrupt_at=1)["interrupted"]
    result = train(tiny(corpus, out, max_steps=3, checkpoint_every=1, malloc_tuning=False), resume=True)
    assert result["step"] == 3


INFERENCE = """
import ctypes, json, sys
calls = []
lookup = ctypes.CDLL.__getattr__
def spy(self, name):  # every ctypes path to mallopt looks the function up on a CDLL first
    if name == "mallopt":
        calls.append(name)
    return lookup(self, name)
ctypes.CDLL.__getattr__ = spy
import spacy, spacy_elmo, spacy_elmo.cli, spacy_elmo.pipeline, spacy_elmo.senses, spacy_elmo.training
from spacy_elmo import load_bilm
from spacy_elmo.training import allocator
bilm = load_bilm(sys.argv[1])
for precision in ("float32", "bfloat16"):
    bilm.set_inference_precision(precision)
    bilm.embed_batch([["A", "small", "test", "."], ["Another", "one"]])
nlp = spacy.blank("en")
nlp.add_pipe("elmo", config={"weights": sys.argv[1]})
doc = nlp("Inference only: no heap tuning here.")
allocator._mallopt()  # the spy sees a lookup: the check itself works
print(json.dumps({"calls": calls, "applied": allocator._applied, "tokens": len(doc)}))
"""


def test_importing_and_inference_never_tune_the_heap():
    from .conftest import ALLENNLP

    out = subprocess.run([sys.executable, "-c", INFERENCE, str(ALLENNLP)], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["calls"] == ["mallopt"]  # the one lookup the script makes itself, at the end
    assert result["applied"] is False and result["tokens"] > 0
