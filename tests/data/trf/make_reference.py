"""Write reference.npz: allennlp-models 2.10.1's own outputs for the random transformer ELMo archives
that spacy_elmo.hub.trf_random writes (seeded), read by tests/test_transformer.py.

Run it with allennlp 2.10.1 and allennlp-models 2.10.1 installed (``pip install --no-deps`` into a
private virtual environment that sees the project's torch; allennlp imports a few packages at
module level that this path never calls: cloud-storage clients, torchvision; where they do not
install against torch 2.x, empty stand-ins for them on the path suffice), and spacy_elmo importable:

    python tests/data/trf/make_reference.py tests/data/trf/reference.npz

For each case (shape, config shape, torch weight format) it writes the archive's folder, loads it
with ``BidirectionalLanguageModelTokenEmbedder`` (their ``load_archive``), indexes the sentences with
their ``ELMoTokenCharactersIndexer``, and stores in float64 and float32: every raw layer as their
embedder forms it ([x; x] for layer 0, then the contextualizer's layers, sentence boundaries removed)
and the embedder's output (the default mix). allennlp-models 2.10.1 refuses one key of 2019's
config shape, ``allow_unmatched_keys``, which it no longer knows: the script removes it before their
loader reads the folder (the tests read the archive as written).
"""

import json
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from allennlp.data import Token, Vocabulary
from allennlp.data.token_indexers import ELMoTokenCharactersIndexer
from allennlp.nn.util import add_sentence_boundary_token_ids, get_text_field_mask, remove_sentence_boundaries
from allennlp_models.lm.modules.token_embedders.bidirectional_lm import BidirectionalLanguageModelTokenEmbedder

from spacy_elmo.hub.trf_random import write_random_trf

sys.path.insert(0, str(Path(__file__).parent))
from cases import CASES, SENTENCES  # noqa: E402


def char_ids(sentences):
    indexer = ELMoTokenCharactersIndexer()
    vocab = Vocabulary()
    rows = [indexer.tokens_to_indices([Token(t) for t in s], vocab)["elmo_tokens"] for s in sentences]
    width = max(len(r) for r in rows)
    out = np.zeros((len(rows), width, 50), dtype=np.int64)
    for b, r in enumerate(rows):
        out[b, : len(r)] = r
    return torch.from_numpy(out)


def run(embedder, tokens):
    """Their embedder's forward, keeping the raw layers it mixes."""
    mask = get_text_field_mask({"": {"": tokens}})
    wrapped, _ = add_sentence_boundary_token_ids(tokens, mask, embedder._bos_indices, embedder._eos_indices)
    result = embedder._lm({embedder._token_name: {"token_characters": wrapped}})
    raw = [torch.cat([result["noncontextual_token_embeddings"]] * embedder._character_embedding_duplication_count, -1)]
    raw += list(result["lm_embeddings"])
    layers = [remove_sentence_boundaries(layer, result["mask"])[0] for layer in raw]
    return torch.stack(layers).numpy(), embedder(tokens).numpy()


def main(target):
    tokens = char_ids(SENTENCES)
    arrays = {"lengths": np.array([len(s) for s in SENTENCES])}
    with tempfile.TemporaryDirectory() as tmp:
        for shape, config_shape, legacy, seed in CASES:
            path = write_random_trf(Path(tmp) / shape, shape, config_shape, seed=seed, legacy=legacy)
            settings = json.loads((path / "config.json").read_text())
            # allennlp 2.x refuses the one key of 2019's shape it no longer knows; it changes nothing in the model
            settings["model"]["text_field_embedder"].pop("allow_unmatched_keys", None)
            (path / "config.json").write_text(json.dumps(settings))
            embedder = BidirectionalLanguageModelTokenEmbedder(str(path)).eval()
            key = f"{shape}_{config_shape}"
            with torch.no_grad():
                layers, mix = run(embedder, tokens)
                arrays[f"{key}/float32/layers"], arrays[f"{key}/float32/mix"] = layers, mix
                layers, mix = run(embedder.double(), tokens)
                arrays[f"{key}/float64/layers"], arrays[f"{key}/float64/mix"] = layers, mix
    np.savez_compressed(target, **arrays)


if __name__ == "__main__":
    main(sys.argv[1])
