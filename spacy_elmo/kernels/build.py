"""Compile, verify and load ``csrc/train_kernels.c``: the trust side of the compiled kernels.

The model is PyTorch's JIT extension loader (``torch.utils.cpp_extension.load``): a per-user
build folder, a build key (here: the source, the flags, the compiler's target and version, the C
library and the CPU), a lock around the build, and a rebuild when what is there does not load.
On top of it, what is loaded is exactly what this package built, whoever else can rename folders
on the way to the cache:

* the cache folder and its ``native/`` are opened and checked on their descriptors
  (:class:`.folder.PrivateFolder`): each must be this user's and closed to writes by group and
  others (a sticky cache folder of someone else's is refused too: its owner can rename what is
  in it). ``native/`` is created 0700, and everything in it is reached through its descriptor;
* each build records the SHA-256 of the library it wrote (``train_kernels-<key>.sha256``, in the
  folder proven private), and the library's name holds that hash. The expected hash comes from
  the build made in this process or from that record; the library's bytes are read and hashed
  through a descriptor, and that same descriptor is what is loaded (``/proc/self/fd/N``, else a
  private copy of the hashed bytes), so no rename between the check and ``dlopen`` changes what
  runs. A file without a record, or whose content does not match it, is never loaded (it is
  renamed aside, ``.rejected``, and rebuilt);
* the compiler runs in a fresh private folder of the system's temporary folder whose path only
  this user or root can change (resolved before it is checked, and only the resolved path used
  after: a link on the way cannot be swapped mid-build), and the library's bytes are published
  into ``native/`` through its descriptor;
* a library that fails to load (``dlopen`` or a missing symbol) is renamed aside and rebuilt
  once; a second failure raises (the caller runs the eager code). A ``dlopen`` that fails for
  where the file lies (a ``noexec`` file system, where a copy in the temporary folder is tried
  too) is :class:`.folder.UnloadableHere`: the library and its record stay, for no rebuild;
* build and publication run under a file lock in ``native/`` (several processes, e.g. DDP ranks,
  build once);
* ``-march=native`` only where :func:`.cpu.identity` names the CPU, and the key holds that identity:
  a library built for one CPU never loads on another.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import shutil
import subprocess
from pathlib import Path
from typing import Callable, List, Optional, Tuple, TypeVar

from . import cpu
from .folder import PrivateFolder, UnloadableHere, UnsafeFolder, load_library, private_scratch, read_all

__all__ = ["UnloadableHere", "UnsafeFolder", "compiler", "current_build", "load"]

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


def compile_flags(triple: str, cpu_identity: Optional[str]) -> Tuple[str, ...]:
    """The compile flags for ``triple``: the x86 flags (``-march=native``) only for an x86 target on
    a CPU that :func:`.cpu.identity` names, which the build key then holds; generic flags elsewhere
    (aarch64, ..., or an x86 CPU that cannot be identified, as without ``/proc/cpuinfo``)."""
    machine = triple.split("-", 1)[0].lower()
    return COMMON_FLAGS + X86_FLAGS if machine in X86_MACHINES and cpu_identity is not None else COMMON_FLAGS


def current_build(cc: str) -> Tuple[Tuple[str, ...], str]:
    """``(compile flags, build key)`` for ``cc`` on this machine."""
    triple, identity = target(cc), cpu.identity()
    flags = compile_flags(triple, identity)
    return flags, build_key(cc, triple, flags, identity)


def build_key(cc: str, triple: str, flags: Tuple[str, ...], cpu_identity: Optional[str]) -> str:
    """16 hex digits naming a build: source, flags, target, compiler version, C library, CPU."""
    parts = [
        SOURCE.read_bytes().hex(),
        " ".join(flags + LINK_FLAGS),
        triple,
        compiler_version(cc),
        " ".join(platform.libc_ver()),
        "unidentified CPU" if cpu_identity is None else cpu_identity,
    ]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def record_name(key: str) -> str:
    """The file (in the kernels' folder) recording the SHA-256 of the library built for ``key``."""
    return f"{STEM}-{key}.sha256"


def library_name(key: str, digest: str) -> str:
    """The library's file name: its build key and (the start of) its SHA-256."""
    return f"{STEM}-{key}-{digest[:16]}.so"


def recorded_digest(folder: PrivateFolder, key: str) -> Optional[str]:
    """The SHA-256 recorded for ``key``'s library in ``folder`` (a file of this user in a folder
    proven private, read through its descriptor); ``None`` when there is none or it is malformed
    (then set aside)."""
    fd = folder.open_file(record_name(key))
    if fd is None:
        return None
    try:
        digest = read_all(fd).decode("ascii", errors="replace").strip()
    finally:
        os.close(fd)
    if len(digest) != 64 or any(ch not in "0123456789abcdef" for ch in digest):
        folder.set_aside(record_name(key))
        return None
    return digest


def open_verified(folder: PrivateFolder, key: str, digest: str) -> Optional[int]:
    """A descriptor of ``key``'s library in ``folder`` whose bytes, read through that descriptor,
    have the SHA-256 ``digest``; else ``None``, with a mismatching library and the record set
    aside (never loaded)."""
    name = library_name(key, digest)
    fd = folder.open_file(name)
    if fd is not None and hashlib.sha256(read_all(fd)).hexdigest() == digest:
        return fd
    if fd is not None:
        os.close(fd)
        folder.set_aside(name)
    folder.set_aside(record_name(key))
    return None


def compile_library(cc: str, flags: Tuple[str, ...], folder: PrivateFolder, key: str) -> str:
    """Compile :data:`SOURCE` in a fresh private folder of the system's temporary folder (a path
    that only this user or root can change, resolved and checked before it is used:
    :func:`.folder.private_scratch`), then publish
    the library under its content-addressed name and its SHA-256 record in ``folder``, each by
    an atomic rename. Returns the SHA-256, taken from the bytes the compiler wrote."""
    with private_scratch("spacy-elmo-build-") as scratch:  # the resolved path, used for everything after its check
        obj, lib = scratch / f"{STEM}.o", scratch / f"{STEM}.so"
        for step in ([cc, *flags, "-c", "-o", str(obj), str(SOURCE)], [cc, *LINK_FLAGS, "-o", str(lib), str(obj), "-lm"]):
            done = subprocess.run(step, capture_output=True, text=True, timeout=120)
            if done.returncode != 0:
                raise RuntimeError(f"{' '.join(step[:2])} ... failed on {SOURCE.name}: {done.stderr.strip()[-2000:]}")
        data = lib.read_bytes()
    digest = hashlib.sha256(data).hexdigest()
    folder.publish(library_name(key, digest), data, 0o644)  # data to dlopen, not a program: no execute bits
    folder.publish(record_name(key), (digest + "\n").encode())
    return digest


def load(root: Path, wrap: Callable[[ctypes.CDLL], T]) -> T:
    """Build (if needed), verify and load the kernels from ``root/native``; ``wrap`` turns the
    loaded library into its typed entry points (a missing symbol counts as a load failure).
    The library loaded is the file whose bytes were hashed, through the descriptor they were
    read from; the hash it must have comes from this process's build or from the record in the
    folder proven private. Raises ``RuntimeError`` (or :class:`UnsafeFolder`) naming the problem
    when it cannot."""
    cc = compiler()
    if cc is None:
        raise RuntimeError("no C compiler found (set CC, or install gcc or clang)")
    flags, key = current_build(cc)
    with PrivateFolder(root, FOLDER) as folder:
        try:
            with folder.lock(f"{STEM}-{key}.lock", LOCK_TIMEOUT_S):
                for attempt in (1, 2):
                    digest = recorded_digest(folder, key)
                    fd = None if digest is None else open_verified(folder, key, digest)
                    if fd is None:
                        digest = compile_library(cc, flags, folder, key)
                        fd = open_verified(folder, key, digest)
                        if fd is None:
                            raise RuntimeError(f"the library just built in {folder.path} changed before it was loaded")
                    name = library_name(key, str(digest))
                    try:
                        return wrap(load_library(fd, name))
                    except (UnsafeFolder, UnloadableHere):  # nowhere safe, or able, to load it from: not the library's fault
                        raise
                    except Exception as err:  # dlopen (OSError), a missing symbol (AttributeError), ...
                        folder.set_aside(name)
                        folder.set_aside(record_name(key))
                        if attempt == 2:
                            raise RuntimeError(f"{folder.path / name} does not load, even rebuilt: {err!r}") from err
        except TimeoutError as err:
            raise RuntimeError(f"another process has been building the kernels in {folder.path} too long ({err})") from err
    raise AssertionError("unreachable")  # pragma: no cover
