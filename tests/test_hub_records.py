"""hub/ looks a published model's name up once, where it enters, and passes the record down: a
record that is not in the registry downloads and loads, and no function below the entry points
is given the bare name (traced while the biLM and the LM head load from a loopback mirror)."""
from __future__ import annotations

import dataclasses
import shutil
import sys
from collections import Counter
from pathlib import Path

import pytest

from spacy_elmo.hub import download, published
from spacy_elmo.hub.lm_head import download_lm_head, head_dim, load_lm_head
from spacy_elmo.hub.load import load_bilm, read_config

from .conftest import ALLENNLP
from .loopback_http import LoopbackServer
from .random_head import write_random_head

SMALL = published.PUBLISHED["elmo-small"]
ORIGINAL = published.PUBLISHED["elmo-original"]
HUB = Path(published.__file__).parent
# where a name enters and is looked up: these may see it, nothing else in hub/ may
ENTRY_POINTS = {"load_bilm", "resolve_weights", "normalise_spec", "is_name", "named_model", "load_lm_head", "_locate_head", "read_config"}


@pytest.fixture()
def served(tmp_path, monkeypatch):
    """elmo-small's files (the fixture biLM) and elmo-original's head (random) on a loopback mirror."""
    root = tmp_path / "served"
    small = root / "allennlp" / SMALL.folder
    small.mkdir(parents=True)
    shutil.copy(ALLENNLP / "options.json", small / SMALL.options_name)
    shutil.copy(ALLENNLP / "lm_weights.hdf5", small / SMALL.weights_name)
    original = root / "allennlp" / ORIGINAL.folder
    write_random_head(original / ORIGINAL.lm_head[0], original / ORIGINAL.lm_head[1], 300, 512)
    server = LoopbackServer(root)
    monkeypatch.setenv(published.MIRROR_ENV, server.url + "allennlp")
    monkeypatch.setenv(published.CACHE_ENV, str(tmp_path / "cache"))
    yield server
    server.close()


def trace(call, name):
    """Run ``call``; return the hub functions below the entry points that were given ``name``, and
    how many calls entered hub/download.py from another module."""
    given, entered = Counter(), Counter()

    def profile(frame, event, arg):
        code = frame.f_code
        if event != "call" or Path(code.co_filename).parent != HUB or code.co_name.startswith("<"):
            return
        arguments = [frame.f_locals.get(v) for v in code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]]
        if name in arguments and code.co_name not in ENTRY_POINTS:
            given[f"{Path(code.co_filename).stem}.{code.co_name}"] += 1
        caller = frame.f_back.f_code.co_filename if frame.f_back is not None else ""
        if code.co_filename.endswith("download.py") and caller != code.co_filename:
            entered[code.co_name] += 1

    sys.setprofile(profile)
    try:
        call()
    finally:
        sys.setprofile(None)
    return dict(given), sum(entered.values())


def test_below_the_entry_points_no_function_takes_the_name(served):
    for _ in range(2):  # downloading, then from the cache
        given, entered = trace(lambda: load_lm_head("elmo-original"), "elmo-original")
        assert given == {} and entered <= 2
        given, entered = trace(lambda: load_bilm("elmo-small"), "elmo-small")
        assert given == {} and entered <= 2
    given, _ = trace(lambda: read_config("elmo-original"), "elmo-original")
    assert given == {}


def test_a_record_outside_the_registry_downloads_and_loads(served, tmp_path):
    mine = dataclasses.replace(SMALL, name="elmo-mine", folder="models/elmo/mine/", lm_head=("mine_softmax.hdf5", "vocab-mine.txt"))
    served_mine = served.root / "allennlp" / mine.folder
    shutil.copytree(served.root / "allennlp" / SMALL.folder, served_mine)
    words, _, _ = write_random_head(served_mine / mine.lm_head[0], served_mine / mine.lm_head[1], 50, SMALL.config.projection_dim)
    assert "elmo-mine" not in published.PUBLISHED  # the old code looked every name up again and refused it
    folder = download.download(mine, progress=False)
    assert folder == tmp_path / "cache" / "elmo-mine" == published.model_dir(mine)
    assert download.is_cached(mine) and download.describe([mine])[0]["cached"]
    assert download.ensure_downloaded(mine).weights == folder / SMALL.weights_name
    assert head_dim(mine) == 128
    softmax, vocab = download_lm_head(mine, progress=False)
    assert (softmax, vocab) == (folder / mine.lm_head[0], folder / mine.lm_head[1])
    assert download.is_cached(mine, mine.head_files)
