"""Compile, verify and load ``csrc/train_kernels.c``: the trust side of the compiled kernels.

The model is PyTorch's JIT extension loader (``torch.utils.cpp_extension.load``): a per-user
build folder, a build key (here: the source, the flags, the compiler's target and version, the C
library and the CPU), a lock around the build, and a rebuild when what is there does not load.
On top of it, what is loaded is exactly what this package built:

* the folder (``<cache>/native``) is created private (0700) and refused, with the cause named,
  when it, or a folder the package created above it, is another user's or writable by group or
  others, or when the cache folder holding it is writable by others without the sticky bit:
  nobody else can put a library where it is looked for;
* each build records the SHA-256 of the library it wrote (``train_kernels-<key>.sha256``), and
  the library's name holds that hash; a file without a record, or whose content does not match
  it, is never loaded (it is renamed aside, ``.rejected``, and rebuilt);
* a library that fails to load (``dlopen`` or a missing symbol) is renamed aside and rebuilt
  once; a second failure raises (the caller runs the eager code). Content-addressed names also
  mean a rebuilt library is never confused with a stale one that ``dlopen`` still holds;
* build and publication run under a file lock (several processes, e.g. DDP ranks, build once).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple, TypeVar

SOURCE = Path(__file__).with_name("csrc") / "train_kernels.c"
STEM = "train_kernels"
FOLDER = "native"  # under the cache root
#: flags for every target. -ffast-math lets the compiler vectorise expf/tanhf (glibc's vector
#: versions, declared only under __FAST_MATH__); the C code keeps NaN where the eager code does
#: without relying on IEEE comparisons. It is given to the compile step only: linked with it, gcc
#: adds a start-up object that turns on flush-to-zero for the whole process.
COMMON_FLAGS = ("-O3", "-ffast-math", "-fPIC", "-pthread")
X86_FLAGS = ("-march=native", "-mprefer-vector-width=512")  # x86 only: AVX-512 where the CPU has it
LINK_FLAGS = ("-shared", "-pthread")  # the kernels start threads of their own (see the C file)
X86_MACHINES = ("x86_64", "amd64", "i386", "i486", "i586", "i686", "x86")
LOCK_TIMEOUT_S = 600.0
T = TypeVar("T")


class UnsafeFolder(RuntimeError):
    """The kernels' folder could be written by someone else: nothing in it is loaded."""


def compiler() -> Optional[str]:
    """``CC`` or the first of cc / gcc / clang on ``PATH``."""
    for name in (os.environ.get("CC", ""), "cc", "gcc", "clang"):
        if name and shutil.which(name):
            return name
    return None


def _first_line(command: List[str]) -> str:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ""
    lines = (done.stdout or done.stderr).strip().splitlines()
    return lines[0].strip() if done.returncode == 0 and lines else ""


def target(cc: str) -> str:
    """The compiler's target triple (``cc -dumpmachine``), else this machine's name."""
    return _first_line([cc, "-dumpmachine"]) or platform.machine()


def compiler_version(cc: str) -> str:
    """The first line of ``cc --version`` (a new compiler means a new build)."""
    return _first_line([cc, "--version"])


def compile_flags(triple: str) -> Tuple[str, ...]:
    """The compile flags for ``triple``: x86 flags on x86 only, generic ones elsewhere (aarch64, ...)."""
    machine = triple.split("-", 1)[0].lower()
    return COMMON_FLAGS + X86_FLAGS if machine in X86_MACHINES else COMMON_FLAGS


def cpu_key() -> str:
    """What ``-march=native`` depends on: the CPU model and its flags (Linux), else the machine name."""
    try:
        text = Path("/proc/cpuinfo").read_text(errors="replace")
    except OSError:
        return platform.machine() + platform.processor()
    first: Dict[str, str] = {}  # the first line of each field (x86: model name, flags; arm: Features, CPU part)
    for line in text.splitlines():
        field = line.split(":", 1)[0].strip()
        if field in ("model name", "flags", "Features", "CPU part"):
            first.setdefault(field, line)
    return "\n".join(first.values())


def current_build(cc: str) -> Tuple[Tuple[str, ...], str]:
    """``(compile flags, build key)`` for ``cc`` on this machine."""
    triple = target(cc)
    flags = compile_flags(triple)
    return flags, build_key(cc, triple, flags)


def build_key(cc: str, triple: str, flags: Tuple[str, ...]) -> str:
    """16 hex digits naming a build: source, flags, target, compiler version, C library, CPU."""
    parts = [
        SOURCE.read_bytes().hex(),
        " ".join(flags + LINK_FLAGS),
        triple,
        compiler_version(cc),
        " ".join(platform.libc_ver()),
        cpu_key(),
    ]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _check_private(folder: Path) -> None:
    """Raise :class:`UnsafeFolder` unless ``folder`` is a directory of this user that group and
    others cannot write. (POSIX only: elsewhere, such as Windows, there is no such mode to check.)"""
    if os.name != "posix":
        return
    st = os.stat(folder)
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeFolder(f"{folder} is not a folder")
    if st.st_uid != os.getuid():
        raise UnsafeFolder(f"{folder} belongs to another user (uid {st.st_uid}); the compiled kernels load only from a folder of yours")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UnsafeFolder(
            f"{folder} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o}); make it 0700 to use the compiled kernels"
        )


