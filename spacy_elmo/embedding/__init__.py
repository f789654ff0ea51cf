"""Embedding a whole corpus: one line in, one array out, resumable, on one machine or a cluster.

``embed_corpus`` (:mod:`.run`) streams a text file or folder (one sentence or document per line)
through the biLM in fixed-size chunks of lines. Each chunk becomes one shard file, written
atomically (:mod:`.shards`); a manifest ties shards to input lines, so an interrupted run resumes
where it stopped without duplicating or losing a line. The result is either AllenNLP's HDF5
layout (:mod:`.hdf5`, assembled from the finished shards) or the shards themselves. The chunks
run in this process, in local worker processes, or on a Dask cluster (:mod:`.cluster`).
"""

from .reader import CorpusError
from .run import EmbedOptions, embed_corpus
from .shards import iter_shard_dir, read_shard

__all__ = ["CorpusError", "EmbedOptions", "embed_corpus", "iter_shard_dir", "read_shard"]
