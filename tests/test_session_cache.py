"""The test session's private cache folder (set in conftest.py): used in process and by subprocesses."""
import os
import subprocess
import sys

from spacy_elmo.cache import CACHE_ENV, cache_root

from .conftest import SESSION_CACHE


def test_the_session_and_its_subprocesses_use_a_private_cache():
    assert os.environ[CACHE_ENV] == str(SESSION_CACHE) and cache_root() == SESSION_CACHE
    code = "from spacy_elmo.cache import cache_root; print(cache_root())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == str(SESSION_CACHE)


def test_the_cache_folder_is_read_on_every_use(monkeypatch, tmp_path):
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "elsewhere"))
    assert cache_root() == tmp_path / "elsewhere"  # not frozen at import
