"""What the compiled kernels load, and from where (spacy_elmo/kernels/build.py, the loader in
native.py): a private folder, only the library this package built (SHA-256 checked), a rebuild
when it does not load, one build for concurrent threads and processes, flags for the target.
Every test builds into its own temporary cache with its own loader (never the user's cache)."""

import contextlib
import fcntl
import hashlib
import os
import stat
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pytest

from spacy_elmo.kernels import build, native

pytestmark = pytest.mark.skipif(build.compiler() is None, reason="needs a C compiler")

PLANTED = r"""
#include <stdio.h>
__attribute__((constructor)) static void planted(void) {
    FILE *f = fopen(MARKER, "w");
    if (f) { fputs("ran", f); fclose(f); }
}
int not_a_kernel(void) { return 1; }
"""


@contextlib.contextmanager
def warnings_as_errors():
    """Fail the test on any warning inside."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _plant(tmp_path):
    """A shared library (not the kernels) whose constructor writes a marker file: ``(library, marker)``."""
    marker = tmp_path / "planted-ran"
    source = tmp_path / "planted.c"
    source.write_text(PLANTED)
    library = tmp_path / "planted.so"
    define = f'-DMARKER="{marker}"'
    subprocess.run([build.compiler(), "-shared", "-fPIC", define, "-o", str(library), str(source)], check=True)
    return library, marker


def _built(root):
    """``(key, library path)`` of the verified build in ``root``."""
    folder = root / build.FOLDER
    _, key = build.current_build(build.compiler())
    path = build.verified(folder, key)
    assert path is not None
    return key, path


def _build_without_loading(root):
    """Build into ``root`` as a previous process did: this process has not loaded it (dlopen would
    otherwise hand back its loaded copy for the same path, whatever the file now holds)."""
    flags, key = build.current_build(build.compiler())
    return key, build.compile_library(build.compiler(), flags, build.private_folder(root), key)


def test_the_kernels_folder_and_the_folders_made_for_it_are_private(tmp_path):
    root = tmp_path / "made" / "cache"
    assert native.KernelLoader(root).get() is not None
    for folder in (tmp_path / "made", root, root / "native"):
        assert _mode(folder) == 0o700, folder
    (library,) = (root / "native").glob("*.so")
    assert _mode(library) in (0o600, 0o644)  # readable by its owner; not 0711 or executable


def test_a_wider_kernels_folder_of_ours_is_narrowed_to_private(tmp_path):
    folder = tmp_path / "native"
    folder.mkdir()
    os.chmod(folder, 0o755)  # as an older version made it
    assert native.KernelLoader(tmp_path).get() is not None
    assert _mode(folder) == 0o700


@pytest.mark.parametrize("mode", [0o770, 0o757])
def test_a_kernels_folder_others_can_write_is_refused_with_one_warning_naming_it(tmp_path, mode):
    folder = tmp_path / "native"
    folder.mkdir()
    os.chmod(folder, mode)
    loader = native.KernelLoader(tmp_path)
    with pytest.warns(UserWarning, match=f"{folder}.*writable by group or others") as caught:
        assert loader.get() is None
    assert len(caught) == 1
    with warnings_as_errors():
        assert loader.get() is None  # decided: no second warning
    assert not list(folder.iterdir())  # nothing built, nothing loaded


@pytest.mark.parametrize("mode, refused", [(0o777, True), (0o770, True), (0o1777, False), (0o755, False)])
def test_a_cache_folder_others_could_swap_the_kernels_folder_in_is_refused(tmp_path, mode, refused):
    root = tmp_path / "shared"
    root.mkdir()
    os.chmod(root, mode)  # 0o1777: sticky, as /tmp: others cannot rename what is ours
    loader = native.KernelLoader(root)
    if refused:
        with pytest.warns(UserWarning, match=f"{root} is writable by group or others without the sticky bit"):
            assert loader.get() is None
    else:
        with warnings_as_errors():
            assert loader.get() is not None


def test_a_kernels_folder_of_another_user_is_refused(tmp_path, monkeypatch):
    folder = tmp_path / "native"
    folder.mkdir(mode=0o700)
    if os.getuid() == 0:
        os.chown(folder, 65534, 65534)  # nobody
    else:
        real = os.getuid()
        monkeypatch.setattr(os, "getuid", lambda: real + 1)  # the folder now belongs to "someone else"
    with pytest.warns(UserWarning, match=f"{folder} belongs to another user"):
        assert native.KernelLoader(tmp_path).get() is None


def test_a_planted_library_in_place_of_the_built_one_never_runs(tmp_path):
    root = tmp_path / "cache"
    _, path = _build_without_loading(root)
    planted, marker = _plant(tmp_path)
    os.replace(planted, path)  # same name, other content: its record does not match
    kernels = native.KernelLoader(root).get()
    assert not marker.exists()  # the planted constructor never ran
    assert kernels is not None  # rebuilt and loaded
    rejected = path.with_name(path.name + ".rejected")
    assert b"not_a_kernel" in rejected.read_bytes()  # the planted file, set aside
    assert build.sha256(_built(root)[1]) != build.sha256(rejected)


def test_a_library_without_its_record_is_never_loaded(tmp_path):
    root = tmp_path / "cache"
    key, path = _build_without_loading(root)
    build.record_path(root / "native", key).unlink()
    planted, marker = _plant(tmp_path)
    os.replace(planted, path)
    kernels = native.KernelLoader(root).get()
    assert not marker.exists()
    assert kernels is not None


@pytest.mark.parametrize("content", ["missing symbols", "not a library"])
def test_a_library_that_does_not_load_is_set_aside_and_rebuilt(tmp_path, content):
    # a recorded library that fails to load: a stale build (kernels missing), or damaged bytes
    root = tmp_path / "cache"
    folder = build.private_folder(root)
    _, key = build.current_build(build.compiler())
    bad = _plant(tmp_path)[0].read_bytes() if content == "missing symbols" else b"\x7fELF not really"
    digest = hashlib.sha256(bad).hexdigest()
    (folder / build.library_name(key, digest)).write_bytes(bad)
    build.record_path(folder, key).write_text(digest)
    with warnings_as_errors():  # recovered: no warning
        kernels = native.KernelLoader(root).get()
    assert kernels is not None
    assert (folder / (build.library_name(key, digest) + ".rejected")).read_bytes() == bad
    assert build.verified(folder, key) != folder / build.library_name(key, digest)


def test_a_library_that_does_not_load_even_rebuilt_gives_one_warning_and_the_eager_code(tmp_path, monkeypatch):
    builds = []

    def broken_build(cc, flags, folder, key):
        builds.append(key)
        path = folder / build.library_name(key, "0" * 64)
        path.write_bytes(b"not a shared library")
        build.record_path(folder, key).write_text(build.sha256(path))
        return path

    monkeypatch.setattr(build, "compile_library", broken_build)
    loader = native.KernelLoader(tmp_path)
    with pytest.warns(UserWarning, match="does not load, even rebuilt") as caught:
        assert loader.get() is None
    assert len(caught) == 1 and len(builds) == 2
    assert loader.get() is None and len(builds) == 2  # decided once per loader


def test_threads_wait_for_the_build_in_progress_instead_of_running_eager(tmp_path, monkeypatch):
    real_compile = build.compile_library
    building = threading.Event()

    def slow_compile(*args):
        building.set()
        time.sleep(0.5)
        return real_compile(*args)

    monkeypatch.setattr(build, "compile_library", slow_compile)
    loader = native.KernelLoader(tmp_path)
    first = threading.Thread(target=loader.get)
    first.start()
    assert building.wait(60)
    assert loader.get() is not None  # waited for the build in progress, then got the kernels
    first.join()


def test_build_and_publication_hold_a_file_lock(tmp_path, monkeypatch):
    real_compile = build.compile_library
    seen = []

    def compile_checking_the_lock(cc, flags, folder, key):
        with open(folder / f"{build.STEM}-{key}.lock", "a") as other:  # another process's view
            with pytest.raises(BlockingIOError):
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        seen.append(key)
        return real_compile(cc, flags, folder, key)

    monkeypatch.setattr(build, "compile_library", compile_checking_the_lock)
    assert native.KernelLoader(tmp_path).get() is not None
    assert len(seen) == 1


def test_two_processes_building_at_once_both_load_one_library(tmp_path):
    code = "import sys; from pathlib import Path; from spacy_elmo.kernels import build, native; build.load(Path(sys.argv[1]), native.NativeKernels)"
    repo = str(Path(__file__).resolve().parent.parent)  # this checkout's spacy_elmo in the children too
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH", "")]))}
    procs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], env=env) for _ in range(2)]
    assert [p.wait(300) for p in procs] == [0, 0]
    assert len(list((tmp_path / "native").glob("*.so"))) == 1
    assert not list((tmp_path / "native").glob("*.rejected"))


def test_x86_flags_only_for_an_x86_target_and_the_build_works_with_generic_flags(tmp_path, monkeypatch):
    assert "-march=native" in build.compile_flags("x86_64-linux-gnu")
    for triple in ("aarch64-linux-gnu", "arm64-apple-darwin23.0.0", "riscv64-linux-gnu", "powerpc64le-linux-gnu"):
        flags = build.compile_flags(triple)
        assert not any(flag.startswith(("-march", "-mprefer-vector-width")) for flag in flags), triple
        assert "-O3" in flags and "-fPIC" in flags
    commands = []
    real_run = subprocess.run

    def recording_run(command, *args, **kwargs):
        commands.append(command)
        return real_run(command, *args, **kwargs)

    monkeypatch.setattr(build, "target", lambda cc: "aarch64-unknown-linux-gnu")
    monkeypatch.setattr(build.subprocess, "run", recording_run)
    assert native.KernelLoader(tmp_path).get() is not None  # generic flags build here too
    compile_step = next(c for c in commands if "-c" in c)
    assert "-march=native" not in compile_step and "-mprefer-vector-width=512" not in compile_step


def test_the_build_key_names_the_compiler_the_c_library_and_the_source(tmp_path, monkeypatch):
    cc = build.compiler()
    flags = build.compile_flags("x86_64-linux-gnu")
    key = build.build_key(cc, "x86_64-linux-gnu", flags)
    assert build.build_key(cc, "x86_64-linux-gnu", flags) == key
    assert build.build_key(cc, "aarch64-linux-gnu", flags) != key
    assert build.build_key(cc, "x86_64-linux-gnu", build.compile_flags("aarch64-linux-gnu")) != key
    with monkeypatch.context() as m:
        m.setattr(build, "compiler_version", lambda cc: "cc (Other) 99.1.0")
        assert build.build_key(cc, "x86_64-linux-gnu", flags) != key
    with monkeypatch.context() as m:
        m.setattr(build.platform, "libc_ver", lambda: ("glibc", "1.0"))
        assert build.build_key(cc, "x86_64-linux-gnu", flags) != key
    with monkeypatch.context() as m:
        m.setattr(build, "cpu_key", lambda: "model name : other")
        assert build.build_key(cc, "x86_64-linux-gnu", flags) != key
    edited = tmp_path / "train_kernels.c"
    edited.write_bytes(build.SOURCE.read_bytes() + b"\n/* edited */\n")
    monkeypatch.setattr(build, "SOURCE", edited)
    assert build.build_key(cc, "x86_64-linux-gnu", flags) != key
    assert build.compiler_version(cc)  # a real first line from this machine's compiler