def _check_parent(root: Path) -> None:
    """Raise :class:`UnsafeFolder` when others could rename the kernels folder away and put theirs
    in its place: ``root`` writable by group or others without the sticky bit (which /tmp has)."""
    if os.name != "posix":
        return
    mode = os.stat(root).st_mode
    if mode & (stat.S_IWGRP | stat.S_IWOTH) and not mode & stat.S_ISVTX:
        raise UnsafeFolder(
            f"{root} is writable by group or others without the sticky bit (mode {stat.S_IMODE(mode):o}): others could replace the kernels folder in it"
        )


def private_folder(root: Path) -> Path:
    """``root/native``, creating what is missing with mode 0700, after checking it and each folder
    created here (:func:`_check_private`) and ``root`` (:func:`_check_parent`); an existing kernels
    folder of ours is narrowed to 0700."""
    folder = root / FOLDER
    missing = []
    for part in [folder, *folder.parents]:
        if part.exists():
            break
        missing.append(part)
    for part in reversed(missing):
        try:
            os.mkdir(part, 0o700)
        except FileExistsError:
            pass  # made meanwhile (another process): checked below like ours
    for part in [*reversed(missing), folder]:
        _check_private(part)
    _check_parent(root)
    if os.name == "posix" and stat.S_IMODE(os.stat(folder).st_mode) != 0o700:
        os.chmod(folder, 0o700)
    return folder


def record_path(folder: Path, key: str) -> Path:
    """Where the SHA-256 of the library built for ``key`` is recorded."""
    return folder / f"{STEM}-{key}.sha256"


def library_name(key: str, digest: str) -> str:
    """The library's file name: its build key and (the start of) its SHA-256."""
    return f"{STEM}-{key}-{digest[:16]}.so"


def _set_aside(path: Path) -> None:
    """Rename ``path`` to ``path.rejected`` (replacing an older one) so that it is never loaded."""
    try:
        os.replace(path, path.with_name(path.name + ".rejected"))
    except FileNotFoundError:
        pass


def verified(folder: Path, key: str) -> Optional[Path]:
    """The library recorded for ``key`` if its content has the recorded SHA-256; else ``None``,
    with a mismatching library and its record set aside (never loaded)."""
    record = record_path(folder, key)
    try:
        digest = record.read_text().strip()
    except FileNotFoundError:
        return None
    if len(digest) != 64 or any(ch not in "0123456789abcdef" for ch in digest):
        _set_aside(record)
        return None
    path = folder / library_name(key, digest)
    if path.is_file() and sha256(path) == digest:
        return path
    _set_aside(path)
    _set_aside(record)
    return None


def compile_library(cc: str, flags: Tuple[str, ...], folder: Path, key: str) -> Path:
    """Compile :data:`SOURCE` in a private scratch folder inside ``folder``, then publish the library
    under its content-addressed name and its SHA-256 record, each by an atomic rename."""
    with tempfile.TemporaryDirectory(dir=folder, prefix=".build-") as scratch:
        obj, lib = Path(scratch) / f"{STEM}.o", Path(scratch) / f"{STEM}.so"
        for step in ([cc, *flags, "-c", "-o", str(obj), str(SOURCE)], [cc, *LINK_FLAGS, "-o", str(lib), str(obj), "-lm"]):
            done = subprocess.run(step, capture_output=True, text=True, timeout=120)
            if done.returncode != 0:
                raise RuntimeError(f"{' '.join(step[:2])} ... failed on {SOURCE.name}: {done.stderr.strip()[-2000:]}")
        os.chmod(lib, 0o644)  # data to dlopen, not a program: no execute bits
        digest = sha256(lib)
        path = folder / library_name(key, digest)
        os.replace(lib, path)
        record = Path(scratch) / "record"
        record.write_text(digest + "\n")
        os.replace(record, record_path(folder, key))
    return path


def load(root: Path, wrap: Callable[[ctypes.CDLL], T]) -> T:
    """Build (if needed), verify and load the kernels from ``root/native``; ``wrap`` turns the
    loaded library into its typed entry points (a missing symbol counts as a load failure).
    Raises ``RuntimeError`` (or :class:`UnsafeFolder`) naming the problem when it cannot."""
    from filelock import FileLock, Timeout

    cc = compiler()
    if cc is None:
        raise RuntimeError("no C compiler found (set CC, or install gcc or clang)")
    folder = private_folder(root)
    flags, key = current_build(cc)
    try:
        with FileLock(str(folder / f"{STEM}-{key}.lock"), timeout=LOCK_TIMEOUT_S):
            for attempt in (1, 2):
                path = verified(folder, key) or compile_library(cc, flags, folder, key)
                try:
                    return wrap(ctypes.CDLL(str(path)))
                except Exception as err:  # dlopen (OSError), a missing symbol (AttributeError), ...
                    _set_aside(path)
                    _set_aside(record_path(folder, key))
                    if attempt == 2:
                        raise RuntimeError(f"{path} does not load, even rebuilt: {err!r}") from err
    except Timeout as err:
        raise RuntimeError(f"waited {LOCK_TIMEOUT_S:.0f} s for another process to build the kernels in {folder}") from err
    raise AssertionError("unreachable")  # pragma: no cover
