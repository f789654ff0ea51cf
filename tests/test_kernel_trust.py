"""What the compiled kernels load, and from where (spacy_elmo/kernels/build.py, kernels/folder.py,
the loader in native.py): a private folder checked on its descriptor, only the library this
package built (SHA-256 checked on the bytes that are then loaded), a rebuild when it does not
load, one build for concurrent threads and processes, flags for the target and the CPU. Every
test builds into its own temporary cache with its own loader (never the user's cache); the
two-user tests run an attacker as a second, real user (they need root to create it); the noexec
tests mount a small noexec tmpfs (root, and a system that lets it mount; skipped otherwise), and
their monkeypatched twins run everywhere."""

import contextlib
import fcntl
import hashlib
import os
import shutil
import stat
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pytest

from spacy_elmo.kernels import build, cpu, folder, native

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
    """``(key, library path)`` of the recorded build in ``root``."""
    _, key = build.current_build(build.compiler())
    with folder.PrivateFolder(root, build.FOLDER) as kernels:
        digest = build.recorded_digest(kernels, key)
    assert digest is not None
    return key, root / build.FOLDER / build.library_name(key, digest)


def _build_without_loading(root):
    """Build into ``root`` as a previous process did: ``(key, library path)``; this process has not loaded it."""
    flags, key = build.current_build(build.compiler())
    with folder.PrivateFolder(root, build.FOLDER) as kernels:
        digest = build.compile_library(build.compiler(), flags, kernels, key)
    return key, root / build.FOLDER / build.library_name(key, digest)


