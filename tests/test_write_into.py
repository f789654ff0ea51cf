"""write_into with odd targets: an output folder on another file system (a link to /dev/shm), a
move that fails half-way (what was set aside is put back), and a dangling link (resolved, or
refused before any work starts)."""
from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from spacy_elmo.files import write_into

OUTPUTS = ("report.json", "pages")


def previous_output(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text("old")
    (out / "pages").mkdir()
    (out / "pages" / "stale.html").write_text("old word")


def new_output(scratch: Path) -> int:
    (scratch / "report.json").write_text("new")
    (scratch / "pages").mkdir()
    (scratch / "pages" / "fresh.html").write_text("new word")
    return 7


def listing(folder: Path):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_an_output_folder_on_another_file_system(tmp_path):
    # before: OSError EXDEV after the whole run, and the previous pages/ left renamed aside
    shm = Path("/dev/shm")
    if not shm.is_dir() or not os.access(shm, os.W_OK) or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("needs /dev/shm on a file system of its own")
    real = Path(os.path.realpath(shm)) / f"spacy-elmo-test-{os.getpid()}-{tmp_path.name}"
    try:
        previous_output(real)
        (tmp_path / "out").symlink_to(real)
        assert write_into(tmp_path / "out", new_output, owned=OUTPUTS) == 7
        assert listing(real) == ["pages", "pages/fresh.html", "report.json"]  # nothing set aside, no scratch left
        assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    finally:
        import shutil

        shutil.rmtree(real, ignore_errors=True)


def test_a_move_that_fails_puts_back_what_it_set_aside(tmp_path, monkeypatch):
    # before: the previous pages/ stayed renamed aside as .pages.<token>.old
    out = tmp_path / "out"
    previous_output(out)
    real_rename, real_replace = os.rename, os.replace

    def failing(move):
        def move_or_fail(source, target, *args, **kwargs):
            if Path(target) == out / "pages" and Path(source).parent != out:  # the new pages/ moving in
                raise OSError(errno.ENOSPC, "No space left on device")
            return move(source, target, *args, **kwargs)

        return move_or_fail

    monkeypatch.setattr(os, "rename", failing(real_rename))
    monkeypatch.setattr(os, "replace", failing(real_replace))
    with pytest.raises(OSError, match="No space left"):
        write_into(out, new_output, owned=OUTPUTS)
    monkeypatch.undo()
    assert (out / "pages" / "stale.html").read_text() == "old word"
    assert not [p.name for p in out.iterdir() if p.name.endswith(".old")]


def test_a_dangling_link_is_resolved_before_any_work(tmp_path):
    # before: the whole job ran, then FileExistsError from mkdir on the link
    (tmp_path / "out").symlink_to(tmp_path / "elsewhere")
    assert write_into(tmp_path / "out", new_output, owned=OUTPUTS) == 7
    assert listing(tmp_path / "elsewhere") == ["pages", "pages/fresh.html", "report.json"]
    assert (tmp_path / "out").resolve() == tmp_path / "elsewhere"


def test_a_dangling_link_into_a_missing_folder_is_refused_before_any_work(tmp_path):
    (tmp_path / "out").symlink_to(tmp_path / "missing" / "deeper")
    calls = []
    with pytest.raises(FileNotFoundError, match="is a link to .*whose folder does not exist") as caught:
        write_into(tmp_path / "out", lambda scratch: calls.append(scratch))
    assert calls == [] and "\n" not in str(caught.value)
