"""A private folder held open by its file descriptor, and loading a library through one.

Checks made on a path and acted on through the same path again can be undone in between: whoever
can rename a folder on the way (the owner of a parent, even with the sticky bit) can swap what the
second lookup finds. Here every check is made on an open descriptor (``fstat``), and what is
checked is what is used afterwards:

* :class:`PrivateFolder` opens the cache folder without following a link at its end, checks on the
  descriptor that it is a folder of this user that group and others cannot write (the sticky bit
  does not help: the folder's owner can still rename what is in it), then opens ``native/`` in it
  (``dir_fd``, ``O_NOFOLLOW``) and checks it the same way. Every file is then opened, created,
  renamed and locked relative to that descriptor, never through the path again;
* :meth:`PrivateFolder.open_file` checks each file on its descriptor too (a regular file of this
  user that group and others cannot write), so the bytes read from it are the bytes that stay;
* :func:`load_library` loads the library through its descriptor (``/proc/self/fd/N``), the one
  whose bytes were hashed; where a system has no such path, from a private copy in a fresh folder
  whose path only this user or root can change (:func:`private_scratch`: the temporary folder is
  resolved, checked with :func:`check_trusted_path`, and only the resolved path is used after);
* a ``dlopen`` that fails because of where the file lies (a ``noexec`` file system, told by
  :func:`maps_executable`) is not blamed on the library: the copy is tried, and where that fails
  for its place too, :class:`UnloadableHere` keeps the library for a process that can load it.

POSIX only (descriptors relative to a folder, ``O_NOFOLLOW``, owners and modes).
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import secrets
import shutil
import stat
import tempfile
import time
from pathlib import Path
from typing import Iterator, List, Optional

from ..cache import make_private_folders

_DIR = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
#: O_NONBLOCK: a FIFO in a file's place must not hang the open (it is then refused as not a regular file)
_FILE = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0) | getattr(os, "O_NONBLOCK", 0)
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
#: descriptors of loaded libraries, open for the process's lifetime: ``dlopen`` knows a library by
#: its path, and a closed descriptor's number (so its ``/proc/self/fd/N``) would be reused
_HELD: List[int] = []


class UnsafeFolder(RuntimeError):
    """The kernels' folder could be written by someone else: nothing in it is loaded."""


class UnloadableHere(RuntimeError):
    """The library cannot be loaded where it would be loaded from (a ``noexec`` file system), which
    is no fault of the library's: it is kept, not set aside and rebuilt."""


def supported() -> bool:
    """Whether this system has what the checks need (POSIX descriptors relative to a folder)."""
    return os.name == "posix" and hasattr(os, "O_NOFOLLOW") and os.open in os.supports_dir_fd


def check_private(st: os.stat_result, what: str, kind: str = "folder") -> None:
    """Raise :class:`UnsafeFolder` unless ``st`` (an ``fstat``) is a ``kind`` (``folder`` or
    ``file``) of this user that group and others cannot write."""
    is_kind = stat.S_ISDIR(st.st_mode) if kind == "folder" else stat.S_ISREG(st.st_mode)
    if not is_kind:
        raise UnsafeFolder(f"{what} is not a {'folder' if kind == 'folder' else 'regular file'}")
    if st.st_uid != os.geteuid():
        raise UnsafeFolder(f"{what} belongs to another user (uid {st.st_uid}); the compiled kernels load only from a {kind} of yours")
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        raise UnsafeFolder(
            f"{what} is writable by group or others (mode {stat.S_IMODE(st.st_mode):o}): "
            f"others could replace what is in it; make it 0700 (or point SPACY_ELMO_CACHE at a folder of yours) to use the compiled kernels"
        )


def check_trusted_path(path: Path) -> Path:
    """The resolved ``path`` (no symbolic link in it), once checked that no one but this user and
    root can change what it names: each folder from ``/`` down belongs to one of them, and one that
    group or others can write has the sticky bit (as ``/tmp``: others cannot rename what is not
    theirs in it); else :class:`UnsafeFolder`. Use the path returned, never ``path`` again: a link
    on the way (a ``TMPDIR`` that is a link in a folder others can write) could be swapped after
    the check, and the resolved path has none."""
    real = Path(os.path.realpath(path))
    for part in [*reversed(real.parents), real]:
        st = os.lstat(part)
        if stat.S_ISLNK(st.st_mode):
            raise UnsafeFolder(f"{part} became a symbolic link while it was checked")
        if st.st_uid not in (0, os.geteuid()):
            raise UnsafeFolder(f"{part} belongs to another user (uid {st.st_uid}), who could swap {real} (set TMPDIR to a folder of yours)")
        if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not st.st_mode & stat.S_ISVTX:
            raise UnsafeFolder(f"{part} is writable by group or others without the sticky bit: others could swap {real}")
    return real