def _sha256(path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_the_kernels_folder_and_the_folders_made_for_it_are_private(tmp_path):
    root = tmp_path / "made" / "cache"
    assert native.KernelLoader(root).get() is not None
    for made in (tmp_path / "made", root, root / "native"):
        assert _mode(made) == 0o700, made
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


@pytest.mark.parametrize("mode, refused", [(0o777, True), (0o770, True), (0o1777, True), (0o755, False)])
def test_a_cache_folder_others_can_write_is_refused_even_with_the_sticky_bit(tmp_path, mode, refused):
    root = tmp_path / "shared"
    root.mkdir()
    os.chmod(root, mode)  # 0o1777: sticky, as /tmp: its owner (and others, for their own entries) can still rename in it
    loader = native.KernelLoader(root)
    if refused:
        with pytest.warns(UserWarning, match=f"{root} is writable by group or others"):
            assert loader.get() is None
        assert not (root / build.FOLDER).exists()  # refused before anything was made in it
    else:
        with warnings_as_errors():
            assert loader.get() is not None


def _belongs_to_someone_else(path, monkeypatch):
    if os.geteuid() == 0:
        os.chown(path, 65534, 65534)  # nobody
    else:
        real = os.geteuid()
        monkeypatch.setattr(os, "geteuid", lambda: real + 1)  # the folder now belongs to "someone else"


def test_a_kernels_folder_of_another_user_is_refused(tmp_path, monkeypatch):
    kernels = tmp_path / "native"
    kernels.mkdir(mode=0o700)
    _belongs_to_someone_else(kernels, monkeypatch)
    with pytest.warns(UserWarning, match=f"{kernels} belongs to another user"):
        assert native.KernelLoader(tmp_path).get() is None


@pytest.mark.parametrize("mode", [0o755, 0o1777])
def test_a_cache_folder_of_another_user_is_refused_even_with_the_sticky_bit(tmp_path, monkeypatch, mode):
    # the owner of the cache folder can rename the kernels folder in it, sticky bit or not
    root = tmp_path / "theirs"
    root.mkdir()
    os.chmod(root, mode)
    _belongs_to_someone_else(root, monkeypatch)
    with pytest.warns(UserWarning, match=f"{root} belongs to another user"):
        assert native.KernelLoader(root).get() is None
    assert not (root / build.FOLDER).exists()


def test_a_cache_folder_that_is_a_symbolic_link_is_refused(tmp_path):
    (tmp_path / "real").mkdir(mode=0o700)
    (tmp_path / "link").symlink_to(tmp_path / "real")
    with pytest.warns(UserWarning, match="symbolic link"):
        assert native.KernelLoader(tmp_path / "link").get() is None


def test_a_symbolic_link_in_place_of_the_record_or_the_library_is_never_followed(tmp_path):
    root = tmp_path / "cache"
    key, path = _build_without_loading(root)
    planted, marker = _plant(tmp_path)
    os.replace(planted, tmp_path / "elsewhere.so")
    path.unlink()
    path.symlink_to(tmp_path / "elsewhere.so")
    with pytest.warns(UserWarning, match="symbolic link"):
        assert native.KernelLoader(root).get() is None
    assert not marker.exists()


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
    assert _sha256(_built(root)[1]) != _sha256(rejected)


def test_a_library_without_its_record_is_never_loaded(tmp_path):
    root = tmp_path / "cache"
    key, path = _build_without_loading(root)
    (root / "native" / build.record_name(key)).unlink()
    planted, marker = _plant(tmp_path)
    os.replace(planted, path)
    kernels = native.KernelLoader(root).get()
    assert not marker.exists()
    assert kernels is not None


@pytest.mark.parametrize("content", ["missing symbols", "not a library"])
def test_a_library_that_does_not_load_is_set_aside_and_rebuilt(tmp_path, content):
    # a recorded library that fails to load: a stale build (kernels missing), or damaged bytes
    root = tmp_path / "cache"
    _, key = build.current_build(build.compiler())
    bad = _plant(tmp_path)[0].read_bytes() if content == "missing symbols" else b"\x7fELF not really"
    digest = hashlib.sha256(bad).hexdigest()
    with folder.PrivateFolder(root, build.FOLDER) as kernels:
        kernels.publish(build.library_name(key, digest), bad)
        kernels.publish(build.record_name(key), digest.encode())
    with warnings_as_errors():  # recovered: no warning
        assert native.KernelLoader(root).get() is not None
    assert (root / build.FOLDER / (build.library_name(key, digest) + ".rejected")).read_bytes() == bad
    assert _built(root)[1] != root / build.FOLDER / build.library_name(key, digest)


def test_a_library_that_does_not_load_even_rebuilt_gives_one_warning_and_the_eager_code(tmp_path, monkeypatch):
    builds = []

    def broken_build(cc, flags, kernels, key):
        builds.append(key)
        bad = b"not a shared library"
        digest = hashlib.sha256(bad).hexdigest()
        kernels.publish(build.library_name(key, digest), bad)
        kernels.publish(build.record_name(key), digest.encode())
        return digest

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

    def compile_checking_the_lock(cc, flags, kernels, key):
        with open(kernels.path / f"{build.STEM}-{key}.lock", "a") as other:  # another process's view
            with pytest.raises(BlockingIOError):
                fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
        seen.append(key)
        return real_compile(cc, flags, kernels, key)

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


CPU = "vendor_id: GenuineIntel\nmodel name: Some CPU\nflags: fpu sse2 avx2"


def test_x86_flags_only_for_an_x86_target_and_the_build_works_with_generic_flags(tmp_path, monkeypatch):
    assert "-march=native" in build.compile_flags("x86_64-linux-gnu", CPU)
    for triple in ("aarch64-linux-gnu", "arm64-apple-darwin23.0.0", "riscv64-linux-gnu", "powerpc64le-linux-gnu"):
        flags = build.compile_flags(triple, CPU)
        assert not any(flag.startswith(("-march", "-mprefer-vector-width")) for flag in flags), triple
        assert "-O3" in flags and "-fPIC" in flags
    commands = _record_commands(monkeypatch)
    monkeypatch.setattr(build, "target", lambda cc: "aarch64-unknown-linux-gnu")
    assert native.KernelLoader(tmp_path).get() is not None  # generic flags build here too
    compile_step = next(c for c in commands if "-c" in c)
    assert "-march=native" not in compile_step and "-mprefer-vector-width=512" not in compile_step


def _record_commands(monkeypatch):
    commands = []
    real_run = subprocess.run

    def recording_run(command, *args, **kwargs):
        commands.append(command)
        return real_run(command, *args, **kwargs)

    monkeypatch.setattr(build.subprocess, "run", recording_run)
    return commands


def test_a_cpu_that_cannot_be_identified_gets_generic_flags_and_a_key_of_its_own(tmp_path, monkeypatch):
    # before: without /proc/cpuinfo (macOS) every CPU had the same key, and x86 still built with
    # -march=native: a library built on one CPU could load on another that lacks its instructions
    assert cpu.identity({}) is None
    assert cpu.identity(cpu.parse_cpuinfo("processor : 0\nmodel name : X\n")) is None  # no features: not identified
    assert build.compile_flags("x86_64-linux-gnu", None) == build.COMMON_FLAGS
    cc = build.compiler()
    identified = build.build_key(cc, "x86_64-linux-gnu", build.COMMON_FLAGS, CPU)
    assert build.build_key(cc, "x86_64-linux-gnu", build.COMMON_FLAGS, None) != identified
    monkeypatch.setattr(cpu, "CPUINFO", str(tmp_path / "no-cpuinfo"))
    cpu.cpuinfo.cache_clear()
    try:
        assert cpu.identity() is None and cpu.features() is None and cpu.vendor() == ""
        commands = _record_commands(monkeypatch)
        assert native.KernelLoader(tmp_path / "cache").get() is not None
        compile_step = next(c for c in commands if "-c" in c)
        assert not any(flag.startswith(("-march", "-mprefer-vector-width")) for flag in compile_step)
    finally:
        cpu.cpuinfo.cache_clear()


def test_the_cpu_identity_tells_cpus_apart_by_model_and_features():
    text = "processor : 0\nvendor_id : GenuineIntel\ncpu family : 6\nmodel : 143\nmodel name : Xeon\nflags : fpu avx512f amx_bf16\n"
    text += "processor : 1\nvendor_id : GenuineIntel\nflags : fpu\n"  # the first processor's fields count
    info = cpu.parse_cpuinfo(text)
    assert info["flags"] == "fpu avx512f amx_bf16" and info["model"] == "143"
    base = cpu.identity(info)
    assert base is not None and "amx_bf16" in base and "Xeon" in base
    for field, other in (("flags", "fpu avx512f"), ("model", "106"), ("model name", "Other"), ("vendor_id", "AuthenticAMD")):
        assert cpu.identity({**info, field: other}) != base, field
    arm = cpu.parse_cpuinfo("processor : 0\nFeatures : fp asimd sve\nCPU implementer : 0x41\nCPU part : 0xd40\n")
    assert cpu.identity(arm) is not None and cpu.identity({**arm, "CPU part": "0xd0c"}) != cpu.identity(arm)


def test_the_build_key_names_the_compiler_the_c_library_the_cpu_and_the_source(tmp_path, monkeypatch):
    cc = build.compiler()
    flags = build.compile_flags("x86_64-linux-gnu", CPU)
    key = build.build_key(cc, "x86_64-linux-gnu", flags, CPU)
    assert build.build_key(cc, "x86_64-linux-gnu", flags, CPU) == key
    assert build.build_key(cc, "aarch64-linux-gnu", flags, CPU) != key
    assert build.build_key(cc, "x86_64-linux-gnu", build.compile_flags("aarch64-linux-gnu", CPU), CPU) != key
    assert build.build_key(cc, "x86_64-linux-gnu", flags, CPU.replace("avx2", "avx512f")) != key
    with monkeypatch.context() as m:
        m.setattr(build, "compiler_version", lambda cc: "cc (Other) 99.1.0")
        assert build.build_key(cc, "x86_64-linux-gnu", flags, CPU) != key
    with monkeypatch.context() as m:
        m.setattr(build.platform, "libc_ver", lambda: ("glibc", "1.0"))
        assert build.build_key(cc, "x86_64-linux-gnu", flags, CPU) != key
    edited = tmp_path / "train_kernels.c"
    edited.write_bytes(build.SOURCE.read_bytes() + b"\n/* edited */\n")
    monkeypatch.setattr(build, "SOURCE", edited)
    assert build.build_key(cc, "x86_64-linux-gnu", flags, CPU) != key
    assert build.compiler_version(cc)  # a real first line from this machine's compiler


def test_the_library_loaded_is_the_one_whose_bytes_were_hashed(tmp_path, monkeypatch):
    # a rename between the check and dlopen: the path now names a planted library, the hashed
    # descriptor still the built one (before, dlopen looked the path up again)
    root = tmp_path / "cache"
    _, path = _build_without_loading(root)
    planted, marker = _plant(tmp_path)
    real_path = folder.descriptor_path

    def swap_then_path(fd):
        os.replace(planted, path)
        return real_path(fd)

    monkeypatch.setattr(folder, "descriptor_path", swap_then_path)
    with warnings_as_errors():
        assert native.KernelLoader(root).get() is not None  # the kernels' symbols: the built library
    assert not marker.exists()


def test_without_a_descriptor_path_the_library_loads_from_a_private_copy(tmp_path, monkeypatch):
    monkeypatch.setattr(folder, "descriptor_path", lambda fd: None)  # as on a system without /proc or /dev/fd
    copies = []
    real_mkdtemp = folder.tempfile.mkdtemp

    def recording_mkdtemp(*args, **kwargs):
        copies.append(Path(real_mkdtemp(*args, **kwargs)))
        assert _mode(copies[-1]) == 0o700
        return str(copies[-1])

    monkeypatch.setattr(folder.tempfile, "mkdtemp", recording_mkdtemp)
    with warnings_as_errors():
        assert native.KernelLoader(tmp_path).get() is not None
    assert copies and not any(copy.exists() for copy in copies)  # loaded, then removed


@pytest.mark.parametrize("owner, mode, refused", [("ours", 0o777, True), ("ours", 0o1777, False), ("other", 0o755, True)])
def test_a_path_others_could_change_is_not_trusted(tmp_path, monkeypatch, owner, mode, refused):
    shared = tmp_path / "shared"
    (shared / "inside").mkdir(parents=True, mode=0o700)
    os.chmod(shared, mode)
    if owner == "other":
        _belongs_to_someone_else(shared, monkeypatch)
    if refused:
        with pytest.raises(build.UnsafeFolder, match=str(shared)):
            folder.check_trusted_path(shared / "inside")
    else:
        folder.check_trusted_path(shared / "inside")


@pytest.mark.parametrize("route", ["build", "load from a copy"])
def test_a_temporary_folder_reached_through_a_link_others_can_swap_is_used_by_its_resolved_path(tmp_path, monkeypatch, route):
    # before: the path was checked resolved, then used as given: a TMPDIR that is a link in a folder
    # others can write (0777, no sticky bit) passed the check, and a swap of the link after it moved
    # the compiler's output, or the copy that dlopen reads, into the other user's folder
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    mine, theirs = tmp_path / "mine", tmp_path / "theirs"
    mine.mkdir(mode=0o700)
    theirs.mkdir()
    os.chmod(theirs, 0o777)
    link = shared / "tmp"
    link.symlink_to(mine)
    assert folder.check_trusted_path(link) == Path(os.path.realpath(mine))  # the path to use from then on
    planted, marker = _plant(tmp_path)

    def swap(scratch_name, library_name=None):
        """The other user's move, once the checks are done: their folder of the same name, then the link."""
        (theirs / scratch_name).mkdir(exist_ok=True)
        os.chmod(theirs / scratch_name, 0o777)
        if library_name is not None:
            shutil.copy(planted, theirs / scratch_name / library_name)
        swapped = shared / "swapped"
        swapped.symlink_to(theirs)
        os.replace(swapped, link)

    root = tmp_path / "cache"
    if route == "build":
        real_run, landed = build.subprocess.run, []

        def run_after_swap(command, *args, **kwargs):
            if "-o" not in command:
                return real_run(command, *args, **kwargs)
            output = Path(command[command.index("-o") + 1])
            if "-c" in command:  # the compile step: swap now, once the checks are done
                swap(output.parent.name)
            done = real_run(command, *args, **kwargs)
            landed.append((theirs / output.parent.name / output.name).exists())  # where they could replace it
            return done

        monkeypatch.setattr(build.subprocess, "run", run_after_swap)
    else:
        _build_without_loading(root)
        monkeypatch.setattr(folder, "descriptor_path", lambda fd: None)
        real_cdll = folder.ctypes.CDLL

        def cdll_after_swap(name, *args, **kwargs):
            if "spacy-elmo-load-" in str(name):
                swap(Path(name).parent.name, Path(name).name)
            return real_cdll(name, *args, **kwargs)

        monkeypatch.setattr(folder.ctypes, "CDLL", cdll_after_swap)
    monkeypatch.setattr(folder.tempfile, "tempdir", str(link))
    with warnings_as_errors():
        assert native.KernelLoader(root).get() is not None
    assert os.readlink(link) == str(theirs)  # the swap did happen
    if route == "build":
        assert landed == [False, False]  # neither the object nor the library was written in their folder
    assert not marker.exists()  # their library never ran
    assert not [p for p in theirs.rglob("*") if p.is_file() and p.name.endswith((".o", ".so")) and p.read_bytes() != planted.read_bytes()]


def _counting_builds(monkeypatch):
    builds, real_compile = [], build.compile_library

    def counting(*args):
        builds.append(args[-1])
        return real_compile(*args)

    monkeypatch.setattr(build, "compile_library", counting)
    return builds


def _loads_nowhere_here(tmp_path, monkeypatch, root):
    """Two processes (loaders) in turn: each gives one warning naming the place and the eager code;
    the library and its record stay, nothing is rebuilt."""
    key, path = _built(root)
    builds = _counting_builds(monkeypatch)
    for _ in range(2):
        loader = native.KernelLoader(root)
        with pytest.warns(UserWarning, match=r"cannot be loaded here: .*refuses code .*set TMPDIR") as caught:
            assert loader.get() is None
        assert len(caught) == 1
        with warnings_as_errors():
            assert loader.get() is None  # decided for this process
    assert builds == []
    assert path.is_file() and (root / build.FOLDER / build.record_name(key)).is_file()
    assert not list((root / build.FOLDER).glob("*.rejected"))


def test_a_library_that_cannot_be_loaded_where_it_would_be_is_kept_not_rebuilt(tmp_path, monkeypatch):
    # before: with no /proc and a noexec temporary folder, dlopen failed for where the copy was, and
    # the good library and its record were set aside and rebuilt, in every process
    root = tmp_path / "cache"
    _build_without_loading(root)
    noexec = tmp_path / "noexec-tmp"
    noexec.mkdir(mode=0o700)
    monkeypatch.setattr(folder, "descriptor_path", lambda fd: None)  # no /proc/self/fd, no /dev/fd
    monkeypatch.setattr(folder.tempfile, "tempdir", str(noexec))
    real_cdll = folder.ctypes.CDLL

    def cdll(name, *args, **kwargs):  # dlopen as on a noexec file system
        if str(name).startswith(os.path.realpath(noexec)):
            raise OSError(f"{name}: failed to map segment from shared object")
        return real_cdll(name, *args, **kwargs)

    monkeypatch.setattr(folder.ctypes, "CDLL", cdll)
    monkeypatch.setattr(folder, "maps_executable", lambda fd: False, raising=False)  # what the probe finds there
    _loads_nowhere_here(tmp_path, monkeypatch, root)


def test_without_a_descriptor_path_a_library_that_does_not_load_is_still_set_aside(tmp_path, monkeypatch):
    # the probe tells the two apart: where the copy's folder allows code, a dlopen failure is the library's
    root = tmp_path / "cache"
    _, key = build.current_build(build.compiler())
    bad = b"\x7fELF not really"
    digest = hashlib.sha256(bad).hexdigest()
    with folder.PrivateFolder(root, build.FOLDER) as kernels:
        kernels.publish(build.library_name(key, digest), bad)
        kernels.publish(build.record_name(key), digest.encode())
    monkeypatch.setattr(folder, "descriptor_path", lambda fd: None)
    with warnings_as_errors():
        assert native.KernelLoader(root).get() is not None  # set aside, rebuilt, loaded from a copy
    assert (root / build.FOLDER / (build.library_name(key, digest) + ".rejected")).read_bytes() == bad


@pytest.fixture()
def noexec_folder(tmp_path):
    """A folder on a file system mounted ``noexec`` (tmpfs), or skip: mounting needs root (and the
    right to mount, which a container may not give)."""
    if os.geteuid() != 0 or shutil.which("mount") is None or shutil.which("umount") is None:
        pytest.skip("needs root and mount to make a noexec file system")
    target = tmp_path / "noexec"
    target.mkdir(mode=0o700)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "noexec,mode=700,size=64m", "tmpfs", str(target)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a noexec tmpfs here: {done.stderr.strip()}")
    try:
        yield target
    finally:
        if subprocess.run(["umount", str(target)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(target)], capture_output=True)


def test_the_probe_tells_a_noexec_file_system(noexec_folder, tmp_path):
    for where, expected in ((noexec_folder, False), (tmp_path, True)):
        (where / "some.so").write_bytes(b"\x7fELF" + b"\0" * 8192)
        fd = os.open(where / "some.so", os.O_RDONLY)
        try:
            assert folder.maps_executable(fd) is expected, where
        finally:
            os.close(fd)


def test_a_cache_folder_on_a_noexec_file_system_loads_from_a_copy(noexec_folder):
    # before: dlopen through /proc/self/fd failed there, the library was set aside, rebuilt, failed again
    root = noexec_folder / "cache"
    with warnings_as_errors():
        assert native.KernelLoader(root).get() is not None
    assert not list((root / build.FOLDER).glob("*.rejected"))


def test_no_descriptor_path_and_a_noexec_temporary_folder_keep_the_library(noexec_folder, tmp_path, monkeypatch):
    root = tmp_path / "cache"
    _build_without_loading(root)
    monkeypatch.setattr(folder, "descriptor_path", lambda fd: None)
    monkeypatch.setattr(folder.tempfile, "tempdir", str(noexec_folder))
    _loads_nowhere_here(tmp_path, monkeypatch, root)


# ----------------------------------------------------------------------------- two real users

ATTACKER = "spacy-elmo-test-attacker"
#: the attacker: swaps two names in its folder as fast as it can until ``stop`` exists, by an
#: atomic exchange where the kernel has one (renameat2), else by three renames (the issue's `mv`s);
#: compiled, so that it runs as a user who cannot reach this test's Python
SWAPPER = r"""
#define _GNU_SOURCE
#include <stdio.h>
#include <unistd.h>
#include <sys/syscall.h>
int main(int argc, char **argv) {
    long swaps = 0;
    if (argc != 3) return 2;
    while (access("stop", F_OK) != 0) {
#ifdef SYS_renameat2
        if (syscall(SYS_renameat2, -100, argv[1], -100, argv[2], 2) == 0) { swaps++; continue; }
#endif
        if (rename(argv[1], "swap-tmp") == 0) {
            rename(argv[2], argv[1]);
            rename("swap-tmp", argv[2]);
            swaps++;
        }
    }
    printf("%ld\n", swaps);
    return 0;
}
"""
#: the victim: loads the kernels from the cache folder again and again for a while; prints what happened
VICTIM = r"""
import collections, json, sys, time
from pathlib import Path
from spacy_elmo.kernels import build, native
root, seconds = Path(sys.argv[1]), float(sys.argv[2])
seen, end = collections.Counter(), time.monotonic() + seconds
while time.monotonic() < end or not seen:
    try:
        build.load(root, native.NativeKernels)
        seen["loaded"] += 1
    except build.UnsafeFolder as err:
        seen["refused: " + str(err).split(":")[0].split(" (")[0].replace(str(root), "ROOT")] += 1
    except Exception as err:
        seen[type(err).__name__ + ": " + str(err)[:200]] += 1
print(json.dumps(seen))
"""


@pytest.fixture(scope="module")
def attacker():
    """``(uid, gid)`` of a second real user, created for these tests (removed after them)."""
    import pwd

    if os.geteuid() != 0:
        pytest.skip("the two-user tests create a second user: they need root")
    if shutil.which("useradd") is None:
        pytest.skip("the two-user tests create a second user with useradd, which is not installed")
    created = False
    try:
        pwd.getpwnam(ATTACKER)
    except KeyError:
        done = subprocess.run(
            ["useradd", "--system", "--no-create-home", "--shell", "/bin/false", ATTACKER], capture_output=True, text=True
        )
        if done.returncode != 0:
            pytest.skip(f"useradd could not create a second user: {done.stderr.strip()}")
        created = True
    entry = pwd.getpwnam(ATTACKER)
    yield entry.pw_uid, entry.pw_gid
    if created:
        subprocess.run(["userdel", ATTACKER], capture_output=True)


def _chown_tree(top, uid, gid):
    for path in [top, *Path(top).rglob("*")]:
        os.chown(path, uid, gid)


def _run_attack(base, uid, gid, swapped, victim_root, seconds=4.0):
    """Run the swapping attacker (as ``uid``) on the two names ``swapped`` in its folder ``base /
    shared`` while the victim (this user) loads from ``victim_root``: ``(victim's outcomes, swaps)``."""
    import json

    shared = base / "shared"
    repo = str(Path(__file__).resolve().parent.parent)  # this checkout's spacy_elmo in the victim too
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [repo, os.environ.get("PYTHONPATH", "")])), "OMP_NUM_THREADS": "1"}
    (base / "swapper.c").write_text(SWAPPER)
    subprocess.run([build.compiler(), "-O2", "-o", str(base / "swapper"), str(base / "swapper.c")], check=True)
    swapper = subprocess.Popen(
        [str(base / "swapper"), *swapped], cwd=shared, user=uid, group=gid, extra_groups=[], stdout=subprocess.PIPE, text=True
    )
    try:
        victim = subprocess.run(
            [sys.executable, "-c", VICTIM, str(victim_root), str(seconds)], env=env, capture_output=True, text=True, timeout=300
        )
    finally:
        (shared / "stop").touch()
        swaps = swapper.communicate(timeout=60)[0]
    assert victim.returncode == 0, victim.stderr[-3000:]
    return json.loads(victim.stdout.strip().splitlines()[-1]), int(swaps or 0)


