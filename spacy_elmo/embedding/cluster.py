"""Running the chunks on a Dask cluster (``pip install "spacy-elmo[cluster]"``).

Each chunk is one task (:func:`cluster_chunk`): the scheduler sends it
the chunk's lines, the worker embeds them with the biLM it loaded once (a per-process cache) and
writes the chunk's shard straight into the output folder, which must therefore be on a file
system that every worker and this process can see (NFS, a cluster file system, or one machine).
A task that fails or whose worker dies is retried (``retries``); since a shard's name is fixed by
its chunk and it is renamed into place whole, a retry overwrites rather than duplicates. At most
two tasks per worker thread are in flight, so the driver's memory stays bounded too.

``local:N`` starts a local cluster of N single-threaded worker processes; any other value is a
scheduler address (``tcp://host:8786``, as printed by ``dask scheduler``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
import uuid
from typing import Any, Dict, Iterator, Optional, Tuple

from .reader import Chunk, CorpusError
from .worker import ChunkResult, EmbedSpec, Executor, embed_chunk


def require_distributed() -> Any:
    try:
        import distributed
    except ImportError:
        raise CorpusError('--cluster needs Dask: pip install "spacy-elmo[cluster]" (dask[distributed]).') from None
    return distributed


NO_TUNING_ENV = "SPACY_ELMO_NO_ALLOCATOR_TUNING"
M_MMAP_THRESHOLD = -3  # glibc's mallopt parameter
MMAP_THRESHOLD_BYTES = 32 << 20  # the most glibc's own dynamic threshold reaches on 64-bit
_tuned: Optional[bool] = None


def worker_environment(threads: int = 1) -> Dict[str, str]:
    """What a local cluster's worker processes start with: Dask's usual thread caps, without its
    ``MALLOC_TRIM_THRESHOLD_=65536`` (see :func:`tune_allocator`)."""
    return {name: str(threads) for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")}


def tune_allocator() -> bool:
    """Undo the cost of Dask's default ``MALLOC_TRIM_THRESHOLD_`` in this worker process, once.

    Setting that variable also freezes glibc's mmap threshold at 128 KiB, so every large tensor
    the biLM allocates becomes a fresh ``mmap``/``munmap``; measured with Dask's default worker
    environment, one worker ran clearly slower (see ``bench/results/embed_corpus.json``). Where the
    variable is set and ``MALLOC_MMAP_THRESHOLD_`` is not, this raises the mmap threshold to
    32 MiB (glibc's own ceiling); freed memory is still returned by
    :mod:`spacy_elmo.bilm.memory`. ``SPACY_ELMO_NO_ALLOCATOR_TUNING=1`` on the workers turns it off.
    Returns whether it changed the setting (glibc on Linux only)."""
    global _tuned
    if _tuned is None:
        _tuned = False
        wanted = os.environ.get("MALLOC_TRIM_THRESHOLD_") and not os.environ.get("MALLOC_MMAP_THRESHOLD_")
        if wanted and not os.environ.get(NO_TUNING_ENV) and sys.platform.startswith("linux"):
            try:
                mallopt = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").mallopt
            except (OSError, AttributeError):  # pragma: no cover - not glibc
                return False
            mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
            _tuned = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES))
    return _tuned


def cluster_chunk(spec: EmbedSpec, folder: str, chunk: Chunk) -> ChunkResult:
    """The task run on a Dask worker: :func:`~spacy_elmo.embedding.worker.embed_chunk` after :func:`tune_allocator`."""
    tune_allocator()
    return embed_chunk(spec, folder, chunk)


def connect(cluster: str, threads: int = 1) -> Tuple[Any, Optional[Any]]:
    """A ``distributed.Client`` for ``cluster`` and the local cluster it started (None for an address)."""
    distributed = require_distributed()
    if cluster.startswith("local:"):
        count = cluster.split(":", 1)[1]
        if not count.isdigit() or int(count) < 1:
            raise CorpusError(f"--cluster {cluster}: use local:N with N >= 1 workers, or a scheduler address such as tcp://host:8786.")
        import dask

        with dask.config.set({"distributed.nanny.pre-spawn-environ": worker_environment(threads)}):
            local = distributed.LocalCluster(n_workers=int(count), threads_per_worker=1, processes=True, dashboard_address=None)
        return distributed.Client(local), local
    try:
        return distributed.Client(cluster, timeout="30s"), None
    except (OSError, TimeoutError) as err:
        raise CorpusError(f"--cluster {cluster}: cannot reach a Dask scheduler there ({err}).") from None


def dask_executor(cluster: Any, retries: int = 2, threads: int = 1) -> Executor:
    """An executor for :func:`~spacy_elmo.embedding.run.embed_corpus`: ``cluster`` is ``local:N``,
    a scheduler address, or an existing ``distributed.Client`` (left open afterwards)."""

    def run(spec: EmbedSpec, folder: Any, chunks: Iterator[Chunk]) -> Iterator[ChunkResult]:
        distributed = require_distributed()
        owned = not isinstance(cluster, distributed.Client)
        client, local = connect(cluster, threads) if owned else (cluster, None)
        try:
            window = max(2, 2 * sum(client.nthreads().values()))
            finished = distributed.as_completed()

            def submit(chunk: Chunk) -> None:
                finished.add(
                    client.submit(
                        cluster_chunk,
                        spec,
                        str(folder),
                        chunk,
                        retries=retries,
                        pure=False,
                        key=f"embed-chunk-{chunk.index}-{uuid.uuid4().hex}",
                    )
                )

            in_flight = 0
            for chunk in chunks:
                submit(chunk)
                in_flight += 1
                if in_flight >= window:
                    yield next(finished).result()
                    in_flight -= 1
            for future in finished:
                yield future.result()
        finally:
            if owned:
                client.close()
                if local is not None:
                    local.close()

    return run
