"""The cache folders are 0700 whatever the umask: under umask 002 a plain mkdir gave 0775, and the
compiled kernels then refused the cache folder (the eager code ran, slower)."""
import contextlib
import os
import shutil
import stat
import warnings

import pytest

from spacy_elmo import load_bilm
from spacy_elmo.cache import make_private_folders
from spacy_elmo.hub import published
from spacy_elmo.kernels import build, native

from .conftest import ALLENNLP
from .loopback_http import LoopbackServer

SMALL = published.PUBLISHED["elmo-small"]


@contextlib.contextmanager
def umask(mask):
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("mask", [0o002, 0o022, 0o077, 0o700])
def test_cache_folders_are_made_private_whatever_the_umask(tmp_path, mask):
    existing = tmp_path / "existing"
    existing.mkdir()
    os.chmod(existing, 0o755)
    with umask(mask):
        made = make_private_folders(existing / "made" / "cache")
    assert made == existing / "made" / "cache"
    assert mode(existing / "made") == 0o700 and mode(made) == 0o700
    assert mode(existing) == 0o755  # a folder that was there is left as it is
    assert make_private_folders(made) == made  # there already: nothing to do
    (tmp_path / "file").write_text("")
    with pytest.raises(NotADirectoryError, match="exists and is not a folder"):
        make_private_folders(tmp_path / "file")


@pytest.fixture()
def mirror(tmp_path, monkeypatch):
    """The fixture biLM served under elmo-small's published path; a cache folder that does not exist yet."""
    folder = tmp_path / "served" / "allennlp" / SMALL.folder
    folder.mkdir(parents=True)
    shutil.copy(ALLENNLP / "options.json", folder / SMALL.options_name)
    shutil.copy(ALLENNLP / "lm_weights.hdf5", folder / SMALL.weights_name)
    server = LoopbackServer(tmp_path / "served")
    monkeypatch.setenv(published.MIRROR_ENV, server.url + "allennlp")
    monkeypatch.setenv(published.CACHE_ENV, str(tmp_path / "new" / "cache"))
    yield tmp_path / "new" / "cache"
    server.close()


def test_a_download_under_umask_002_makes_a_cache_folder_the_kernels_accept(mirror):
    # before: the download made the cache folder 0775 (plain mkdir under umask 002); the kernels then
    # refused it as writable by group
    pytest.importorskip("h5py")
    with umask(0o002):
        load_bilm("elmo-small")
    for folder in (mirror.parent, mirror, published.model_dir("elmo-small")):
        assert mode(folder) == 0o700, folder
    if build.compiler() is None:
        pytest.skip("the kernels' part needs a C compiler")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no "writable by group or others" warning
        assert native.KernelLoader(mirror).get() is not None