@contextlib.contextmanager
def private_scratch(prefix: str) -> Iterator[Path]:
    """A fresh folder (0700, removed afterwards) in the system's temporary folder, named by its
    resolved path: the temporary folder is resolved and checked (:func:`check_trusted_path`)
    before the scratch folder is made in it, and everything after goes through the path yielded."""
    base = check_trusted_path(Path(tempfile.gettempdir()))
    scratch = Path(tempfile.mkdtemp(prefix=prefix, dir=base))
    try:
        yield check_trusted_path(scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _open_folder(name: str, what: str, dir_fd: Optional[int] = None) -> int:
    try:
        return os.open(name, _DIR, dir_fd=dir_fd)
    except OSError as err:
        if err.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafeFolder(f"{what} is a symbolic link or not a folder; the compiled kernels load only from a real folder") from err
        raise


class PrivateFolder:
    """``root/name`` (the kernels' folder), created 0700 where missing, held open and checked on its
    descriptor along with ``root``; the files in it are reached through that descriptor only. A
    folder of this user with a wider mode than 0700 (that no one else can write) is narrowed.
    Use it as a context manager (it closes its descriptors)."""

    def __init__(self, root: Path, name: str) -> None:
        if not supported():
            raise UnsafeFolder("the compiled kernels load only on POSIX systems (through file descriptors)")
        self.path = Path(root) / name
        make_private_folders(Path(root))  # 0700 whatever the umask; checked below, on descriptors
        root_fd = _open_folder(str(root), str(root))
        try:
            check_private(os.fstat(root_fd), str(root))
            try:
                os.mkdir(name, 0o700, dir_fd=root_fd)
            except FileExistsError:
                pass  # ours from before, or made meanwhile by another process: checked below
            self.fd = _open_folder(name, str(self.path), dir_fd=root_fd)
        finally:
            os.close(root_fd)
        try:
            st = os.fstat(self.fd)
            check_private(st, str(self.path))
            if stat.S_IMODE(st.st_mode) != 0o700:
                os.fchmod(self.fd, 0o700)
        except BaseException:
            os.close(self.fd)
            raise

    def __enter__(self) -> "PrivateFolder":
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)

    def open_file(self, name: str) -> Optional[int]:
        """A read-only descriptor of ``name`` in the folder, checked to be a regular file of this
        user that group and others cannot write; ``None`` when there is none."""
        try:
            fd = os.open(name, _FILE, dir_fd=self.fd)
        except FileNotFoundError:
            return None
        except OSError as err:
            if err.errno == errno.ELOOP:
                raise UnsafeFolder(f"{self.path / name} is a symbolic link") from err
            raise
        try:
            check_private(os.fstat(fd), str(self.path / name), kind="file")
        except BaseException:
            os.close(fd)
            raise
        return fd

    def publish(self, name: str, data: bytes, mode: int = 0o644) -> None:
        """Write ``data`` to ``name`` in the folder: a new file under a temporary name, flushed, then
        renamed into place (a reader sees the old file or the new one)."""
        temporary = f".{name}.{secrets.token_hex(6)}.tmp"
        fd = os.open(temporary, _NEW, mode, dir_fd=self.fd)
        try:
            with open(fd, "wb", closefd=False) as out:
                out.write(data)
                out.flush()
                os.fsync(fd)
            os.fchmod(fd, mode)  # whatever the umask left of it
        except BaseException:
            os.unlink(temporary, dir_fd=self.fd)
            raise
        finally:
            os.close(fd)
        os.replace(temporary, name, src_dir_fd=self.fd, dst_dir_fd=self.fd)

    def set_aside(self, name: str) -> None:
        """Rename ``name`` to ``name.rejected`` (replacing an older one) so that it is never loaded."""
        try:
            os.replace(name, name + ".rejected", src_dir_fd=self.fd, dst_dir_fd=self.fd)
        except FileNotFoundError:
            pass

    @contextlib.contextmanager
    def lock(self, name: str, timeout: float) -> Iterator[None]:
        """An exclusive ``flock`` on the file ``name`` in the folder, for processes and threads
        alike; ``TimeoutError`` after ``timeout`` seconds."""
        import fcntl

        fd = os.open(name, os.O_RDWR | os.O_CREAT | _FILE, 0o600, dir_fd=self.fd)
        try:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"waited {timeout:.0f} s for {self.path / name}") from None
                    time.sleep(0.05)
            yield
        finally:
            os.close(fd)  # closing releases the lock


