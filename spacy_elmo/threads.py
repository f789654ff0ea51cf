"""How many CPU threads the biLM's compute uses, and a warning when that oversubscribes the machine.

The biLM's recurrent steps are many small matrix products, one after another. Each product is
split across torch's intra-op threads and waits for the slowest of them, so a thread that shares
its core with other work (another process, another thread of ours) stalls every step. On an idle
machine a second thread buys little; on a busy one it costs a lot (see the README's "Threads"
section for measured numbers, made by ``bench/threads.py``, removed since: ``git show
6025c3d:bench/threads.py``). Hence the default of one thread, and
a warning when ``threads x processes`` exceeds the cores this process may run on.

This module imports no spaCy: the component, the CLI and plain biLM scripts all use it.
"""

from __future__ import annotations

import os
import warnings
from contextlib import contextmanager
from typing import Iterator, Optional

import torch

DEFAULT_THREADS = 1
"""The component's and the CLI's default: one intra-op thread per process."""


class ThreadOversubscriptionWarning(UserWarning):
    """More compute threads than cores: the biLM's many small products then wait for each other."""


def available_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - macOS, Windows
        return max(1, os.cpu_count() or 1)


def resolve_threads(threads: Optional[int]) -> int:
    """A thread count from a setting: ``None`` = :data:`DEFAULT_THREADS`; ``0`` = every available core."""
    if threads is None:
        return DEFAULT_THREADS
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 0:
        raise ValueError(f"threads must be a whole number >= 0 (0 = one per core), got {threads!r}")
    return threads if threads > 0 else available_cores()


def oversubscription_message(threads: int, n_process: int = 1, cores: Optional[int] = None) -> Optional[str]:
    """The warning text when ``threads * n_process`` exceeds ``cores``; ``None`` when it fits."""
    cores = available_cores() if cores is None else cores
    total = threads * max(1, n_process)
    if total <= cores:
        return None
    procs = f" x {n_process} processes" if n_process > 1 else ""
    fit = max(1, cores // max(1, n_process))
    more = f"; up to {fit} pay only on cores that nothing else uses" if fit > 1 else ""
    return (
        f"spacy-elmo: {threads} threads{procs} = {total} compute threads on {cores} CPU cores; the biLM's "
        f"recurrent steps then wait for descheduled threads and run several times slower. "
        f"Use threads={DEFAULT_THREADS}, the safe default" + (" (or fewer processes)" if n_process > 1 else "") + more + "."
    )


def first_oversubscription_message(threads: int, n_process: int = 1, cores: Optional[int] = None) -> Optional[str]:
    """:func:`oversubscription_message`, but only the first time per process for the same numbers
    (the CLI and the ``elmo`` component it builds share it, so that one setting warns once)."""
    key = (threads, max(1, n_process), cores)
    if key in _checked:
        return None
    _checked.add(key)
    return oversubscription_message(threads, n_process, cores)


def check_oversubscription(threads: int, n_process: int = 1, cores: Optional[int] = None, stacklevel: int = 2) -> bool:
    """Warn (:class:`ThreadOversubscriptionWarning`) when ``threads * n_process > cores``; True if it warned."""
    message = oversubscription_message(threads, n_process, cores)
    if message is None:
        return False
    warnings.warn(message, ThreadOversubscriptionWarning, stacklevel=stacklevel + 1)
    return True


class ForkedWorkerThreadsWarning(UserWarning):
    """More than one thread asked for in a forked worker process: it runs with one instead."""


def in_forked_worker() -> bool:
    """True in a child process started by ``fork`` (how ``nlp.pipe(n_process=N)`` starts its workers on Linux)."""
    import multiprocessing

    return multiprocessing.parent_process() is not None and multiprocessing.get_start_method(allow_none=True) in (None, "fork")


_fork_warned = False


def safe_threads(threads: Optional[int]) -> int:
    """:func:`resolve_threads`, limited to 1 in a forked worker process (with one warning per process).

    OpenMP (GNU libgomp, torch's CPU thread pool on Linux) cannot start new threads in a process
    forked after its parent used several: ``torch.set_num_threads(2)`` followed by any parallel
    product hangs the child for good. ``nlp.pipe(n_process=N)`` forks, so its workers run with one
    thread each; use more processes, not more threads, or the ``spawn`` start method.
    """
    global _fork_warned
    wanted = resolve_threads(threads)
    if wanted > 1 and in_forked_worker():
        if not _fork_warned:
            _fork_warned = True
            warnings.warn(
                f"spacy-elmo: threads={wanted} in a forked worker process (e.g. nlp.pipe(n_process=N)) runs with 1 thread: "
                "OpenMP hangs when a forked child starts new threads. Parallelise with n_process instead.",
                ForkedWorkerThreadsWarning,
                stacklevel=3,
            )
        return 1
    return wanted


def set_threads(threads: Optional[int]) -> int:
    """Set torch's intra-op thread count for this process (see :func:`safe_threads`); returns the previous count."""
    previous = torch.get_num_threads()
    wanted = safe_threads(threads)
    if wanted != previous:
        torch.set_num_threads(wanted)
    return previous


@contextmanager
def using_threads(threads: Optional[int]) -> Iterator[int]:
    """Run a block with ``threads`` intra-op threads and restore the previous count afterwards.

    Yields the count in use. Cheap enough to wrap every batch: torch only changes its setting
    when the count differs.
    """
    previous = set_threads(threads)
    try:
        yield torch.get_num_threads()
    finally:
        if torch.get_num_threads() != previous:
            torch.set_num_threads(previous)


def in_worker_process() -> bool:
    """True in a child process (e.g. one of ``nlp.pipe(n_process=N)``'s workers), False in the main process."""
    import multiprocessing

    return multiprocessing.parent_process() is not None


_checked: set = set()


def check_component_threads(threads: int, cores: Optional[int] = None) -> bool:
    """The component's check, at most one warning per process and setting.

    In the main process it compares ``threads`` with the cores; in a worker of
    ``nlp.pipe(n_process=N)`` (N is not visible there) it assumes at least two such workers, so
    ``threads=2`` on a 2-core machine warns in the workers.
    """
    n_process = 2 if in_worker_process() else 1
    if in_forked_worker():
        threads = min(threads, 1)  # safe_threads runs forked workers with one thread (and says so)
    message = first_oversubscription_message(threads, n_process, cores)
    if message is None:
        return False
    warnings.warn(message, ThreadOversubscriptionWarning, stacklevel=3)
    return True