def _evil_kernels(tmp_path, target):
    """A kernels folder at ``target`` as an attacker would make it: the planted library under this
    machine's build key, with a matching record. Returns the marker its constructor writes."""
    planted, marker = _plant(tmp_path)
    _, key = build.current_build(build.compiler())
    data = planted.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    target.mkdir(mode=0o700)
    (target / build.library_name(key, digest)).write_bytes(data)
    (target / f"{build.STEM}-{key}.sha256").write_text(digest + "\n")  # the record's name, as the loader reads it
    return marker


@pytest.fixture()
def shared_base():
    """A folder every user can reach (not write): the attacker's folder goes in it."""
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="spacy-elmo-two-users-"))
    os.chmod(base, 0o755)
    yield base
    shutil.rmtree(base, ignore_errors=True)


def test_a_cache_folder_of_another_user_cannot_get_its_library_run_while_it_swaps_ours(attacker, shared_base, tmp_path):
    # the reproduction: the other user owns a 1777 cache folder; we load from it while they
    # swap `native/` with a folder of theirs. Before: their library ran in our process.
    uid, gid = attacker
    shared = shared_base / "shared"
    shared.mkdir()
    marker = _evil_kernels(tmp_path, shared / "evil")
    assert build.load(tmp_path / "ours", native.NativeKernels) is not None
    shutil.copytree(tmp_path / "ours" / build.FOLDER, shared / build.FOLDER)  # ours, built, as an earlier load left it
    _chown_tree(shared / "evil", uid, gid)
    os.chown(shared, uid, gid)
    os.chmod(shared, 0o1777)
    outcomes, swaps = _run_attack(shared_base, uid, gid, (build.FOLDER, "evil"), shared)
    assert swaps > 0
    assert not marker.exists(), f"the other user's library ran in our process ({outcomes})"
    assert set(outcomes) == {"refused: ROOT belongs to another user"}, outcomes


def test_a_rename_above_our_cache_folder_never_gets_another_users_library_run(attacker, shared_base, tmp_path):
    # our cache folder lies in a folder of the other user's, who swaps it with a cache folder of
    # theirs as fast as they can: every check is on a descriptor, and the library loaded is the
    # one hashed through it, so each load gets our kernels or a refusal, never theirs
    uid, gid = attacker
    shared = shared_base / "shared"
    shared.mkdir()
    ours = shared / "cache"
    assert build.load(ours, native.NativeKernels) is not None  # our kernels, built before the attack
    (shared / "theirs").mkdir()
    marker = _evil_kernels(tmp_path, shared / "theirs" / build.FOLDER)
    _chown_tree(shared / "theirs", uid, gid)
    os.chown(shared, uid, gid)
    outcomes, swaps = _run_attack(shared_base, uid, gid, ("cache", "theirs"), ours)
    assert swaps > 0
    assert not marker.exists(), f"the other user's library ran in our process ({outcomes})"
    assert set(outcomes) <= {"loaded", "refused: ROOT belongs to another user"}, outcomes