def read_all(fd: int) -> bytes:
    """Every byte of the file open as ``fd``, from its start."""
    with open(fd, "rb", closefd=False) as fh:
        fh.seek(0)
        return fh.read()


def descriptor_path(fd: int) -> Optional[str]:
    """A path naming the open file ``fd`` itself (``/proc/self/fd/N``, or ``/dev/fd/N``), checked to
    reach the same file; ``None`` where the system has none."""
    st = os.fstat(fd)
    for base in ("/proc/self/fd", "/dev/fd"):
        path = f"{base}/{fd}"
        try:
            there = os.stat(path)
        except OSError:
            continue
        if (there.st_dev, there.st_ino) == (st.st_dev, st.st_ino):
            return path
    return None


def maps_executable(fd: int) -> bool:
    """Whether the file open as ``fd`` can be mapped as code where it lies: ``False`` when its file
    system refuses (``noexec``), so that ``dlopen`` fails for where the file is, not for what it is;
    ``True`` where that cannot be told (an empty file, a system without ``mmap``)."""
    import mmap

    try:
        size = os.fstat(fd).st_size
        if size == 0:
            return True
        mapped = mmap.mmap(fd, min(size, mmap.PAGESIZE), flags=mmap.MAP_PRIVATE, prot=mmap.PROT_READ | mmap.PROT_EXEC)
    except OSError as err:
        return err.errno not in (errno.EPERM, errno.EACCES)
    except (AttributeError, ValueError):  # pragma: no cover - no PROT_EXEC / MAP_PRIVATE here
        return True
    mapped.close()
    return True


def load_library(fd: int, name: str) -> ctypes.CDLL:
    """``dlopen`` the library open as ``fd``, whatever its path names now, and take ``fd`` over:
    through :func:`descriptor_path` (once loaded, ``fd`` stays open for the process's lifetime,
    so that its number never names another file to ``dlopen``), else from a copy of its bytes,
    ``name``, in a fresh private folder of a trusted path (:func:`private_scratch`).

    A failure where the file lies refuses code (:func:`maps_executable`: the cache folder on a
    ``noexec`` file system) moves on to the copy; where the copy's folder refuses it too, it is
    :class:`UnloadableHere` (the library is not at fault: keep it). Any other failure is the
    library's (``OSError``)."""
    path = descriptor_path(fd)
    if path is not None:
        try:
            library = ctypes.CDLL(path)
        except OSError:
            if maps_executable(fd):
                os.close(fd)
                raise
            here = "the cache folder's file system refuses code (mounted noexec), and {}"
        except BaseException:
            os.close(fd)
            raise
        else:
            _HELD.append(fd)
            return library
    else:
        here = "this system has no /proc/self/fd or /dev/fd to load it through its descriptor, and {}"
    try:
        return _load_copy(fd, name, here)
    finally:
        os.close(fd)


def _load_copy(fd: int, name: str, here: str) -> ctypes.CDLL:
    """``dlopen`` a copy of the bytes open as ``fd`` in a fresh private folder; ``here``: why not
    through the descriptor, for the message when the copy's folder refuses code too."""
    with private_scratch("spacy-elmo-load-") as scratch:
        copy = scratch / name
        with open(os.open(copy, _NEW, 0o600), "wb") as out:
            out.write(read_all(fd))
        try:
            return ctypes.CDLL(str(copy))
        except OSError as err:
            copy_fd = os.open(copy, _FILE)
            try:
                location = not maps_executable(copy_fd)
            finally:
                os.close(copy_fd)
            if not location:
                raise
            where = here.format(f"the temporary folder {scratch.parent} refuses code too (mounted noexec)")
            raise UnloadableHere(
                f"the compiled kernels cannot be loaded here: {where}; set TMPDIR to a folder of yours that allows it"
            ) from err
